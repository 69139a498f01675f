"""The window step: two windows checkable by hand, then equal to the per-micro-step Accumulator, window for window.

By hand: gradients 1, 2, 3, 4 in windows of 2 move a weight of 0 at learning rate 1 by 1.5, then 3.5 (-5 in all);
summed gradients 2 and 12 with counts 1 and 3: -3.5.
"""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor, nn

from accumulator import Accumulator
from accumulator.batch_size import CriticalBatchSchedule
from accumulator.drivers.window import make_window_step
from tests.accumulator.helpers import (assert_states_close, grad_fn_for, make_data, make_net, make_optimizer,
                                       optimizer_state, split)


def gradient_is_the_input(g):
    """A ``grad_fn`` whose loss is its input's sum and whose gradient is its input: the arithmetic by hand."""
    return g.sum(), (g,)


def one_weight_window_step(accumulate_step):
    w = Parameter(Tensor([0.0]), name="w")
    accumulator = Accumulator(nn.SGD([w], 1.0), accumulate_step=accumulate_step)
    return w, make_window_step(gradient_is_the_input, accumulator)


def test_gradients_1_2_3_4_in_windows_of_2_apply_their_means_1_5_and_3_5():
    w, window_step = one_weight_window_step(2)
    loss_sum, updated = window_step(Tensor([[1.0], [2.0]]))
    assert (float(loss_sum), bool(updated), w.asnumpy().tolist()) == (3.0, True, [-1.5])    # 0 - (1 + 2) / 2
    loss_sum, updated = window_step(Tensor([[3.0], [4.0]]))
    assert (float(loss_sum), bool(updated), w.asnumpy().tolist()) == (7.0, True, [-5.0])    # -1.5 - (3 + 4) / 2


def test_counts_1_and_3_weigh_summed_gradients_2_and_12_into_their_mean_3_5():
    w, window_step = one_weight_window_step(2)
    _, updated = window_step(Tensor([[2.0], [12.0]]), counts=[1, 3])
    assert bool(updated) and w.asnumpy().tolist() == [-3.5]                                 # 0 - (2 + 12) / (1 + 3)


def test_windows_of_2_then_4_under_a_schedule_that_changes_n_apply_their_means(graph_mode):
    # One graph with the number of micro-batches left open serves both lengths (docs/window-step.md).
    w = Parameter(Tensor([0.0]), name="w")
    schedule = CriticalBatchSchedule(interval=8, max_step=8)
    accumulator = Accumulator(nn.SGD([w], 1.0), schedule)
    schedule.bind(accumulator)
    window_step = make_window_step(gradient_is_the_input, accumulator)
    schedule.set_window(2)
    _, updated = window_step(Tensor([[1.0], [2.0]]), counts=[1, 1])
    assert bool(updated) and w.asnumpy().tolist() == [-1.5]                                 # 0 - (1 + 2) / 2
    schedule.set_window(4)
    loss_sum, updated = window_step(Tensor([[3.0], [4.0], [5.0], [6.0]]), counts=[1, 1, 1, 1])
    assert (float(loss_sum), bool(updated), w.asnumpy().tolist()) == (18.0, True, [-6.0])  # -1.5 - 18 / 4
    assert int(accumulator.update_count) == 2


