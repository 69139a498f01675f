"""benchmarks/time_to_target.py: the time to N = 1's loss from hand-written logs, and the command end to end."""
import io
import json
import os

import pytest

from benchmarks import time_to_target as ttt
from data.idx import write_synthetic_mnist
from scripts.benchmark import main, parse_args


def epochs(*losses, seconds=10.0, counted=100, n=None, probes=()):
    """Hand-written ``--log-json`` epochs: one per loss, each ``seconds`` long; ``probes`` go in the first."""
    records = [dict(counted=counted, seconds=seconds, test_loss=loss, probes=[]) for loss in losses]
    records[0]["probes"] = list(probes)
    for record in records:
        if n is not None:
            record["accumulate_step"] = n
    return records


def run(name, seed, records, tool="lm", **more):
    return dict(tool=tool, seed=seed, name=name, records=records, **more)


def test_the_time_is_interpolated_between_the_epochs_that_straddle_the_target_and_never_reached_is_none():
    points = ttt.curve(epochs(3.0, 2.0, 1.0, seconds=4.0))
    assert [seconds for _, seconds, _ in points] == [4.0, 8.0, 12.0]
    assert ttt.seconds_to(points, 1.5) == pytest.approx(10.0)  # half way from 2.0 at 8 s to 1.0 at 12 s
    assert ttt.seconds_to(points, 2.0) == 8.0  # reached exactly at an epoch's end
    assert ttt.seconds_to(points, 3.5) == 4.0  # before the first evaluation: the first epoch's end
    assert ttt.seconds_to(points, 0.9) is None
    # A loss that goes back up: the first crossing counts.
    assert ttt.seconds_to(ttt.curve(epochs(2.0, 1.0, 3.0, seconds=1.0)), 1.5) == pytest.approx(1.5)


def test_a_run_stops_only_after_the_target_epoch_once_the_target_is_reached():
    assert not ttt.done(epochs(0.5), 1.0, 3)  # reached, but fewer epochs than N = 1's: no equal-samples loss yet
    assert not ttt.done(epochs(2.0, 1.5, 1.1), 1.0, 3)
    assert ttt.done(epochs(0.9, 1.5, 1.1), 1.0, 3)  # reached once, at the first epoch


def test_the_best_fixed_window_is_the_fastest_by_median_and_ratios_and_not_reached_follow():
    runs = []
    for seed, shift in ((0, 0.0), (1, 0.1)):
        runs += [run("N=1", seed, epochs(3.0 + shift, 2.0 + shift, 1.0 + shift)),  # target: 1.0, 1.1; 30 s
                 run("N=2", seed, epochs(3.0, 2.5, 2.0, 1.8, 1.6, 1.4, seconds=6.0)),  # never within the cap
                 run("N=2 sqrt", seed, epochs(2.5, 1.5, 0.9, 0.8, seconds=6.0)),
                 run("N=4 sqrt", seed, epochs(2.8, 1.8, 1.0 + shift, seconds=5.0)),  # 15 s in both seeds
                 run("auto sqrt", seed, epochs(2.9, 1.9, 1.0 + shift, seconds=6.0, n=8))]
    result = ttt.analyse(runs)["lm"]
    rows = {row["name"]: row for row in result["rows"]}
    assert result["best"] == "N=4 sqrt" and result["seeds"] == [0, 1]
    assert rows["N=1"]["seconds"] == {0: 30.0, 1: 30.0} and rows["N=1"]["vs_n1"] == 1.0
    assert rows["N=2"]["seconds"] == {0: None, 1: None} and rows["N=2"]["median"] is None
    assert rows["N=2"]["vs_n1"] is None and rows["N=2"]["vs_best"] is None
    # Seed 0's target 1.0: between 1.5 at 12 s and 0.9 at 18 s; seed 1's 1.1 between 1.5 and 0.9 too.
    assert rows["N=2 sqrt"]["seconds"][0] == pytest.approx(12.0 + 6.0 * 0.5 / 0.6)
    assert rows["N=2 sqrt"]["seconds"][1] == pytest.approx(12.0 + 6.0 * 0.4 / 0.6)
    assert rows["auto sqrt"]["median"] == 18.0
    assert rows["auto sqrt"]["vs_n1"] == pytest.approx(0.6) and rows["auto sqrt"]["vs_best"] == pytest.approx(1.2)
    assert rows["auto sqrt"]["n_epoch1"] == {0: 8, 1: 8} and rows["N=4 sqrt"]["n_epoch1"] == {0: 4, 1: 4}
    assert rows["auto sqrt"]["loss"] == {0: 1.0, 1: 1.1}
    met = {check["name"]: check["met"] for check in result["checks"]}
    assert list(met.values()) == [2, 0, 2, 2]  # faster than N = 1; 1.2x > 1.15x the best; N 8 vs 4; no worse


