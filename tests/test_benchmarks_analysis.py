"""benchmarks/analysis.py: repeats merged, each contender at its best setting, the issues' targets."""
import pytest

from benchmarks.analysis import best_rows, check_targets, summarize
from benchmarks.report import format_table, format_targets


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
    rows = summarize(runs)
    checks = {c["target"]: c for c in check_targets(rows, best_rows(rows))}
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
    assert "NOT MET" in format_targets(list(checks.values()))


def test_ratios_compare_each_contender_at_its_best_setting():
    rows = summarize([_row("plain_micro", "1", 1.0), _row("plain_micro", "", 4.0),
                      _row("accumulator", "1", 3.0), _row("accumulator", "", 2.0)])
    best = best_rows(rows)
    assert best[("mnist", "graph", "plain_micro")]["blocking"] == "1"
    assert best[("mnist", "graph", "accumulator")]["blocking"] == ""
    assert best[("mnist", "graph", "accumulator")]["ratio_vs_plain_micro"] == pytest.approx(0.5)
    assert "ERROR" not in format_table(rows, best)


def test_repeats_merge_and_a_configuration_that_always_failed_keeps_its_error():
    failed = dict(_row("boost", "1", 1.0), error="Traceback\nRuntimeError: boom")
    rows = summarize([dict(_row("plain_micro", "1", 0, block_ms=[1.0, 3.0]), repeat=0),
                      dict(_row("plain_micro", "1", 0, block_ms=[2.0]), repeat=1), failed])
    assert len(rows) == 2
    assert rows[0]["repeats"] == 2 and rows[0]["median_ms"] == 2.0 and rows[0]["min_ms"] == 1.0
    assert rows[1]["error"].endswith("boom") and "median_ms" not in rows[1]
    assert ("mnist", "graph", "boost") not in best_rows(rows)


@pytest.mark.parametrize("accumulate, checked", [(4, True), (16, True), (8, False)])
def test_window_is_held_to_the_bare_loop_at_n_4_and_16(accumulate, checked):
    # 1.04 ms against the floor's 1.00 ms per micro-step: within 1.05x.
    rows = summarize([_row("window", "1", 1.04, accumulate=accumulate),
                      _row("window_floor", "1", 1.0, accumulate=accumulate),
                      _row("torch_accumulate", "n/a", 0.5, mode="eager", accumulate=accumulate)])
    checks = check_targets(rows, best_rows(rows))
    target = f"mnist N={accumulate}: window >= 0.95x window_floor throughput"
    assert [check["target"] for check in checks] == ([target] if checked else [])
    if checked:
        assert checks[0]["met"] and checks[0]["median_ratio"] == pytest.approx(1 / 1.04)
