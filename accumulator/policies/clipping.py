"""Clipping the window's gradient to a global norm, once per window, just before the optimizer."""
import mindspore as ms
from mindspore import ops

from accumulator.policies.base import Policy


@ms.jit_class
class ClipNorm(Policy):
    """Scales the window's gradient so its global norm is at most ``max_norm``; ``clip_norm=max_norm``.

    The norm is the window's mean gradient's (unscaled), the one the
    optimizer would get. On CPU it doubles as the finiteness check, so a
    window whose norm overflows float32 (beyond about 1e19) counts as not finite.

    Example:
        >>> from mindspore import Tensor
        >>> float(ClipNorm(1.0).factor({"norm": Tensor(4.0)})), float(ClipNorm(1.0).factor({"norm": Tensor(0.5)}))
        (0.25, 1.0)
    """

    needs_norm = True

    def __init__(self, max_norm):
        if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)) or not max_norm > 0:
            raise ValueError(f"clip_norm must be a positive number or None, got {max_norm!r}")
        self.max_norm = float(max_norm)

    def factor(self, summary):
        return self.max_norm / ops.maximum(summary["norm"], self.max_norm)
