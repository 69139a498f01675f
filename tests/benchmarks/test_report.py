"""benchmarks/report.py: repeats merged, each contender at its best setting, the table and the load note.

By hand: runs that recorded a load of 1.6 on 2 cores add ``load 1.6 on 2 cores (max 1.6)`` to the table; runs
that recorded none add nothing.
"""
import pytest

from benchmarks.report import best_rows, format_table, note_load, summarize


def _run(contender, blocking, block_ms, kind="speed", accumulate=4, peak_mb=100.0):
    return dict(kind=kind, net="mnist", contender=contender, mode="graph", blocking=blocking, accumulate=accumulate,
                batch=32, block_ms=block_ms, compile_s=0.5, state_bytes=0, param_bytes=8, peak_mb=peak_mb,
                baseline_mb=40.0)


def test_ratios_compare_each_contender_at_its_best_setting():
    rows = summarize([_run("plain_micro", "1", [1.0]), _run("plain_micro", "", [4.0]),
                      _run("accumulator", "1", [3.0]), _run("accumulator", "", [2.0])])
    best = best_rows(rows)
    assert best[("mnist", "graph", "plain_micro")]["blocking"] == "1"
    assert best[("mnist", "graph", "accumulator")]["blocking"] == ""
    assert best[("mnist", "graph", "accumulator")]["ratio_vs_plain_micro"] == pytest.approx(0.5)


def test_repeats_merge_and_a_configuration_that_always_failed_keeps_its_error():
    failed = dict(_run("boost", "1", [1.0]), error="Traceback\nRuntimeError: boom")
    rows = summarize([dict(_run("plain_micro", "1", [1.0, 3.0]), repeat=0),
                      dict(_run("plain_micro", "1", [2.0]), repeat=1), failed])
    assert len(rows) == 2
    assert rows[0]["repeats"] == 2 and rows[0]["median_ms"] == 2.0 and rows[0]["min_ms"] == 1.0
    assert rows[1]["error"].endswith("boom") and "median_ms" not in rows[1]
    assert ("mnist", "graph", "boost") not in best_rows(rows)


def test_table_marks_best_settings_shows_errors_and_lists_the_sweep():
    rows = summarize([_run("plain_micro", "1", [1.0]), _run("plain_micro", "", [2.0]),
                      dict(_run("boost", "1", [1.0]), error="Traceback\nKeyError: 'boost'"),
                      _run("accumulator", "1", [1.0], kind="memory", accumulate=16, peak_mb=90.0)])
    lines = format_table(rows, best_rows(rows)).splitlines()
    plain_on, plain_off, boost = lines[2:5]
    assert plain_on.endswith(" *") and "1.00" in plain_on
    assert not plain_off.endswith(" *") and plain_off.split()[3] == "off"
    assert boost.endswith("ERROR KeyError: 'boost'")
    assert lines[-1] == "  accumulator  N=16  N*B=512       50.0 (peak 90)"


def test_the_load_note_counts_only_runs_that_recorded_a_load():
    assert note_load([], cores=2) == ""
    assert note_load([dict(load_before=1.5), dict(repeat=0)], cores=2) == ""
    assert "load 1.6 on 2 cores (max 1.6)" in note_load([dict(load_before=1.6)], cores=2)
