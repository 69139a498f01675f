"""benchmarks/worker.py: one configuration timed in this process."""
import pytest

from benchmarks.worker import main, measure, peak_mb


def test_measure_times_whole_windows_in_blocks():
    result = measure(dict(contender="accumulator", hidden=8, batch=4, accumulate=2, mode="graph",
                          device_target="CPU", seconds=0.02, blocks=3))
    assert len(result["block_ms"]) == 3 and all(ms > 0 for ms in result["block_ms"])
    assert result["windows_per_block"] >= 1 and result["compile_s"] > 0
    assert result["state_bytes"] == pytest.approx(result["param_bytes"], abs=64)
    assert result["peak_mb"] >= result["baseline_mb"] > 0
    assert peak_mb("CPU") >= result["peak_mb"]


def test_main_prints_one_result_line(capsys):
    assert main(['{"contender": "plain_micro", "hidden": 8, "batch": 4, "accumulate": 2, "mode": "graph", '
                 '"device_target": "CPU", "seconds": 0.01, "blocks": 1}']) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("RESULT {")
