"""Clipping, non-finite windows and loss scaling act once per window; errors raised while a step compiles."""
import re

import numpy as np
import pytest
import mindspore as ms
from mindspore import nn

from accumulator import Accumulator
from accumulator.policies import SkipNonFiniteMicroBatches, SkipSpikes
from tests.accumulator.helpers import (Scale, accumulated_step, assert_states_close, grad_fn_for, make_data, make_net,
                     make_optimizer, optimizer_state, reference_state, split)

LEARNING_RATE = 0.1


def micro_grads(x, y, sizes):
    """Each micro-batch's gradient at the initial weights, as numpy."""
    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params())
    grad_fn = grad_fn_for(net, optimizer)
    return [[g.asnumpy() for g in grad_fn(data, label)[1]] for data, label in split(x, y, sizes)]


def scaled_grad_fn(net, optimizer, scaler):
    """Gradients of the loss scaled by ``scaler``, as mixed-precision training computes them."""
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def forward(data, label):
        return scaler.scale(loss_fn(net(data), label))

    return ms.value_and_grad(forward, None, optimizer.parameters)


def clip_by_global_norm(grads, clip_norm):
    norm = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads))
    return [g * clip_norm / max(norm, clip_norm) for g in grads]


def test_clip_acts_once_on_the_window_gradient():
    x, y = make_data(12)
    sizes, clip_norm = [4, 4, 4], 0.05
    initial = [p.asnumpy() for p in make_net().trainable_params()]
    per_micro = micro_grads(x, y, sizes)
    window_grad = [np.mean(list(g), axis=0) for g in zip(*per_micro)]
    expected = [p - LEARNING_RATE * g for p, g in zip(initial, clip_by_global_norm(window_grad, clip_norm))]
    clipped_per_micro = [clip_by_global_norm(g, clip_norm) for g in per_micro]
    per_micro_answer = [p - LEARNING_RATE * np.mean(list(g), axis=0)
                        for p, g in zip(initial, zip(*clipped_per_micro))]

    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params(), LEARNING_RATE)
    step = accumulated_step(Accumulator(optimizer, 3, clip_norm=clip_norm), grad_fn_for(net, optimizer))
    for data, label in split(x, y, sizes):
        step(data, label)
    actual = [p.asnumpy() for p in optimizer.parameters]
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # Clipping each micro-step would give another answer, and this test sees it.
    assert not all(np.allclose(got, other, rtol=1e-5, atol=1e-6) for got, other in zip(actual, per_micro_answer))


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


# by_matmul=False is the Ascend/GPU path (ms.amp.all_finite, plain sums), run here on CPU.
@pytest.mark.parametrize("by_matmul", [True, False])
@pytest.mark.parametrize("clip_norm, huge", [(None, 1e30), (1.0, 1e15)])
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


def test_dynamic_loss_scale_moves_once_per_window_and_unscales_exactly():
    x, y = make_data(40)
    x_bad = x.copy()
    x_bad[17, 2] = np.nan      # window 2 of 5 (micro-batches of 4, N=2)
    windows = [(x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]) for i in range(5)]

    expected = reference_state("momentum", [windows[index] for index in (0, 1, 3, 4)])

    net = make_net()
    optimizer = make_optimizer("momentum", net.trainable_params())
    scaler = ms.amp.DynamicLossScaler(scale_value=2.0 ** 10, scale_factor=2, scale_window=2)
    accumulator = Accumulator(optimizer, 2, loss_scaler=scaler)
    step = accumulated_step(accumulator, scaled_grad_fn(net, optimizer, scaler))
    scales = []
    for data, label in split(x_bad, y, [4] * 10):
        step(data, label)
        scales.append(float(scaler.scale_value.asnumpy()))
    # Finite windows count up to scale_window=2 then double; the overflowed
    # window halves; nothing moves mid-window.
    assert scales == [1024, 1024, 1024, 2048, 2048, 1024, 1024, 1024, 1024, 2048]
    assert int(accumulator.skipped_windows) == 1
    assert_states_close(optimizer_state(optimizer), expected)


@pytest.mark.parametrize("clip_norm", [0, -1.0, True, "1"])
def test_bad_clip_norm_is_rejected(clip_norm):
    optimizer = make_optimizer("sgd", make_net().trainable_params())
    with pytest.raises(ValueError, match=f"clip_norm must be a positive number or None, got {clip_norm!r}"):
        Accumulator(optimizer, 2, clip_norm=clip_norm)


def test_bad_loss_scaler_is_rejected():
    optimizer = make_optimizer("sgd", make_net().trainable_params())
    with pytest.raises(TypeError, match="loss_scaler must be a mindspore.amp.LossScaler, got float"):
        Accumulator(optimizer, 2, loss_scaler=1024.0)


def test_static_loss_scale_is_unscaled_once_per_window():
    x, y = make_data(16)
    expected = reference_state("adam", [(x, y)])

    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    scaler = ms.amp.StaticLossScaler(scale_value=2.0 ** 12)
    step = accumulated_step(Accumulator(optimizer, 4, loss_scaler=scaler), scaled_grad_fn(net, optimizer, scaler))
    for data, label in split(x, y, [4] * 4):
        step(data, label)
    assert_states_close(optimizer_state(optimizer), expected)


