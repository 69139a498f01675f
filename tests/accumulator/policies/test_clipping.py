"""ClipNorm alone: its factor from hand-written window summaries.

By hand: ClipNorm(1.0) on a window whose gradient norm is 4 scales it by 0.25; at norm 0.5 it leaves it (1.0).
Through the Accumulator, clipping acts once, on the window's mean gradient, not on each micro-batch's.
"""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor

from accumulator import Accumulator
from accumulator.policies import ClipNorm
from tests.accumulator.helpers import (accumulated_step, grad_fn_for, make_data, make_net, make_optimizer,
                                       scaled_grad_fn, split)


@pytest.mark.parametrize("norm, expected", [(4.0, 0.25), (1.0, 1.0), (0.5, 1.0), (0.0, 1.0)])
def test_the_factor_brings_the_norm_down_to_the_limit_and_never_up(norm, expected):
    assert float(ClipNorm(1.0).factor({"norm": Tensor(norm)})) == pytest.approx(expected)


def test_it_asks_for_the_norm_and_nothing_else():
    policy = ClipNorm(2.0)
    assert (policy.needs_norm, policy.needs_finite, policy.gate({}), policy.state_parameters()) == (True, False,
                                                                                                  None, [])


@pytest.mark.parametrize("bad", [0, -1.0, True, "1", None])
def test_a_limit_that_is_not_a_positive_number_is_refused_with_its_value(bad):
    with pytest.raises(ValueError, match=f"clip_norm must be a positive number or None, got {bad!r}"):
        ClipNorm(bad)


LEARNING_RATE = 0.1


def micro_grads(x, y, sizes):
    """Each micro-batch's gradient at the initial weights, as numpy."""
    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params())
    grad_fn = grad_fn_for(net, optimizer)
    return [[g.asnumpy() for g in grad_fn(data, label)[1]] for data, label in split(x, y, sizes)]


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
