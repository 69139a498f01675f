"""Contenders timed in one process, block by block in turn: ratios fine to a few percent.

Separate workers (``benchmarks.runner``) keep contenders from sharing
caches and memory pools, but on a shared machine one process can run
faster than the next for no reason of its own, which hides a small
difference (docs/performance.md#noise). Here every contender of one configuration is built in the
same process (graph mode, ``MS_DEV_HOST_BLOCKING_RUN=1``) and their blocks
alternate A B C A B C, so each ratio pairs blocks timed moments apart; the
table gives the median of those paired ratios. ``scripts/benchmark.py
--paired`` runs it; by hand, ``python -m benchmarks.paired SPEC`` prints
one ``RESULT`` line, like ``benchmarks.worker``.
"""
import json
import statistics
import sys

from benchmarks.configs import NETS
from benchmarks.contenders import CONTENDERS
from benchmarks.report import finish, ruled
from benchmarks.runner import run_module
from benchmarks.worker import RESULT_PREFIX, prepare, time_block, use_mindspore


def measure_paired(spec):
    """Builds every contender in ``spec["contenders"]`` here and times their blocks in turn.

    Returns ``block_ms``: for each contender, milliseconds per micro-batch
    of B samples in each of ``spec["blocks"]`` rounds; and ``tensors``, the
    net's parameter tensors.

    Example:
        >>> result = measure_paired(dict(contenders=["plain_micro", "accumulator"], hidden=8, batch=4,
        ...                              accumulate=2, device_target="CPU", seconds=0.02, blocks=2))
        >>> {name: len(times) for name, times in result["block_ms"].items()}, result["tensors"]
        ({'plain_micro': 2, 'accumulator': 2}, 6)
    """
    use_mindspore("graph", spec["device_target"])
    runners = {}
    for name in spec["contenders"]:
        runner = CONTENDERS[name].build(dict(spec, contender=name, mode="graph"))
        runners[name] = runner, prepare(runner, spec)[0]
    block_ms = {name: [] for name in runners}
    for _ in range(spec["blocks"]):
        for name, (runner, calls) in runners.items():
            block_ms[name].append(time_block(runner, calls, spec["batch"]))
    tensors = len(next(iter(runners.values()))[0].weights())
    return dict(block_ms=block_ms, tensors=tensors)


def paired_rows(block_ms):
    """One row per contender: median and fastest ms per micro-batch, and its time against the first's.

    ``time_ratio`` is the median over rounds of this contender's block time
    over the first contender's in the same round; ``min_time_ratio`` the
    ratio of the fastest blocks.

    Example:
        >>> rows = paired_rows({"a": [2.0, 4.0, 2.0], "b": [2.2, 4.0, 2.4]})
        >>> [(row["contender"], round(row["time_ratio"], 2), round(row["min_time_ratio"], 2)) for row in rows]
        [('a', 1.0, 1.0), ('b', 1.1, 1.1)]
    """
    base = next(iter(block_ms.values()))
    return [dict(contender=name, median_ms=statistics.median(times), min_ms=min(times),
                 time_ratio=statistics.median(t / b for t, b in zip(times, base)),
                 min_time_ratio=min(times) / min(base))
            for name, times in block_ms.items()]


def format_paired(rows):
    """The paired table: each contender's time per micro-batch and against the first one's.

    Example:
        >>> print(format_paired(paired_rows({"a": [2.0], "b": [2.2]})))
        contender                ms/micro      min  time vs first  (fastest)
        --------------------------------------------------------------------
        a                           2.000    2.000          1.000      1.000
        b                           2.200    2.200          1.100      1.100
    """
    head = f"{'contender':22} {'ms/micro':>10} {'min':>8} {'time vs first':>14} {'(fastest)':>10}"
    lines = ruled(head)
    for row in rows:
        lines.append(f"{row['contender']:22} {row['median_ms']:10.3f} {row['min_ms']:8.3f} "
                     f"{row['time_ratio']:14.3f} {row['min_time_ratio']:10.3f}")
    return "\n".join(lines)


# The summary's columns: (heading, contender, against): time per micro-step of one over the other's.
SUMMARY = (("plain", "plain_micro", "plain_micro"), ("micro floor", "micro_floor", "plain_micro"),
           ("two-graph floor", "two_graph_floor", "plain_micro"), ("recommended", "recommended", "plain_micro"),
           ("window", "window", "plain_micro"), ("first example", "first_example", "plain_micro"),
           ("accumulator(grads)", "accumulator", "plain_micro"), ("unchecked", "accumulator_unchecked", "plain_micro"),
           ("tutorial", "tutorial", "plain_micro"), ("tutorial_skip", "tutorial_skip", "plain_micro"),
           ("boost", "boost", "plain_micro"), ("EMA / window", "window_ema", "window"))


