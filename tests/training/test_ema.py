"""--ema in the tools: evaluation and the sample read the weights' average, the log keeps both losses, resume too.

By hand: ``--ema 1`` exits 2 with ``argument --ema: must be a number in (0, 1), got 1``.
"""
import json
import shutil

import mindspore as ms
import numpy as np
import pytest

import training.lm
from accumulator.policies import EMA
from scripts import train_lm, train_mnist  # scripts/ has no __init__.py: a namespace package on pytest's path
from training.config import TrainConfig
from training.loop import evaluate, train
from training.task import toy_task


@pytest.mark.parametrize("tool", [train_mnist, train_lm], ids=["mnist", "lm"])
@pytest.mark.parametrize("value, message", [("1", "must be a number in (0, 1), got 1"),
                                            ("-0.5", "must be a number in (0, 1), got -0.5"),
                                            ("high", "expected a number in (0, 1), got 'high'")])
def test_a_decay_outside_0_1_is_one_usage_line(tool, value, message, capsys):
    with pytest.raises(SystemExit) as caught:
        tool.parse_args(["--ema", value])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and err.endswith(f"error: argument --ema: {message}\n")
    with pytest.raises(ValueError, match=r"^ema must be a number in \(0, 1\), got 1.5$"):
        TrainConfig(ema=1.5)


def saved(path):
    """Every Tensor of a checkpoint, as numpy (not its text: the history's timings)."""
    return {name: value.asnumpy() for name, value in ms.load_checkpoint(str(path)).items()
            if not isinstance(value, str)}


def test_evaluation_reads_the_average_the_log_keeps_both_losses_and_resume_keeps_the_average(tmp_path, capsys):
    common = dict(mode="pynative", epochs=2, batch_size=2, accumulate_step=2, lr=0.5, ema=0.5)
    _, run = train(TrainConfig(**common, ckpt_dir=str(tmp_path / "whole"), log_json=str(tmp_path / "run.json")),
                   toy_task(), progress=False)
    history = json.load(open(tmp_path / "run.json"))["epochs"]
    last = history[-1]
    assert last["test_loss"] != last["trained_test_loss"]
    # Each window's count, for the average's horizon: the epoch's windows, the first of the run its reference.
    for record, before in zip(history, [0] + [record["updates"] for record in history]):
        assert len(record["ema_windows"]) == record["updates"] - before
        assert sum(record["ema_windows"]) == record["counted"]
        assert record["ema_reference"] == history[0]["ema_windows"][0] == 4
    assert evaluate(run, toy_task())["test_loss"] == last["trained_test_loss"]  # the trained weights are back
    with run.accumulator.find(EMA).averaged():
        assert evaluate(run, toy_task())["test_loss"] == last["test_loss"]
    assert f"; without the average: loss {last['trained_test_loss']:.4f}\n" in capsys.readouterr().out

    (tmp_path / "cut").mkdir()
    shutil.copy(tmp_path / "whole" / "epoch_001.ckpt", tmp_path / "cut")
    train(TrainConfig(**common, ckpt_dir=str(tmp_path / "cut"), resume=True), toy_task(), progress=False)
    whole, resumed = saved(tmp_path / "whole" / "epoch_002.ckpt"), saved(tmp_path / "cut" / "epoch_002.ckpt")
    assert sorted(whole) == sorted(resumed) and {"accumulator.ema.weight", "accumulator.ema.moves"} <= set(whole)
    for name, value in whole.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)


def test_the_language_models_sample_and_validation_use_the_average(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(training.lm, "SYNTHETIC_BYTES", 3000)
    train_lm.main(["--synthetic", "--data-dir", str(tmp_path / "text"), "--mode", "pynative", "--epochs", "1",
                   "--width", "32", "--depth", "1", "--max-length", "64", "--batch-size", "4", "--ema", "0.9",
                   "--sample-tokens", "5", "--log-json", str(tmp_path / "run.json")])
    out = capsys.readouterr().out
    record = json.load(open(tmp_path / "run.json"))["epochs"][0]
    assert f"validation loss {record['test_loss']:.4f}" in out
    assert f"; without the average: loss {record['trained_test_loss']:.4f}\n" in out
    assert "sample from 'KING', at temperature 0.8 with the weights' moving average:\nKING" in out
