"""Smoke test of scripts/benchmark.py: a tiny run end to end, and its bookkeeping."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO_ROOT, "scripts", "benchmark.py")
sys.path.insert(0, os.path.join(REPO_ROOT, "scripts"))
import benchmark  # noqa: E402  (needs the path above)
from benchmarks.contenders import CONTENDERS, available_contenders  # noqa: E402

POSITIVE = ("min_ms", "median_ms", "samples_per_s", "best_samples_per_s", "compile_s", "peak_mb",
            "baseline_mb", "param_bytes", "repeats")


@pytest.mark.slow
def test_tiny_run_writes_complete_json(tmp_path):
    out = tmp_path / "bench.json"
    command = [sys.executable, SCRIPT, "--nets", "mnist", "--contenders", "plain_micro,accumulator",
               "--modes", "graph", "--batch", "8", "--accumulate", "2", "--repeats", "1",
               "--seconds", "0.1", "--blocks", "2", "--sweep", "2", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "plain_micro" in done.stdout and "accumulator" in done.stdout

    result = json.loads(out.read_text())
    rows = result["rows"]
    speed = {(r["contender"], r["blocking"]) for r in rows if r["kind"] == "speed"}
    # Both runtime settings of both contenders, and the memory sweep's two rows.
    assert speed == {(c, b) for c in ("plain_micro", "accumulator") for b in ("1", "")}
    assert sorted(r["contender"] for r in rows if r["kind"] == "memory") == ["accumulator", "plain_full", "window"]
    for row in rows:
        assert "error" not in row, row
        for key in POSITIVE:
            assert row[key] > 0, (key, row)
        assert all(ms > 0 for run in result["runs"] for ms in run["block_ms"])
        if row["contender"] in ("accumulator", "window"):
            # One buffer per parameter plus a few scalar counters.
            assert row["state_ratio"] == pytest.approx(1.0, abs=1e-3)
        else:
            assert row["state_bytes"] == 0
    assert len(result["runs"]) == len(rows)


def _row(contender, blocking, median_ms, mode="graph", net="mnist", block_ms=None, peak_mb=10.0,
         kind="speed", accumulate=4):
    return dict(kind=kind, net=net, contender=contender, mode=mode, blocking=blocking,
                accumulate=accumulate, batch=32, block_ms=block_ms or [median_ms], compile_s=1.0,
                state_bytes=8 if contender == "accumulator" else 0, param_bytes=8, peak_mb=peak_mb,
                baseline_mb=5.0)


def test_targets_need_both_median_and_min_ratios():
    # Accumulator vs plain step: 1.0x on medians but 0.5x on the fastest blocks.
    runs = [_row("plain_micro", "1", 0, net="wide", block_ms=[1.0, 2.0, 3.0]),
            _row("accumulator", "1", 0, net="wide", block_ms=[2.0, 2.0, 2.0], peak_mb=50.0),
            _row("boost", "1", 0, net="wide", block_ms=[4.0, 4.0, 4.0], peak_mb=60.0)]
    runs += [_row(name, "1", 1.0, kind="memory", net="wide", accumulate=n, peak_mb=peak)
             for name, peaks in (("plain_full", (20.0, 40.0)), ("accumulator", (50.0, 50.5)), ("window", (50.0, 60.0)))
             for n, peak in zip((1, 16), peaks)]
    rows = benchmark.summarise(runs)
    checks = {c["target"]: c for c in benchmark.check_targets(rows, benchmark.best_rows(rows))}
    plain = checks["wide: accumulator >= 0.97x plain_micro throughput"]
    assert plain["median_ratio"] == pytest.approx(1.0) and plain["min_ratio"] == pytest.approx(0.5)
    assert not plain["met"]
    boost = checks["wide: accumulator >= 1.40x boost throughput"]
    assert boost["median_ratio"] == pytest.approx(2.0) and boost["met"]
    assert checks["wide: accumulator peak MB < boost peak MB"]["met"]
    assert checks["accumulator state = 1.0x parameter bytes"]["met"]
    assert checks["memory flat in N x B: accumulator spread < 5% of its level, plain step grows"]["met"]
    # 55 MB against 45.5 above baseline: 1.21x, over the 1.15x allowed.
    assert not checks["window peak at N=16 <= 1.15x accumulator's"]["met"]
    assert "NOT MET" in benchmark.format_targets(list(checks.values()))


def test_ratios_compare_each_contender_at_its_best_setting():
    rows = benchmark.summarise([_row("plain_micro", "1", 1.0), _row("plain_micro", "", 4.0),
                                _row("accumulator", "1", 3.0), _row("accumulator", "", 2.0)])
    best = benchmark.best_rows(rows)
    assert best[("mnist", "graph", "plain_micro")]["blocking"] == "1"
    assert best[("mnist", "graph", "accumulator")]["blocking"] == ""
    assert best[("mnist", "graph", "accumulator")]["ratio_vs_plain_micro"] == pytest.approx(0.5)
    assert "ERROR" not in benchmark.format_table(rows, best)


def test_every_contender_runs_in_both_runtime_settings():
    configs = benchmark.make_configs(benchmark.parse_args(["--quick", "--sweep", ""]))
    mindspore_rows = [c for c in configs if c["blocking"] != "n/a"]
    assert {c["blocking"] for c in mindspore_rows} == {"1", ""}
    assert len(mindspore_rows) % 2 == 0


@pytest.mark.parametrize("name", sorted(available_contenders(experiments=True)))
def test_every_contender_trains_one_window_on_a_tiny_net(name):
    spec = dict(hidden=8, batch=4, accumulate=2, mode="graph", device_target="CPU")
    runner = CONTENDERS[name].build(spec)
    before = runner.weights()
    calls = max(1, spec["batch"] * spec["accumulate"] // runner.samples_per_call)
    for _ in range(calls):
        runner.step()
    if runner.sync:
        runner.sync()
    # Every row of the table must time real training: one window changes the weights.
    assert any(not np.array_equal(a, b) for a, b in zip(before, runner.weights()))
    assert runner.param_bytes == 4 * sum(w.size for w in before)
    # Accumulating contenders keep about one buffer per parameter (two for the tutorial).
    assert runner.state_bytes in (0, pytest.approx(runner.param_bytes, abs=64),
                                  pytest.approx(2 * runner.param_bytes, abs=64))
