"""The non-finite policies alone: gates, keep and the dropped count from hand-written values.

By hand: with ``skip_nonfinite='micro_batch'``, gradients 1, NaN, 2 and 3 in a window of 4 drop the NaN one and
move a weight of 0 at learning rate 1 by their mean, to -2; with the default, that window is skipped whole.
"""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor

from mindspore import nn

from accumulator import Accumulator, make_window_step
from accumulator.policies import SkipNonFiniteMicroBatches, SkipNonFiniteWindows
from tests.accumulator.helpers import (accumulated_step, assert_states_close, grad_fn_for, make_data, make_net,
                                       make_optimizer, optimizer_state, per_micro_step, reference_state, scale_setup,
                                       split, sweep)


@pytest.mark.parametrize("finite", [True, False])
def test_the_window_gate_is_the_finiteness(finite):
    assert bool(SkipNonFiniteWindows().gate({"finite": Tensor(finite)})) is finite


@pytest.mark.parametrize("value, kept", [(1.0, True), (np.nan, False), (np.inf, False), (-np.inf, False)])
def test_a_micro_batch_is_kept_only_when_every_bucket_is_finite(value, kept):
    flats = (Tensor(np.ones(128, np.float32)), Tensor(np.array([2.0, value], np.float32)))
    assert bool(SkipNonFiniteMicroBatches().keep(flats)) is kept


def test_dropped_counts_the_micro_batches_left_out():
    policy = SkipNonFiniteMicroBatches()
    policy.count(Tensor(4, ms.int32), None, Tensor(3, ms.int32))
    policy.count(Tensor(2, ms.int32), None, Tensor(0, ms.int32))
    assert int(policy.dropped_micro_batches) == 3
    assert [p.name for p in policy.state_parameters()] == ["accumulator.dropped_micro_batches"]


@pytest.mark.parametrize("finite, total, applied", [(True, 3.0, True), (True, 0.0, False), (False, 3.0, False)])
def test_a_window_that_kept_nothing_or_is_not_finite_is_skipped(finite, total, applied):
    summary = {"finite": Tensor(finite), "total": Tensor(total)}
    assert bool(SkipNonFiniteMicroBatches().gate(summary)) is applied


def test_nonfinite_windows_are_skipped_and_later_windows_train():
    x, y = make_data(32)
    x_bad = x.copy()
    x_bad[9, 0] = np.nan       # window 1 (micro-step 2 of 8)
    x_bad[21, 3] = np.inf      # window 2 (micro-step 5)
    windows = [(x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]) for i in range(4)]

    expected = reference_state("adam", [windows[0], windows[3]])

    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    accumulator = Accumulator(optimizer, 2)
    step = accumulated_step(accumulator, grad_fn_for(net, optimizer))
    updated = [bool(step(data, label)[1]) for data, label in split(x_bad, y, [4] * 8)]
    assert updated == [False, True, False, False, False, False, False, True]
    assert int(accumulator.skipped_windows) == 2 and int(accumulator.update_count) == 2
    assert_states_close(optimizer_state(optimizer), expected)
    assert all(np.isfinite(p.asnumpy()).all() for p in optimizer.parameters)


BAD_VALUES = (np.nan, np.inf, -np.inf)


# by_matmul=False is the Ascend/GPU path (ms.amp.all_finite, plain sums), run here on CPU. The fast path runs each
# check (finiteness, the clipped window's norm) by matmul and the finiteness by the other path; CI the fourth.
@pytest.mark.parametrize("clip_norm, huge, by_matmul", sweep([(None, 1e30, True), (1.0, 1e15, True),
                                                              (None, 1e30, False), (1.0, 1e15, False)], fast=3))
def test_every_nonfinite_gradient_entry_is_seen(clip_norm, huge, by_matmul):
    # A conv kernel (4-D), a dense matrix and biases (1-D): one bad entry in
    # any of them skips the window; huge but finite gradients do not. With
    # clipping the check is the window's norm, so "huge" stays below 1e19.
    # The gradients are mutable inputs: nan, inf and -inf all run the one compiled step.
    net = nn.SequentialCell(nn.Conv2d(1, 2, 3, has_bias=True), nn.Flatten(), nn.Dense(2 * 4 * 4, 3))
    optimizer = nn.SGD(net.trainable_params(), 1e-40)
    accumulator = Accumulator(optimizer, 1, clip_norm=clip_norm)
    accumulator.sum_by_matmul = by_matmul
    step = ms.jit(accumulator.__call__)
    shapes = [p.shape for p in optimizer.parameters]
    for bad in BAD_VALUES:
        for index, shape in enumerate(shapes):
            grads = [np.full(s, huge, np.float32) for s in shapes]
            grads[index].reshape(-1)[-1] = bad
            assert not bool(step(ms.mutable(tuple(ms.Tensor(g) for g in grads)))), (bad, shape)
        assert bool(step(ms.mutable(tuple(ms.Tensor(np.full(s, -huge, np.float32)) for s in shapes))))
    assert int(accumulator.skipped_windows) == len(BAD_VALUES) * len(shapes)
    assert int(accumulator.update_count) == len(BAD_VALUES)


