"""benchmarks/report.py: the table, the target lines, the load note and the JSON."""
import json

from benchmarks.analysis import best_rows, summarize
from benchmarks.report import format_table, format_targets, note_load, write_json


def _run(contender, blocking, block_ms, kind="speed", accumulate=4, peak_mb=100.0):
    return dict(kind=kind, net="mnist", contender=contender, mode="graph", blocking=blocking, accumulate=accumulate,
                batch=32, block_ms=block_ms, compile_s=0.5, state_bytes=0, param_bytes=8, peak_mb=peak_mb,
                baseline_mb=40.0)


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


def test_targets_and_load_note():
    text = format_targets([dict(target="a", median_ratio=1.5, min_ratio=1.25, met=True)])
    assert text == "targets:\n  met      a: 1.50x median, 1.25x min"
    assert note_load([], cores=2) == ""
    assert note_load([dict(load_before=1.5), dict(repeat=0)], cores=2) == ""
    assert "load 1.6 on 2 cores (max 1.6)" in note_load([dict(load_before=1.6)], cores=2)


def test_json_holds_each_section(tmp_path):
    path = tmp_path / "out.json"
    write_json(str(path), settings=dict(nets=["mnist"]), runs=[], rows=[], targets=[])
    assert json.loads(path.read_text()) == dict(settings=dict(nets=["mnist"]), runs=[], rows=[], targets=[])
