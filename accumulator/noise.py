"""Gradient-noise telemetry: the noise scale B_simple = tr(Σ) / |G|² from the window's micro-batches.

McCandlish et al. (2018), "An Empirical Model of Large-Batch Training",
appendix A: a batch of b samples has a mean gradient whose squared norm is
|G|² + tr(Σ)/b on average. A window holds micro-batches of b_i samples (B in
all), so with A the mean of the micro-batch gradients' squared norms and T
the window mean gradient's,

    S = (A - T) / (mean(1/b_i) - 1/B)   estimates tr(Σ), and
    |G|² ≈ T - S / B.

That is ``track_noise="micro_batch"``: a squared norm of every micro-batch's
gradient, a read of the gradient per micro-step. One micro-batch per window
is enough, and ``track_noise=True`` (``centered``) takes the last one,
once per window: with g_L its mean gradient and g_w the window's on the
same device, |g_L - g_w|² has the expectation tr(Σ) (1/b_L - 1/B), so

    S = |g_L - g_w|² / (1/b_L - 1/B)

with no |G|² in the numerator to add noise (|g_L|² - T would have it).
Across devices the distances and their spreads are summed, and S is their
ratio; B in |G|² ≈ T - S / B counts every device's samples, B in each
spread only that device's, so one micro-batch per device and window leaves
it nothing to measure.

Both are smoothed separately by a bias-corrected exponential average and
only then divided (the ratio of two noisy estimates is biased; its average
is worse). The noise scale predicts the critical batch: past it, a larger
batch buys little.
"""
import mindspore as ms
from mindspore import Parameter, Tensor, ops

from accumulator.constants import ONE_FLOAT, ZERO_FLOAT

# About the last twenty windows; both averages use it, so their bias
# corrections cancel in the ratio.
NOISE_DECAY = 0.95


def _parameter(name, value=0.0):
    return Parameter(Tensor(value, ms.float32), name=f"accumulator.noise.{name}", requires_grad=False)


@ms.jit_class
class NoiseTracker:
    """The window's sums for the noise scale, and their smoothed estimates.

    Owned by an ``Accumulator(..., track_noise=...)``, which calls ``add``
    for each sampled micro-batch, ``count`` for every micro-batch and
    ``close`` once per window; read the result on the host with
    ``noise_scale()`` and ``record()``. ``centered``: the samples are each
    window's last micro-batch, as distances from the window's mean.

    Attributes:
        squares: sum over the window's sampled micro-batches of |g_i|², or
            when ``centered`` of |g_L - g_w|² (times the loss scale²).
        inverse_sizes: sum of their 1 / b_i, or when ``centered`` of
            1 / b_L - 1 / B.
        micro_batches: how many sampled micro-batches the sums hold.
        samples: sum of every kept micro-batch's b_i (B).
        trace, gradient: the exponential averages of tr(Σ) and |G|².
        windows: windows behind the averages.

    Example:
        >>> tracker = NoiseTracker()
        >>> tracker.noise_scale() is None, tracker.record()["windows"]
        (True, 0)
    """

    def __init__(self, centered=False):
        self.centered = centered
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

    def add(self, squared_norm, weight, kept):
        """Adds one sampled micro-batch when ``kept`` (a bool Tensor).

        ``squared_norm``: |g_i|², or with ``centered`` |g_L - g_w|²;
        ``weight``: 1/b_i, or with ``centered`` 1/b_L - 1/B.
        """
        # select, not a product: a dropped micro-batch's NaN norm must not enter.
        ops.assign_add(self.squares, ops.select(kept, squared_norm, ZERO_FLOAT))
        ops.assign_add(self.inverse_sizes, ops.select(kept, ONE_FLOAT * weight, ZERO_FLOAT))
        return ops.assign_add(self.micro_batches, kept.astype(ms.float32))

    def count(self, samples):
        """Adds ``samples`` (a float32 Tensor) to the window's B: every kept micro-batch's, sampled or not."""
        return ops.assign_add(self.samples, samples)

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
        if self.centered:
            # Summed over devices: each device's distance over its spread.
            spread = inverse_sizes
            trace = squares / (scale * scale * spread)
        else:
            spread = inverse_sizes / micro_batches - 1.0 / samples
            trace = (squares / (micro_batches * scale * scale) - window_squared_norm) / spread
        gradient = window_squared_norm - trace / samples
        # One micro-batch of one size has no second batch size to compare
        # with: spread is 0 and the estimates are not numbers; with no
        # sampled micro-batch (a flushed partial window) they are 0 / 0.
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