def test_nonfinite_check_can_be_turned_off():
    x, y = make_data(8)
    x[0, 0] = np.nan
    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params())
    accumulator = Accumulator(optimizer, 2, skip_nonfinite=False)
    grad_fn = grad_fn_for(net, optimizer)
    for data, label in split(x, y, [4, 4]):
        accumulator(grad_fn(data, label)[1])
    assert int(accumulator.update_count) == 1 and int(accumulator.skipped_windows) == 0
    assert not np.isfinite(optimizer.parameters[0].asnumpy()).all()


@pytest.mark.parametrize("by_matmul", [True, False])
def test_a_nonfinite_micro_batch_is_dropped_and_its_window_applies(mode, by_matmul):
    net, accumulator, grad_fn = scale_setup(4, skip_nonfinite="micro_batch")
    accumulator.sum_by_matmul = by_matmul
    step = per_micro_step(accumulator, grad_fn)
    updated = [bool(step(ms.Tensor(np.full(2, g, np.float32)))) for g in (1.0, np.nan, 2.0, 3.0)]
    assert updated == [False, False, False, True]
    np.testing.assert_allclose(net.w.asnumpy(), [-2.0, -2.0])   # the mean of 1, 2 and 3
    assert (int(accumulator.find(SkipNonFiniteMicroBatches).dropped_micro_batches), int(accumulator.skipped_windows)) == (1, 0)


def test_a_dropped_micro_batch_takes_its_count_with_it():
    net, accumulator, grad_fn = scale_setup(4, skip_nonfinite="micro_batch")
    step = per_micro_step(accumulator, grad_fn, with_count=True)
    # Summed-loss gradients with sample counts: (2 + 4 + 6) / (1 + 2 + 3) = 2.
    for g, count in ((2.0, 1), (np.inf, 5), (4.0, 2), (6.0, 3)):
        step(ms.Tensor(np.full(2, g, np.float32)), ms.Tensor(count, ms.int32))
    np.testing.assert_allclose(net.w.asnumpy(), [-2.0, -2.0])


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_a_window_that_kept_no_micro_batch_is_skipped(reduction):
    net, accumulator, grad_fn = scale_setup(2, skip_nonfinite="micro_batch", reduction=reduction)
    step = per_micro_step(accumulator, grad_fn)
    updated = [bool(step(ms.Tensor(np.full(2, g, np.float32)))) for g in (np.nan, -np.inf, 1.0, 1.0)]
    assert updated == [False, False, False, True]
    total = 1.0 if reduction == "mean" else 2.0
    np.testing.assert_allclose(net.w.asnumpy(), [-total, -total])
    assert (int(accumulator.find(SkipNonFiniteMicroBatches).dropped_micro_batches), int(accumulator.skipped_windows)) == (2, 1)


def test_the_window_step_drops_a_nonfinite_micro_batch_too():
    net, accumulator, grad_fn = scale_setup(4, skip_nonfinite="micro_batch")
    window_step = make_window_step(grad_fn, accumulator)
    stacked = ms.Tensor(np.array([[1.0] * 2, [np.nan] * 2, [2.0] * 2, [3.0] * 2], np.float32))
    _, updated = window_step(stacked)
    assert bool(updated)
    np.testing.assert_allclose(net.w.asnumpy(), [-2.0, -2.0])
    # With counts, and a list whose last micro-batch is of another size.
    _, updated = window_step([(ms.Tensor(np.full(2, 2.0, np.float32)),), (ms.Tensor(np.full(2, np.nan, np.float32)),),
                              (ms.Tensor(np.full(2, 6.0, np.float32)),)], counts=[1, 5, 3])
    np.testing.assert_allclose(net.w.asnumpy(), [-4.0, -4.0])   # -2 - (2 + 6) / (1 + 3)
    assert int(accumulator.find(SkipNonFiniteMicroBatches).dropped_micro_batches) == 2
