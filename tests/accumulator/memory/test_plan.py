"""accumulator.memory.plan: the micro-batch chosen by measured memory, the fit that stops before the budget, the errors.

By hand: a step needing 100 MiB + 10 MiB a sample under a budget of 400 MiB, 90% of it usable (360 MiB): 16 needs
260 MiB and 32 needs 420, so a batch of 64 runs as 4 micro-batches of 16.
"""
import os
import signal

import pytest

from accumulator.memory.plan import (MemoryPlan, PlanError, Probe, ProbeChild, choose_micro_batch, format_size,
                              measure_in_child, parse_size, peak_resident, plan_micro_batch, touch_memory)

MIB = 2 ** 20
GIB = 2 ** 30


def linear(base, per_sample, speeds=None, calls=None):
    """A ``measure`` whose peak grows by ``per_sample`` bytes a sample; samples/s from ``speeds`` (or the size)."""
    def measure(size):
        if calls is not None:
            calls.append(size)
        return Probe(size, base + per_sample * size, float(size) if speeds is None else speeds[size])
    return measure


def test_the_largest_size_under_the_budget_with_its_margin_when_speed_grows_with_size():
    # 100 MiB + 10 MiB a sample; 90% of 400 MiB is 360 MiB: 16 needs 260, 32 needs 420.
    calls = []
    plan = choose_micro_batch(linear(100 * MIB, 10 * MIB, calls=calls), 64, budget=400 * MIB,
                              candidates=[4, 8, 16, 32, 64])
    assert (plan.micro_batch, plan.accumulate_step) == (16, 4)
    assert calls == [64, 32, 16, 8]  # from the largest down; 8 for speed, slower: 4 never runs


def test_the_fastest_size_that_fits_not_the_largest():
    # Each size below is faster than the one above until 1: the search follows them down.
    speeds = {1: 10.0, 2: 30.0, 4: 25.0, 8: 20.0}
    plan = choose_micro_batch(linear(0, MIB, speeds), 8, budget=100 * MIB)
    assert plan.micro_batch == 2
    assert [probe.size for probe in plan.probes] == [1, 2, 4, 8]


def test_the_line_through_two_measured_peaks_skips_the_sizes_it_puts_over_the_budget():
    calls = []
    plan = choose_micro_batch(linear(100 * MIB, 10 * MIB, calls=calls), 64, budget=400 * MIB,
                              candidates=[8, 16, 32, 48, 64])
    # 64 and 48 are measured over (a device reports such peaks): the line puts 32 at 420 MiB > 360.
    assert calls == [64, 48, 16, 8] and plan.micro_batch == 16
    skipped = [probe for probe in plan.probes if probe.size == 32]
    assert [(probe.outcome, probe.peak) for probe in skipped] == [("not run", 420 * MIB)]


def test_the_line_never_skips_the_smallest_size_so_the_error_names_a_measured_need():
    calls = []
    with pytest.raises(PlanError, match=r"below the smallest micro-batch's need: micro-batch 1 peaks at 110\.0 MiB, "
                                        r"so it needs a budget of 122\.2 MiB \(10% kept free\)"):
        choose_micro_batch(linear(100 * MIB, 10 * MIB, calls=calls), 8, budget=50 * MIB)
    assert calls == [8, 4, 1]  # the line through 8 and 4 puts 2 over: not run


def test_sizes_within_the_noise_are_tied_and_the_larger_is_taken():
    def speeds(table, spread=None):
        return lambda size: Probe(size, MIB, table[size], spread=spread)
    assert choose_micro_batch(speeds({1: 5.0, 2: 100.0, 4: 102.0, 8: 100.0}), 8, GIB).micro_batch == 8  # within 3%
    assert choose_micro_batch(speeds({1: 5.0, 2: 100.0, 4: 110.0, 8: 100.0}), 8, GIB).micro_batch == 4
    # The same 10% apart, but each size's calls spread 12 samples/s either way: not told apart, so the larger.
    assert choose_micro_batch(speeds({1: 5.0, 2: 100.0, 4: 110.0, 8: 100.0}, spread=12.0), 8, GIB).micro_batch == 8


def test_an_uneven_batch_ends_on_a_smaller_micro_batch_that_completes_it():
    plan = choose_micro_batch(linear(0, MIB), 20, budget=10 * MIB, candidates=[4, 8, 16])
    assert plan.micro_batch == 8 and plan.micro_batches == [8, 8, 4] and sum(plan.micro_batches) == 20
    assert "8 + 8 + 4 = 20 per update" in plan.table()


def test_a_batch_smaller_than_one_micro_batch_says_so():
    with pytest.raises(PlanError, match="batch per update of 3 is smaller than one micro-batch: the smallest "
                                        "candidate is 4"):
        choose_micro_batch(linear(0, MIB), 3, budget=MIB, candidates=[4, 8])


def test_a_failure_that_is_not_memory_reports_its_reason():
    def measure(size):
        return Probe(size, outcome="ValueError: shapes (4, 3) and (2,) not aligned") if size == 4 \
            else linear(0, MIB)(size)
    with pytest.raises(PlanError, match=r"micro-batch 4 failed, not for memory: ValueError: shapes"):
        choose_micro_batch(measure, 8, budget=GIB)


