"""benchmarks/paired.py: contenders timed in one process, in turn, compared on paired ratios.

By hand: a takes 1.0, 10.0, 1.0 ms and b 1.1, 11.0, 1.1 ms in three rounds: the paired median ratio says b takes
1.1x, where round 2's slowness would hide it in a ratio of medians.
"""
import json

import pytest

from benchmarks.paired import paired_rows, report


def test_ratios_pair_blocks_of_the_same_round():
    # Round 2 was slow for both: a ratio of medians would say 1.0, the paired median says b takes 1.1x.
    rows = paired_rows({"a": [1.0, 10.0, 1.0], "b": [1.1, 11.0, 1.1]})
    assert rows[1]["time_ratio"] == pytest.approx(1.1)
    assert rows[0]["time_ratio"] == 1.0 and rows[1]["median_ms"] == 1.1


@pytest.mark.slow  # a worker process
def test_report_prints_the_tables_and_writes_json(tmp_path, capsys):
    path = tmp_path / "paired.json"
    assert report(["mnist"], ["plain_micro", "recommended"], 4, 2, 0.05, 2, json_path=str(path)) == 0
    out = capsys.readouterr().out
    summary = [line for line in out.splitlines() if line.startswith("mnist ")]  # the summary's row
    assert "time vs first" in out and len(summary) == 1 and "1.00x (1.00x)" in summary[0]
    saved = json.loads(path.read_text())
    assert [row["contender"] for row in saved["paired"][0]["rows"]] == ["plain_micro", "recommended"]
