"""benchmarks/end_to_end.py: the training tool's epochs against its own step, and the script's --end-to-end.

By hand: the MNIST tool's epochs of 0.2, 0.3, 0.25 s against its fastest driver's 0.2 s each: the tool's median
runs at 0.8 of that ceiling, its best at 1.0; a step that failed keeps its error.
"""
import io
import os
import subprocess
import sys

import pytest

from benchmarks import end_to_end
from data.idx import write_synthetic_mnist
from tests import REPO_ROOT

SCRIPT = os.path.join(REPO_ROOT, "scripts", "benchmark.py")


@pytest.fixture(scope="module")
def tiny_mnist(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("tiny_mnist"))
    write_synthetic_mnist(folder, n_train=80, n_test=16, seed=0)  # batches of 16: 5, the last window short
    return folder


# The MNIST step: the language model's worker runs the same code on its own task (the tool's graph mode runs
# under msrun in tests/tools/test_train_lm.py).
@pytest.mark.slow  # end to end: a worker process, 2 epochs (the fewest --end-to-end takes)
def test_every_worker_times_its_epochs_on_a_tiny_config(tiny_mnist):
    specs = end_to_end.make_specs(batch=16, accumulate=2, epochs=2, data_dir=tiny_mnist, steps=("mnist",))
    runs = end_to_end.run_end_to_end(specs, repeats=1, log=io.StringIO())
    assert [run["step"] for run in runs] == ["mnist"] and not any("error" in run for run in runs)
    assert [run["driver"] for run in runs] == ["window"]  # the tool's pick at a fixed N
    for run in runs:
        assert list(run["epochs"]) == ["tool", "in-graph", "host", "window"]
        each = 80
        assert run["first"]["samples"] == each and run["first"]["seconds"] > 0
        for epochs in run["epochs"].values():
            assert [epoch["samples"] for epoch in epochs] == [each]  # every sample, the short batch too
            assert all(epoch["seconds"] > 0 for epoch in epochs)

    rows = end_to_end.end_to_end_rows(runs)
    tools = [row for row in rows if row["pipeline"] == "tool"]
    assert all(row["vs_ceiling"] > 0 and row["paired_vs_ceiling"] > 0 and row["first_epoch_s"] > 0 for row in tools)
    assert all(row["ceiling"] in end_to_end.DRIVERS for row in tools)
    table = end_to_end.format_end_to_end(rows)
    assert "training tool (data in memory)" in table and "MNIST" in table


def _epochs(seconds, samples=600):
    return [dict(seconds=s, samples=samples) for s in seconds]


def test_each_tool_is_paired_with_its_fastest_driver_and_a_failed_step_keeps_its_error():
    runs = [dict(step="mnist", driver="in-graph", first=dict(seconds=1.5, samples=600),
                 epochs={"tool": _epochs([0.2, 0.3, 0.25]), "in-graph": _epochs([0.2, 0.2, 0.2]),
                         "host": _epochs([0.3, 0.3, 0.3]), "window": _epochs([0.25, 0.25, 0.25])}),
            dict(step="lm", error="Traceback\nMemoryError: boom")]
    rows = {(row["step"], row["pipeline"]): row for row in end_to_end.end_to_end_rows(runs)}
    mnist = rows[("mnist", "tool")]
    assert (mnist["driver"], mnist["ceiling"]) == ("in-graph", "in-graph")
    assert mnist["vs_ceiling"] == pytest.approx(0.8) and mnist["min_vs_ceiling"] == pytest.approx(1.0)
    assert mnist["paired_vs_ceiling"] == pytest.approx(0.8)  # 1.0, 0.67 and 0.8 epoch by epoch
    assert mnist["first_extra_s"] == pytest.approx(1.25)
    assert "ERROR MemoryError: boom" in end_to_end.format_end_to_end(list(rows.values()))


def test_the_script_takes_train_mnists_window_and_refuses_a_single_epoch():
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        import benchmark
    finally:
        sys.path.remove(os.path.dirname(SCRIPT))
    assert benchmark.parse_args(["--end-to-end"]).accumulate == 2
    assert benchmark.parse_args([]).accumulate == 8
    assert benchmark.parse_args(["--end-to-end", "--quick", "-N", "4"]).epochs == 3
    done = subprocess.run([sys.executable, SCRIPT, "--end-to-end", "--epochs", "1"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "--end-to-end needs 2 or more" in done.stderr and done.stdout == ""
