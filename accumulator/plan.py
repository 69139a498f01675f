"""The micro-batch chosen by measuring memory: a batch per update and a budget in, a micro-batch and N out.

``plan_micro_batch`` runs your step for candidate micro-batch sizes and
reads its peak memory: on a CPU the peak resident memory (VmHWM) of a child
process (``spawn`` context), reset between sizes and replaced after a size
that does not fit, so that such a size kills a child, never your run; on GPU or Ascend the
device's peak (``mindspore.runtime``), in this process (unverified: no such
device ran it). It fits the peak as ``a + b * size`` from the two smallest
sizes, runs no size the fit puts over the budget, measures the largest it
keeps under and the one below, then takes, of the sizes that fit with
``margin`` of the budget kept free, the one with the most samples per second
measured in the same probes. ``choose_micro_batch`` is the search over any
``measure(size) -> Probe``. docs/memory-plan.md.
"""
import ctypes
import dataclasses
import gc
import multiprocessing
import pickle
import re
import resource
import signal
import sys
import time
from typing import Optional

from accumulator.checks import positive_int

# The share of MemAvailable a CPU run's default budget takes: the rest is for the system and other processes.
BUDGET_FRACTION = 0.8
# The share of the budget a chosen size leaves free: a probe's few micro-steps are not a whole run.
MARGIN = 0.1
# Micro-steps timed per probe, after one that compiles, and the least time they take: a few steps of a
# millisecond are all noise, and a second is little beside the compile.
PROBE_STEPS = 5
PROBE_SECONDS = 1.0
# A probe's outcome when the size did not fit: a child killed by a signal (as the OOM killer does), or a device error.
OUT_OF_MEMORY = "out of memory"
_UNITS = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


class PlanError(ValueError):
    """No micro-batch can be chosen: the budget, the batch or the step is the cause, named in one line.

    Example:
        >>> isinstance(PlanError("micro-batch 1 failed"), ValueError)
        True
    """


def parse_size(text):
    """Bytes from ``text``: a number and an optional unit K, M, G or T, binary (``6G``, ``6GB``, ``6GiB``: 6 x 2**30).

    Example:
        >>> parse_size("512MiB"), parse_size("6G"), parse_size("1.5 GiB"), parse_size("4096")
        (536870912, 6442450944, 1610612736, 4096)
        >>> parse_size("lots")
        Traceback (most recent call last):
        ...
        ValueError: expected a size such as 512MiB, 6GiB or 6G, got 'lots'
    """
    match = _SIZE.match(str(text))
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"expected a size such as 512MiB, 6GiB or 6G, got {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def format_size(size):
    """``size`` bytes as people read them, in MiB below a GiB and in GiB above.

    Example:
        >>> format_size(536870912), format_size(6442450944)
        ('512.0 MiB', '6.00 GiB')
    """
    return f"{size / 2 ** 30:.2f} GiB" if size >= 2 ** 30 else f"{size / 2 ** 20:.1f} MiB"


