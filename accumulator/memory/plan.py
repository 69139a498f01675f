"""The micro-batch chosen by measuring memory: a batch per update and a budget in, a micro-batch and N out.

``plan_micro_batch`` runs your step for candidate micro-batch sizes and
reads its peak memory: on a CPU the peak resident memory (VmHWM) of a child
process (``spawn`` context), watched while it runs and stopped the moment
it passes the budget, reset between sizes and replaced after a size that
does not fit, so that such a size costs a child, never your run; on GPU or Ascend the
device's peak (``mindspore.runtime``), in this process (unverified: no such
device ran it). It goes down from the largest size (the cheapest probe:
fewest micro-steps a window) to the largest that fits, and once two peaks
are measured a line ``a + b * size`` through them skips the sizes it puts
over the budget. Below the largest that fits it measures the next size,
and the next while the smaller is clearly faster; of the sizes that fit
with ``margin`` of the budget kept free it takes the fastest, sizes
within the measured noise counting as tied and going to the larger.
``choose_micro_batch`` is the search over any ``measure(size) -> Probe``.
docs/memory-plan.md.
"""
import ctypes
import dataclasses
import gc
import multiprocessing
import os
import pickle
import re
import resource
import signal
import sys
import time
from typing import Optional

from accumulator._internal.checks import positive_int

