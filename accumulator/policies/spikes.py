"""Skipping a window whose gradient norm spikes far above the recent windows'."""
import mindspore as ms
from mindspore import Tensor, ops

from accumulator._internal.checks import non_negative_int
from accumulator._internal.constants import state_parameter
from accumulator.policies.base import Policy

# The running mean of window norms a spike is measured against: an
# exponential average over roughly the last ten windows, bias-corrected.
NORM_DECAY = 0.9


@ms.jit_class
class SkipSpikes(Policy):
    """Skips a window whose norm, before clipping, exceeds ``factor`` times the running mean of applied windows' norms.

    ``spike_factor=factor, spike_warmup=warmup``: the first ``warmup``
    applied windows only build the mean; a spike never enters it. The
    Accumulator counts a skipped spike in ``skipped_windows``.

    Example:
        >>> policy = SkipSpikes(2.0, warmup=0)
        >>> _ = ops.assign(policy.norm_average, Tensor(0.1)), ops.assign(policy.norm_windows, Tensor(1, ms.int32))
        >>> [bool(policy.gate({"norm": Tensor(norm)})) for norm in (1.5, 2.5)]    # the mean is 1.0
        [True, False]
    """

    needs_norm = True

    def __init__(self, factor, warmup=10):
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 1 < factor < float("inf"):
            raise ValueError(f"spike_factor must be a number above 1 or None, got {factor!r}")
        # Not `self.factor`: that is a hook's name (accumulator.policies.base).
        self.spike_factor = float(factor)
        self.warmup = max(non_negative_int(warmup, "spike_warmup"), 1)
        self.norm_average = state_parameter(0.0, ms.float32, "norm_average")
        self.norm_windows = state_parameter(0, ms.int32, "norm_windows")

    def state_parameters(self):
        return [self.norm_average, self.norm_windows]

    def gate(self, summary):
        windows = self.norm_windows.astype(ms.float32)
        average = self.norm_average / (1 - ops.pow(Tensor(NORM_DECAY, ms.float32), windows))
        spike = ops.logical_and(self.norm_windows >= self.warmup, summary["norm"] > self.spike_factor * average)
        return ops.logical_not(spike)

    def close_window(self, tensors, summary):
        applied, norm = summary["applied"], summary["norm"]
        # select, not arithmetic on the flag: a NaN norm must not reach the mean.
        absorbed = NORM_DECAY * self.norm_average + (1 - NORM_DECAY) * norm
        ops.assign(self.norm_average, ops.select(applied, absorbed, self.norm_average))
        return ops.assign_add(self.norm_windows, applied.astype(ms.int32))