def per_micro_step_run(windows, accumulate_step, counts=None, optimizer_name="adam", **accumulator_args):
    """Reference: one jitted call per micro-batch, a flush after each short window.

    Returns (optimizer state, per-window summed losses, per-window updated flags, accumulator).
    """
    net = make_net()
    optimizer = make_optimizer(optimizer_name, net.trainable_params())
    accumulator = Accumulator(optimizer, accumulate_step, **accumulator_args)
    grad_fn = grad_fn_for(net, optimizer, "mean" if counts is None else "sum")

    @ms.jit
    def step(x, y):
        loss, grads = grad_fn(x, y)
        return loss, accumulator(grads)

    @ms.jit
    def counted_step(x, y, count):
        loss, grads = grad_fn(x, y)
        return loss, accumulator(grads, count)

    flush = ms.jit(accumulator.flush)
    losses, updated = [], []
    for index, window in enumerate(windows):
        window_losses, flags = [], []
        for position, (x, y) in enumerate(window):
            if counts is None:
                loss, flag = step(x, y)
            else:
                loss, flag = counted_step(x, y, Tensor(counts[index][position], ms.float32))
            window_losses.append(float(loss))
            flags.append(bool(flag))
        if len(window) < accumulate_step:
            flags.append(bool(flush()))
        losses.append(sum(window_losses))
        updated.append(any(flags))
    return optimizer_state(optimizer), losses, updated, accumulator


def window_step_run(windows, accumulate_step, counts=None, stacked=True, optimizer_name="adam",
                    **accumulator_args):
    """The same windows through make_window_step; same return values."""
    net = make_net()
    optimizer = make_optimizer(optimizer_name, net.trainable_params())
    accumulator = Accumulator(optimizer, accumulate_step, **accumulator_args)
    grad_fn = grad_fn_for(net, optimizer, "mean" if counts is None else "sum")
    window_step = make_window_step(grad_fn, accumulator)
    losses, updated = [], []
    for index, window in enumerate(windows):
        window_counts = None if counts is None else counts[index]
        if stacked:
            xs = ms.ops.stack([x for x, _ in window])
            ys = ms.ops.stack([y for _, y in window])
            loss_sum, flag = window_step(xs, ys, counts=window_counts)
        else:
            loss_sum, flag = window_step(window, counts=window_counts)
        assert loss_sum.shape == ()
        losses.append(float(loss_sum))
        updated.append(bool(flag))
    return optimizer_state(optimizer), losses, updated, accumulator


def make_windows(sizes_per_window, seed=0):
    """Windows of consecutive micro-batches of the given sizes."""
    x, y = make_data(sum(map(sum, sizes_per_window)), seed)
    batches = split(x, y, [size for sizes in sizes_per_window for size in sizes])
    windows, start = [], 0
    for sizes in sizes_per_window:
        windows.append(batches[start:start + len(sizes)])
        start += len(sizes)
    return windows