def test_the_equal_samples_check_allows_n1s_spread_over_the_seeds_and_no_more():
    runs = [run("N=1", 0, epochs(2.0, 1.5, 1.0)), run("N=1", 1, epochs(2.2, 1.5, 1.1)),
            run("N=2 sqrt", 0, epochs(2.0, 1.5, 1.0)), run("N=2 sqrt", 1, epochs(2.2, 1.5, 1.1)),
            run("auto sqrt", 0, epochs(2.15, 1.5, 1.0)),  # 0.15 worse after epoch 1, spread 0.2: allowed
            run("auto sqrt", 1, epochs(2.2, 1.55, 1.1))]  # 0.05 worse after epoch 2, spread 0: not
    result = ttt.analyse(runs)["lm"]
    assert [gap["spread"] for gap in result["gaps"]] == pytest.approx([0.2, 0.0, 0.1])
    assert result["gaps"][1]["gaps"] == pytest.approx({0: 0.0, 1: 0.05})
    assert result["checks"][-1]["met"] == 1
    table = ttt.format_time_to_target({"lm": result})
    assert "after epoch 2: auto sqrt less N=1 +0.0000 / +0.0500 (N=1's spread over the seeds 0.0000)" in table


def test_the_probes_share_counts_their_seconds_up_to_the_target_and_what_the_other_branches_cost():
    probe = dict(seen=0, accumulate_step=4, seconds=3.0, branch_seconds={"1": 1.0, "2": 0.6, "4": 0.4})
    late = dict(seen=900, accumulate_step=8, seconds=5.0, branch_seconds={"4": 1.0, "8": 1.0})
    records = epochs(2.0, 1.0, 0.5, probes=[probe])
    records[2]["probes"] = [late]  # after the target is reached: not counted
    share, spent = ttt.probe_shares(records, 15.0)
    assert share == pytest.approx(3.0 / 15.0) and spent == pytest.approx(2.6 / 15.0)
    runs = [run("N=1", 0, epochs(2.0, 1.5, 1.0), tool="mnist"),
            run("auto linear", 0, records, tool="mnist")]
    row = ttt.analyse(runs)["mnist"]["rows"][1]
    assert row["seconds"][0] == 20.0 and row["probe_share"] == {0: pytest.approx(0.15)}
    assert "probes 15% (13% beyond the kept branch)" in ttt.format_time_to_target(ttt.analyse(runs))


def test_a_failed_run_keeps_its_error_and_a_seed_without_n1_is_left_out():
    runs = [run("N=1", 0, epochs(2.0, 1.5, 1.0)), run("N=1", 1, [], error="Traceback\nMemoryError: boom"),
            run("auto sqrt", 0, epochs(2.0, probes=[dict(seen=0, accumulate_step=1, seconds=2.0,
                                                         branch_seconds={"1": 1.0, "2": 0.5})]),
                error="Traceback\nValueError: bad")]
    result = ttt.analyse(runs)["lm"]
    assert result["seeds"] == [0] and result["best"] == "N=1"  # N = 1 is a fixed window too
    assert [(check["met"], check["of"]) for check in result["checks"]] == [(0, 1)] * 4  # never reached, no epoch 3
    auto = result["rows"][1]
    assert auto["seconds"] == {0: None} and auto["loss"] == {0: None} and auto["errors"] == ["ValueError: bad"]
    assert (auto["probe_share"], auto["probe_spent"]) == ({0: 0.2}, {0: 0.1})  # not reached: of the whole run
    assert "auto sqrt" in ttt.format_time_to_target({"lm": result}).split("ERROR")[0]


def test_each_seed_runs_n1_first_and_the_others_to_its_target_each_saved_as_it_is_done(monkeypatch):
    calls, saved = [], []

    def train(tool, step, rule, seed, most_epochs, target, target_epoch, data_dir, timeout):  # the tool's log
        calls.append((seed, step, rule, most_epochs, target))
        if seed == 1:
            return dict(records=[], load_before=0.0, load_after=0.0, error="Traceback\nMemoryError: boom")
        return dict(records=epochs_of(step), load_before=0.0, load_after=0.0, stopped=target is not None)

    def epochs_of(step):
        return epochs(2.0, 1.5, 1.0) if step == 1 else epochs(1.8, 1.2, 0.9)

    monkeypatch.setattr(ttt, "train", train)
    runs = ttt.run_all(["lm"], [0, 1], [1, 2, "auto"], log=io.StringIO(), save=lambda runs: saved.append(len(runs)))
    assert calls == [(0, 1, "none", 3, None), (0, 2, "none", 6, 1.0), (0, 2, "sqrt", 6, 1.0),
                     (0, "auto", "sqrt", 6, 1.0), (1, 1, "none", 3, None)]  # seed 1's N = 1 failed: no target
    assert saved == [1, 2, 3, 4, 5] and [run["name"] for run in runs][-1] == "N=1"


