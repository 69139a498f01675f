"""Loss scaling: the window's gradient unscaled once, the scaler adjusted once per window."""
import mindspore as ms
from mindspore import ops

from accumulator.policies.base import Policy


@ms.jit_class
class LossScaling(Policy):
    """Unscales the window by ``scaler.scale_value`` and adjusts ``scaler`` from the window's finiteness.

    ``loss_scaler=scaler``, a ``mindspore.amp`` loss scaler whose ``scale``
    you applied to the loss. An overflowed window never reaches the
    weights: it is skipped. An empty window (``flush`` with nothing in it)
    leaves the scaler as it was.

    Example:
        >>> from mindspore import Tensor
        >>> policy = LossScaling(ms.amp.DynamicLossScaler(1024.0, 2, 1000))
        >>> float(policy.unscale())
        0.0009765625
        >>> policy.close_window((), {"finite": Tensor(False), "nonempty": Tensor(True)})
        >>> float(policy.scaler.scale_value)    # an overflow halves it
        512.0
    """

    needs_finite = True

    def __init__(self, scaler):
        if not isinstance(scaler, ms.amp.LossScaler):
            raise TypeError(f"loss_scaler must be a mindspore.amp.LossScaler, got {type(scaler).__name__}")
        self.scaler = scaler
        # What adjust() may change: put back after an empty window.
        self.scaler_state = [getattr(scaler, name) for name in ("scale_value", "counter") if hasattr(scaler, name)]

    @property
    def loss_scale(self):
        """The scale the gradients carry: ``Accumulator.loss_scale`` reads it."""
        return self.scaler.scale_value

    def unscale(self):
        return 1.0 / self.scaler.scale_value

    def gate(self, summary):
        return summary["finite"]

    def close_window(self, tensors, summary):
        before = [value * 1 for value in self.scaler_state]
        self.scaler.adjust(summary["finite"])
        # An empty window is neither a good step nor an overflow: put back what adjust changed.
        for value, old in zip(self.scaler_state, before):
            ops.assign(value, ops.select(summary["nonempty"], value, old))
