"""benchmarks/scale_rules.py: the sweep's runs, the time to a target loss, and the targets' verdicts."""
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
    assert verdicts["(2) auto sqrt reaches 1.0000 sooner than N=1"] == (True, "20.0 s vs 30.0 s (-33%)")
    assert verdicts["(2) auto sqrt reaches 1.0000 sooner than auto"] == (True, "20.0 s vs never")
    assert verdicts["(2) auto sqrt reaches 1.0000 sooner than 1.10 x fastest fixed (N=4)"] == \
        (False, "20.0 s vs 16.5 s (+21%)")
    table = scale_rules.format_report(results, report)
    assert "MISSED: (2) auto sqrt reaches 1.0000 sooner than 1.10 x fastest fixed (N=4)" in table
    assert "| auto | 3.5000 | 3.0000 | 2.0000 | 1.5000 | never | auto |" in table


@pytest.mark.slow  # one run of the MNIST tool: about 15 s
def test_a_run_records_the_window_and_the_learning_rate_its_rule_set():
    records = scale_rules.train("mnist", 2, "linear", 1, "sgd", ["--batch-size", "64"])
    assert len(records) == 1 and records[0]["accumulate_step"] == 2
    assert records[0]["lr"] in (pytest.approx(0.02), pytest.approx(0.01))  # the last window: whole, or one left