# The share of MemAvailable a CPU run's default budget takes: the rest is for the system and other processes.
BUDGET_FRACTION = 0.8
# The share of the budget a chosen size leaves free: a probe's few micro-steps are not a whole run.
MARGIN = 0.1
# Calls timed per probe, each on its own, after one that compiles, and the least time they take together: a
# few calls of a millisecond are all noise (docs/memory-plan.md#planning-cost).
PROBE_STEPS = 5
PROBE_SECONDS = 0.25
# Two sizes' samples/s closer than this share of the faster (or than either's spread over its calls) are tied,
# and the larger is taken: fewer launches a window (docs/memory-plan.md#how-it-measures-and-chooses).
SPEED_TOLERANCE = 0.03
# How often the parent reads a probe child's resident memory, in seconds: what the child allocates in that
# time is how far it may pass the budget before it is stopped, far less than the margin.
WATCH_SECONDS = 0.005
# A probe's outcome when the size did not fit: a child killed by a signal (as the OOM killer does), or a device error.
OUT_OF_MEMORY = "out of memory"
# A probe's outcome when its child passed the budget and the parent stopped it (docs/memory-plan.md#planning-cost).
OVER_BUDGET = "over the budget"
# A probe's outcome when the line through the measured peaks put it over the budget: ``peak`` is the prediction.
NOT_RUN = "not run"
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
    by a signal, as the OOM killer does, named after it), ``"over the budget
    (stopped at ...)"`` (the child passed the budget and was stopped: ``peak``
    is what it held then, less than its need), ``"not run"`` (the line put it
    over the budget: ``peak`` is the prediction) or another failure's text.
    ``samples_per_second`` is the median over the timed calls, ``spread``
    half their range (samples/s); ``seconds`` is what the probe cost, a child's
    start included (None where not counted), and ``phases`` where it went:
    ``"start"`` (the child's start and imports for its first size, and
    what it frees after each), ``"build"``
    (``make_step``), the ``"first call"`` (its compile) and the ``"timed"`` calls.

    Example:
        >>> Probe(8, peak=2 ** 30, samples_per_second=100.0).outcome
        'measured'
    """
    size: int
    peak: Optional[int] = None
    samples_per_second: Optional[float] = None
    outcome: str = "measured"
    spread: Optional[float] = None
    seconds: Optional[float] = None
    phases: Optional[dict] = None


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
        """The probes as a small table: size, peak memory, samples/s and its spread, the probe's seconds, the choice.

        Example:
            >>> plan = MemoryPlan(batch=16, micro_batch=8, budget=2 ** 30, margin=0.1,
            ...                   probes=(Probe(8, 2 ** 28, 50.0, spread=2.0, seconds=1.5),
            ...                           Probe(16, 2 ** 30, None, "not run")))
            >>> print(plan.table())
            micro-batch  peak memory        samples/s  probe s  chosen
                      8    256.0 MiB           50 ± 2      1.5  <- 8 x 2 = 16 per update
                     16     1.00 GiB                -        -  not run (the line's prediction)
            budget 1.00 GiB, 10% kept free; the probes took 1.5 s
        """
        lines = [f"{'micro-batch':>11}  {'peak memory':>11}  {'samples/s':>15}  {'probe s':>7}  chosen"]
        for probe in self.probes:
            peak = "-" if probe.peak is None else format_size(probe.peak)
            speed = "-" if probe.samples_per_second is None else f"{probe.samples_per_second:,.0f}" + (
                "" if probe.spread is None else f" ± {probe.spread:,.0f}")
            seconds = "-" if probe.seconds is None else f"{probe.seconds:.1f}"
            if probe.size == self.micro_batch:
                note = f"<- {' + '.join(map(str, self.micro_batches))} = {self.batch} per update" \
                    if self.batch % self.micro_batch else f"<- {self.micro_batch} x {self.accumulate_step} = " \
                                                            f"{self.batch} per update"
            elif probe.outcome == NOT_RUN:
                note = f"{NOT_RUN} (the line's prediction)"
            else:
                note = "" if probe.outcome == "measured" else probe.outcome
            lines.append(f"{probe.size:>11}  {peak:>11}  {speed:>15}  {seconds:>7}  {note}".rstrip())
        took = sum(probe.seconds for probe in self.probes if probe.seconds is not None)
        lines.append(f"budget {format_size(self.budget)}, {self.margin:.0%} kept free"
                     + (f"; the probes took {took:.1f} s" if took else ""))
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
    """The ``MemoryPlan`` for ``batch`` samples per update from ``measure(size) -> Probe``, few sizes measured.

    A size fits when its peak is at most ``(1 - margin) * budget``. The
    sizes are tried from the largest down (a large micro-batch is the
    cheapest window to run: fewest micro-steps) until one fits; a size over
    the budget, out of memory or stopped, sends the search to the next. Once
    two peaks are measured, a line ``a + b * size`` through them (fitted
    again to every peak measured) skips the sizes it puts over the budget: a
    ``"not run"`` probe holds the prediction (the smallest candidate always
    runs, so that an error names a measured need). Below the largest size
    that fits, the next one runs for speed, and the next while the newest
    is faster than the one above it by more than the noise. Of the sizes
    that fit, the fastest is chosen; a larger one within the noise of it
    (``SPEED_TOLERANCE`` of its samples/s, or either's ``spread``) is tied
    and taken instead: fewer launches. Raises ``PlanError`` when the batch
    is smaller than every candidate, when a size fails for another reason
    than memory (with that reason), or when none fits (naming what the
    smallest needs).

    Example: a step that needs 100 MiB plus 10 MiB a sample, and is fastest at 8.
        >>> def measure(size):
        ...     speed = {4: 45.0, 8: 60.0, 16: 55.0, 32: 50.0, 48: 40.0, 64: 30.0}[size]
        ...     return Probe(size, (100 + 10 * size) * 2 ** 20, speed)
        >>> plan = choose_micro_batch(measure, 64, budget=400 * 2 ** 20, candidates=[4, 8, 16, 32, 48, 64])
        >>> plan.micro_batch, [probe.size for probe in plan.probes], plan.probes[3].outcome
        (8, [4, 8, 16, 32, 48, 64], 'not run')

    64 and 48 run over the budget (a device reports their peaks; a CPU child
    would be stopped); the line through them puts 32 at 420 MiB, over 360:
    not run. 16 fits, 8 below it is faster, 4 is not: 8.
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
            probes.append(Probe(size, predicted, None, NOT_RUN))
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


def _wait(result):
    """Blocks until the step's outputs are computed: MindSpore may return before a launch ends."""
    for value in result if isinstance(result, (tuple, list)) else (result,):
        if hasattr(value, "asnumpy"):
            value.asnumpy()


def _run_step(make_step, size, args, steps):
    """``(phases, calls)``: each timed call's seconds, at least ``steps`` and ``PROBE_SECONDS`` after one that compiles.

    ``phases`` are the seconds of ``make_step``, of the first call, and of the timed calls together.
    """
    started = time.perf_counter()
    step = make_step(size, *args)
    built = time.perf_counter()
    _wait(step())
    phases, calls = {"build": built - started, "first call": time.perf_counter() - built}, []
    while len(calls) < steps or sum(calls) < PROBE_SECONDS:
        started = time.perf_counter()
        _wait(step())
        calls.append(time.perf_counter() - started)
    return {**phases, "timed": sum(calls)}, calls


def _speed(samples, seconds):
    """``(median samples/s, half the range)`` over calls of ``samples`` each that took ``seconds``."""
    rates = sorted(samples / max(call, 1e-9) for call in seconds)
    middle = len(rates) // 2
    median = rates[middle] if len(rates) % 2 else (rates[middle - 1] + rates[middle]) / 2
    return median, (rates[-1] - rates[0]) / 2


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
            phases, calls = _run_step(make_step, size, args, steps)
            measured = ("measured", peak_resident(), *_speed(samples, calls), phases)
        except BaseException as error:  # noqa: B902  (the parent reports it; the child ends here)
            first_line = next((line for line in str(error).splitlines() if line.strip()), "")  # MindSpore's run long
            connection.send((f"{type(error).__name__}: {first_line}", None, None, None, None, False))
            return
        _release()
        reusable = _reset_peak()
        connection.send((*measured, reusable))
        if not reusable:
            return


def _resident(pid):
    """Process ``pid``'s resident memory now, in bytes (``/proc/<pid>/statm``); None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


# What a child that ended without answering said: no outcome, peak, speed, spread or phases, and not reusable.
_NO_ANSWER = (None,) * 5 + (False,)


class ProbeChild:
    """A child process (``spawn`` context) that measures ``make_step``'s step at one size after another.

    ``measure(size)`` sends a size and returns its ``Probe``: the child builds
    ``make_step(size, *args)``, runs it once to compile, times at least
    ``steps`` calls and ``PROBE_SECONDS``, each on its own, and reports its peak resident
    memory, reset (``/proc/self/clear_refs``) after each size, so a size after
    the first also counts what the child still holds from the ones before:
    more than a fresh run would hold, not less (docs/memory-plan.md#planning-cost).
    With a ``limit`` in bytes the parent reads the child's resident memory
    every ``WATCH_SECONDS`` while it runs and kills it the moment it passes:
    ``"over the budget (stopped at ...)"``. A child killed by another's signal (the OOM killer's SIGKILL) is
    ``"out of memory (killed by SIGKILL)"``; an exception is its type and the first line of its
    text. Each ends the child, as does a peak it cannot reset: ``alive`` is
    then False. ``close()`` ends it.

    Example:
        >>> with ProbeChild(touch_memory, args=(2 ** 20,), steps=1) as child:
        ...     first, second = child.measure(8), child.measure(4)
        ...     first.outcome, second.outcome, child.alive, first.peak > 8 * 2 ** 20
        ('measured', 'measured', True, True)
        >>> with ProbeChild(touch_memory, args=(2 ** 30,), steps=1) as child:
        ...     over = child.measure(2, limit=first.peak + 2 ** 29)
        ...     over.outcome.startswith("over the budget (stopped at "), over.peak > first.peak, child.alive
        (True, True, False)
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

    def measure(self, size, samples=None, limit=None):
        """The ``Probe`` of ``size``; ``samples`` is what one call of the step trains (None: ``size``).

        ``limit``: the resident bytes past which the child is stopped (None: not watched).
        """
        started, self._busy = time.perf_counter(), True
        try:
            self._connection.send((size, samples or size))
            stopped_at = self._watch(limit)
            answer = _NO_ANSWER if stopped_at else self._connection.recv()
        except (EOFError, OSError):  # it ended without a word: killed, or exited from native code
            stopped_at, answer = None, _NO_ANSWER
        outcome, peak, speed, spread, phases, reusable = answer
        self._busy = False
        if not reusable:
            self.close()
        if stopped_at:
            outcome, peak = f"{OVER_BUDGET} (stopped at {format_size(stopped_at)})", stopped_at
        elif outcome is None:
            code = self._process.exitcode
            outcome = f"{OUT_OF_MEMORY} (killed by {signal.Signals(-code).name})" if code < 0 else \
                f"the child exited with status {code} and no error"
        seconds = time.perf_counter() - started
        if phases:  # the rest: the child's start and imports (its first size), freeing memory after the size
            phases = {"start": seconds - sum(phases.values()), **phases}
        return Probe(size, peak, speed, outcome, spread, seconds, phases)

    def _watch(self, limit):
        """Waits for the child's answer; kills it and returns its resident bytes if it passes ``limit`` first."""
        while not self._connection.poll(None if limit is None else WATCH_SECONDS):
            held = _resident(self._process.pid)
            if held is not None and held > limit:
                self._process.kill()
                return held
        return None

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
    started = time.perf_counter()
    try:
        phases, calls = _run_step(make_step, size, args, steps)
    except (RuntimeError, MemoryError) as error:
        return Probe(size, outcome=OUT_OF_MEMORY if "memory" in str(error).lower()
                     else f"{type(error).__name__}: {error}")
    speed, spread = _speed(samples or size, calls)
    return Probe(size, int(ms.runtime.max_memory_allocated()), speed, "measured", spread, time.perf_counter() - started,
                 phases)


def plan_micro_batch(make_step, batch, memory_budget=None, *, args=(), candidates=None, margin=MARGIN,
                     steps=PROBE_STEPS, device=None, window=False):
    """Measures ``make_step``'s step at candidate micro-batch sizes and returns the ``MemoryPlan`` for ``batch``.

    ``make_step(size, *args)`` builds your compiled step for micro-batches
    of ``size`` samples and returns ``step()``, which runs one micro-step
    (forward, backward, accumulate) on a micro-batch it holds. On a CPU it
    runs in a ``ProbeChild``, one for the sizes that fit and a new one after
    a size that does not, stopped the moment its resident memory passes the
    budget less its margin (all but the smallest size: an error names what
    that one needs): ``make_step`` must be a top-level function of a
    module the child can import, and ``args`` picklable.
    ``memory_budget`` is bytes or a size such as ``"6GiB"``; None takes
    ``default_budget(device)``. With ``window=True``, ``step()`` trains a
    whole window instead: ``ceil(batch / size)`` micro-batches and their
    update, as your loop will (its stacked inputs and update then count in
    the peak; docs/memory-plan.md#your-step). Each size is timed over at
    least ``steps`` calls and ``PROBE_SECONDS``, each on its own. ``device`` is MindSpore's
    device target (None: the context's). See ``choose_micro_batch`` for the choice.

    Example: a step that holds 1 MiB a sample, within a budget it cannot pass.
        >>> peak = peak_resident()
        >>> plan = plan_micro_batch(touch_memory, 6, peak + 2 ** 30, args=(2 ** 20,), candidates=[2], steps=1)
        >>> plan.micro_batch, plan.accumulate_step
        (2, 3)
        >>> plan_micro_batch(touch_memory, 6, 2 ** 20, args=(2 ** 20,), candidates=[2], steps=1)
        Traceback (most recent call last):
        ...
        accumulator.memory.plan.PlanError: a memory budget of 1.0 MiB is below the smallest micro-batch's need: ...
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
        usable, smallest, children = budget * (1 - margin), _sizes(batch, candidates)[-1], []

        def measure(size):  # one child while sizes fit (docs/memory-plan.md#planning-cost)
            if not children or not children[-1].alive:
                children.append(ProbeChild(make_step, args, steps))
            probe = children[-1].measure(size, batch if window else size, None if size == smallest else usable)
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
