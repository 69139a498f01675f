"""The measuring child: runs ``make_step``'s step at one size after another and reports its peak resident memory.

Private to ``accumulator.memory``: plan.py holds the search, this module the process that measures, its
supervision (watched against the budget, timed out, killed on interrupt) and how its outcomes read
(docs/memory-plan.md#planning-cost).
"""
import ctypes
import gc
import multiprocessing
import os
import signal
import sys
import time

from accumulator.memory._records import Measurement
from accumulator.memory._sizes import format_size

# Calls timed per size, each on its own, after one that compiles, and the least time they take together: a few
# calls of a millisecond are all noise (docs/memory-plan.md#planning-cost).
STEPS = 5
SECONDS = 0.25
# How often the parent reads a child's resident memory, in seconds: what the child allocates in that time is how
# far it may pass the budget before it is stopped, far less than the margin.
WATCH_SECONDS = 0.005
# The longest a size may run without answering, in seconds, before its child is taken for hung: an hour, past any
# compile seen here (docs/memory-plan.md#errors).
TIMEOUT = 3600.0
# A measurement's outcome when the size did not fit: killed by a signal (as the OOM killer does), a MemoryError, or
# an error whose text says the device is out of memory.
OUT_OF_MEMORY = "out of memory"
# Its outcome when its child passed the budget and the parent stopped it (docs/memory-plan.md#planning-cost).
OVER_BUDGET = "over the budget"
# Words of a device's out-of-memory error (MindSpore's, CUDA's, Ascend's): with "memory" in the same line.
_MEMORY_WORDS = ("out of", "alloc", "enough", "exhaust", "insufficient")
# Why a child that exits with an error status before answering most likely did (docs/memory-plan.md#your-step).
_UNGUARDED = ("did the script that plans lack `if __name__ == \"__main__\":`? A spawned child re-runs its "
              "unguarded top level")


def peak_resident():
    """This process's peak resident memory so far, in bytes, or None where it cannot be read.

    VmHWM (/proc); where /proc is missing ``getrusage``'s ``ru_maxrss``, KiB
    on Linux and bytes on macOS; None where neither exists (Windows has no ``resource``).

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
    try:
        import resource  # not on Windows
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def failure(error):
    """A step's exception as an outcome: its type and first line, ``out of memory (...)`` when it is memory's.

    Example:
        >>> failure(MemoryError("cannot allocate")), failure(RuntimeError("Malloc device memory failed"))
        ('out of memory (MemoryError: cannot allocate)', 'out of memory (RuntimeError: Malloc device memory failed)')
        >>> failure(ValueError("shapes differ\\n\\n- C++ Call Stack"))
        'ValueError: shapes differ'
    """
    first_line = next((line for line in str(error).splitlines() if line.strip()), "")  # MindSpore's run long
    text = f"{type(error).__name__}: {first_line}"
    lower = first_line.lower()
    if isinstance(error, MemoryError) or "memory" in lower and any(word in lower for word in _MEMORY_WORDS):
        return f"{OUT_OF_MEMORY} ({text})"
    return text


def wait(result):
    """Blocks until the step's outputs are computed: MindSpore may return before a launch ends.

    Example:
        >>> from mindspore import Tensor
        >>> wait((Tensor([1.0]), "not a Tensor"))
    """
    for value in result if isinstance(result, (tuple, list)) else (result,):
        if hasattr(value, "asnumpy"):
            value.asnumpy()


def run_step(make_step, size, args, steps):
    """``(phases, calls)``: each timed call's seconds, at least ``steps`` and ``SECONDS`` after one that compiles.

    ``phases`` are the seconds of ``make_step``, of the first call, and of the timed calls together.

    Example:
        >>> phases, calls = run_step(touch_memory, 2, (2 ** 20,), steps=3)
        >>> list(phases), len(calls) >= 3
        (['build', 'first call', 'timed'], True)
    """
    started = time.perf_counter()
    step = make_step(size, *args)
    built = time.perf_counter()
    wait(step())
    phases, calls = {"build": built - started, "first call": time.perf_counter() - built}, []
    while len(calls) < steps or sum(calls) < SECONDS:
        started = time.perf_counter()
        wait(step())
        calls.append(time.perf_counter() - started)
    return {**phases, "timed": sum(calls)}, calls


def speed(samples, seconds):
    """``(median samples/s, half the range)`` over calls of ``samples`` each that took ``seconds``.

    Example:
        >>> speed(8, [0.5, 0.25, 0.1])
        (32.0, 32.0)
    """
    rates = sorted(samples / max(call, 1e-9) for call in seconds)
    middle = len(rates) // 2
    median = rates[middle] if len(rates) % 2 else (rates[middle - 1] + rates[middle]) / 2
    return median, (rates[-1] - rates[0]) / 2


def _release():
    """Gives back what the last size held: Python's garbage, MindSpore's cached memory, glibc's free heap."""
    gc.collect()
    if "mindspore" in sys.modules:  # imported by the step, not by the planner: a step need not use MindSpore
        sys.modules["mindspore"].ms_memory_recycle()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _write(path, text):
    """Writes ``text`` to a /proc file; False where it cannot (not Linux, not allowed)."""
    try:
        with open(path, "w", encoding="ascii") as file:
            file.write(text)
        return True
    except OSError:
        return False


