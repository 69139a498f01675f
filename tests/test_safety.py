"""Clipping, non-finite windows and loss scaling act once per window."""
import numpy as np
import pytest
import mindspore as ms
from mindspore import nn

from accumulator import Accumulator
from helpers import (accumulated_step, assert_states_close, grad_fn_for, make_data, make_net, make_optimizer,
                     optimizer_state, reference_state, split)

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


# by_matmul=False is the Ascend/GPU path (ms.amp.all_finite, plain sums), run here on CPU.
@pytest.mark.parametrize("by_matmul", [True, False])
@pytest.mark.parametrize("clip_norm, huge", [(None, 1e30), (1.0, 1e15)])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_every_nonfinite_gradient_entry_is_seen(bad, clip_norm, huge, by_matmul):
    # A conv kernel (4-D), a dense matrix and biases (1-D): one bad entry in
    # any of them skips the window; huge but finite gradients do not. With
    # clipping the check is the window's norm, so "huge" stays below 1e19.
    net = nn.SequentialCell(nn.Conv2d(1, 2, 3, has_bias=True), nn.Flatten(), nn.Dense(2 * 4 * 4, 3))
    optimizer = nn.SGD(net.trainable_params(), 1e-40)
    accumulator = Accumulator(optimizer, 1, clip_norm=clip_norm)
    accumulator.sum_by_matmul = by_matmul
    step = ms.jit(accumulator.__call__)
    shapes = [p.shape for p in optimizer.parameters]
    for index, shape in enumerate(shapes):
        grads = [np.full(s, huge, np.float32) for s in shapes]
        grads[index].reshape(-1)[-1] = bad
        assert not bool(step(ms.mutable(tuple(ms.Tensor(g) for g in grads))))
    assert bool(step(ms.mutable(tuple(ms.Tensor(np.full(s, -huge, np.float32)) for s in shapes))))
    assert int(accumulator.skipped_windows) == len(shapes) and int(accumulator.update_count) == 1


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