@pytest.mark.parametrize("outcome", ["out of memory (killed by SIGKILL)", "over the budget (stopped at 1.00 GiB)"])
def test_out_of_memory_or_stopped_over_the_budget_steps_down_to_the_sizes_that_fit(outcome):
    calls = []

    def measure(size):
        calls.append(size)
        return Probe(size, None if outcome.startswith("out") else GIB, outcome=outcome) if size >= 4 \
            else linear(0, MIB)(size)
    plan = choose_micro_batch(measure, 16, budget=GIB)
    assert plan.micro_batch == 2 and calls == [16, 8, 4, 2, 1]
    assert outcome in plan.table()


def test_a_smallest_size_stopped_over_the_budget_names_how_far_it_got():
    def stopped(size):
        return Probe(size, 100 * MIB, outcome="over the budget (stopped at 100.0 MiB)")
    with pytest.raises(PlanError, match=r"micro-batch 1 passed 100\.0 MiB when it was stopped, so it needs a budget "
                                        r"of more than 111\.1 MiB"):
        choose_micro_batch(stopped, 4, budget=100 * MIB)


def test_sizes_parse_in_binary_units_and_read_back():
    assert parse_size("6GiB") == parse_size("6G") == parse_size("6gb") == 6 * 2 ** 30
    assert format_size(parse_size("512MiB")) == "512.0 MiB"
    for bad in ("", "6 parsecs", "0G", "-1G"):
        with pytest.raises(ValueError, match="expected a size such as 512MiB"):
            parse_size(bad)


def test_a_step_that_is_not_importable_is_refused_before_any_child():
    with pytest.raises(PlanError, match="make_step must be a top-level function"):
        plan_micro_batch(lambda size: None, 8, "1GiB", device="CPU")


def test_the_plan_records_what_it_measured():
    plan = MemoryPlan(8, 4, 2 ** 30, 0.1, (Probe(4, 5 * MIB, 9.0, spread=0.5, seconds=2.0),))
    assert plan.record()["probes"] == [{"size": 4, "peak": 5 * MIB, "samples_per_second": 9.0, "outcome": "measured",
                                        "spread": 0.5, "seconds": 2.0, "phases": None}]


def raise_for(size):
    raise ValueError(f"no step for {size} samples\n\n- C++ Call Stack: (For framework developers)")


def killed(size):
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.fixture
def children_started(monkeypatch):
    """A list that gains an entry for each ``ProbeChild`` the planner starts."""
    started = []

    class CountedChild(ProbeChild):
        def __init__(self, *args, **kwargs):
            started.append(True)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr("accumulator.memory.plan.ProbeChild", CountedChild)
    return started


def test_the_sizes_that_fit_are_measured_in_one_child_and_planned(children_started):
    # The fast suite's one probe child (CI's oldest release runs it too); the plan module's child examples are slow.
    plan = plan_micro_batch(touch_memory, 6, peak_resident() + GIB, args=(MIB,), candidates=[2, 3], steps=1)
    assert [(probe.size, probe.outcome) for probe in plan.probes] == [(2, "measured"), (3, "measured")]
    assert all(probe.peak > probe.size * MIB and probe.samples_per_second > 0 and probe.spread >= 0
               and probe.seconds > 0 for probe in plan.probes)
    assert all(list(probe.phases) == ["start", "build", "first call", "timed"] for probe in plan.probes)
    assert (plan.micro_batch, plan.accumulate_step) in [(2, 3), (3, 2)]
    assert len(children_started) == 1


@pytest.mark.slow
def test_a_child_measures_the_memory_its_step_holds_per_sample(children_started):
    # 64 MiB a sample: the two children's peaks differ by the 3 samples' 192 MiB, give or take the import's noise.
    small, large = (measure_in_child(touch_memory, size, args=(64 * MIB,), steps=1) for size in (1, 4))
    assert abs((large.peak - small.peak) - 192 * MIB) < 32 * MIB
    budget = int((small.peak + 130 * MIB) / 0.9)  # room for 1 and 2, not 4
    plan = plan_micro_batch(touch_memory, 8, budget, args=(64 * MIB,), candidates=[1, 2, 4], steps=1)
    assert plan.micro_batch in (1, 2)
    assert all(probe.peak <= budget * 0.9 for probe in plan.probes if probe.size == plan.micro_batch)
    # 4, the first tried, passed the budget: its child was stopped there, and the search went on down.
    over = plan.probes[-1]
    assert over.size == 4 and over.outcome.startswith("over the budget (stopped at ") and over.peak > budget * 0.9
    assert len(children_started) == 2 + 2  # the two measure_in_child above, then 4's, then one for 2 and 1


@pytest.mark.slow
def test_a_child_killed_by_a_signal_is_out_of_memory_and_an_exception_is_its_text():
    assert measure_in_child(killed, 1).outcome == "out of memory (killed by SIGKILL)"
    assert measure_in_child(raise_for, 3).outcome == "ValueError: no step for 3 samples"
    assert peak_resident() > 0  # and the run is still here


@pytest.mark.slow
def test_a_reused_child_resets_its_peak_and_counts_no_less_than_a_fresh_one():
    with ProbeChild(touch_memory, args=(64 * MIB,), steps=1) as child:
        large, small = child.measure(4), child.measure(1)
        assert child.alive
    fresh = measure_in_child(touch_memory, 1, args=(64 * MIB,), steps=1)
    assert large.peak - small.peak > 150 * MIB  # reset: the 4 samples' block is no longer the peak
    assert small.peak >= fresh.peak - 8 * MIB, (small.peak, fresh.peak)  # what it still holds counts: conservative
