"""benchmarks/scale_rules.py: the sweep's runs, the lr sweep, the speed run, the time to a target, the verdicts."""
import json

import pytest

from benchmarks import scale_rules


def epochs(losses, seconds):
    return [{"samples": 100, "seconds": seconds, "test_loss": loss} for loss in losses]


def test_the_plan_runs_each_fixed_window_with_and_without_the_rule_and_every_rule_the_optimizer_takes():
    assert scale_rules.plan("adamw", (1, 8)) == [
        ("N=1", 1, "none"), ("N=8", 8, "none"), ("N=8 sqrt", 8, "sqrt"),
        ("auto", "auto", "none"), ("auto linear", "auto", "linear"), ("auto sqrt", "auto", "sqrt"),
        ("auto adascale", "auto", "adascale")]
    assert "auto sqrt" not in [name for name, _, _ in scale_rules.plan("sgd")]


def test_the_time_to_a_target_is_interpolated_between_epochs_and_none_when_never_reached():
    points = scale_rules.curve(epochs([3.0, 2.0, 1.0], 10.0))
    assert points[-1] == (300, 30.0, 1.0)
    assert scale_rules.seconds_to(points, 1.5) == pytest.approx(25.0)
    assert scale_rules.seconds_to(points, 3.0) == 10.0
    assert scale_rules.seconds_to(points, 0.5) is None


def test_a_missed_target_says_by_how_much():
    results = {"N=1": epochs([3.0, 2.0, 1.0], 10.0),          # the target: 1.0, at 30 s
               "N=4": epochs([3.0, 2.0, 1.0], 5.0),           # the fastest fixed window: 15 s
               "N=4 sqrt": epochs([3.5, 2.5, 1.5], 5.0),
               "auto": epochs([3.5, 3.0, 2.0, 1.5], 4.0),
               "auto sqrt": epochs([3.2, 2.4, 1.5, 1.0], 5.0)}  # 20 s: sooner than N=1, not within 10% of N=4
    report = scale_rules.analyse(results, "sqrt")
    assert report["fastest_fixed"] == ["N=4", 15.0]
    verdicts = {check["target"]: (check["met"], check["detail"]) for check in report["checks"]}
    assert verdicts["(1) |auto sqrt - N=1| < |auto - N=1| at every epoch"][0]
    assert verdicts["(2) auto sqrt reaches N=1's epoch-3 loss sooner than N=1"] == (True, "20.0 s vs 30.0 s (-33%)")
    assert verdicts["(2) auto sqrt reaches N=1's epoch-3 loss sooner than auto"] == (True, "20.0 s vs never")
    assert verdicts["(2) auto sqrt reaches N=1's epoch-3 loss sooner than 1.10 x the fastest fixed window"] == \
        (False, "20.0 s vs 16.5 s (+21%), N=4 15.0 s")
    assert report["epochs_to_target"] == {"N=1": 3.0, "N=4": 3.0, "N=4 sqrt": None, "auto": None, "auto sqrt": 4.0}
    table = scale_rules.format_report(results, report)
    assert "MISSED: (2) auto sqrt reaches N=1's epoch-3 loss sooner than 1.10 x the fastest fixed window" in table
    assert "| auto | 3.5000 | 3.0000 | 2.0000 | 1.5000 | never | never | auto |" in table
    assert "| auto sqrt | 3.2000 | 2.4000 | 1.5000 | 1.0000 | 4.00 | 20.0 | auto sqrt |" in table


@pytest.mark.slow  # one run of the MNIST tool: about 15 s
def test_a_run_records_the_window_and_the_learning_rate_its_rule_set():
    records = scale_rules.train("mnist", 2, "linear", 1, "sgd", ["--batch-size", "64"])
    assert len(records) == 1 and records[0]["accumulate_step"] == 2
    assert records[0]["lr"] in (pytest.approx(0.02), pytest.approx(0.01))  # the last window: whole, or one left


def fake_train(calls, losses):
    """A stand-in for scale_rules.train: records its arguments, returns epochs of ``losses(arguments)``."""
    def train(tool, accumulate_step, scale_rule, epochs, optimizer, extra=()):
        calls.append((tool, accumulate_step, scale_rule, epochs, optimizer, list(extra)))
        return [{"samples": 100, "seconds": 1.0, "test_loss": loss}
                for loss in losses(accumulate_step, scale_rule, list(extra))[:epochs]]
    return train