def assert_same_runs(actual, expected):
    assert_states_close(actual[0], expected[0])
    for got, want in zip(actual[1], expected[1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert actual[2] == expected[2]
    assert int(actual[3].update_count) == int(expected[3].update_count)
    assert int(actual[3].micro_step) == 0


# N=1: windows of a single micro-batch, whose loop body is chosen in Python (docs/mindspore-behaviours.md). A larger
# N, and a short last window, run the loop whose bound is a Tensor argument (window._loop): on the fast path the
# clip-norm test below compares stacked windows with the per-micro-step run, the uneven test a short last window
# with the large batch.
@pytest.mark.slow
def test_window_step_equals_per_micro_step_with_windows_of_one_micro_batch(graph_mode):
    windows = make_windows([[2]] * 3)
    expected = per_micro_step_run(windows, 1)
    actual = window_step_run(windows, 1)
    assert_same_runs(actual, expected)
    assert actual[2] == [True] * len(windows)


def test_uneven_last_micro_batch_with_counts_is_exact(mode):
    # An epoch's end as mnist_windows yields it: a full window, then one
    # whose last micro-batch is smaller. Count weighting makes it exact:
    # each window's update is one plain step on its whole batch (16, then 11 samples).
    # Fed as numpy arrays, as the README's pipeline cuts them: stacked on the host.
    windows = make_windows([[4, 4, 4, 4], [4, 4, 3]])
    counts = [[len(x) for x, _ in window] for window in windows]
    numpy_windows = [[(x.asnumpy(), y.asnumpy()) for x, y in window] for window in windows]
    state, losses, updated, accumulator = window_step_run(numpy_windows, 4, counts=counts, stacked=False)
    assert updated == [True, True]
    assert (int(accumulator.update_count), int(accumulator.micro_step)) == (2, 0)

    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    grad_fn = grad_fn_for(net, optimizer)
    for window, loss_sum in zip(windows, losses):
        data = np.concatenate([b.asnumpy() for b, _ in window])
        label = np.concatenate([b.asnumpy() for _, b in window])
        loss, grads = grad_fn(Tensor(data), Tensor(label))
        optimizer(grads)
        # The window's summed loss is its whole batch's mean loss times its samples.
        np.testing.assert_allclose(loss_sum, float(loss) * len(data), rtol=1e-5, atol=1e-6)
    assert_states_close(state, optimizer_state(optimizer))


def test_list_of_equal_micro_batches_and_counts_given_as_a_slice():
    # A counts Tensor that is a slice of a larger one is a view; MindSpore
    # 2.10 misreads a view passed straight into a compiled while loop.
    windows = make_windows([[3, 3, 3], [3, 3, 3]])
    all_counts = Tensor(np.array([3, 3, 3, 3, 3, 3, 99], np.float32))
    expected = per_micro_step_run(windows, 3, counts=[[3] * 3] * 2)
    actual = window_step_run(windows, 3, counts=[all_counts[0:3], all_counts[3:6]], stacked=False)
    assert_same_runs(actual, expected)


def test_clip_norm_and_a_nonfinite_micro_batch_skip_exactly_that_window(graph_mode):
    windows = make_windows([[4] * 4] * 3)
    x, y = windows[1][2]
    poisoned = x.asnumpy().copy()
    poisoned[0, 0] = np.nan
    windows[1][2] = (Tensor(poisoned), y)
    args = dict(clip_norm=0.05, skip_nonfinite=True, optimizer_name="momentum")
    expected = per_micro_step_run(windows, 4, **args)
    actual = window_step_run(windows, 4, **args)
    assert_states_close(actual[0], expected[0])
    assert actual[2] == expected[2] == [True, False, True]
    assert int(actual[3].skipped_windows) == 1 and int(actual[3].update_count) == 2
    np.testing.assert_allclose(actual[1], expected[1], rtol=1e-5, atol=1e-6)
    assert all(np.all(b.asnumpy() == 0) for b in actual[3].grad_buffers)


def test_bad_windows_are_rejected_before_any_state_changes():
    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params())
    accumulator = Accumulator(optimizer, 2)
    window_step = make_window_step(grad_fn_for(net, optimizer, "sum"), accumulator)
    x, y = make_data(12)
    xs, ys = Tensor(x.reshape(3, 4, 6)), Tensor(y.reshape(3, 4))
    with pytest.raises(ValueError, match="at most accumulate_step=2 micro-batches, got 3"):
        window_step(xs, ys)
    with pytest.raises(ValueError, match=r"counts must hold one number per micro-batch, shape \[2\]"):
        window_step(xs[:2], ys[:2], counts=[4, 4, 4])
    with pytest.raises(ValueError, match="same leading size"):
        window_step(xs[:2], ys[:1])
    with pytest.raises(ValueError, match="at least one micro-batch"):
        window_step([])
    assert int(accumulator.micro_step) == 0 and int(accumulator.update_count) == 0


def test_counts_with_a_summing_accumulator_are_rejected_before_any_state_changes():
    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params())
    accumulator = Accumulator(optimizer, 2, reduction="sum")
    before = optimizer_state(optimizer)
    window_step = make_window_step(grad_fn_for(net, optimizer, "sum"), accumulator)
    x, y = make_data(8)
    with pytest.raises(ValueError, match="counts were given to an Accumulator with reduction='sum'"):
        window_step(Tensor(x.reshape(2, 4, 6)), Tensor(y.reshape(2, 4)), counts=[4, 4])
    assert int(accumulator.micro_step) == 0 and int(accumulator.update_count) == 0
    assert_states_close(optimizer_state(optimizer), before)
