"""Whole-batch losses: peak memory and time per sample against the large batch.

``python -m benchmarks.whole_batch`` trains an InfoNCE encoder (an MLP wide
enough that its activations, not its weights, fill memory) on synthetic
pairs, two ways, each configuration in a process of its own:

* ``large batch``: one compiled step on all N x B pairs at once; its
  activations grow with N;
* ``whole batch``: ``make_whole_batch_step`` on N micro-batches of B pairs,
  the same loss over all N x B; only the representations grow with N.

Each process notes its RSS, compiles with one window, resets its peak RSS
(``/proc/self/clear_refs``, so the compilers' passing peaks are left out)
and times ``--repeats`` more. It reports the peak RSS over those windows,
that peak above the RSS before the first window (the window's own memory:
MindSpore keeps the memory pool the first window grew), and the median
seconds per sample. Prints a table and writes JSON (``--json``).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

from benchmarks.configs import positive, positive_int_list
from benchmarks.report import write_json
from benchmarks.worker import RESULT_PREFIX

METHODS = {"large": "large batch", "whole": "whole batch"}
INPUT_WIDTH, EMBEDDING_WIDTH = 64, 32


def memory_mb():
    """This process's ``(resident, peak resident)`` memory in MB, from /proc/self/status.

    Example:
        >>> resident, peak = memory_mb()
        >>> 0 < resident <= peak
        True
    """
    status = dict(re.findall(r"(VmRSS|VmHWM):\s+(\d+) kB", open("/proc/self/status").read()))
    return int(status["VmRSS"]) / 1024, int(status["VmHWM"]) / 1024


def reset_peak():
    """Makes the peak RSS the current RSS (Linux ``clear_refs``), so later peaks exclude the compiles."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def measure(spec):
    """Runs one configuration in this process; returns its row.

    ``spec``: ``method`` (``"large"`` or ``"whole"``), ``micro_batches`` N,
    ``micro_batch_size`` B, ``width`` and ``depth`` of the encoder's MLP, ``repeats``.

    Example:
        >>> row = measure(dict(method="whole", micro_batches=2, micro_batch_size=4, width=8, depth=1, repeats=1))
        >>> row["samples"], row["window_mb"] >= 0, row["s_per_sample"] > 0
        (8, True, True)
    """
    import numpy as np
    import mindspore as ms
    from mindspore import Tensor, nn, ops
    from accumulator import Accumulator
    from accumulator.whole_batch import make_whole_batch_step

    ms.set_seed(0)
    layers = [nn.Dense(INPUT_WIDTH, spec["width"]), nn.ReLU()]
    for _ in range(spec["depth"] - 1):
        layers += [nn.Dense(spec["width"], spec["width"]), nn.ReLU()]
    encoder = nn.SequentialCell(layers + [nn.Dense(spec["width"], EMBEDDING_WIDTH)])

    def info_nce(queries, keys):
        # logsumexp, not cross_entropy: fewer [B, B] tensors on CPU (docs/mindspore-behaviours.md).
        logits = ops.matmul(queries, keys.T) / EMBEDDING_WIDTH
        return (ops.logsumexp(logits, 1) - (queries * keys).sum(1) / EMBEDDING_WIDTH).mean()

    def pair_encoder(query, key):
        return encoder(query), encoder(key)

    size, steps = spec["micro_batch_size"], spec["micro_batches"]
    rng = np.random.default_rng(0)
    queries = rng.normal(size=(steps * size, INPUT_WIDTH)).astype(np.float32)
    keys = queries + 0.1 * rng.normal(size=queries.shape).astype(np.float32)
    optimizer = nn.SGD(encoder.trainable_params(), 1e-3)
    if spec["method"] == "large":
        def large_loss(query, key):
            return info_nce(*pair_encoder(query, key))
        grad_fn = ms.value_and_grad(large_loss, None, optimizer.parameters)

        @ms.jit
        def large_step(query, key):
            loss, grads = grad_fn(query, key)
            optimizer(grads)
            return loss
        batch = (Tensor(queries), Tensor(keys))

        def window():
            return large_step(*batch)
    else:
        accumulator = Accumulator(optimizer, accumulate_step=steps)
        whole_step = make_whole_batch_step(pair_encoder, info_nce, accumulator, network=encoder)
        micro_batches = [(Tensor(queries[i * size:(i + 1) * size]), Tensor(keys[i * size:(i + 1) * size]))
                         for i in range(steps)]

        def window():
            return whole_step(micro_batches)[0]
    before, _ = memory_mb()
    window().asnumpy()  # compiles; the memory pool it grows stays, so it counts below
    reset_peak()
    times = []
    for _ in range(spec["repeats"]):
        start = time.perf_counter()
        window().asnumpy()
        times.append(time.perf_counter() - start)
    _, peak = memory_mb()
    return dict(spec, samples=steps * size, peak_mb=peak, window_mb=peak - before,
                s_per_sample=statistics.median(times) / (steps * size))