def test_the_lr_sweep_trains_n_1_for_the_target_epochs_per_lr_and_seed_and_takes_the_lowest_mean(monkeypatch):
    calls = []
    final = {("0.01", "0"): 1.0, ("0.01", "1"): 2.0, ("0.003", "0"): 1.4, ("0.003", "1"): 1.4}
    monkeypatch.setattr(scale_rules, "train", fake_train(
        calls, lambda n, rule, extra: [9.0, 9.0, final[extra[-1], extra[-3]]]))
    best, losses = scale_rules.tune_lr("lm", ["0.01", "0.003"], [0, 1], "adamw", ["--batch-size", "1"],
                                       say=lambda line: None)
    assert (best, losses) == ("0.003", {"0.01": 1.5, "0.003": pytest.approx(1.4)})
    assert calls[0] == ("lm", 1, "none", 3, "adamw", ["--batch-size", "1", "--seed", "0", "--lr", "0.01"])
    assert len(calls) == 4


def test_the_main_sweeps_each_seed_at_the_tuned_lr_and_writes_what_it_ran(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(scale_rules, "train", fake_train(calls, lambda n, rule, extra: [3.0, 2.0, 1.0]))
    path = tmp_path / "sweep.json"
    scale_rules.main(["lm", "--epochs", "3", "--windows", "1", "2", "--seeds", "0", "4", "--lr-sweep", "0.003",
                      "--flags=--batch-size 1", "--json", str(path)])
    saved = json.loads(path.read_text())
    swept = [call for call in calls if call[1:3] != (1, "none") or "--seed" in call[5][-2:]]
    assert [call[5] for call in swept[-2:]] == [["--batch-size", "1", "--lr", "0.003", "--seed", "4"]] * 2
    assert saved["flags"] == "--batch-size 1 --lr 0.003" and saved["lr_sweep"] == {"0.003": 1.0}
    assert sorted(saved["results"]) == ["0", "4"]
    assert list(saved["results"]["4"]) == [name for name, _, _ in scale_rules.plan("adamw", (1, 2))]


def test_only_runs_the_runs_it_names_in_the_plan_s_order_and_refuses_a_name_not_in_it(monkeypatch, tmp_path, capsys):
    calls = []
    monkeypatch.setattr(scale_rules, "train", fake_train(calls, lambda n, rule, extra: [3.0, 2.0, 1.0]))
    scale_rules.main(["lm", "--epochs", "3", "--windows", "1", "4", "--only", "auto sqrt", "N=4",
                      "--json", str(tmp_path / "part.json")])
    assert [call[1:3] for call in calls] == [(4, "none"), ("auto", "sqrt")]
    with pytest.raises(SystemExit):
        scale_rules.main(["lm", "--windows", "1", "4", "--only", "N=8"])
    assert "--only: no run named N=8 in the plan" in capsys.readouterr().err


def test_parts_of_a_sweep_are_merged_in_the_plan_s_order(tmp_path):
    parts = {"auto": epochs([3.5, 3.0, 2.5], 1.0), "auto sqrt": epochs([3.0, 1.5, 1.0], 1.0),
             "N=1": epochs([3.0, 2.0, 1.0], 1.0)}
    for name, records in parts.items():
        (tmp_path / f"{name}.json").write_text(json.dumps({"results": {"0": {name: records}}}))
    scale_rules.main(["lm", "--windows", "1", "--from-json", *(str(tmp_path / f"{name}.json") for name in parts),
                      "--json", str(tmp_path / "merged.json"), "--plot", str(tmp_path / "rules.png")])
    saved = json.loads((tmp_path / "merged.json").read_text())
    assert list(saved["results"]["0"]) == ["N=1", "auto", "auto sqrt"]
    assert (tmp_path / "rules.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [check["met"] for check in saved["reports"]["0"]["checks"]] == [True, False, True, True]  # ties N=1


def test_the_speed_run_s_seconds_replace_the_sweep_s_and_a_different_window_is_named():
    swept = {"N=1": epochs([2.0, 1.0], 50.0), "auto": [
        {"samples": 100, "seconds": 50.0, "test_loss": 1.5, "accumulate_step": 4},
        {"samples": 100, "seconds": 50.0, "test_loss": 1.0, "accumulate_step": 8}]}
    timed = {"N=1": [{"seconds": 2.0, "accumulate_step": 1}] * 3,
             "auto": [{"seconds": 1.0, "accumulate_step": 4}, {"seconds": 0.5, "accumulate_step": 16}]}
    retimed, differing = scale_rules.with_seconds(swept, timed)
    assert [r["seconds"] for r in retimed["N=1"]] == [2.0, 2.0]
    assert [r["seconds"] for r in retimed["auto"]] == [1.0, 0.5]
    assert [r["test_loss"] for r in retimed["auto"]] == [1.5, 1.0] and swept["auto"][0]["seconds"] == 50.0
    assert differing == ["auto, epoch 2: N 8 swept, 16 timed"]
    with pytest.raises(ValueError, match="auto: 2 epochs swept, 1 timed"):
        scale_rules.with_seconds(swept, {**timed, "auto": timed["auto"][:1]})


def test_the_targets_over_seeds_are_met_only_where_every_seed_meets_them_and_from_the_speed_run_s_seconds(tmp_path):
    def runs(auto_sqrt):  # N=1's target 1.0 in 3 epochs; "auto sqrt" reaches it in 3 (seed 0) or never (seed 1)
        return {"N=1": epochs([3.0, 2.0, 1.0], 99.0), "N=2": epochs([3.0, 2.0, 1.0], 99.0),
                "auto": epochs([3.5, 3.0, 2.5], 99.0), "auto sqrt": epochs(auto_sqrt, 99.0)}
    for seed, auto_sqrt in ((0, [3.0, 1.5, 1.0]), (1, [3.8, 3.2, 2.6])):
        (tmp_path / f"seed{seed}.json").write_text(json.dumps({"results": {seed: runs(auto_sqrt)}}))
    timed = {name: [{"seconds": seconds, "accumulate_step": 1}] * 3
             for name, seconds in (("N=1", 10.0), ("N=2", 6.0), ("auto", 5.0), ("auto sqrt", 5.0))}
    (tmp_path / "speed.json").write_text(json.dumps({"results": {0: timed}}))
    lines = []
    reports = scale_rules.report(scale_rules.load_results([tmp_path / "seed0.json", tmp_path / "seed1.json"]),
                                 "adamw", scale_rules.load_results([tmp_path / "speed.json"]), lines.append)
    assert reports[0]["seconds_to_target"] == {"N=1": 30.0, "N=2": 18.0, "auto": None, "auto sqrt": 15.0}
    assert reports[1]["seconds_to_target"]["auto sqrt"] is None  # seed 1 timed by seed 0's speed run
    assert [check["met"] for check in reports[0]["checks"]] == [True, True, True, True]
    assert lines[-4:] == [
        "MISSED (met in 1 of 2 seeds): (1) |auto sqrt - N=1| < |auto - N=1| at every epoch",
        "MISSED (met in 1 of 2 seeds): (2) auto sqrt reaches N=1's epoch-3 loss sooner than N=1",
        "MISSED (met in 1 of 2 seeds): (2) auto sqrt reaches N=1's epoch-3 loss sooner than auto",
        "MISSED (met in 1 of 2 seeds): (2) auto sqrt reaches N=1's epoch-3 loss sooner than 1.10 x the fastest fixed window"]


@pytest.mark.slow  # two tiny language models compiled and trained for 2 epochs: about 15 s
def test_speed_times_every_epoch_of_each_run_and_records_its_window():
    tiny = "--width 8 --depth 1 --heads 2 --max-length 32 --batch-size 2 --optimizer adamw"
    lines = []
    timed = scale_rules.speed([("N=2", 2, "none"), ("auto sqrt", "auto", "sqrt")], 2, tiny, 3, 3000, lines.append)
    assert list(timed) == ["N=2", "auto sqrt"] and [len(records) for records in timed.values()] == [2, 2]
    assert [record["accumulate_step"] for record in timed["N=2"]] == [2, 2]
    assert all(record["seconds"] > 0 and record["samples"] == timed["N=2"][0]["samples"]
               for records in timed.values() for record in records)
    assert [line.split(" (")[0] for line in lines] == ["seed 3, epoch 1", "seed 3, epoch 2"]


@pytest.mark.parametrize("argv, message", [
    (["--speed", "--lr-sweep", "0.1"], "--lr-sweep does nothing with --speed"),
    (["--from-json", "a.json", "--lr-sweep", "0.1"], "--lr-sweep does nothing with --from-json"),
    (["--speed", "--speed-json", "s.json"], "--speed-json does nothing with --speed"),
    (["--only", "N=1", "--plot", "p.png"], "--plot does nothing with --only"),
])
def test_a_flag_the_run_would_ignore_is_refused_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit):
        scale_rules.main(["lm", "--windows", "1", *argv])
    assert message in capsys.readouterr().err
