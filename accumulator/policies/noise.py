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
from mindspore import Tensor, ops

from accumulator._internal.checks import positive_int
from accumulator._internal.constants import ONE_FLOAT, ZERO_FLOAT, state_parameter
from accumulator.policies.base import Policy
from accumulator._internal.sums import float32, on_cpu, squared_total

# About the last twenty windows; both averages use it, so their bias
# corrections cancel in the ratio.
NOISE_DECAY = 0.95

_hyper_map = ops.HyperMap()


def _distance(factor, grad, buffer):
    return float32(grad) - float32(buffer) * factor


@ms.jit_class
class NoiseTracker(Policy):
    """The window's sums for the noise scale, and their smoothed estimates; a policy that never changes the update.

    Made by ``track_noise``: ``True`` gives ``NoiseFromLastMicroBatch``,
    ``"micro_batch"`` ``NoiseFromEveryMicroBatch``; the accumulator's
    ``noise`` is it. ``micro_batch_size``: samples per micro-batch, when
    micro-batches come without counts. Read the result on the host with
    ``noise_scale()`` and ``record()``.

    Attributes:
        squares: sum over the window's sampled micro-batches of |g_i|², or
            from the last micro-batch |g_L - g_w|² (times the loss scale²).
        inverse_sizes: sum of their 1 / b_i, or 1 / b_L - 1 / B.
        micro_batches: how many sampled micro-batches the sums hold.
        samples: sum of every kept micro-batch's b_i (B).
        trace, gradient: the exponential averages of tr(Σ) and |G|².
        windows: windows behind the averages.

    Example:
        >>> tracker = NoiseFromLastMicroBatch()
        >>> tracker.noise_scale() is None, tracker.record()["windows"]
        (True, 0)
    """

    needs_norm = True
    centered = False

    def __init__(self, micro_batch_size=None):
        self.micro_batch_size = None if micro_batch_size is None else positive_int(micro_batch_size,
                                                                                  "micro_batch_size")
        self.by_matmul = on_cpu()
        self.squares = state_parameter(0.0, ms.float32, "noise.squares")
        self.inverse_sizes = state_parameter(0.0, ms.float32, "noise.inverse_sizes")
        self.samples = state_parameter(0.0, ms.float32, "noise.samples")
        self.micro_batches = state_parameter(0.0, ms.float32, "noise.micro_batches")
        self.trace = state_parameter(0.0, ms.float32, "noise.trace")
        self.gradient = state_parameter(0.0, ms.float32, "noise.gradient")
        self.windows = state_parameter(0, ms.int32, "noise.windows")

    def state_parameters(self):
        return [self.squares, self.inverse_sizes, self.samples, self.micro_batches, self.trace, self.gradient,
                self.windows]

    def window_tensors(self):
        """The window's sums, to be added up across devices with the gradient."""
        return (self.squares, self.inverse_sizes, self.samples, self.micro_batches)

    def count(self, steps, weight, kept):
        """Adds every kept micro-batch's samples to the window's B, sampled or not."""
        self._size(weight)
        samples = weight if weight is not None else kept.astype(ms.float32) * self.micro_batch_size
        return ops.assign_add(self.samples, ops.cast(samples, ms.float32))

    def _size(self, count):
        """A micro-batch's samples: its ``count``, or ``micro_batch_size``; raised while the step compiles if neither."""
        if count is None and self.micro_batch_size is None:
            raise ValueError("track_noise needs each micro-batch's sample count: pass it as "
                             "accumulator(grads, count) or set Accumulator(..., micro_batch_size=...)")
        return self.micro_batch_size if count is None else ops.cast(count, ms.float32)

    def _squared_norm(self, grads, count):
        """|g|² of a micro-batch's mean gradient: a summed loss's gradient is count times it."""
        squared = squared_total(self.by_matmul, grads)
        if count is not None:
            size = self._size(count)
            squared = squared / (size * size)
        return squared

    def _sample(self, squared_norm, weight, kept):
        # select, not a product: a dropped micro-batch's NaN norm must not enter.
        ops.assign_add(self.squares, ops.select(kept, squared_norm, ZERO_FLOAT))
        ops.assign_add(self.inverse_sizes, ops.select(kept, ONE_FLOAT * weight, ZERO_FLOAT))
        return ops.assign_add(self.micro_batches, kept.astype(ms.float32))

    def close_window(self, tensors, summary):
        """Folds the window into the averages when it is applied and has two batch sizes to compare."""
        squares, inverse_sizes, samples, micro_batches = tensors
        norm = summary["norm"]
        window_squared_norm = norm * norm
        # The squares hold the loss scale², the norm does not.
        unscale = summary["unscale"]
        if self.centered:
            # Summed over devices: each device's distance over its spread.
            spread = inverse_sizes
            trace = squares * unscale * unscale / spread
        else:
            spread = inverse_sizes / micro_batches - 1.0 / samples
            trace = (squares * unscale * unscale / micro_batches - window_squared_norm) / spread
        gradient = window_squared_norm - trace / samples
        # One micro-batch of one size has no second batch size to compare
        # with: spread is 0 and the estimates are not numbers; with no
        # sampled micro-batch (a flushed partial window) they are 0 / 0.
        usable = ops.logical_and(summary["applied"], spread > 0)
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
            >>> NoiseFromEveryMicroBatch().record()
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


@ms.jit_class
class NoiseFromEveryMicroBatch(NoiseTracker):
    """``track_noise="micro_batch"``: every micro-batch's squared norm, a read of its gradient per micro-step.

    Less noisy than the last micro-batch alone, and the only way with one
    micro-batch per window on each of several devices.

    Example:
        >>> tracker = NoiseFromEveryMicroBatch(micro_batch_size=4)
        >>> _ = tracker.add((Tensor([3.0, 4.0]),), None, Tensor(True))
        >>> float(tracker.squares), float(tracker.inverse_sizes)
        (25.0, 0.25)
    """

    def add(self, flats, count, kept):
        size = self._size(count)
        return self._sample(self._squared_norm(flats, count), 1.0 / size, kept)


@ms.jit_class
class NoiseFromLastMicroBatch(NoiseTracker):
    """``track_noise=True``: the window's last micro-batch, as its distance from the window's mean; once a window.

    |g_L - g_w|² has the expectation tr(Σ) (1/b_L - 1/B): no |G|² in it to add noise.

    Example:
        >>> tracker = NoiseFromLastMicroBatch(micro_batch_size=2)
        >>> _ = tracker.count(Tensor(2, ms.int32), None, Tensor(2, ms.int32))    # B = 4 samples
        >>> _ = tracker.sample_last((Tensor([3.0]),), None, Tensor(True), (Tensor([4.0]),), Tensor(2.0))
        >>> float(tracker.squares), float(tracker.inverse_sizes)    # (3 - 2)², 1/2 - 1/4
        (1.0, 0.25)
    """

    centered = True

    def sample_last(self, flats, count, kept, buffers, total):
        size = self._size(count)
        # The buffers times this are the window mean, on the scale of the micro-batch's grads.
        factor = ops.cast(count, ms.float32) / total if count is not None else 1.0 / total
        distance = _hyper_map(ops.partial(_distance, factor), flats, buffers)
        return self._sample(self._squared_norm(distance, count), 1.0 / size - 1.0 / self.samples, kept)
