"""Accumulation schedules: N changes between windows, and each window stays exact.

By hand: ``{0: 2, 1: 4}`` takes windows of 2 micro-batches for the first update, then of 4; each window's
update equals one large-batch step on its samples. A schedule without an entry for update 0 is refused.
"""
import pytest
import mindspore as ms
from mindspore import Tensor, nn, ops

from accumulator import Accumulator
from accumulator.batch_size.schedule import SETTLE_WINDOWS, NoiseScaleSchedule, as_schedule
from tests.accumulator.helpers import (accumulated_step, assert_states_close, grad_fn_for, make_data, make_net,
                                       make_optimizer, optimizer_state, reference_state, split, sweep)


def warmup_schedule(update_count):
    return ops.where(update_count < 2, 1, 3)


# A dict schedule also drives test_step's and test_scaling's compiled steps: the fast path runs the callable here,
# CI both.
@pytest.mark.parametrize("accumulate_step", sweep([warmup_schedule, {0: 1, 2: 3}]), ids=["callable", "dict"])
def test_windows_follow_the_schedule_and_equal_their_large_batches(accumulate_step):
    x, y = make_data(32)
    window_sizes = [1, 1, 3, 3]
    bounds = [0, 4, 8, 20, 32]
    windows = [(x[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]

    expected = reference_state("adam", windows)

    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    accumulator = Accumulator(optimizer, accumulate_step)
    step = accumulated_step(accumulator, grad_fn_for(net, optimizer))
    seen_sizes = []
    for (data, label), size in zip(windows, window_sizes):
        seen_sizes.append(int(accumulator.accumulate_step))
        for micro in split(data, label, [4] * size):
            step(*micro)
    assert seen_sizes == window_sizes
    assert int(accumulator.update_count) == 4
    assert_states_close(optimizer_state(optimizer), expected)


def test_piecewise_schedule_picks_the_last_started_entry():
    schedule = as_schedule({0: 8, 100: 4, 500: 1})
    assert (schedule.first_step, schedule.fixed_step) == (8, None)
    assert as_schedule(3).fixed_step == 3
    assert [int(schedule(Tensor(u, ms.int32)).asnumpy()) for u in (0, 99, 100, 499, 500, 10 ** 6)] == \
        [8, 8, 4, 4, 1, 1]


@pytest.mark.parametrize("schedule, message", [
    ({5: 2}, "must have an entry for update 0"),
    ({0: 2, -1: 4}, r"keys must be update counts >= 0, got \[-1, 0\]"),
    ({0: 0}, r"accumulate_step\[0\] must be a positive int, got 0"),
    ({}, "must have an entry for update 0"),
])
def test_bad_schedules_are_rejected(schedule, message):
    optimizer = make_optimizer("sgd", make_net().trainable_params())
    with pytest.raises(ValueError, match=message):
        Accumulator(optimizer, schedule)


@pytest.mark.parametrize("noise_scale, expected", [(20.0, 4), (24.0, 6), (12.0, 4), (8.0, 2), (100.0, 16)])
def test_the_adaptive_window_moves_only_past_its_hysteresis(noise_scale, expected):
    # N = 4 of micro-batches of 4; the target is noise scale / 4, rounded: 5 and 3 lie within 1.5x of 4, 6 and 2
    # do not, 25 is clamped to max_step.
    schedule = NoiseScaleSchedule(micro_batch_size=4, min_step=1, max_step=16, hysteresis=1.5, first_step=4)
    accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), schedule, track_noise=True,
                              micro_batch_size=4)
    accumulator.noise.gradient.set_data(Tensor(1.0, ms.float32))
    accumulator.noise.trace.set_data(Tensor(noise_scale, ms.float32))
    accumulator.noise.windows.set_data(Tensor(SETTLE_WINDOWS - 1, ms.int32))
    assert int(schedule(Tensor(0, ms.int32))) == 4  # not settled yet
    accumulator.noise.windows.set_data(Tensor(SETTLE_WINDOWS, ms.int32))
    assert int(schedule(Tensor(0, ms.int32))) == expected


@pytest.mark.parametrize("noise_scale, update_cost, expected", [(100.0, 2.0, 7), (100.0, 0.5, 4), (256.0, 1.0, 8),
                                                                (-8.0, 1.0, 2)])
def test_with_an_update_cost_the_window_aims_at_the_square_root_of_its_product_with_the_noise_scale(
        noise_scale, update_cost, expected):
    # Micro-batches of 4: 100 samples are 25 micro-batches, √(25 x 2) = 7.07, √(25 x 0.5) = 3.5 lies within 1.5x
    # of 4; a negative trace (no noise measured) sets the lowest N, as it does without a cost.
    schedule = NoiseScaleSchedule(micro_batch_size=4, min_step=1, max_step=16, first_step=4, update_cost=update_cost)
    accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), schedule, track_noise=True,
                              micro_batch_size=4)
    accumulator.noise.gradient.set_data(Tensor(1.0, ms.float32))
    accumulator.noise.trace.set_data(Tensor(noise_scale, ms.float32))
    accumulator.noise.windows.set_data(Tensor(SETTLE_WINDOWS, ms.int32))
    assert int(schedule(Tensor(0, ms.int32))) == expected
