"""scripts/benchmark.py as a user runs it: bad values stop it before any worker, a tiny run end to end.

By hand: a bad value exits 2 naming the flag and the values it takes, before any worker starts (no progress line,
no table).
"""
import json
import os
import subprocess
import sys

import pytest
from tests import REPO_ROOT


SCRIPT = os.path.join(REPO_ROOT, "scripts", "benchmark.py")

POSITIVE = ("min_ms", "median_ms", "samples_per_s", "best_samples_per_s", "compile_s", "peak_mb",
            "baseline_mb", "param_bytes", "repeats")


def run_script(*flags, cwd=None, timeout=60):
    return subprocess.run([sys.executable, SCRIPT, *flags], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


# Every bad value, parsed in this process by the script's own parse_args (main's first call, before any worker).
BAD_VALUES = [
    (("--nets", "foo"), ("--nets", "'foo'", "'mnist', 'wide'")),
    (("--nets", "mnist,"), ("--nets", "''", "'mnist', 'wide'")),
    (("--contenders", "acumulator"), ("--contenders", "'acumulator'", "'accumulator'", "'window'")),
    (("--modes", "graph,eager"), ("--modes", "'eager'", "'graph', 'pynative'")),
    (("--sweep-net", "foo"), ("--sweep-net", "'foo'", "'mnist', 'wide'")),
    (("--batch", "0"), ("--batch", "'0'", "above 0")),
    (("--accumulate", "-3"), ("--accumulate", "'-3'", "above 0")),
    (("-N", "2.5"), ("--accumulate", "'2.5'", "whole number")),
    (("--repeats", "0"), ("--repeats", "'0'", "above 0")),
    (("--blocks", "0"), ("--blocks", "'0'", "above 0")),
    (("--seconds", "-1"), ("--seconds", "'-1'", "above 0")),
    (("--seconds", "nan"), ("--seconds", "'nan'", "above 0")),
    (("--timeout", "0"), ("--timeout", "'0'", "above 0")),
    (("--sweep", "1,0"), ("--sweep", "'0'", "above 0")),
    (("--sweep", "4,x"), ("--sweep", "'x'", "whole number")),
    (("--device-target", "TPU"), ("--device-target", "'TPU'", "'CPU', 'GPU', 'Ascend'")),
    (("--paired", "--contenders", "accumulator"), ("--paired", "two or more")),
]


def assert_refused(code, stderr, named):
    assert code == 2, stderr
    assert stderr.startswith("usage: benchmark.py")
    for text in named:
        assert text in stderr, (text, stderr)


@pytest.mark.parametrize("flags, named", BAD_VALUES)
def test_a_bad_value_exits_2_naming_the_flag_and_the_valid_values(flags, named, monkeypatch, capsys):
    from scripts.benchmark import parse_args
    monkeypatch.setattr(sys, "argv", [SCRIPT])
    with pytest.raises(SystemExit) as exited:
        parse_args([*flags, "--quick"])
    assert_refused(exited.value.code, capsys.readouterr().err, named)


# The front door itself, for a value argparse refuses and one parse_args refuses after parsing: the script
# exits 2 before main() starts anything.
@pytest.mark.parametrize("flags, named", [BAD_VALUES[0], BAD_VALUES[-1]])
def test_the_script_refuses_a_bad_value_before_any_worker(flags, named):
    done = run_script(*flags, "--quick", timeout=30)
    assert_refused(done.returncode, done.stderr, named)
    # Nothing started: no worker's progress line, no table.
    assert not any(line.startswith("[") for line in done.stderr.splitlines()) and done.stdout == ""


# One contender, no memory sweep: a sweep's row is the same worker timing one block; its configurations are
# make_configs's doctest, its table lines tests/benchmarks/test_report.py's, its plot test_plot.py's, each
# contender's state against its parameters test_contenders.py's. The ratio against plain_micro is best_rows's doctest.
@pytest.mark.slow
def test_tiny_run_writes_complete_json(tmp_path):
    out = tmp_path / "bench.json"
    done = run_script("--nets", "mnist", "--contenders", "accumulator", "--modes", "graph",
                      "--batch", "8", "--accumulate", "2", "--repeats", "1", "--seconds", "0.1", "--blocks", "2",
                      "--sweep", "", "--json", str(out), cwd=str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "accumulator" in done.stdout

    result = json.loads(out.read_text())
    rows = result["rows"]
    # Both runtime settings of the contender, and no memory row.
    assert {(r["kind"], r["contender"], r["blocking"]) for r in rows} == {("speed", "accumulator", "1"),
                                                                          ("speed", "accumulator", "")}
    for row in rows:
        assert "error" not in row, row
        for key in POSITIVE:
            assert row[key] > 0, (key, row)
        # One buffer per parameter plus a few scalar counters.
        assert row["state_ratio"] == pytest.approx(1.0, abs=1e-3)
    assert all(ms > 0 for run in result["runs"] for ms in run["block_ms"])
    assert len(result["runs"]) == len(rows)
    assert result["settings"]["nets"] == ["mnist"] and result["settings"]["sweep"] == []
