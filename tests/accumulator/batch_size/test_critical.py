"""The measured window (accumulator.batch_size.critical): the decision on hand-written losses, its bounds and growth, bad
input, and the branches: a probe that keeps N leaves the run bit for bit as without it; one that grows N leaves it
as a run that trained at the grown N.

By hand: from a loss of 2.0, window 1 reached 1.0; with a tolerance of 5% of that progress (0.05), window 2's
1.05 keeps pace and window 4's 1.06 does not: N = 2.
"""
import numpy as np
import pytest
from mindspore import Parameter, Tensor, amp, nn

import accumulator.policies as shipped
from accumulator import Accumulator, training_state
from accumulator.batch_size import CriticalBatchSchedule, ScaleRule
from tests.accumulator.helpers import (accumulated_step, grad_fn_for, make_data, make_net, make_optimizer,
                                       optimizer_state, split)


def bound_schedule(**settings):
    schedule = CriticalBatchSchedule(**{"interval": 100, **settings})
    schedule.bind(Accumulator(nn.SGD(nn.Dense(2, 1).trainable_params(), 0.1), schedule))
    return schedule


def test_the_largest_window_that_keeps_pace_with_the_smallest_is_chosen():
    schedule = bound_schedule(tolerance=0.05, max_step=64)
    # From 2.0, window 1 reached 1.0: a window may lose 5% of that progress, 0.05
    assert schedule.choose({1: 1.00, 2: 1.05, 4: 1.06}, start_loss=2.0) == 2
    assert schedule.choose({2: 1.0, 4: 0.9, 8: 0.95}, start_loss=2.0) == 8      # lower losses pass too
    assert schedule.choose({8: 1.0, 16: 1.2, 32: 1.0}, start_loss=2.0) == 8     # 32 is past a window that failed


def test_the_tolerance_is_a_share_of_the_progress_not_of_the_loss():
    # Early, a loss of 2.2 from 2.3: 2's 2.21 is within 1% of the loss but lost a tenth of the progress
    assert bound_schedule(tolerance=0.05).choose({1: 2.20, 2: 2.21}, start_loss=2.3) == 1
    assert bound_schedule(tolerance=0.05).choose({1: 2.20, 2: 2.204}, start_loss=2.3) == 2
    # No progress at the smallest window: a larger one must do no worse
    assert bound_schedule(tolerance=0.05).choose({1: 1.0, 2: 1.001}, start_loss=0.9) == 1


def test_n_only_grows_within_the_bounds():
    schedule = bound_schedule(min_step=2, max_step=12, branches=3)
    assert schedule.current == 2 and schedule.windows() == [2, 4, 8]
    assert schedule.choose({8: 1.0}, start_loss=2.0) == 8
    assert schedule.choose({2: 1.0}, start_loss=2.0) == 8                   # a smaller window's does not shrink N
    assert schedule.windows() == [8, 12]
    assert schedule.choose({8: 1.0, 12: 1.0, 20: 1.0}, start_loss=2.0) == 12  # the upper bound holds
    assert not schedule.should_probe(10 ** 9)                   # at the bound: nothing left to measure


def test_probes_follow_at_once_while_n_grows_then_at_doubling_gaps():
    schedule = bound_schedule(interval=100, max_step=1024)
    due = []
    for seen in range(0, 1600, 50):
        while schedule.should_probe(seen):
            due.append(seen)
            grows = seen == 100 and schedule.current < 4   # the probe at 100 grows N twice, then keeps it
            schedule.choose({schedule.current: 1.0, 2 * schedule.current: 1.0 if grows else 1.9}, start_loss=2.0)
    assert due == [0, 100, 100, 100, 300, 700, 1500]
    assert schedule.current == 4


@pytest.mark.parametrize("settings, message", [
    ({"tolerance": 0}, "tolerance must be a number in (0, 1), got 0"),
    ({"tolerance": 1}, "tolerance must be a number in (0, 1), got 1"),
    ({"min_step": 0}, "min_step must be a positive int, got 0"),
    ({"min_step": 8, "max_step": 4}, "max_step must be at least min_step=8, got 4"),
    ({"interval": 0}, "interval must be a positive int, got 0"),
    ({"branches": 1}, "branches must be an int of at least 2 (N and 2N), got 1"),
])
def test_bad_settings_are_refused_in_one_line(settings, message):
    with pytest.raises(ValueError) as error:
        CriticalBatchSchedule(**{"interval": 100, **settings})
    assert str(error.value) == message


