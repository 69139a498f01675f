"""training.records: the summary, the JSON log and the plot a run leaves behind.

By hand: batch 16 x 4 micro-steps is an effective batch of 64; 1200 samples in 3.0 s are 400 samples a second; the
best epoch is the one of the highest accuracy (0.85), the final one's is 0.8.
"""
import json
import os

import pytest

from training.config import TrainConfig
from training.records import summarize, write_json_log, write_plot

HISTORY = [
    {"epoch": 1, "train_loss": 0.9, "samples": 600, "seconds": 2.0, "test_accuracy": 0.85, "test_loss": 0.5},
    {"epoch": 2, "train_loss": 0.4, "samples": 600, "seconds": 1.0, "test_accuracy": 0.8, "test_loss": 0.6},
]


def test_summary_names_best_and_final_epochs_and_the_throughput():
    summary = summarize(TrainConfig(batch_size=16, accumulate_step=4), HISTORY, updates=20, skipped_windows=1)
    assert (summary["best_epoch"], summary["best_accuracy"], summary["final_accuracy"]) == (1, 0.85, 0.8)
    assert (summary["final_train_loss"], summary["final_test_loss"], summary["epochs"]) == (0.4, 0.6, 2)
    assert summary["samples_per_second"] == pytest.approx(1200 / 3.0) and summary["train_seconds"] == 3.0
    assert (summary["effective_batch_size"], summary["updates"], summary["skipped_windows"]) == (64, 20, 1)


def test_json_log_is_replaced_whole_and_leaves_no_temporary(tmp_path):
    path = str(tmp_path / "logs" / "run.json")
    write_json_log(path, TrainConfig(), "toy", HISTORY[:1])
    write_json_log(path, TrainConfig(), "toy", HISTORY, {"updates": 20})
    logged = json.load(open(path))
    assert [record["epoch"] for record in logged["epochs"]] == [1, 2] and logged["summary"] == {"updates": 20}
    assert logged["config"]["device_target"] == "CPU" and logged["config"]["mode"] == "graph"
    assert os.listdir(tmp_path / "logs") == ["run.json"]


def test_plot_accuracy_axis_stops_at_100_percent(tmp_path, monkeypatch):
    figure_class = pytest.importorskip("matplotlib.figure").Figure
    limits = []
    real_savefig = figure_class.savefig

    def savefig(figure, *args, **kwargs):
        limits.append(figure.axes[1].get_ylim())  # the accuracy panel
        return real_savefig(figure, *args, **kwargs)

    monkeypatch.setattr(figure_class, "savefig", savefig)
    write_plot(str(tmp_path / "run.png"), [dict(HISTORY[0], test_accuracy=0.97), dict(HISTORY[1], test_accuracy=1.0)])
    (bottom, top), = limits
    assert top == 100 and bottom < 97
