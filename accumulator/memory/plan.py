"""The micro-batch chosen by measuring memory: a batch per update and a budget in, a micro-batch and N out.

``plan_micro_batch`` measures your step at candidate micro-batch sizes, from
the largest down, in a child process on a CPU (``_child.MeasuringChild``,
stopped the moment it passes the budget) or in this process on a device; a
line through the measured peaks skips the sizes it puts over the budget; of
the sizes that fit it takes the fastest, a larger one within the noise
winning the tie. ``choose_micro_batch`` is the search over any
``measure(size) -> Measurement``. docs/memory-plan.md says why each piece is there.
"""
import pickle
import time

from accumulator._internal.checks import positive_int
from accumulator._internal.deprecation import deprecated
from accumulator.memory._child import (OUT_OF_MEMORY, OVER_BUDGET, STEPS, MeasuringChild, failure, peak_resident,
                                       run_step, speed, touch_memory)
from accumulator.memory._records import NOT_RUN, Measurement, MemoryPlan
from accumulator.memory._sizes import format_size, parse_size

# The share of MemAvailable a CPU run's default budget takes: the rest is for the system and other processes.
BUDGET_FRACTION = 0.8
# The share of the budget a chosen size leaves free: a measurement's few micro-steps are not a whole run.
MARGIN = 0.1
# Two sizes' samples/s closer than this share of the faster (or than either's spread over its calls) are tied,
# and the larger is taken: fewer launches a window (docs/memory-plan.md#how-it-measures-and-chooses).
SPEED_TOLERANCE = 0.03


class PlanError(ValueError):
    """No micro-batch can be chosen: the budget, the batch or the step is the cause, named in one line.

    Example:
        >>> isinstance(PlanError("micro-batch 1 failed"), ValueError)
        True
    """


def default_budget(device="CPU"):
    """The budget when none is given: on a CPU, ``BUDGET_FRACTION`` of MemAvailable (/proc/meminfo), in bytes.

    GPU and Ascend report no free memory here: pass a budget there.

    Example:
        >>> default_budget() > 0
        True
    """
    if device == "CPU":
        try:
            with open("/proc/meminfo", encoding="ascii") as meminfo:
                for line in meminfo:
                    if line.startswith("MemAvailable:"):
                        return int(int(line.split()[1]) * 1024 * BUDGET_FRACTION)
        except OSError:
            pass
    raise PlanError(f"no free memory to read on {device}: pass a memory budget (e.g. memory_budget='6GiB')")


def default_candidates(batch):
    """Powers of two below ``batch``, and ``batch``: the sizes tried when none are given.

    Example:
        >>> default_candidates(24)
        [1, 2, 4, 8, 16, 24]
    """
    return [2 ** k for k in range(batch.bit_length()) if 2 ** k < batch] + [batch]


def _predict(probes, size):
    """The peak at ``size`` from a least-squares line through the measured probes; None below two of them."""
    points = [(probe.size, probe.peak) for probe in probes if probe.outcome == "measured"]
    if len(points) < 2:
        return None
    mean_size = sum(s for s, _ in points) / len(points)
    mean_peak = sum(p for _, p in points) / len(points)
    slope = sum((s - mean_size) * (p - mean_peak) for s, p in points) / sum((s - mean_size) ** 2 for s, _ in points)
    return round(mean_peak + slope * (size - mean_size))


def _sizes(batch, candidates):
    """The candidates up to ``batch``, largest first; ``PlanError`` when the batch is below all of them."""
    positive_int(batch, "batch")
    sizes = sorted(set(default_candidates(batch) if candidates is None else
                       [positive_int(size, "candidates") for size in candidates]), reverse=True)
    if sizes[-1] > batch:
        raise PlanError(f"the batch per update of {batch} is smaller than one micro-batch: the smallest candidate "
                        f"is {sizes[-1]}")
    return [size for size in sizes if size <= batch]


def _tied(one, other):
    """Whether two probes' samples/s differ by less than ``SPEED_TOLERANCE`` of the faster or either's spread."""
    faster = max(one.samples_per_second, other.samples_per_second)
    noise = max(SPEED_TOLERANCE * faster, one.spread or 0.0, other.spread or 0.0)
    return abs(one.samples_per_second - other.samples_per_second) <= noise


def _clearly_faster(probe, than):
    """Whether ``probe`` trains faster than ``than`` by more than the noise (not ``_tied``)."""
    return probe.samples_per_second > than.samples_per_second and not _tied(probe, than)


