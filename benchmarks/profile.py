"""Where a step's time goes: MindSpore's profiler on the plain step, the micro-step and a whole window.

The paired table (``benchmarks.paired``) says how long each step takes;
this says what runs inside it. Each of three calls runs under
``mindspore.Profiler``, which records every CPU kernel's compute time:

* ``plain``: the plain step (forward, backward, the optimizer);
* ``micro``: the recommended step's jitted micro-step (forward, backward,
  ``accumulate(grads)``), with no window applied;
* ``window``: ``accumulate_step`` such micro-steps and ``step()``, which
  applies the window by its own compiled call; reported per micro-step.

Per call: kernels launched, their compute time and the mean gap before
each (from its predecessor's end to its start: its launch) by kernel type,
against the wall time of the same call timed outside the profiler. The
difference is what no kernel computes: launching kernels and running the
graph.
Run it with ``python scripts/benchmark.py --profile`` (a worker per net,
with ``MS_DEV_HOST_BLOCKING_RUN=1``).
"""
import contextlib
import csv
import glob
import io
import json
import os
import statistics
import sys
import tempfile
import time

from benchmarks.report import write_json
from benchmarks.runner import run_module
from benchmarks.worker import RESULT_PREFIX, use_mindspore

CALLS = ("plain", "micro", "window")


def read_op_types(folder, calls):
    """``{kernel type: (kernels per call, compute ms per call)}`` from a profiler's output folder.

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> os.makedirs(os.path.join(folder, "run", "FRAMEWORK"))
        >>> with open(os.path.join(folder, "run", "FRAMEWORK", "cpu_op_type_info_0.csv"), "w") as f:
        ...     _ = f.write("op_type,type_occurrences,execution_frequency(per-step),total_compute_time,"
        ...                 "avg_time(ms),percent\\nAdam,20,1,4.0,0.2,1.0\\n")
        >>> read_op_types(folder, 10)
        {'Adam': (2.0, 0.4)}
    """
    paths = glob.glob(os.path.join(folder, "*", "FRAMEWORK", "cpu_op_type_info_*.csv"))
    if not paths:
        raise RuntimeError(f"MindSpore's profiler wrote no kernel table under {folder}")
    ops = {}
    for path in paths:
        with open(path, newline="") as table:
            for row in csv.DictReader(table):
                kernels, compute = ops.get(row["op_type"], (0.0, 0.0))
                ops[row["op_type"]] = (kernels + int(row["type_occurrences"]) / calls,
                                       compute + float(row["total_compute_time"]) / calls)
    return ops


def read_launch_gaps(folder):
    """``{kernel type: mean microseconds}`` between the end of the kernel before and its start.

    From the profiler's per-kernel timestamps (``start ns, duration ms``);
    gaps above a millisecond lie between calls and are left out.

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> os.makedirs(os.path.join(folder, "run", "FRAMEWORK"))
        >>> with open(os.path.join(folder, "run", "FRAMEWORK", "cpu_op_execute_timestamp_0.txt"), "w") as f:
        ...     _ = f.write("Default/MatMul-op1;HostCpuOps;1000,0.002,0 9000000,0.002,0\\n"
        ...                 "Default/Adam-op2;HostCpuOps;43000,0.001,0\\n")
        >>> read_launch_gaps(folder)
        {'Adam': 40.0}
    """
    events = []
    for path in glob.glob(os.path.join(folder, "*", "FRAMEWORK", "cpu_op_execute_timestamp_*.txt")):
        with open(path) as table:
            for line in table:
                name, _, times = line.strip().split(";", 2)
                kind = name.rsplit("/", 1)[-1].split("-op")[0]
                for event in times.split():
                    start, duration, _ = event.split(",")
                    events.append((int(start), float(duration) * 1e6, kind))
    events.sort()
    gaps = {}
    for (start, duration, _), (next_start, _, kind) in zip(events, events[1:]):
        gap = (next_start - start - duration) / 1000.0
        if gap < 1000.0:
            gaps.setdefault(kind, []).append(gap)
    return {kind: statistics.mean(values) for kind, values in gaps.items()}