def peak_resident():
    """This process's peak resident memory so far, in bytes (VmHWM; ``getrusage`` where /proc is missing).

    Example:
        >>> peak_resident() > 0
        True
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


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


@dataclasses.dataclass(frozen=True)
class Probe:
    """One candidate micro-batch: its measured peak memory (bytes) and samples per second, or why it has none.

    ``outcome`` is ``"measured"``, ``"out of memory ..."`` (the child was killed
    by a signal, as the OOM killer does, named after it), ``"not run"`` (the fit put it over
    the budget: ``peak`` is the prediction) or another failure's text.

    Example:
        >>> Probe(8, peak=2 ** 30, samples_per_second=100.0).outcome
        'measured'
    """
    size: int
    peak: Optional[int] = None
    samples_per_second: Optional[float] = None
    outcome: str = "measured"


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """The chosen micro-batch for a batch per update, and the probes it was chosen from.

    ``accumulate_step`` N is ``ceil(batch / micro_batch)``; ``micro_batches``
    lists the sizes of one window's micro-batches: all ``micro_batch`` but
    the last, which is smaller when the two do not divide (pass each one's
    count to the accumulator: every update then equals the whole batch).

    Example:
        >>> plan = MemoryPlan(batch=20, micro_batch=8, budget=2 ** 30, margin=0.1,
        ...                   probes=(Probe(8, 2 ** 28, 50.0),))
        >>> plan.accumulate_step, plan.micro_batches
        (3, [8, 8, 4])
    """
    batch: int
    micro_batch: int
    budget: int
    margin: float
    probes: tuple

    @property
    def accumulate_step(self):
        """N: micro-batches per update, ``ceil(batch / micro_batch)``."""
        return -(-self.batch // self.micro_batch)

    @property
    def micro_batches(self):
        """One window's micro-batch sizes, in order; they add up to ``batch``."""
        return [self.micro_batch] * (self.accumulate_step - 1) + [self.batch - self.micro_batch
                                                                   * (self.accumulate_step - 1)]

    def table(self):
        """The probes as a small table: size, peak memory, samples/s, and which was chosen.

        Example:
            >>> plan = MemoryPlan(batch=16, micro_batch=8, budget=2 ** 30, margin=0.1,
            ...                   probes=(Probe(8, 2 ** 28, 50.0), Probe(16, 2 ** 30, None, "not run")))
            >>> print(plan.table())
            micro-batch  peak memory  samples/s  chosen
                      8    256.0 MiB         50  <- 8 x 2 = 16 per update
                     16     1.00 GiB          -  not run (the fit's prediction)
            budget 1.00 GiB, 10% kept free
        """
        lines = [f"{'micro-batch':>11}  {'peak memory':>11}  {'samples/s':>9}  chosen"]
        for probe in self.probes:
            peak = "-" if probe.peak is None else format_size(probe.peak)
            speed = "-" if probe.samples_per_second is None else f"{probe.samples_per_second:,.0f}"
            if probe.size == self.micro_batch:
                note = f"<- {' + '.join(map(str, self.micro_batches))} = {self.batch} per update" \
                    if self.batch % self.micro_batch else f"<- {self.micro_batch} x {self.accumulate_step} = " \
                                                            f"{self.batch} per update"
            elif probe.outcome == "not run":
                note = "not run (the fit's prediction)"
            else:
                note = "" if probe.outcome == "measured" else probe.outcome
            lines.append(f"{probe.size:>11}  {peak:>11}  {speed:>9}  {note}".rstrip())
        lines.append(f"budget {format_size(self.budget)}, {self.margin:.0%} kept free")
        return "\n".join(lines)

    def record(self):
        """The plan as JSON-ready values, for a log.

        Example:
            >>> plan = MemoryPlan(batch=16, micro_batch=8, budget=2 ** 30, margin=0.1,
            ...                   probes=(Probe(8, 2 ** 28, 50.0),))
            >>> record = plan.record()
            >>> record["micro_batch"], record["accumulate_step"], record["probes"][0]["peak"]
            (8, 2, 268435456)
        """
        return {"batch": self.batch, "micro_batch": self.micro_batch, "accumulate_step": self.accumulate_step,
                "budget": self.budget, "margin": self.margin,
                "probes": [dataclasses.asdict(probe) for probe in self.probes]}


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