def _need(probe, margin):
    """What the smallest size needs, for the error when nothing fits: its peak, or how far it got."""
    if probe.outcome == "measured":
        return f"peaks at {format_size(probe.peak)}, so it needs a budget of {format_size(probe.peak / (1 - margin))}"
    if probe.outcome.startswith(OVER_BUDGET):
        return f"passed {format_size(probe.peak)} when it was stopped, so it needs a budget of more than " \
               f"{format_size(probe.peak / (1 - margin))}"
    return probe.outcome


def choose_micro_batch(measure, batch, budget, candidates=None, margin=MARGIN):
    """The ``MemoryPlan`` for ``batch`` samples per update from ``measure(size) -> Measurement``, few sizes measured.

    A size fits when its peak is at most ``(1 - margin) * budget``. From the
    largest size down to the first that fits (a size over the budget, out of
    memory or stopped sends the search on), skipping those the line through
    the measured peaks puts over it (``"not run"``; never the smallest); below
    it the next while it is clearly faster; then the fastest that fits, a
    larger one within the noise taken instead. ``PlanError`` when the batch is
    below every candidate, a size fails not for memory (with its reason), or
    none fits (with what the smallest needs). docs/memory-plan.md#how-it-measures-and-chooses.

    Example: a step that needs 100 MiB plus 10 MiB a sample, and is fastest at 8.
        >>> def measure(size):
        ...     speed = {4: 45.0, 8: 60.0, 16: 55.0, 32: 50.0, 48: 40.0, 64: 30.0}[size]
        ...     return Measurement(size, (100 + 10 * size) * 2 ** 20, speed)
        >>> plan = choose_micro_batch(measure, 64, budget=400 * 2 ** 20, candidates=[4, 8, 16, 32, 48, 64])
        >>> plan.micro_batch, [probe.size for probe in plan.probes], plan.probes[3].outcome
        (8, [4, 8, 16, 32, 48, 64], 'not run')

    64 and 48 run over; the line through them puts 32 at 420 MiB, over 360: not run. 16 fits, 8 is faster, 4 not.
    """
    sizes = _sizes(batch, candidates)
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be in [0, 1), got {margin!r}")
    usable = budget * (1 - margin)
    probes = []

    def fits(size):
        probe = measure(size)
        probes.append(probe)
        if probe.outcome != "measured" and not probe.outcome.startswith((OUT_OF_MEMORY, OVER_BUDGET)):
            raise PlanError(f"micro-batch {size} failed, not for memory: {probe.outcome}")
        return probe.outcome == "measured" and probe.peak <= usable

    for index, size in enumerate(sizes):
        predicted = _predict(probes, size)
        if predicted is not None and predicted > usable and size != sizes[-1]:
            probes.append(Measurement(size, predicted, None, NOT_RUN))
        elif fits(size):
            above = probes[-1]
            for smaller in sizes[index + 1:]:  # for speed: the largest that fits is not always the fastest
                if not fits(smaller) or not _clearly_faster(probes[-1], above):
                    break
                above = probes[-1]
            break
    probes.sort(key=lambda probe: probe.size)
    fitting = [probe for probe in probes if probe.outcome == "measured" and probe.peak <= usable]
    if not fitting:
        raise PlanError(f"a memory budget of {format_size(budget)} is below the smallest micro-batch's need: "
                        f"micro-batch {probes[0].size} {_need(probes[0], margin)} ({margin:.0%} kept free)")
    fastest = max(fitting, key=lambda probe: probe.samples_per_second)
    chosen = max((probe for probe in fitting if _tied(probe, fastest)), key=lambda probe: probe.size)
    return MemoryPlan(batch, chosen.size, int(budget), margin, tuple(probes))


def measure_in_child(make_step, size, args=(), steps=STEPS, samples=None, limit=None):
    """The ``Measurement`` of ``make_step(size, *args)``'s step, in a ``MeasuringChild`` of its own.

    ``samples`` is what one call of the step trains (None: ``size``). The
    child's peak resident memory includes its MindSpore import and anything
    ``make_step`` loads, as your run's will; ``limit``: the resident bytes
    past which it is stopped. docs/memory-plan.md#your-step.

    Example:
        >>> measured = measure_in_child(touch_memory, 4, args=(2 ** 20,), steps=1)
        >>> measured.outcome, measured.peak > 4 * 2 ** 20
        ('measured', True)
    """
    with MeasuringChild(make_step, args, steps) as child:
        return child.measure(size, samples, limit)