def test_bad_losses_change_nothing():
    schedule = bound_schedule()
    with pytest.raises(ValueError, match=r"losses_by_step must map Ns \(ints >= 1\) to losses \(numbers\)"):
        schedule.choose({1: 1.0, 2: "low"}, start_loss=2.0)
    with pytest.raises(ValueError, match="start_loss must be a loss \\(a number\\), got None"):
        schedule.choose({1: 1.0, 2: 1.0}, start_loss=None)
    assert schedule.current == 1 and schedule.should_probe(0)


@pytest.mark.parametrize("losses, start_loss", [
    ({1: 1.0, 2: float("nan")}, 2.0), ({1: 1.0, 2: float("inf")}, 2.0),   # 2 diverged
    ({1: float("nan"), 2: 1.0}, 2.0),                                         # 1 did: no progress to keep pace with
    ({1: 1.0, 2: 1.0}, float("nan")),                                         # nothing to measure progress from
])
def test_a_loss_that_is_not_finite_does_not_keep_pace(losses, start_loss):
    schedule = bound_schedule()
    assert schedule.choose(losses, start_loss) == 1 and int(schedule.kept) == 1


def test_a_diverging_branch_is_recorded_and_the_run_goes_on_from_the_smallest():
    schedule, trained = bound_schedule(max_step=8, branches=3), []
    losses = iter([2.0, 1.0, 1.0, float("nan"), 1.0])   # the start, then N = 1, 2, 4 (diverges), and no more
    probed = schedule.probe({}, trained.append, lambda: next(losses))
    assert trained == [1, 2, 4] and schedule.current == 2
    assert probed["branches"][4]["loss"] != probed["branches"][4]["loss"]    # NaN, as logged


def test_a_probe_whose_start_is_not_finite_trains_n_alone():
    schedule, trained = bound_schedule(), []
    losses = iter([float("inf"), 1.0])
    probed = schedule.probe({}, trained.append, lambda: next(losses))
    assert trained == [1] and schedule.current == 1 and sorted(probed["branches"]) == [1]


class ToyRun:
    """A tiny net trained by the compiled in-graph step at N from a measured schedule, momentum and the linear rule."""

    def __init__(self):
        self.net = make_net()
        self.optimizer = make_optimizer("momentum", self.net.trainable_params())
        self.schedule = CriticalBatchSchedule(interval=100, max_step=4, branches=2, branch_windows=2)
        self.accumulator = Accumulator(self.optimizer, self.schedule)
        self.schedule.bind(self.accumulator)
        ScaleRule(self.accumulator, "linear", tuned_step=1)
        self.step = accumulated_step(self.accumulator, grad_fn_for(self.net, self.optimizer))
        self.loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def train(self, micro_batches):
        for micro_batch in micro_batches:
            self.step(*micro_batch)

    def held_out_loss(self, x, y):
        return float(self.loss(self.net(Tensor(x)), Tensor(y)).asnumpy())

    def state(self):
        return {name: param.asnumpy().copy()
                for name, param in training_state(self.net, self.optimizer, self.accumulator).items()}


def probed_run(micro_batches, held_out, penalty_above):
    """A run that probes windows 1 and 2 on the first four micro-batches, then trains the rest.

    ``penalty_above``: the held-out loss of a window above it is raised by 10, which decides the probe; the
    start's is raised by 10 too, so that every window makes progress enough for the others to keep pace.
    """
    run = ToyRun()
    probe_batches, rest = micro_batches[:4], micro_batches[4:]
    reads = []

    def held_out_loss():
        reads.append(run.schedule.current)
        penalised = len(reads) == 1 or run.schedule.current > penalty_above
        return run.held_out_loss(*held_out) + 10 * penalised

    probed = run.schedule.probe(training_state(run.net, run.optimizer, run.accumulator),
                                lambda window: run.train(probe_batches), held_out_loss)
    run.train(rest)
    return run, probed["branches"]


def test_a_probe_that_keeps_n_leaves_the_run_bit_identical():
    x, y = make_data(48)
    micro_batches = split(x[:40], y[:40], [4] * 10)
    plain = ToyRun()
    plain.train(micro_batches)
    probed, records = probed_run(micro_batches, (x[40:], y[40:]), penalty_above=1)
    assert sorted(records) == [1, 2] and probed.schedule.current == 1
    assert int(probed.accumulator.update_count) == 10
    expected, actual = plain.state(), probed.state()
    assert actual.keys() == expected.keys()
    assert (actual.pop(probed.schedule.kept.name), expected.pop(plain.schedule.kept.name)) == (1, 0)
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


