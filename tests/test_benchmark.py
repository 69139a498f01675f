"""Smoke test of scripts/benchmark.py: a tiny run end to end, and its bookkeeping."""
import json
import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO_ROOT, "scripts", "benchmark.py")
sys.path.insert(0, os.path.join(REPO_ROOT, "scripts"))
import benchmark  # noqa: E402  (needs the path above)

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
    assert sorted(r["contender"] for r in rows if r["kind"] == "memory") == ["accumulator", "plain_full"]
    for row in rows:
        assert "error" not in row, row
        for key in POSITIVE:
            assert row[key] > 0, (key, row)
        assert all(ms > 0 for run in result["runs"] for ms in run["block_ms"])
        if row["contender"] == "accumulator":
            # One buffer per parameter plus a few scalar counters.
            assert row["state_ratio"] == pytest.approx(1.0, abs=1e-3)
        else:
            assert row["state_bytes"] == 0
    assert len(result["runs"]) == len(rows)


def _row(contender, blocking, median_ms, mode="graph"):
    return dict(kind="speed", net="mnist", contender=contender, mode=mode, blocking=blocking,
                accumulate=4, batch=32, block_ms=[median_ms], compile_s=1.0, state_bytes=0,
                param_bytes=8, peak_mb=10.0, baseline_mb=5.0)


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
