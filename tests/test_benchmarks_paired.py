"""benchmarks/paired.py: contenders timed in one process, in turn, judged on paired ratios."""
import json

import pytest

from benchmarks.paired import check_paired_targets, measure_paired, paired_rows, report


def test_every_contender_gets_one_block_per_round():
    result = measure_paired(dict(contenders=["window_floor", "window"], hidden=8, batch=4, accumulate=2,
                                 device_target="CPU", seconds=0.02, blocks=3))
    assert list(result["block_ms"]) == ["window_floor", "window"]
    assert all(len(times) == 3 and min(times) > 0 for times in result["block_ms"].values())


def test_ratios_pair_blocks_of_the_same_round():
    # Round 2 was slow for both: a ratio of medians would say 1.0, the paired median says b takes 1.1x.
    rows = paired_rows({"a": [1.0, 10.0, 1.0], "b": [1.1, 11.0, 1.1]})
    assert rows[1]["time_ratio"] == pytest.approx(1.1)
    assert rows[0]["time_ratio"] == 1.0 and rows[1]["median_ms"] == 1.1


def test_targets_are_judged_only_where_both_contenders_and_n_match():
    slow = {"window_floor": [1.0, 1.0, 1.0], "window": [1.2, 1.1, 1.3]}
    checks = check_paired_targets("mnist", 16, slow)
    assert [check["met"] for check in checks] == [False]
    assert checks[0]["median_ratio"] == pytest.approx(1 / 1.2)
    assert check_paired_targets("mnist", 8, slow) == []  # the window target is set at N = 4 and 16 only
    assert check_paired_targets("wide", 16, slow) == []
    noise = {"accumulator": [2.0, 2.0], "acc_noise": [2.05, 2.08]}
    assert [(check["target"].split(":")[0], check["met"]) for check in check_paired_targets("mnist", 8, noise)] \
        == [("mnist", True)]


@pytest.mark.slow
def test_report_prints_the_table_and_writes_json(tmp_path, capsys):
    path = tmp_path / "paired.json"
    assert report(["mnist"], ["accumulator", "acc_noise"], 4, 2, 0.05, 2, json_path=str(path)) == 0
    out = capsys.readouterr().out
    assert "time vs first" in out and "mnist: acc_noise >= 0.95x accumulator throughput (paired)" in out
    saved = json.loads(path.read_text())
    assert [row["contender"] for row in saved["paired"][0]["rows"]] == ["accumulator", "acc_noise"]
    assert saved["targets"][0]["target"].endswith("(paired)")