def window_cost(block_ms):
    """What a window costs beyond its micro-steps, against the apply floor: medians, and the fastest blocks'.

    N x (recommended step - micro-step) over the apply floor's time per
    window, all three timed in the same rounds (each is per micro-batch, the
    floor's a window's over N, so the N cancels); None without the three rows.

    Example:
        >>> [round(x, 3) for x in window_cost({"recommended": [1.5, 1.6], "micro_floor": [1.2, 1.2],
        ...                                    "apply_floor": [0.2, 0.25]})]
        [1.55, 1.5]
    """
    if not {"recommended", "micro_floor", "apply_floor"} <= set(block_ms):
        return None
    rounds = zip(block_ms["recommended"], block_ms["micro_floor"], block_ms["apply_floor"])
    median = statistics.median((step - micro) / floor for step, micro, floor in rounds)
    fastest = (min(block_ms["recommended"]) - min(block_ms["micro_floor"])) / min(block_ms["apply_floor"])
    return median, fastest


def format_summary(results):
    """One line per net: its tensors, each contender's time per micro-step against the plain step, the window's cost.

    Medians of the paired ratios, the fastest blocks' ratio in brackets; ``EMA / window`` is the window step with
    the weights' average against without it; the last, ``window cost``, is ``window_cost`` (against the apply floor).

    Example:
        >>> block_ms = {"plain_micro": [2.0, 2.0], "recommended": [1.6, 1.8]}
        >>> print(format_summary([dict(net="deep48", tensors=48, block_ms=block_ms)]))
        net       tensors  plain           micro floor     two-graph floor recommended     window          first example   accumulator(grads) unchecked       tutorial        tutorial_skip   boost           EMA / window    window cost
        deep48         48  1.00x (1.00x)                                   0.85x (0.80x)
        >>> print(format_summary([dict(net="lm", tensors=28, block_ms={"window": [2.0], "window_ema": [2.1]})])[-13:])
        1.05x (1.05x)
    """
    headings = [heading for heading, _, _ in SUMMARY] + ["window cost"]
    lines = [f"{'net':9} {'tensors':>7}  " + " ".join(f"{heading:15}" for heading in headings).rstrip()]
    for result in results:
        block_ms, cells = result["block_ms"], []
        for _, contender, against in SUMMARY:
            if contender in block_ms and against in block_ms:
                times, base = block_ms[contender], block_ms[against]
                median = statistics.median(t / b for t, b in zip(times, base))
                cells.append(f"{median:.2f}x ({min(times) / min(base):.2f}x)")
            else:
                cells.append("")
        cost = window_cost(block_ms)
        cells.append("" if cost is None else f"{cost[0]:.2f}x ({cost[1]:.2f}x)")
        lines.append((f"{result['net']:9} {result['tensors']:7}  " + " ".join(f"{c:15}" for c in cells)).rstrip())
    return "\n".join(lines)


def report(nets, contenders, batch, accumulate, seconds, blocks, device_target="CPU", timeout=300,
           json_path=None, settings=None, optimizer="sgd"):
    """Runs one paired worker per net, prints each table and the summary; returns the exit status.

    0 when every worker ran, 1 when one failed.

    Example:
        >>> report(["mnist"], ["plain_micro", "accumulator"], 4, 2, 0.02, 2)  # a minute  # doctest: +SKIP
        0
    """
    results = []
    for net in nets:
        spec = dict(contenders=list(contenders), **NETS[net], optimizer=optimizer, batch=batch,
                    accumulate=accumulate, device_target=device_target, seconds=seconds, blocks=blocks)
        result = run_module("benchmarks.paired", spec, blocking="1", timeout=timeout)
        print(f"paired, one process: {net} net, B={batch}, N={accumulate}, {optimizer}, graph mode, {blocks} rounds")
        if "error" in result:
            print(f"ERROR {result['error'].splitlines()[-1]}")
            results.append(dict(spec, net=net, **result))
            continue
        rows = paired_rows(result["block_ms"])
        print(format_paired(rows))
        results.append(dict(spec, net=net, rows=rows, **result))
    summary = [result for result in results if "rows" in result]
    if summary:
        print(format_summary(summary))
    return finish(results, json_path, settings=settings, paired=results)


def main(argv=None):
    """Measures the contenders given as JSON in ``argv[0]`` together and prints the ``RESULT`` line."""
    spec = json.loads((sys.argv[1:] if argv is None else argv)[0])
    print(RESULT_PREFIX + json.dumps(measure_paired(spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