def profile_call(call, calls):
    """Runs ``call`` ``calls`` times under MindSpore's profiler; returns ``read_op_types`` and ``read_launch_gaps``."""
    import mindspore as ms
    with tempfile.TemporaryDirectory() as folder:
        profiler = ms.Profiler(output_path=folder)
        for _ in range(calls):
            call()
        ms.runtime.synchronize()
        profiler.stop()
        with contextlib.redirect_stdout(io.StringIO()):  # its progress lines
            profiler.analyse()
        return read_op_types(folder, calls), read_launch_gaps(folder)


def wall_ms(call, calls, rounds=5):
    """The median over ``rounds`` of the milliseconds per call of ``calls`` calls in a row."""
    import mindspore as ms
    times = []
    for _ in range(rounds):
        ms.runtime.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        ms.runtime.synchronize()
        times.append(1000.0 * (time.perf_counter() - start) / calls)
    return statistics.median(times)


def build_calls(net_spec, batch, accumulate, optimizer):
    """The three profiled calls on the spec's net (``benchmarks.nets``), and how many micro-steps each holds."""
    import mindspore as ms
    from mindspore import Tensor, nn
    from accumulator import Accumulator
    from benchmarks.nets import mindspore_net, numpy_data

    def fresh():
        ms.set_seed(0)
        net, loss_fn = mindspore_net(net_spec)
        make = nn.Adam if optimizer == "adam" else nn.SGD
        chosen = make(net.trainable_params(), learning_rate=1e-3)

        def forward(x, y):
            return loss_fn(net, x, y)

        return chosen, ms.value_and_grad(forward, None, chosen.parameters)

    x, y = (Tensor(array) for array in numpy_data(net_spec, batch))
    plain_optimizer, plain_grad = fresh()

    @ms.jit
    def plain(x, y):
        loss, grads = plain_grad(x, y)
        plain_optimizer(grads)
        return loss

    def accumulating():
        optimizer, grad_fn = fresh()
        accumulator = Accumulator(optimizer, accumulate)

        @ms.jit
        def micro(x, y):
            loss, grads = grad_fn(x, y)
            accumulator.accumulate(grads)
            return loss

        return accumulator, micro

    # Each its own: the micro-step alone never applies, and step() counts only the window's own micro-steps.
    _, micro = accumulating()
    accumulator, window_micro = accumulating()

    def window():
        for _ in range(accumulate):
            window_micro(x, y)
            accumulator.step()

    return dict(plain=(lambda: plain(x, y), 1), micro=(lambda: micro(x, y), 1), window=(window, accumulate))


def measure_profile(net, net_spec, batch, accumulate, optimizer, calls, device_target="CPU"):
    """Profiles and times the three calls; every figure per micro-step.

    Example:
        >>> result = measure_profile("tiny", dict(hidden=8), batch=4, accumulate=2, optimizer="adam", calls=4)
        >>> sorted(result["calls"]), result["calls"]["plain"]["ops"]["Adam"][0]
        (['micro', 'plain', 'window'], 6.0)
        >>> "Adam" in result["calls"]["micro"]["ops"], result["calls"]["window"]["ops"]["Adam"][0]
        (False, 3.0)
    """
    import mindspore as ms
    use_mindspore("graph", device_target)
    result = dict(net=net, batch=batch, accumulate=accumulate, optimizer=optimizer, calls={})
    for name, (call, micro_steps) in build_calls(net_spec, batch, accumulate, optimizer).items():
        for _ in range(3):  # compile, and let the memory pool settle
            call()
        ms.runtime.synchronize()  # or the profiler sees the last warm-up call's kernels
        ops, gaps = profile_call(call, calls)
        per_micro = {op: (kernels / micro_steps, compute / micro_steps) for op, (kernels, compute) in ops.items()}
        result["calls"][name] = dict(ops=per_micro, gap_us=gaps, wall_ms=wall_ms(call, calls) / micro_steps)
    return result