def _measure_on_device(make_step, size, args=(), steps=STEPS, samples=None):
    """One ``Measurement`` on GPU or Ascend, in this process: the device's peak allocated memory (unverified path).

    Resets ``mindspore.runtime``'s peak, runs the step, reads ``max_memory_allocated()``; an error is ``failure``'s
    outcome, out of memory when it says so. Not run on a GPU or Ascend device: docs/memory-plan.md#devices.
    """
    import mindspore as ms
    ms.runtime.reset_max_memory_allocated()
    started = time.perf_counter()
    try:
        phases, calls = run_step(make_step, size, args, steps)
    except (RuntimeError, MemoryError) as error:
        return Measurement(size, outcome=failure(error))
    rate, spread = speed(samples or size, calls)
    return Measurement(size, int(ms.runtime.max_memory_allocated()), rate, "measured", spread,
                       time.perf_counter() - started, phases)


def plan_micro_batch(make_step, batch, memory_budget=None, *, args=(), candidates=None, margin=MARGIN,
                     steps=STEPS, device=None, window=False):
    """Measures ``make_step``'s step at candidate micro-batch sizes and returns the ``MemoryPlan`` for ``batch``.

    ``make_step(size, *args)`` builds your compiled step for micro-batches
    of ``size`` samples and returns ``step()``, which runs one micro-step
    (forward, backward, accumulate) on a micro-batch it holds; with
    ``window=True`` one whole window (``ceil(batch / size)`` micro-batches
    and the update). On a CPU it runs in a ``MeasuringChild``, one for the
    sizes that fit and a new one after a size that does not, stopped the
    moment it passes the budget less its margin (all but the smallest size):
    ``make_step`` must be a top-level function of an importable module, and
    ``args`` picklable. ``memory_budget`` is bytes or a size such as
    ``"6GiB"``; None takes ``default_budget(device)``. ``device``: MindSpore's
    device target (None: the context's). ``choose_micro_batch`` chooses.

    Example: a step that holds 1 MiB a sample, within a budget it cannot pass.
        >>> peak = peak_resident()
        >>> plan = plan_micro_batch(touch_memory, 6, peak + 2 ** 30, args=(2 ** 20,), candidates=[2], steps=1)
        >>> plan.micro_batch, plan.accumulate_step
        (2, 3)
    """
    if device is None:
        import mindspore as ms
        device = ms.get_context("device_target")
    budget = default_budget(device) if memory_budget is None else (
        parse_size(memory_budget) if isinstance(memory_budget, str) else positive_int(memory_budget, "memory_budget"))
    positive_int(steps, "steps")
    if device != "CPU":
        return choose_micro_batch(lambda size: _measure_on_device(make_step, size, args, steps,
                                                                  batch if window else size),
                                  batch, budget, candidates, margin)
    if peak_resident() is None:
        raise PlanError("this system gives no peak memory to read (no /proc, no resource module): pass the "
                        "micro-batch yourself")
    try:
        pickle.dumps((make_step, args))
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        raise PlanError(f"make_step must be a top-level function of an importable module, and args picklable: "
                        f"each size runs in a child process that imports them ({error})") from None
    usable, smallest, children = budget * (1 - margin), _sizes(batch, candidates)[-1], []

    def measure(size):  # one child while sizes fit (docs/memory-plan.md#planning-cost)
        if not children or not children[-1].alive:
            children.append(MeasuringChild(make_step, args, steps))
        measured = children[-1].measure(size, batch if window else size, None if size == smallest else usable)
        if measured.outcome == "measured" and measured.peak > usable:
            children[-1].close()  # what it still holds would count in the next, smaller size's peak
        return measured
    try:
        return choose_micro_batch(measure, batch, budget, candidates, margin)
    finally:
        for child in children:
            child.close()


_OLD_NAMES = {"Probe": Measurement, "ProbeChild": MeasuringChild}


def __getattr__(name):
    """The 0.2.0 names: ``Probe`` is ``Measurement``, ``ProbeChild`` ``MeasuringChild``; each warns once."""
    if name in _OLD_NAMES:
        deprecated(f"accumulator.memory.plan.{name}", f"accumulator.memory.plan.{_OLD_NAMES[name].__name__}")
        return _OLD_NAMES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
