"""The measured window (accumulator.batch_size.critical): the decision on hand-written losses, its bounds and growth, bad
input, and the branches: a probe that keeps N leaves the run bit for bit as without it; one that grows N leaves it
as a run that trained at the grown N.

By hand: from a loss of 2.0, window 1 reached 1.0; with a tolerance of 5% of that progress (0.05), window 2's
1.05 keeps pace and window 4's 1.06 does not: N = 2.
"""
import numpy as np
import pytest
from mindspore import Tensor, nn

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
    with pytest.raises(ValueError, match="finite losses"):
        schedule.choose({1: 1.0, 2: float("inf")}, start_loss=2.0)
    with pytest.raises(ValueError, match="start_loss must be a finite loss, got nan"):
        schedule.choose({1: 1.0, 2: 1.0}, start_loss=float("nan"))
    assert schedule.current == 1 and schedule.should_probe(0)


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