def run_configuration(spec):
    """``measure(spec)`` in a fresh Python process, so each peak is its own."""
    command = [sys.executable, "-m", "benchmarks.whole_batch", "--worker", json.dumps(spec)]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    for line in result.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    lines = (result.stderr or result.stdout).strip().splitlines() or ["no output"]
    return dict(spec, error=next((line for line in reversed(lines) if "Error" in line), lines[-1]))


def format_table(rows):
    """The rows as text, each whole-batch row's time against the large batch of the same N.

    Example:
        >>> rows = [dict(method=m, micro_batches=2, micro_batch_size=4, samples=8, peak_mb=500.0,
        ...              window_mb=w, s_per_sample=t) for m, w, t in (("large", 40.0, 1e-4), ("whole", 5.0, 1.5e-4))]
        >>> print(format_table(rows).splitlines()[3])
        whole batch     2      8       500        5.0        150.0   1.50x
    """
    head = f"{'method':12} {'N':>4} {'N*B':>6} {'peak MB':>9} {'window MB':>10} {'us/sample':>12} {'time':>7}"
    lines = [head, "-" * len(head)]
    large = {row["micro_batches"]: row for row in rows if row["method"] == "large" and "error" not in row}
    for row in rows:
        name = METHODS[row["method"]]
        if "error" in row:
            lines.append(f"{name:12} {row['micro_batches']:>4} ERROR {row['error']}")
            continue
        reference = large.get(row["micro_batches"])
        ratio = f"{row['s_per_sample'] / reference['s_per_sample']:.2f}x" if reference else ""
        lines.append(f"{name:12} {row['micro_batches']:>4} {row['samples']:>6} {row['peak_mb']:9.0f} "
                     f"{row['window_mb']:10.1f} {row['s_per_sample'] * 1e6:12.1f} {ratio:>7}")
    lines.append("peak MB: peak RSS over the timed windows; window MB: that peak above the RSS before the first; "
                 "time: seconds per sample against the large batch of the same N x B")
    return "\n".join(lines)


def run(micro_batches=(1, 4, 16), micro_batch_size=64, width=1024, depth=16, repeats=2, json_path=None):
    """Measures every method at every N, one process each; prints the table and writes JSON. Returns the rows.

    Example (tests/test_whole_batch.py runs it with tiny sizes; no N here, so no process):
        >>> run(micro_batches=())
        method          N    N*B   peak MB  window MB    us/sample    time
        ------------------------------------------------------------------
        peak MB: peak RSS over the timed windows; window MB: that peak above the RSS before the first;
        time: seconds per sample against the large batch of the same N x B
        []
    """
    rows = [run_configuration(dict(method=method, micro_batches=steps, micro_batch_size=micro_batch_size,
                                   width=width, depth=depth, repeats=repeats))
            for steps in micro_batches for method in METHODS]
    print(format_table(rows))
    if json_path:
        write_json(json_path, rows=rows)
    return rows


def main(argv=None):
    """The command line; ``--worker SPEC`` is the per-configuration process."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.whole_batch", description=__doc__.splitlines()[0])
    parser.add_argument("--micro-batches", type=positive_int_list, default=[1, 4, 16],
                        help="window sizes N, a comma list")
    parser.add_argument("--micro-batch-size", type=positive(int), default=64, help="pairs per micro-batch B")
    parser.add_argument("--width", type=positive(int), default=1024, help="the encoder MLP's width")
    parser.add_argument("--depth", type=positive(int), default=16, help="the encoder MLP's hidden layers")
    parser.add_argument("--repeats", type=positive(int), default=2, help="timed windows per configuration")
    parser.add_argument("--json", default="whole_batch.json", help="where to write the rows")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(RESULT_PREFIX + json.dumps(measure(json.loads(args.worker))), flush=True)
        return 0
    rows = run(args.micro_batches, args.micro_batch_size, args.width, args.depth, args.repeats, args.json)
    return 1 if any("error" in row for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
