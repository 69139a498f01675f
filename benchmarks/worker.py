"""Times one configuration; ``benchmarks.runner`` starts it as ``python -m benchmarks.worker SPEC``.

``SPEC`` is the configuration as JSON, with ``device_target``, ``seconds``
and ``blocks``. The worker prints one line, ``RESULT`` and the result as
JSON, and exits 0; a failure is a traceback and a non-zero exit. By hand,
from the repository root::

    python -m benchmarks.worker '{"kind": "speed", "net": "mnist", "hidden": 512, "contender": "window",
        "mode": "graph", "blocking": "1", "batch": 32, "accumulate": 8, "device_target": "CPU",
        "seconds": 1, "blocks": 3}'
"""
import json
import resource
import sys
import time

from benchmarks.contenders import CONTENDERS

RESULT_PREFIX = "RESULT "


def peak_mb(device_target):
    """Peak memory of this process so far, in MB: RSS on CPU, the device allocator's peak elsewhere.

    Example:
        >>> peak_mb("CPU") > 0
        True
    """
    # On CPU the tensors live in the process; RSS is what a user would run out of.
    if device_target == "CPU":
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    import mindspore as ms
    return ms.runtime.max_memory_allocated() / 2 ** 20


def use_mindspore(mode, device_target):
    """Sets MindSpore's execution mode (``"graph"`` or ``"pynative"``) and device for this process.

    The device can be chosen only before the runtime starts; when it is
    already ``device_target``, it is left alone.

    Example:
        >>> import mindspore as ms
        >>> use_mindspore("graph", "CPU")
        >>> ms.get_context("mode") == ms.GRAPH_MODE
        True
    """
    import mindspore as ms
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    if ms.get_context("device_target") != device_target:
        ms.set_device(device_target)


def measure(spec):
    """Builds the contender, times its first call and then whole windows in blocks.

    Returns per-block milliseconds per micro-batch of B samples, first-call
    (compile) seconds, state and parameter bytes, peak and baseline memory.
    It sets MindSpore's mode and device for the whole process.

    Example:
        >>> result = measure(dict(contender="plain_micro", hidden=8, batch=4, accumulate=2, mode="graph",
        ...                       device_target="CPU", seconds=0.01, blocks=2))
        >>> len(result["block_ms"]), result["param_bytes"]  # (784*8 + 8 + 8*8 + 8 + 8*10 + 10) float32
        (2, 25768)
    """
    contender = CONTENDERS[spec["contender"]]
    use_mindspore(spec["mode"], spec["device_target"])
    # Memory the runtime holds before any of the contender's tensors exist.
    baseline_mb = peak_mb(spec["device_target"])
    runner = contender.build(spec)
    calls, compile_s = prepare(runner, spec)
    block_ms = [time_block(runner, calls, spec["batch"]) for _ in range(spec["blocks"])]
    return dict(block_ms=block_ms, compile_s=compile_s, windows_per_block=calls // _calls_per_window(runner, spec),
                state_bytes=runner.state_bytes, param_bytes=runner.param_bytes,
                peak_mb=peak_mb(spec["device_target"]), baseline_mb=baseline_mb)


def _calls_per_window(runner, spec):
    return max(1, spec["batch"] * spec["accumulate"] // runner.samples_per_call)


def prepare(runner, spec):
    """Compiles and warms up ``runner``; returns its calls per timed block and the first call's seconds.

    A block is whole windows (so the once-per-window update counts at its
    real share), as many as make ``spec["blocks"]`` blocks last about
    ``spec["seconds"]``.

    Example:
        >>> from benchmarks.contenders import Runner
        >>> runner = Runner(step=lambda: None, samples_per_call=4, state_bytes=0, param_bytes=4)
        >>> calls, compile_s = prepare(runner, dict(batch=4, accumulate=2, seconds=1e-3, blocks=1))
        >>> calls % 2, compile_s >= 0
        (0, True)
    """
    sync = runner.sync or (lambda: None)
    calls_per_window = _calls_per_window(runner, spec)
    start = time.perf_counter()
    runner.step()
    sync()
    compile_s = time.perf_counter() - start
    for _ in range(calls_per_window):  # warm-up: every branch has run once
        runner.step()
    sync()
    start = time.perf_counter()
    for _ in range(calls_per_window):
        runner.step()
    sync()
    window_s = time.perf_counter() - start
    windows = max(1, round(spec["seconds"] / spec["blocks"] / max(window_s, 1e-6)))
    return windows * calls_per_window, compile_s


def time_block(runner, calls, batch):
    """Milliseconds per micro-batch of ``batch`` samples over ``calls`` calls of ``runner``.

    Example:
        >>> from benchmarks.contenders import Runner
        >>> time_block(Runner(step=lambda: None, samples_per_call=8, state_bytes=0, param_bytes=4), 3, 4) >= 0
        True
    """
    start = time.perf_counter()
    for _ in range(calls):
        runner.step()
    (runner.sync or (lambda: None))()
    return 1000.0 * (time.perf_counter() - start) / (calls * runner.samples_per_call / batch)


def main(argv=None):
    """Measures the configuration given as JSON in ``argv[0]`` and prints the ``RESULT`` line.

    Example:
        >>> main(['{"contender": "nope"}'])
        Traceback (most recent call last):
        KeyError: 'nope'
    """
    spec = json.loads((sys.argv[1:] if argv is None else argv)[0])
    print(RESULT_PREFIX + json.dumps(measure(spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
