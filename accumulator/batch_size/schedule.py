"""Accumulation schedules: how many micro-batches the next window holds.

Each schedule is called inside the compiled step with the update count (an
int32 scalar Tensor) and returns N for the next window. Three plain attributes
are read on the host: ``first_step`` (N of the first window), ``fixed_step``
(N when it never changes, else ``None``) and ``reads_state`` (True when N
depends on more than the update count, so a checkpoint cannot be checked
against it before it is loaded).
"""
import numbers
from typing import Callable, Dict, Optional, Union

import mindspore as ms
from mindspore import Tensor, ops

from accumulator._internal.checks import positive_int
from accumulator.policies.noise import NOISE_DECAY

# The noise averages' horizon: an adaptive window waits for it to fill
# before it moves, so a first noisy window cannot set N.
SETTLE_WINDOWS = round(1 / (1 - NOISE_DECAY))


@ms.jit_class
class ConstantSchedule:
    """The same N for every window.

    Example:
        >>> schedule = ConstantSchedule(4)
        >>> int(schedule(Tensor(7, ms.int32))), schedule.fixed_step
        (4, 4)
    """

    reads_state = False

    def __init__(self, accumulate_step):
        self.first_step = self.fixed_step = positive_int(accumulate_step, "accumulate_step")
        self.step = Tensor(self.fixed_step, ms.int32)

    def __call__(self, update_count):
        return self.step


@ms.jit_class
class PiecewiseSchedule:
    """N from a dict ``{first_update: N}``, like Lightning's scheduler.

    Keys are update counts (windows applied so far); the entry with the
    largest key not above the count wins. Key 0 must be present.

    Example:
        >>> schedule = PiecewiseSchedule({0: 8, 100: 4, 500: 1})
        >>> int(schedule(Tensor(120, ms.int32))), schedule.first_step, schedule.fixed_step
        (4, 8, None)
    """

    fixed_step = None
    reads_state = False

    def __init__(self, steps_by_update):
        keys = sorted(steps_by_update)
        if any(isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0 for k in keys):
            raise ValueError(f"accumulate_step schedule keys must be update counts >= 0, got {keys!r}")
        if not keys or keys[0] != 0:
            raise ValueError(f"accumulate_step schedule must have an entry for update 0, got {steps_by_update!r}")
        steps = [positive_int(steps_by_update[k], f"accumulate_step[{k}]") for k in keys]
        self.first_step = steps[0]
        self.starts = Tensor(keys, ms.int32)
        self.steps = Tensor(steps, ms.int32)

    def __call__(self, update_count):
        index = (self.starts <= update_count).astype(ms.int32).sum() - 1
        return self.steps[index]


@ms.jit_class
class CallableSchedule:
    """N from ``fn(update_count)``, as optax's ``every_k_schedule``.

    ``fn`` receives the update count as an int32 scalar Tensor and runs
    inside the compiled step, so it must be graph-compatible (use
    ``ops.where``, not a Python ``if``). Values below 1 count as 1.

    Example:
        >>> def warmup(update_count):
        ...     return ops.where(update_count < 10, 1, 4)
        >>> schedule = CallableSchedule(warmup)
        >>> schedule.first_step, int(schedule(Tensor(10, ms.int32)))
        (1, 4)
    """

    fixed_step = None
    reads_state = False

    def __init__(self, fn):
        self.fn = fn
        self.first_step = positive_int(int(self(Tensor(0, ms.int32))), "accumulate_step(0)")

    def __call__(self, update_count):
        return ops.maximum(ops.cast(self.fn(update_count), ms.int32), 1)


