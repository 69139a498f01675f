"""LossScaling alone: its unscale, its gate, and the scaler adjusted once per non-empty window."""
import pytest
from mindspore import Tensor, amp

from accumulator.policies import LossScaling


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