def _parent_alive():
    """Asks Linux to SIGKILL this child when its parent ends (``prctl(PR_SET_PDEATHSIG)``); False if it has ended.

    The request counts from now: a parent that ended while this child imported (seconds) is checked by pid.
    """
    try:
        ctypes.CDLL("libc.so.6").prctl(1, int(signal.SIGKILL))  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's close() and the pipe's end stop it
        pass
    return os.getppid() == multiprocessing.parent_process().pid


def _serve(connection, make_step, args, steps):
    """A child: measures each ``(size, samples)`` the parent sends, resetting its peak after each.

    It offers itself to the OOM killer first and ends with its parent. Each answer says whether it can take
    another size: not after an error, nor when it cannot reset its peak (each size then takes a fresh child).
    """
    if not _parent_alive():
        return
    _write("/proc/self/oom_score_adj", "1000")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it ends this child
    while True:
        try:
            request = connection.recv()
        except EOFError:  # the parent is gone
            return
        if request is None:
            return
        size, samples = request
        try:
            phases, calls = run_step(make_step, size, args, steps)
            measured = ("measured", peak_resident(), *speed(samples, calls), phases)
        except BaseException as error:  # noqa: B902  (the parent reports it; the child ends here)
            connection.send((failure(error), None, None, None, None, False))
            return
        _release()
        reusable = _write("/proc/self/clear_refs", "5")  # VmHWM back to the resident memory now (Linux)
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


class MeasuringChild:
    """A child process (``spawn`` context) that measures ``make_step``'s step at one size after another.

    ``measure(size, samples, limit)`` returns the size's ``Measurement``
    (``samples``: what one call trains, None: ``size``): the child builds ``make_step(size, *args)``, runs it
    once to compile, times at least ``steps`` calls and ``SECONDS``, and
    reports its peak resident memory, reset after each size (so a size after
    the first also counts what the child still holds: more than a fresh run,
    not less). With a ``limit`` in bytes it is killed the moment its resident
    memory passes it (``over the budget (stopped at ...)``); a child killed by a
    signal is ``out of memory (killed by SIG...)``; one silent for ``TIMEOUT``
    seconds is killed as hung. Each ends the child (``alive`` False), as does
    an exception. ``close()`` ends it; it ends with its parent too.
    ``accumulator.memory.plan.measure_in_child`` has an example.
    """

    def __init__(self, make_step, args=(), steps=STEPS):
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
        """The ``Measurement`` of ``size``; ``limit``: the resident bytes past which the child is stopped."""
        started, self._busy = time.perf_counter(), True
        try:
            self._connection.send((size, samples or size))
            stopped_at = self._watch(limit, started + TIMEOUT)
            answer = _NO_ANSWER if stopped_at else self._connection.recv()
        except (EOFError, OSError):  # it ended without a word: killed, or exited from native code
            stopped_at, answer = None, _NO_ANSWER
        outcome, peak, rate, spread, phases, reusable = answer
        self._busy = False
        if not reusable:
            self.close()
        if stopped_at == "hung":
            outcome = f"no answer in {TIMEOUT:g} s: the child was stopped as hung"
        elif stopped_at:
            outcome, peak = f"{OVER_BUDGET} (stopped at {format_size(stopped_at)})", stopped_at
        elif outcome is None:
            code = self._process.exitcode
            outcome = f"{OUT_OF_MEMORY} (killed by {signal.Signals(-code).name})" if code < 0 else \
                f"the child exited with status {code} before answering: {_UNGUARDED}"
        seconds = time.perf_counter() - started
        if phases:  # the rest: the child's start and imports (its first size), freeing memory after the size
            phases = {"start": seconds - sum(phases.values()), **phases}
        return Measurement(size, peak, rate, outcome, spread, seconds, phases)

    def _watch(self, limit, deadline):
        """Waits for the answer; kills the child and says why (its resident bytes, or "hung") if it must."""
        while not self._connection.poll(WATCH_SECONDS if limit is not None else 1.0):
            held = None if limit is None else _resident(self._process.pid)
            if held is not None and held > limit or time.perf_counter() > deadline:
                self._process.kill()
                return held if held is not None and held > limit else "hung"
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