@pytest.mark.parametrize("by_matmul", [True, False])
def test_clipping_sees_the_unscaled_mean_under_loss_scaling(by_matmul):
    x, y = make_data(12)
    sizes, clip_norm = [4, 4, 4], 0.05
    initial = [p.asnumpy() for p in make_net().trainable_params()]
    window_grad = [np.mean(list(g), axis=0) for g in zip(*micro_grads(x, y, sizes))]
    expected = [p - LEARNING_RATE * g for p, g in zip(initial, clip_by_global_norm(window_grad, clip_norm))]

    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params(), LEARNING_RATE)
    scaler = ms.amp.StaticLossScaler(scale_value=2.0 ** 12)
    accumulator = Accumulator(optimizer, 3, clip_norm=clip_norm, loss_scaler=scaler)
    accumulator.sum_by_matmul = by_matmul
    step = accumulated_step(accumulator, scaled_grad_fn(net, optimizer, scaler))
    for data, label in split(x, y, sizes):
        step(data, label)
    for got, want in zip(optimizer.parameters, expected):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5, atol=1e-6)


def scale_setup(accumulate_step, **accumulator_args):
    net = Scale()
    optimizer = nn.SGD(net.trainable_params(), 1.0)
    accumulator = Accumulator(optimizer, accumulate_step, **accumulator_args)
    grad_fn = ms.value_and_grad(net, None, optimizer.parameters)
    return net, accumulator, grad_fn


def per_micro_step(accumulator, grad_fn, with_count=False):
    def step(x):
        return accumulator(grad_fn(x)[1])

    def step_with_count(x, count):
        return accumulator(grad_fn(x)[1], count)

    return ms.jit(step_with_count if with_count else step)


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
    from accumulator import make_window_step
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


def test_a_spike_window_is_skipped_and_kept_out_of_the_running_mean(graph_mode):
    net, accumulator, grad_fn = scale_setup(1, spike_factor=10)
    step = per_micro_step(accumulator, grad_fn)
    # Window norms 1 (twelve times), 100, then 1: a gradient of g/sqrt(2) per entry has norm g.
    norms = [1.0] * 12 + [100.0, 1.0]
    updated = [bool(step(ms.Tensor(np.full(2, g / np.sqrt(2), np.float32)))) for g in norms]
    assert updated == [True] * 12 + [False, True]
    assert (int(accumulator.update_count), int(accumulator.skipped_windows)) == (13, 1)
    np.testing.assert_allclose(float(accumulator.find(SkipSpikes).norm_average) / (1 - 0.9 ** 13), 1.0, rtol=1e-5)
    np.testing.assert_allclose(net.w.asnumpy(), [-13 / np.sqrt(2)] * 2, rtol=1e-5)


def test_spikes_wait_for_the_warmup():
    net, accumulator, grad_fn = scale_setup(1, spike_factor=10, spike_warmup=3)
    step = per_micro_step(accumulator, grad_fn)
    updated = [bool(step(ms.Tensor(np.full(2, g, np.float32)))) for g in (1.0, 100.0, 1.0, 1.0, 1000.0)]
    assert updated == [True, True, True, True, False]


@pytest.mark.parametrize("args, message", [
    ({"skip_nonfinite": "window"}, "skip_nonfinite must be True, False or 'micro_batch', got 'window'"),
    ({"spike_factor": 1.0}, "spike_factor must be a number above 1 or None, got 1.0"),
    ({"spike_factor": float("inf")}, "spike_factor must be a number above 1 or None, got inf"),
    ({"spike_factor": 10, "spike_warmup": -1}, "spike_warmup must be a non-negative int, got -1"),
])
def test_bad_skip_policies_are_rejected(args, message):
    optimizer = make_optimizer("sgd", make_net().trainable_params())
    with pytest.raises((TypeError, ValueError), match=re.escape(message)):
        Accumulator(optimizer, 2, **args)


class LibraryError(ValueError):
    """An exception class of a library's own."""


def test_an_error_raised_while_a_step_compiles_is_a_builtin_one_with_its_message_quoted_first():
    # docs/mindspore-behaviours.md: why the Accumulator's in-graph checks raise ValueError, and what a user sees first.
    @ms.jit
    def builtin(x):
        if x.shape[0] != 2:
            raise ValueError(f"x has {x.shape[0]} rows, expected 2")
        return x

    @ms.jit
    def own_class(x):
        if x.shape[0] != 2:
            raise LibraryError("x has the wrong number of rows")
        return x

    x = ms.Tensor(np.ones(3, np.float32))
    with pytest.raises(ValueError) as raised:
        builtin(x)
    first, *appendix = str(raised.value).splitlines()
    assert first == "'x has 3 rows, expected 2'" and "- The Traceback of Net Construct Code:" in appendix
    with pytest.raises(RuntimeError, match="Unsupported exception type: LibraryError"):
        own_class(x)