def test_a_probe_that_grows_n_continues_from_its_branch():
    x, y = make_data(48)
    micro_batches = split(x[:40], y[:40], [4] * 10)
    at_two = ToyRun()
    at_two.schedule.set_window(2)
    at_two.train(micro_batches)
    probed, _ = probed_run(micro_batches, (x[40:], y[40:]), penalty_above=2)
    assert probed.schedule.current == 2 and int(probed.accumulator.update_count) == 5
    assert optimizer_state(probed.optimizer).keys() == optimizer_state(at_two.optimizer).keys()
    for name, value in optimizer_state(at_two.optimizer).items():
        np.testing.assert_array_equal(optimizer_state(probed.optimizer)[name], value, err_msg=name)


# Every policy the library ships, as a run would hold it: a new one must be added here (the test checks the list).
POLICIES = {   # each made for the test's net
    "ClipNorm": lambda net: shipped.ClipNorm(0.01),
    "EMA": lambda net: shipped.EMA(net.trainable_params(), 0.5),
    "LossScaling": lambda net: shipped.LossScaling(amp.DynamicLossScaler(2.0 ** 10, 2, 1)),   # doubles every window
    "NoiseFromEveryMicroBatch": lambda net: shipped.NoiseFromEveryMicroBatch(4),
    "NoiseFromLastMicroBatch": lambda net: shipped.NoiseFromLastMicroBatch(4),
    "SkipNonFiniteMicroBatches": lambda net: shipped.SkipNonFiniteMicroBatches(),
    "SkipNonFiniteWindows": lambda net: shipped.SkipNonFiniteWindows(),
    "SkipSpikes": lambda net: shipped.SkipSpikes(1.01, warmup=1),
}


def held(value, path, found, depth=3):
    """Every Parameter reachable from ``value`` through attributes, lists and dicts (not Cells: training_state's)."""
    if isinstance(value, Parameter):
        found.setdefault(id(value), (path, value))
    elif isinstance(value, (list, tuple)) or isinstance(value, dict) and depth:
        for key, item in (value.items() if isinstance(value, dict) else enumerate(value)):
            held(item, f"{path}[{key}]", found, depth)
    elif depth and hasattr(value, "__dict__") and not isinstance(value, (nn.Cell, Accumulator, type)):
        for name, item in vars(value).items():
            held(item, f"{path}.{name}", found, depth - 1)
    return found


def test_the_policies_shipped_are_the_ones_probed_below():
    classes = {name for name in shipped.__all__
               if isinstance(getattr(shipped, name), type) and issubclass(getattr(shipped, name), shipped.Policy)}
    assert classes - {"Policy"} == set(POLICIES)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_probe_puts_back_every_parameter_a_policy_holds(policy):
    x, y = make_data(12)
    net = make_net()
    optimizer = make_optimizer("momentum", net.trainable_params())
    schedule = CriticalBatchSchedule(interval=100, max_step=2, branch_windows=2)
    accumulator = Accumulator(optimizer, schedule, policies=[POLICIES[policy](net)])
    schedule.bind(accumulator)
    ScaleRule(accumulator, "linear", tuned_step=1)
    step = accumulated_step(accumulator, grad_fn_for(net, optimizer), use_jit=False)
    micro_batches = split(x, y, [2] * 6)
    for micro_batch in micro_batches[:2]:
        step(*micro_batch)
    state = training_state(net, optimizer, accumulator)
    ends = {}

    def branch(accumulate_step):
        for micro_batch in micro_batches[2:]:
            step(*micro_batch)
        everything = held(accumulator.policies, "policies", {id(param): (name, param) for name, param in state.items()})
        ends[accumulate_step] = {path: param.asnumpy().copy() for path, param in everything.values()}

    losses = iter([10.0, 1.0, 5.0])   # N = 2 loses most of N = 1's progress: the run goes on from N = 1's branch
    schedule.probe(state, branch, lambda: next(losses))
    assert schedule.current == 1
    after = held(accumulator.policies, "policies", {id(param): (name, param) for name, param in state.items()})
    for path, param in after.values():
        if path not in (schedule.kept.name, schedule.accumulate_step.name):
            np.testing.assert_array_equal(param.asnumpy(), ends[1][path], err_msg=f"{policy}: {path}")


def test_the_old_name_of_n_still_reads_it_and_warns():
    schedule = CriticalBatchSchedule(interval=10, first_step=4)
    with pytest.warns(DeprecationWarning, match="CriticalBatchSchedule.step is deprecated.*accumulate_step"):
        assert schedule.step is schedule.accumulate_step
