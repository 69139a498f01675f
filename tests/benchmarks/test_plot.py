"""benchmarks/plot.py: the PNG is written.

By hand: one speed row and two memory rows (N = 1 and 8) give a file that starts with the PNG signature.
"""
import pytest

from benchmarks.plot import plot


@pytest.mark.slow  # the lab's plot: CI draws it
def test_plot_writes_bars_and_the_memory_sweep(tmp_path):
    pytest.importorskip("matplotlib")
    speed = dict(kind="speed", net="wide", mode="graph", contender="accumulator", samples_per_s=640.0)
    memory = [dict(kind="memory", contender="accumulator", accumulate=n, batch=32, peak_mb=900.0, baseline_mb=400.0)
              for n in (1, 8)]
    path = tmp_path / "bench.png"
    assert plot([speed] + memory, {("wide", "graph", "accumulator"): speed}, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