def test_the_configurations_and_commands_follow_the_rules_regime():
    assert ttt.make_configs("mnist", [1, 2, "noise", "auto"]) == [
        ("N=1", 1, "none"), ("N=2", 2, "none"), ("N=2 linear", 2, "linear"),
        ("noise linear", "noise", "linear"), ("auto linear", "auto", "linear")]
    argv = ttt.command("lm", 4, "sqrt", 1, 6, "log.json")
    assert argv[1].endswith("train_lm.py") and argv[2] == "--synthetic"
    flags = dict(zip(argv[3::2], argv[4::2]))
    assert {flags[k] for k in ("--optimizer", "--lr", "--batch-size", "--scale-rule", "--seed", "--epochs")} == {
        "adamw", "0.003", "1", "sqrt", "6"}


@pytest.mark.parametrize("flags, words", [
    (("--windows", "2,4"), ("--windows", "'2,4'", "must hold 1")),
    (("--windows", "1,fast"), ("--windows", "'fast'", "noise or auto")),
    (("--seeds", "0,x"), ("--seeds", "'x'", "0 or above")),
    (("--tools", "mnist,cifar"), ("--tools", "'cifar'", "'mnist', 'lm'")),
    (("--target-epoch", "0"), ("--target-epoch", "'0'", "above 0")),
])
def test_a_bad_value_stops_the_command_with_one_line_naming_it(flags, words, capsys):
    with pytest.raises(SystemExit) as stopped:
        parse_args(["--time-to-target", *flags])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert all(word in error for word in words), error


def test_the_command_defaults_to_both_tools_two_seeds_every_window_and_a_longer_timeout():
    args = parse_args(["--time-to-target"])
    assert (args.tools, args.seeds, args.windows) == (["mnist", "lm"], [0, 1], [1, 2, 4, 8, 16, "noise", "auto"])
    assert args.target_epoch == 3 and args.timeout == ttt.TIMEOUT and parse_args([]).timeout == 300


def test_the_runs_of_an_earlier_json_are_analysed_again_into_the_table_json_and_plot(tmp_path, capsys):
    runs = [run("N=1", 0, epochs(2.0, 1.5, 1.0), tool="mnist", load_before=0.1),
            run("N=2 linear", 0, epochs(1.9, 1.4, 0.9, seconds=6.0), tool="mnist", load_before=0.1),
            run("auto linear", 0, epochs(1.9, 1.3, 0.9, seconds=7.0, n=4,
                                         probes=[dict(seen=0, accumulate_step=4, seconds=1.0,
                                                      branch_seconds={"1": 0.3, "2": 0.2, "4": 0.2})]),
                tool="mnist", load_before=0.1)]
    saved, again, plot_path = tmp_path / "runs.json", str(tmp_path / "again.json"), str(tmp_path / "ttt.png")
    saved.write_text(json.dumps({"settings": {"target_epoch": 3}, "runs": runs}))
    assert main(["--time-to-target", "--from-json", str(saved), "--json", again, "--plot", plot_path]) == 0
    table = capsys.readouterr().out
    assert "MNIST (samples), seeds 0; best fixed window: N=2 linear" in table
    with open(again) as handle:
        analysed = json.load(handle)["analysed"]["mnist"]
    medians = [row["median"] for row in analysed["rows"]]
    assert medians == pytest.approx([30.0, 12.0 + 6.0 * 0.4 / 0.5, 14.0 + 7.0 * 0.3 / 0.4])  # target 1.0
    assert os.path.getsize(plot_path) > 0


@pytest.mark.slow  # end to end: two tool processes, each compiles
def test_the_command_trains_n1_and_the_measured_window_and_writes_the_table_json_and_plot(tmp_path, capsys):
    data = str(tmp_path / "mnist")
    write_synthetic_mnist(data, n_train=640, n_test=64, seed=0)  # 20 micro-batches of 32: one probe at the start
    json_path, plot_path = str(tmp_path / "ttt.json"), str(tmp_path / "ttt.png")
    status = main(["--time-to-target", "--tools", "mnist", "--seeds", "0", "--windows", "1,auto", "--target-epoch",
                   "1", "--data-dir", data, "--json", json_path, "--plot", plot_path])
    assert status == 0
    table = capsys.readouterr().out
    assert "MNIST (samples), seeds 0; best fixed window: N=1" in table and "auto linear" in table
    with open(json_path) as handle:
        saved = json.load(handle)
    runs = {run["name"]: run for run in saved["runs"]}
    assert list(runs) == ["N=1", "auto linear"] and len(runs["N=1"]["records"]) == 1
    assert runs["auto linear"]["target"] == runs["N=1"]["records"][0]["test_loss"]
    assert 1 <= len(runs["auto linear"]["records"]) <= ttt.CAP  # stopped once reached, or at the cap
    assert runs["auto linear"]["records"][0]["probes"][0]["seen"] == 0
    assert os.path.getsize(plot_path) > 0
