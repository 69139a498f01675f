"""Times one configuration inside the subprocess ``scripts/benchmark.py`` starts.

Example:
    >>> measure(dict(contender="plain_micro", hidden=512, batch=32, accumulate=4, mode="graph",
    ...              device_target="CPU", seconds=0.5, blocks=3))["block_ms"]  # doctest: +SKIP
    [0.91, 0.88, 0.90]
"""
import resource
import time

from benchmarks.contenders import CONTENDERS


def _peak_mb(device_target):
    # On CPU the tensors live in the process; RSS is what a user would run out of.
    if device_target == "CPU":
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    import mindspore as ms
    return ms.runtime.max_memory_allocated() / 2 ** 20


def measure(spec):
    """Builds the contender, times its first call and then whole windows in blocks.

    Returns per-block milliseconds per micro-batch of B samples, first-call
    (compile) seconds, state and parameter bytes, peak and baseline memory.
    """
    contender = CONTENDERS[spec["contender"]]
    if contender.framework == "mindspore":
        import mindspore as ms
        mode = ms.GRAPH_MODE if spec["mode"] == "graph" else ms.PYNATIVE_MODE
        ms.set_context(mode=mode)
        ms.set_device(spec["device_target"])
    # Memory the runtime holds before any of the contender's tensors exist.
    baseline_mb = _peak_mb(spec["device_target"])
    runner = contender.build(spec)
    sync = runner.sync or (lambda: None)
    # Whole windows per block, so the once-per-window update is counted at its real share.
    calls_per_window = max(1, spec["batch"] * spec["accumulate"] // runner.samples_per_call)

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

    block_ms = []
    for _ in range(spec["blocks"]):
        start = time.perf_counter()
        for _ in range(windows * calls_per_window):
            runner.step()
        sync()
        micro_batches = windows * calls_per_window * runner.samples_per_call / spec["batch"]
        block_ms.append(1000.0 * (time.perf_counter() - start) / micro_batches)
    return dict(block_ms=block_ms, compile_s=compile_s, windows_per_block=windows,
                state_bytes=runner.state_bytes, param_bytes=runner.param_bytes,
                peak_mb=_peak_mb(spec["device_target"]), baseline_mb=baseline_mb)