def format_profile(result):
    """The profile as a table: per micro-step, each kernel type's launches, compute ms and launch gap in each call.

    Example:
        >>> calls = {"plain": dict(ops={"Adam": (6.0, 0.3)}, gap_us={"Adam": 40.0}, wall_ms=1.0),
        ...          "micro": dict(ops={"AssignAdd": (1.0, 0.1)}, gap_us={"AssignAdd": 20.0}, wall_ms=0.6),
        ...          "window": dict(ops={"AssignAdd": (1.0, 0.1), "Adam": (3.0, 0.15)},
        ...                         gap_us={"AssignAdd": 20.0, "Adam": 50.0}, wall_ms=0.9)}
        >>> print(format_profile(dict(net="tiny", batch=4, accumulate=2, optimizer="adam", calls=calls)))
        tiny, B=4, N=2, adam: per micro-step, kernels, their compute ms and mean launch gap us
        kernel               plain                micro                window
        Adam                     6   0.300    40                           3   0.150    50
        AssignAdd                                 1   0.100    20          1   0.100    20
        all kernels              6   0.300                     1   0.100               4   0.250
        wall ms                      1.000                         0.600                   0.900
    """
    calls = result["calls"]
    names = sorted({op for name in CALLS for op in calls[name]["ops"]},
                   key=lambda op: -max(calls[name]["ops"].get(op, (0, 0))[1] for name in CALLS))
    lines = [f"{result['net']}, B={result['batch']}, N={result['accumulate']}, {result['optimizer']}: "
             "per micro-step, kernels, their compute ms and mean launch gap us",
             f"{'kernel':20} " + " ".join(f"{name:20}" for name in CALLS).rstrip()]
    for op in names:
        cells = []
        for name in CALLS:
            if op in calls[name]["ops"]:
                kernels, compute = calls[name]["ops"][op]
                gap = calls[name]["gap_us"].get(op)
                cells.append(f"{kernels:5.0f} {compute:7.3f} " + (f"{gap:5.0f}" if gap is not None else " " * 5))
            else:
                cells.append(" " * 19)
        lines.append(f"{op:20} " + " ".join(cells).rstrip())
    totals = [f"{sum(k for k, _ in calls[name]['ops'].values()):5.0f} "
              f"{sum(m for _, m in calls[name]['ops'].values()):7.3f}      " for name in CALLS]
    lines.append(f"{'all kernels':20} " + " ".join(totals).rstrip())
    lines.append(f"{'wall ms':20} " + " ".join(f"{'':5} {calls[name]['wall_ms']:7.3f}      " for name in CALLS).rstrip())
    return "\n".join(lines)


def report_profile(nets, batch, accumulate, optimizer, calls=50, device_target="CPU", timeout=600, json_path=None):
    """Profiles each net of ``benchmarks.configs.NETS`` named in ``nets`` in a worker, prints the tables.

    Each worker runs with ``MS_DEV_HOST_BLOCKING_RUN=1``, as the paired
    table's do. Returns 0 when every worker ran, 1 when one failed.

    Example:
        >>> report_profile(["deep48"], 16, 4, "adam")  # a minute  # doctest: +SKIP
        0
    """
    from benchmarks.configs import NETS
    results, status = [], 0
    for net in nets:
        spec = dict(net=net, net_spec=dict(NETS[net]), batch=batch, accumulate=accumulate, optimizer=optimizer,
                    calls=calls, device_target=device_target)
        result = run_module("benchmarks.profile", spec, blocking="1", timeout=timeout)
        if "error" in result:
            print(f"{net}: ERROR {result['error'].splitlines()[-1]}")
            status = 1
        else:
            print(format_profile(result), flush=True)
        results.append(result)
    if json_path:
        write_json(json_path, profiles=results)
    return status


def main(argv=None):
    """Profiles the net given as JSON in ``argv[0]`` and prints the ``RESULT`` line."""
    spec = json.loads((sys.argv[1:] if argv is None else argv)[0])
    print(RESULT_PREFIX + json.dumps(measure_profile(**spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
