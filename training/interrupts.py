"""Ctrl-C (SIGINT) and SIGTERM as an exception that unwinds a run, whatever MindSpore does with signals.

MindSpore 2.10 installs its own C-level SIGINT handler each time a graph
runs; it sends the process SIGTERM, which ends it at once: no
``KeyboardInterrupt``, no clean-up, no message, exit status 143. Putting
Python's handler back does not last past the next step. So a tool that
must end cleanly blocks both signals in every thread before any thread
starts (``hold_signals``, first thing in the script), and
``signals_raise_interrupted`` receives them in a thread of its own with
``sigwait``, where no handler can intercept them, and raises
``Interrupted`` in the main thread. Imported before numpy or MindSpore:
this module imports neither.
"""
import _thread
import contextlib
import functools
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)

class Interrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM; ``exit_status`` is the shell's ``128 + signal number``.

    A ``KeyboardInterrupt``, so whatever treats Ctrl-C specially (``finally``
    blocks, context managers, progress bars) treats SIGTERM the same way.

    Example:
        >>> error = Interrupted(signal.SIGTERM)
        >>> error.name, error.exit_status
        ('SIGTERM', 143)
    """

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self):
        """The signal's name, e.g. ``'SIGINT'``.

        Example:
            >>> Interrupted(signal.SIGINT).name
            'SIGINT'
        """
        return signal.Signals(self.signum).name

    @property
    def exit_status(self):
        """``128 + signal number``: 130 for SIGINT, 143 for SIGTERM, as a shell reports a process they ended.

        Example:
            >>> Interrupted(signal.SIGINT).exit_status
            130
        """
        return 128 + self.signum


def hold_signals():
    """Blocks SIGINT and SIGTERM in the calling thread and every thread it starts later; returns the old mask.

    Call it before anything starts a thread (importing numpy does), so that
    no thread can take the signals; ``signals_raise_interrupted`` then
    receives them. Held signals wait, they are not lost.

    Example:
        >>> previous = hold_signals()
        >>> signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        True
        >>> _ = signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    """
    return signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)


class _Receiver(threading.Thread):
    """Takes held signals with ``sigwait`` and hands each to the main thread's Python handler."""

    def __init__(self):
        super().__init__(name="signal receiver", daemon=True)
        self.received = []
        self.stopping = False

    def run(self):
        while True:
            signum = signal.sigwait(SIGNALS)
            if self.stopping:
                return
            self.received.append(signum)
            # Simulates SIGINT (Python 3.9 takes no signal number here) in the main thread,
            # whose handler reads from `received` which signal it really was.
            _thread.interrupt_main()

    def stop(self):
        self.stopping = True
        signal.pthread_kill(self.ident, signal.SIGINT)
        self.join()


class _Handler:
    """The Python-level handler of both signals while ``signals_raise_interrupted`` is active."""

    def __init__(self, receiver):
        self.receiver = receiver
        self.deferring = 0
        self.pending = None
        self.raised = False

    def __call__(self, signum, frame):
        if self.receiver is not None and self.receiver.received:
            signum = self.receiver.received.pop(0)
        if self.raised:
            return
        if self.deferring:
            self.pending = self.pending or signum
            return
        self.raise_interrupted(signum)

    def raise_interrupted(self, signum):
        self.raised = True
        raise Interrupted(signum)


_active = []  # the _Handler of the signals_raise_interrupted block running now, if any


@contextlib.contextmanager
def signals_raise_interrupted():
    """Inside the block, SIGINT or SIGTERM raises ``Interrupted`` in the main thread, once.

    Signals that come while the first one unwinds are ignored, so the
    clean-up it triggers runs to its end. If the signals are held
    (``hold_signals``), a thread receives them; otherwise Python's own
    handlers do, which MindSpore may replace for SIGINT once a graph runs.
    Handlers and thread are gone after the block. Call from the main thread.

    Example (doctest re-raises a ``KeyboardInterrupt``, so it is caught here):
        >>> try:
        ...     with signals_raise_interrupted():
        ...         signal.raise_signal(signal.SIGTERM)
        ... except Interrupted as error:
        ...     print(error.name, error.exit_status)
        SIGTERM 143
    """
    held = set(SIGNALS) <= signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handler = _Handler(_Receiver() if held else None)
    previous = {signum: signal.signal(signum, handler) for signum in SIGNALS}
    if held:
        handler.receiver.start()
    _active.append(handler)
    try:
        yield
    finally:
        _active.remove(handler)
        if held:
            handler.receiver.stop()
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextlib.contextmanager
def deferred():
    """Inside the block, a signal for ``signals_raise_interrupted`` waits; it is raised when the block ends.

    For work that should finish once begun, such as writing a checkpoint:
    the write is atomic anyway, but an interrupted one loses the epoch, and
    MindSpore logs a misleading "Failed to save the checkpoint" line.
    Without an active ``signals_raise_interrupted`` it changes nothing.

    Example:
        >>> finished = []
        >>> try:
        ...     with signals_raise_interrupted(), deferred():
        ...         signal.raise_signal(signal.SIGTERM)
        ...         finished.append(True)
        ... except Interrupted as error:
        ...     print(error.name, finished)
        SIGTERM [True]
    """
    if not _active:
        yield
        return
    handler = _active[-1]
    handler.deferring += 1
    try:
        yield
    finally:
        handler.deferring -= 1
    if not handler.deferring and handler.pending is not None:
        handler.raise_interrupted(handler.pending)


def finishing(function):
    """``function`` whose every call runs inside ``deferred``: a signal during it takes effect when it returns.

    For compiled steps: a signal raised during MindSpore's compile lands
    in Python code the compiler is running, which MindSpore reports as a
    20-line ``[ERROR] ANALYZER`` log (and an ``analyze_fail.ir``) before the
    run can end cleanly; deferred, it ends the run after the step instead.

    Example:
        >>> step = finishing(lambda: signal.raise_signal(signal.SIGTERM) or "finished")
        >>> try:
        ...     with signals_raise_interrupted():
        ...         print(step())
        ... except Interrupted as error:
        ...     print(error.name)
        SIGTERM
    """
    @functools.wraps(function)
    def call(*args, **kwargs):
        with deferred():
            return function(*args, **kwargs)
    return call
