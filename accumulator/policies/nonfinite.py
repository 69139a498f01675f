"""Skipping what holds NaN or Inf: a whole window, or single micro-batches."""
import mindspore as ms
from mindspore import Tensor, ops

from accumulator._internal.constants import state_parameter
from accumulator.policies.base import Policy
from accumulator._internal.sums import all_finite, on_cpu


@ms.jit_class
class SkipNonFiniteWindows(Policy):
    """Skips a window whose gradient holds NaN or Inf: the optimizer does not run, the window is cleared.

    The Accumulator counts it in ``skipped_windows``. ``skip_nonfinite=True``.

    Example:
        >>> policy = SkipNonFiniteWindows()
        >>> bool(policy.gate({"finite": Tensor(False)}))
        False
    """

    needs_finite = True

    def gate(self, summary):
        return summary["finite"]


@ms.jit_class
class SkipNonFiniteMicroBatches(Policy):
    """Leaves out of the sum each micro-batch whose gradient holds NaN or Inf; ``skip_nonfinite="micro_batch"``.

    A check per micro-step. The window still applies at its boundary,
    normalised by the micro-batches (or counts) it kept, and is skipped when
    it kept none, or when its sum is not finite. ``dropped_micro_batches``
    counts those left out.

    Example:
        >>> policy = SkipNonFiniteMicroBatches()
        >>> bool(policy.keep((Tensor([1.0, float("inf")]),)))
        False
        >>> _ = policy.count(Tensor(3, ms.int32), Tensor(3.0), Tensor(2, ms.int32))
        >>> int(policy.dropped_micro_batches)
        1
        >>> bool(policy.gate({"finite": Tensor(True), "total": Tensor(0.0)}))    # kept nothing
        False
    """

    needs_finite = True

    def __init__(self):
        self.by_matmul = on_cpu()
        self.dropped_micro_batches = state_parameter(0, ms.int32, "dropped_micro_batches")

    def state_parameters(self):
        return [self.dropped_micro_batches]

    def keep(self, flats):
        return all_finite(self.by_matmul, flats)

    def count(self, steps, weight, kept):
        return ops.assign_add(self.dropped_micro_batches, steps - kept)

    def gate(self, summary):
        return ops.logical_and(summary["finite"], summary["total"] > 0)
