"""benchmarks/compile_times.py: the language-model tool's compiles and first epochs, via scripts/benchmark.py."""
import json
import os
import subprocess
import sys

import pytest

from benchmarks.compile_times import GRAPHS, check_lm_flags, format_compile_times

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "benchmark.py")


# Two workers, each compiling a small transformer's steps: about a minute on one core.
@pytest.mark.slow
def test_compile_times_flag_times_each_graphs_compile_and_two_epochs(tmp_path):
    path = tmp_path / "compile_times.json"
    done = subprocess.run([sys.executable, SCRIPT, "--compile-times", "--lm-flags=--width 16 --depth 1 --max-length 32",
                           "--json", str(path)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(path.read_text())["compile_times"]
    assert result["lm_flags"] == ["--width", "16", "--depth", "1", "--max-length", "32"]
    # Each graph timed twice, its first call and a later one; the times themselves are the benchmark's to read.
    assert set(result["graphs"]) == set(GRAPHS)
    for name in GRAPHS:
        first, later = result["graphs"][name]
        assert first > 0 and later > 0, (name, first, later)
    assert result["compile_s"] > 0
    first, second = result["epochs"]
    assert len(first["windows"]) == len(second["windows"]) > 1
    for epoch in (first, second):
        assert epoch["seconds"] == pytest.approx(sum(epoch["windows"]) + epoch["flush"])
        assert epoch["validation"] > 0
    assert "micro-step" in done.stdout and "compiled ahead (compile_train_step)" in done.stdout


def test_flags_the_micro_step_cannot_measure_are_refused():
    for flags in (["--mode", "pynative"], ["--window-step"], ["--track-noise"]):
        assert check_lm_flags(flags).startswith("measures the micro-step of graph mode"), flags
    assert check_lm_flags(["--depth", "1", "--max-length", "32"]) is None


def test_the_table_lists_each_epochs_slowest_windows_first():
    epoch = dict(seconds=4.0, windows=[0.5, 0.2, 2.0, 0.9, 0.3], flush=0.1, validation=0.2)
    graphs = {name: [3.0, 0.1] for name in GRAPHS}
    lines = format_compile_times(dict(lm_flags=["--width", "16"], load_before=1.0, compile_s=2.0, epochs=[epoch],
                                      graphs=graphs)).splitlines()
    assert lines[0].startswith("train_lm.py --synthetic --width 16,")
    assert lines[-1].split()[:8] == ["1", "4.00", "2.00", "(2),", "0.90", "(3),", "0.50", "(0)"]
    # The last window with the flush after it: 0.3 + 0.1.
    assert "0.40 (flush 0.10)" in lines[-1]
