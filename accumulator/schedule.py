"""Accumulation schedules: how many micro-batches the next window holds."""
import numbers

import mindspore as ms
from mindspore import Tensor, ops


def _check_step(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


@ms.jit_class
class ConstantSchedule:
    """The same N for every window.

    Example:
        >>> ConstantSchedule(4)(Tensor(7, ms.int32))   # -> Tensor(4)
    """

    def __init__(self, accumulate_step):
        self.step = Tensor(_check_step(accumulate_step, "accumulate_step"), ms.int32)

    def __call__(self, update_count):
        return self.step


@ms.jit_class
class PiecewiseSchedule:
    """N from a dict ``{first_update: N}``, like Lightning's scheduler.

    Keys are update counts (windows applied so far); the entry with the
    largest key not above the count wins. Key 0 must be present.

    Example:
        >>> schedule = PiecewiseSchedule({0: 8, 100: 4, 500: 1})
        >>> schedule(Tensor(120, ms.int32))   # -> Tensor(4)
    """

    def __init__(self, steps_by_update):
        keys = sorted(steps_by_update)
        if any(isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0 for k in keys):
            raise ValueError(f"accumulate_step schedule keys must be update counts >= 0, got {keys!r}")
        if not keys or keys[0] != 0:
            raise ValueError(f"accumulate_step schedule must have an entry for update 0, got {steps_by_update!r}")
        steps = [_check_step(steps_by_update[k], f"accumulate_step[{k}]") for k in keys]
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
        >>> CallableSchedule(warmup)
    """

    def __init__(self, fn):
        self.fn = fn
        self.first_step = _check_step(int(self(Tensor(0, ms.int32)).asnumpy()), "accumulate_step(0)")

    def __call__(self, update_count):
        return ops.maximum(ops.cast(self.fn(update_count), ms.int32), 1)


def as_schedule(accumulate_step):
    """Turns an ``accumulate_step`` argument into ``(schedule, first N)``.

    Example:
        >>> schedule, first = as_schedule({0: 2, 10: 4})   # first == 2
    """
    if isinstance(accumulate_step, dict):
        schedule = PiecewiseSchedule(accumulate_step)
        return schedule, schedule.first_step
    if callable(accumulate_step):
        schedule = CallableSchedule(accumulate_step)
        return schedule, schedule.first_step
    step = _check_step(accumulate_step, "accumulate_step")
    return ConstantSchedule(step), step
