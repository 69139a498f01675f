"""Gradient-noise telemetry: the noise scale B_simple = tr(Σ) / |G|² from the window's micro-batches.

McCandlish et al. (2018), "An Empirical Model of Large-Batch Training",
appendix A: a batch of b samples has a mean gradient whose squared norm is
|G|² + tr(Σ)/b on average. A window holds micro-batches of b_i samples (B in
all), so with A the mean of the micro-batch gradients' squared norms and T
the window mean gradient's,

    S = (A - T) / (mean(1/b_i) - 1/B)   estimates tr(Σ), and
    |G|² ≈ T - S / B.

Both are smoothed separately by a bias-corrected exponential average and
only then divided (the ratio of two noisy estimates is biased; its average
is worse). The noise scale predicts the critical batch: past it, a larger
batch buys little.
"""
import mindspore as ms
from mindspore import Parameter, Tensor, ops

# About the last twenty windows; both averages use it, so their bias
# corrections cancel in the ratio.
NOISE_DECAY = 0.95


def _parameter(name, value=0.0):
    return Parameter(Tensor(value, ms.float32), name=f"accumulator.noise.{name}", requires_grad=False)


@ms.jit_class
class NoiseTracker:
    """The window's sums for the noise scale, and their smoothed estimates.

    Owned by an ``Accumulator(..., track_noise=True)``, which calls ``add``
    once per micro-batch and ``close`` once per window; read the result on
    the host with ``noise_scale()`` and ``record()``.

    Attributes:
        squares: sum over the window's micro-batches of |g_i|² (times the
            loss scale²).
        inverse_sizes: sum of 1 / b_i.
        samples: sum of b_i (B).
        micro_batches: how many micro-batches the sums hold.
        trace, gradient: the exponential averages of tr(Σ) and |G|².
        windows: windows behind the averages.

    Example:
        >>> tracker = NoiseTracker()
        >>> tracker.noise_scale() is None, tracker.record()["windows"]
        (True, 0)
    """

    def __init__(self):
        self.squares = _parameter("squares")
        self.inverse_sizes = _parameter("inverse_sizes")
        self.samples = _parameter("samples")
        self.micro_batches = _parameter("micro_batches")
        self.trace = _parameter("trace")
        self.gradient = _parameter("gradient")
        self.windows = Parameter(Tensor(0, ms.int32), name="accumulator.noise.windows", requires_grad=False)

    def state_parameters(self):
        """Every Parameter, for checkpoints."""
        return [self.squares, self.inverse_sizes, self.samples, self.micro_batches, self.trace, self.gradient,
                self.windows]

    def add(self, squared_norm, size, kept):
        """Adds one micro-batch: the squared norm of its mean gradient, its ``size``; ``kept`` a bool Tensor."""
        kept = kept.astype(ms.float32)
        size = ops.cast(size, ms.float32)
        # select, not a product: a dropped micro-batch's NaN norm must not enter.
        ops.assign_add(self.squares, ops.select(kept > 0, squared_norm, ops.zeros_like(squared_norm)))
        ops.assign_add(self.inverse_sizes, kept / size)
        ops.assign_add(self.samples, kept * size)
        return ops.assign_add(self.micro_batches, kept)

    def window_tensors(self):
        """The window's sums, to be added up across devices with the gradient."""
        return (self.squares, self.inverse_sizes, self.samples, self.micro_batches)

    def close(self, sums, window_squared_norm, scale, applied):
        """Folds one window into the averages when ``applied`` and it has two batch sizes to compare.

        ``sums`` are ``window_tensors()`` (reduced across devices),
        ``window_squared_norm`` T (unscaled), ``scale`` the loss scale the
        squares still hold. Runs inside the Accumulator's window branch, so
        it selects rather than branches.
        """
        squares, inverse_sizes, samples, micro_batches = sums
        mean_square = squares / (micro_batches * scale * scale)
        spread = inverse_sizes / micro_batches - 1.0 / samples
        trace = (mean_square - window_squared_norm) / spread
        gradient = window_squared_norm - trace / samples
        # One micro-batch of one size has no second batch size to compare
        # with: spread is 0 and the estimates are not numbers.
        usable = ops.logical_and(applied, spread > 0)
        ops.assign(self.trace, ops.select(usable, NOISE_DECAY * self.trace + (1 - NOISE_DECAY) * trace, self.trace))
        ops.assign(self.gradient, ops.select(usable, NOISE_DECAY * self.gradient + (1 - NOISE_DECAY) * gradient,
                                             self.gradient))
        ops.assign_add(self.windows, usable.astype(ms.int32))
        for sum_ in self.window_tensors():
            ops.assign(sum_, ops.zeros_like(sum_))
        return usable

    def record(self):
        """The bias-corrected averages of |G|² and tr(Σ) and the windows behind them, read on the host.

        Example:
            >>> NoiseTracker().record()
            {'gradient_squared_norm': None, 'trace': None, 'windows': 0}
        """
        windows = int(self.windows)
        if windows == 0:
            return {"gradient_squared_norm": None, "trace": None, "windows": 0}
        correction = 1 - NOISE_DECAY ** windows
        return {"gradient_squared_norm": float(self.gradient) / correction, "trace": float(self.trace) / correction,
                "windows": windows}

    def noise_scale(self):
        """tr(Σ) / |G|² from the averages, or None before any window (or while |G|² is not above 0)."""
        if int(self.windows) == 0 or float(self.gradient) <= 0:
            return None
        return float(self.trace) / float(self.gradient)
