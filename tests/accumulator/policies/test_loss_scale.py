"""LossScaling alone: its unscale, its gate, and the scaler adjusted once per non-empty window.

By hand: StaticLossScaler(256) unscales by 1/256; DynamicLossScaler(1024, factor 2, window 2): an overflowed
window halves the scale to 512, a second good window doubles it to 2048, an empty window leaves it as it was.
"""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, amp

from accumulator import Accumulator
from accumulator.policies import LossScaling
from tests.accumulator.helpers import (accumulated_step, assert_states_close, make_data, make_net, make_optimizer,
                                       optimizer_state, reference_state, scaled_grad_fn, split)


def test_unscale_is_the_inverse_of_the_scale():
    assert float(LossScaling(amp.StaticLossScaler(256.0)).unscale()) == pytest.approx(1 / 256)


@pytest.mark.parametrize("finite", [True, False])
def test_an_overflowed_window_is_skipped(finite):
    assert bool(LossScaling(amp.StaticLossScaler(8.0)).gate({"finite": Tensor(finite)})) is finite


@pytest.mark.parametrize("finite, nonempty, scale, counter", [
    (False, True, 512.0, 0),    # an overflow halves the scale
    (True, True, 2048.0, 0),    # a good window, the second of a scale window of 2: doubled
    (False, False, 1024.0, 1),  # an empty window: the scaler as it was
    (True, False, 1024.0, 1),
])
def test_the_scaler_adjusts_from_the_window_and_not_at_all_when_it_is_empty(finite, nonempty, scale, counter):
    scaler = amp.DynamicLossScaler(1024.0, 2, 2)
    policy = LossScaling(scaler)
    policy.close_window((), {"finite": Tensor(True), "nonempty": Tensor(True)})     # one good window first
    policy.close_window((), {"finite": Tensor(finite), "nonempty": Tensor(nonempty)})
    assert (float(scaler.scale_value), int(scaler.counter)) == (scale, counter)


def test_what_is_not_a_loss_scaler_is_refused():
    with pytest.raises(TypeError, match="loss_scaler must be a mindspore.amp.LossScaler, got float"):
        LossScaling(2.0)


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