def choose_micro_batch(measure, batch, budget, candidates=None, margin=MARGIN):
    """The ``MemoryPlan`` for ``batch`` samples per update from ``measure(size) -> Probe``, few sizes measured.

    A size fits when its peak is at most ``(1 - margin) * budget``. The two
    smallest candidates are measured first: they fix a line ``a + b * size``
    through the peaks. Then, from the largest size the line keeps under the
    budget downwards, sizes are measured until one fits, and the one below
    it too, for speed; the line is fitted again to every peak measured, and
    a size it puts over the budget is never run (a ``"not run"`` probe holds
    the smallest such from the first line, with the prediction). Each
    probe costs a compile, so the sizes in between are not measured. Of the
    sizes that fit, the fastest is chosen. Raises ``PlanError`` when the batch
    is smaller than every candidate, when a size fails for another reason
    than memory (with that reason), or when none fits (naming what the
    smallest needs).

    Example: a step that needs 100 MiB plus 10 MiB a sample, and is fastest at 8.
        >>> def measure(size):
        ...     return Probe(size, (100 + 10 * size) * 2 ** 20, {1: 10.0, 2: 19.0, 8: 60.0, 16: 55.0}[size])
        >>> plan = choose_micro_batch(measure, 64, budget=400 * 2 ** 20)
        >>> plan.micro_batch, [probe.size for probe in plan.probes], plan.probes[-1].outcome
        (8, [1, 2, 8, 16, 32], 'not run')
    """
    positive_int(batch, "batch")
    candidates = sorted(set(default_candidates(batch) if candidates is None else
                            [positive_int(size, "candidates") for size in candidates]))
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be in [0, 1), got {margin!r}")
    if candidates[0] > batch:
        raise PlanError(f"the batch per update of {batch} is smaller than one micro-batch: the smallest candidate "
                        f"is {candidates[0]}")
    usable = budget * (1 - margin)
    sizes = [size for size in candidates if size <= batch]
    probes = []

    def fits(size):
        probe = measure(size)
        probes.append(probe)
        if probe.outcome != "measured" and not probe.outcome.startswith(OUT_OF_MEMORY):
            raise PlanError(f"micro-batch {size} failed, not for memory: {probe.outcome}")
        return probe.outcome == "measured" and probe.peak <= usable

    if all(fits(size) for size in sizes[:2]):
        predicted = {size: _predict(probes, size) for size in sizes[2:]}
        over = [size for size in sizes[2:] if predicted[size] > usable]
        if over:
            probes.append(Probe(over[0], predicted[over[0]], None, "not run"))
        under = [size for size in sizes[2:] if predicted[size] <= usable]
        for index in reversed(range(len(under))):
            # The line through every peak so far: a size measured over the budget corrects it.
            if _predict(probes, under[index]) <= usable and fits(under[index]):
                if index:  # the size below, for speed: the largest that fits is not always the fastest
                    fits(under[index - 1])
                break
    probes.sort(key=lambda probe: probe.size)
    fitting = [probe for probe in probes if probe.outcome == "measured" and probe.peak <= usable]
    if not fitting:
        smallest = probes[0]
        need = smallest.outcome if smallest.peak is None else f"peaks at {format_size(smallest.peak)}, so it needs " \
            f"a budget of {format_size(smallest.peak / (1 - margin))}"
        raise PlanError(f"a memory budget of {format_size(budget)} is below the smallest micro-batch's need: "
                        f"micro-batch {smallest.size} {need} ({margin:.0%} kept free)")
    chosen = max(fitting, key=lambda probe: probe.samples_per_second)
    return MemoryPlan(batch, chosen.size, int(budget), margin, tuple(probes))


def _wait(result):
    """Blocks until the step's outputs are computed: MindSpore may return before a launch ends."""
    for value in result if isinstance(result, (tuple, list)) else (result,):
        if hasattr(value, "asnumpy"):
            value.asnumpy()


def _run_step(make_step, size, args, steps):
    """``(calls timed, their seconds)`` after one that compiles: at least ``steps`` calls and ``PROBE_SECONDS``."""
    step = make_step(size, *args)
    _wait(step())
    started, done = time.perf_counter(), 0
    while done < steps or time.perf_counter() - started < PROBE_SECONDS:
        _wait(step())
        done += 1
    return done, time.perf_counter() - started