@ms.jit_class
class NoiseScaleSchedule:
    """N that follows the measured gradient noise scale: an adaptive window.

    Between windows, sets N so that the effective batch, micro-batch x N x
    ranks, is near the accumulator's ``noise_scale`` (McCandlish et al.'s
    critical batch), rounded and clamped to ``[min_step, max_step]``. With
    ``update_cost``, the seconds of one update (the optimizer and the
    window's close) over those of one micro-step, N is instead the window
    that trains fastest in seconds, √(update_cost x s) for a noise scale of
    s micro-batches: samples' worth per second, as Pollux's goodput (Qiao et
    al. 2021), under McCandlish et al.'s model (docs/batch-size.md#fastest-in-seconds). N
    moves only when the target is ``hysteresis`` times above or below it, so
    noise in the estimate does not make it flap, and only once the averages
    hold ``SETTLE_WINDOWS`` windows; until then N stays at ``first_step``.
    On one device N stays at 2 or more where ``max_step`` allows: a window
    of one micro-batch cannot measure the noise, so N would never move
    again, while the noise scale usually grows as training goes on. The
    learning rate is left as you set it.

    Needs ``Accumulator(..., track_noise=True)``; its state (the noise
    averages and the current N) is the accumulator's, so a resumed run
    chooses the same N.

    Example:
        >>> from mindspore import nn
        >>> from accumulator import Accumulator
        >>> schedule = NoiseScaleSchedule(micro_batch_size=32, min_step=1, max_step=16)
        >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), schedule,
        ...                           track_noise=True, micro_batch_size=32)
        >>> int(accumulator.accumulate_step), schedule.fixed_step
        (2, None)
        >>> NoiseScaleSchedule(micro_batch_size=32, update_cost=0)
        Traceback (most recent call last):
        ...
        ValueError: update_cost must be None or a number above 0 (an update's seconds over a micro-step's), got 0
    """

    fixed_step = None
    reads_state = True

    def __init__(self, micro_batch_size: int, min_step: int = 1, max_step: int = 64, ranks: int = 1,
                 hysteresis: float = 1.5, first_step: Optional[int] = None,
                 update_cost: Optional[float] = None) -> None:
        self.micro_batch_size = positive_int(micro_batch_size, "micro_batch_size")
        self.min_step = positive_int(min_step, "min_step")
        self.max_step = positive_int(max_step, "max_step")
        if self.max_step < self.min_step:
            raise ValueError(f"max_step must be at least min_step={min_step}, got {max_step!r}")
        self.ranks = positive_int(ranks, "ranks")
        if isinstance(hysteresis, bool) or not isinstance(hysteresis, (int, float)) or not 1 <= hysteresis < 1e9:
            raise ValueError(f"hysteresis must be a number of at least 1, got {hysteresis!r}")
        self.hysteresis = float(hysteresis)
        # Two micro-batches at least, where allowed: a window of one on one
        # device has no second batch size to measure the noise against.
        measurable = min(max(self.min_step, 2), self.max_step)
        self.lowest = measurable if self.ranks == 1 else self.min_step
        self.first_step = measurable if first_step is None else positive_int(first_step, "first_step")
        if not self.min_step <= self.first_step <= self.max_step:
            raise ValueError(f"first_step must be within [{min_step}, {max_step}], got {first_step!r}")
        if update_cost is not None and (isinstance(update_cost, bool) or not isinstance(update_cost, numbers.Real)
                                        or not 0 < update_cost < 1e9):
            raise ValueError(f"update_cost must be None or a number above 0 (an update's seconds over a "
                             f"micro-step's), got {update_cost!r}")
        self.update_cost = None if update_cost is None else float(update_cost)
        self.noise = None
        self.current = None

    def bind(self, accumulator):
        """Reads N and the noise averages from ``accumulator``; the Accumulator calls this itself."""
        if accumulator.noise is None:
            raise ValueError("NoiseScaleSchedule needs Accumulator(..., track_noise=True)")
        self.noise = accumulator.noise
        self.current = accumulator.accumulate_step

    def __call__(self, update_count):
        # The noise scale in micro-batches; the averages' ratio: their bias corrections are the same and cancel.
        target = self.noise.trace / self.noise.gradient / (self.micro_batch_size * self.ranks)
        if self.update_cost is not None:  # a Python float: decided when the graph is built
            target = ops.sqrt(target * self.update_cost)
        target = ops.clip_by_value(ops.round(target), float(self.lowest), float(self.max_step))
        current = self.current.astype(ms.float32)
        far = ops.logical_or(target >= current * self.hysteresis, target * self.hysteresis <= current)
        known = ops.logical_and(self.noise.windows >= SETTLE_WINDOWS, self.noise.gradient > 0)
        # A NaN target (no estimate yet) compares False everywhere: N stays.
        return ops.select(ops.logical_and(known, far), target, current).astype(ms.int32)


def as_schedule(accumulate_step: Union[int, Dict[int, int], Callable, "NoiseScaleSchedule"]):
    """The schedule for an ``accumulate_step`` argument: an int, a dict, a callable or a schedule.

    Example:
        >>> as_schedule({0: 2, 10: 4}).first_step
        2
        >>> as_schedule(0)
        Traceback (most recent call last):
        ...
        ValueError: accumulate_step must be a positive int, got 0
    """
    if isinstance(accumulate_step, NoiseScaleSchedule):
        return accumulate_step
    if isinstance(accumulate_step, dict):
        return PiecewiseSchedule(accumulate_step)
    if callable(accumulate_step):
        return CallableSchedule(accumulate_step)
    return ConstantSchedule(accumulate_step)
