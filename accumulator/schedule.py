"""Accumulation schedules: how many micro-batches the next window holds.

Each schedule is called inside the compiled step with the update count (an
int32 scalar Tensor) and returns N for the next window. Two plain attributes
are read on the host: ``first_step`` (N of the first window) and
``fixed_step`` (N when it never changes, else ``None``).
"""
import numbers

import mindspore as ms
from mindspore import Tensor, ops

from accumulator.checks import positive_int


@ms.jit_class
class ConstantSchedule:
    """The same N for every window.

    Example:
        >>> schedule = ConstantSchedule(4)
        >>> int(schedule(Tensor(7, ms.int32))), schedule.fixed_step
        (4, 4)
    """

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

    def __init__(self, fn):
        self.fn = fn
        self.first_step = positive_int(int(self(Tensor(0, ms.int32))), "accumulate_step(0)")

    def __call__(self, update_count):
        return ops.maximum(ops.cast(self.fn(update_count), ms.int32), 1)


def as_schedule(accumulate_step):
    """The schedule for an ``accumulate_step`` argument: an int, a dict or a callable.

    Example:
        >>> as_schedule({0: 2, 10: 4}).first_step
        2
        >>> as_schedule(0)
        Traceback (most recent call last):
        ...
        ValueError: accumulate_step must be a positive int, got 0
    """
    if isinstance(accumulate_step, dict):
        return PiecewiseSchedule(accumulate_step)
    if callable(accumulate_step):
        return CallableSchedule(accumulate_step)
    return ConstantSchedule(accumulate_step)