def _release():
    """Gives back what the last size held before the next one's peak starts.

    Python's garbage, MindSpore's cached memory, and glibc's free heap, which it keeps resident otherwise.
    """
    gc.collect()
    if "mindspore" in sys.modules:  # imported by the step, not by the planner: a step need not use MindSpore
        sys.modules["mindspore"].ms_memory_recycle()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _reset_peak():
    """Resets this process's VmHWM to its resident memory now (Linux ``clear_refs``); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


def _serve(connection, make_step, args, steps):
    """A probe child: measures each ``(size, samples)`` the parent sends, resetting its peak after each.

    It offers itself to the OOM killer first: a size that does not fit takes the child, not the run. Each
    answer says whether it can take another size: not after an error, nor when it cannot reset its peak
    (each size then takes a fresh child).
    """
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="ascii") as score:
            score.write("1000")
    except OSError:
        pass
    while True:
        try:
            request = connection.recv()
        except EOFError:  # the parent is gone
            return
        if request is None:
            return
        size, samples = request
        try:
            done, seconds = _run_step(make_step, size, args, steps)
            measured = ("measured", peak_resident(), samples * done / seconds)
        except BaseException as error:  # noqa: B902  (the parent reports it; the child ends here)
            first_line = next((line for line in str(error).splitlines() if line.strip()), "")  # MindSpore's run long
            connection.send((f"{type(error).__name__}: {first_line}", None, None, False))
            return
        _release()
        reusable = _reset_peak()
        connection.send((*measured, reusable))
        if not reusable:
            return


class ProbeChild:
    """A child process (``spawn`` context) that measures ``make_step``'s step at one size after another.

    ``measure(size)`` sends a size and returns its ``Probe``: the child builds
    ``make_step(size, *args)``, runs it once to compile, times at least
    ``steps`` calls and ``PROBE_SECONDS``, and reports its peak resident
    memory, reset (``/proc/self/clear_refs``) after each size, so a size after
    the first also counts what the child still holds from the ones before:
    more than a fresh run would hold, not less (docs/memory-plan.md#planning-cost).
    A child killed by a signal (the OOM killer's SIGKILL) is ``"out of memory
    (killed by SIGKILL)"``; an exception is its type and the first line of its
    text. Either ends the child, as does a peak it cannot reset: ``alive`` is
    then False. ``close()`` ends it.

    Example:
        >>> with ProbeChild(touch_memory, args=(2 ** 20,), steps=1) as child:
        ...     first, second = child.measure(8), child.measure(4)
        ...     first.outcome, second.outcome, child.alive, first.peak > 8 * 2 ** 20
        ('measured', 'measured', True, True)
    """

    def __init__(self, make_step, args=(), steps=PROBE_STEPS):
        context = multiprocessing.get_context("spawn")
        self._connection, child_end = context.Pipe()
        self._process = context.Process(target=_serve, args=(child_end, make_step, args, steps), daemon=True)
        self._process.start()
        child_end.close()
        self._busy = False  # running a size: an interrupt then kills it rather than wait

    @property
    def alive(self):
        """Whether the child can measure another size."""
        return not self._connection.closed and self._process.is_alive()

    def measure(self, size, samples=None):
        """The ``Probe`` of ``size``; ``samples`` is what one call of the step trains (None: ``size``)."""
        self._busy = True
        try:
            self._connection.send((size, samples or size))
            outcome, peak, speed, reusable = self._connection.recv()
        except (EOFError, OSError):  # it ended without a word: killed, or exited from native code
            outcome, peak, speed, reusable = None, None, None, False
        self._busy = False
        if not reusable:
            self.close()
        if outcome is None:
            code = self._process.exitcode
            outcome = f"{OUT_OF_MEMORY} (killed by {signal.Signals(-code).name})" if code < 0 else \
                f"the child exited with status {code} and no error"
        return Probe(size, peak, speed, outcome)

    def close(self):
        """Ends the child: asks it to stop, or kills it if it is still running a size (an interrupt)."""
        if self._process.is_alive() and not self._busy and not self._connection.closed:
            try:
                self._connection.send(None)
                self._process.join()
            except OSError:  # it ended as the request went
                pass
        if self._process.is_alive():
            self._process.kill()
        self._process.join()
        self._connection.close()

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()


def measure_in_child(make_step, size, args=(), steps=PROBE_STEPS, samples=None):
    """One ``Probe`` of ``make_step(size, *args)``'s step, run in a ``ProbeChild`` of its own.

    ``samples`` is what one call of the step trains (None: ``size``, one
    micro-batch), for its samples per second. The child's peak resident
    memory includes its MindSpore import and anything ``make_step`` loads,
    as your run's will. docs/memory-plan.md#your-step.

    Example:
        >>> probe = measure_in_child(touch_memory, 4, args=(2 ** 20,), steps=1)
        >>> probe.outcome, probe.peak > 4 * 2 ** 20
        ('measured', True)
    """
    with ProbeChild(make_step, args, steps) as child:
        return child.measure(size, samples)


def _measure_on_device(make_step, size, args=(), steps=PROBE_STEPS, samples=None):
    """One ``Probe`` on GPU or Ascend, in this process: the device's peak allocated memory (unverified path).

    Resets ``mindspore.runtime``'s peak, runs the step, reads
    ``max_memory_allocated()``; an error naming memory is ``"out of
    memory"``. Not run on a GPU or Ascend device: docs/memory-plan.md#devices.
    """
    import mindspore as ms
    ms.runtime.reset_max_memory_allocated()
    try:
        done, seconds = _run_step(make_step, size, args, steps)
    except (RuntimeError, MemoryError) as error:
        return Probe(size, outcome=OUT_OF_MEMORY if "memory" in str(error).lower()
                     else f"{type(error).__name__}: {error}")
    return Probe(size, int(ms.runtime.max_memory_allocated()), (samples or size) * done / seconds)


def plan_micro_batch(make_step, batch, memory_budget=None, *, args=(), candidates=None, margin=MARGIN,
                     steps=PROBE_STEPS, device=None, window=False):
    """Measures ``make_step``'s step at candidate micro-batch sizes and returns the ``MemoryPlan`` for ``batch``.

    ``make_step(size, *args)`` builds your compiled step for micro-batches
    of ``size`` samples and returns ``step()``, which runs one micro-step
    (forward, backward, accumulate) on a micro-batch it holds. On a CPU it
    runs in a ``ProbeChild``, one for the sizes that fit and a new one after
    a size that does not: ``make_step`` must be a top-level function of a
    module the child can import, and ``args`` picklable.
    ``memory_budget`` is bytes or a size such as ``"6GiB"``; None takes
    ``default_budget(device)``. With ``window=True``, ``step()`` trains a
    whole window instead: ``ceil(batch / size)`` micro-batches and their
    update, as your loop will (its stacked inputs and update then count in
    the peak; docs/memory-plan.md#your-step). Each size is timed over at
    least ``steps`` calls and ``PROBE_SECONDS``. ``device`` is MindSpore's
    device target (None: the context's). See ``choose_micro_batch`` for the choice.

    Example: a step that holds 1 MiB a sample, within a budget it cannot pass.
        >>> peak = peak_resident()
        >>> plan = plan_micro_batch(touch_memory, 6, peak + 2 ** 30, args=(2 ** 20,), candidates=[2], steps=1)
        >>> plan.micro_batch, plan.accumulate_step
        (2, 3)
        >>> plan_micro_batch(touch_memory, 6, 2 ** 20, args=(2 ** 20,), candidates=[2], steps=1)
        Traceback (most recent call last):
        ...
        accumulator.plan.PlanError: a memory budget of 1.0 MiB is below the smallest micro-batch's need: ...
    """
    if device is None:
        import mindspore as ms
        device = ms.get_context("device_target")
    budget = default_budget(device) if memory_budget is None else (
        parse_size(memory_budget) if isinstance(memory_budget, str) else positive_int(memory_budget, "memory_budget"))
    positive_int(steps, "steps")
    if device == "CPU":
        try:
            pickle.dumps((make_step, args))
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            raise PlanError(f"make_step must be a top-level function of an importable module, and args picklable: "
                            f"each size runs in a child process that imports them ({error})") from None
        usable, children = budget * (1 - margin), []

        def measure(size):  # one child while sizes fit (docs/memory-plan.md#planning-cost)
            if not children or not children[-1].alive:
                children.append(ProbeChild(make_step, args, steps))
            probe = children[-1].measure(size, batch if window else size)
            if probe.outcome == "measured" and probe.peak > usable:
                children[-1].close()  # what it still holds would count in the next, smaller size's peak
            return probe
        try:
            return choose_micro_batch(measure, batch, budget, candidates, margin)
        finally:
            for child in children:
                child.close()
    return choose_micro_batch(lambda size: _measure_on_device(make_step, size, args, steps, batch if window else size),
                              batch, budget, candidates, margin)


def touch_memory(size, bytes_per_sample):
    """A stand-in ``make_step`` whose step holds and touches ``size * bytes_per_sample`` bytes: memory known per sample.

    For trying the planner without a network, and for its tests.

    Example:
        >>> step = touch_memory(3, 1024)
        >>> int(step().sum())
        3072
    """
    import numpy as np
    held = []

    def step():
        held.clear()  # the last step's block goes first: the peak is one block
        held.append(np.ones(size * bytes_per_sample, np.uint8))  # ones, not empty: every page is touched
        return held[0]
    return step
