"""Benchmark gradient accumulation on the MNIST dense nets, graph mode first.

Every configuration (net x contender x mode x runtime setting) runs in its own
subprocess (this script re-invokes itself with a hidden ``--worker`` flag), so
compile caches, memory pools and peak RSS never leak from one contender into
the next. Configurations alternate A B C A B C over ``--repeats`` so slow
drift of the machine hits every contender alike.

MindSpore 2.10's asynchronous runtime makes small graphs without control flow
several times slower on a 2-core CPU; ``MS_DEV_HOST_BLOCKING_RUN=1`` turns it
off. Each MindSpore configuration is therefore measured with the variable set
and unset, and contenders are compared best setting against best setting.

Examples:
    python scripts/benchmark.py --quick               # ~2 minutes (default run: ~20 on a 2-core CPU)
    python scripts/benchmark.py --json bench.json --plot bench.png
    python scripts/benchmark.py --nets wide --contenders plain_micro,accumulator
    python scripts/benchmark.py --kernels             # single kernels, MindSpore against PyTorch
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from benchmarks.contenders import CONTENDERS, available_contenders  # noqa: E402

NETS = {"mnist": 512, "wide": 4096}
BLOCKING_ENV = "MS_DEV_HOST_BLOCKING_RUN"
# "1": variable set, "": removed from the worker's environment.
BLOCKING_SETTINGS = ("1", "")
# The plain step takes the whole batch at once; the other two take N micro-steps of B.
SWEPT = ("plain_full", "accumulator", "window")
# The issues' speed targets: (net, contender, against, minimum throughput ratio).
SPEED_TARGETS = (
    ("mnist", "accumulator", "plain_micro", 0.97),
    ("wide", "accumulator", "plain_micro", 0.97),
    ("wide", "accumulator", "boost", 1.4),
    ("mnist", "window", "torch_accumulate", 1 / 0.9),  # at most 0.9x PyTorch's time
)


def make_configs(args):
    """The measured configurations, in the order one repeat runs them.

    Example:
        >>> args = parse_args(["--quick"])
        >>> make_configs(args)[0]["contender"]
        'plain_micro'
    """
    configs = []
    names = args.contenders.split(",") if args.contenders else available_contenders(args.experiments)
    for net in args.nets.split(","):
        for mode in args.modes.split(",") + ["eager"]:  # eager: other frameworks' reference rows
            for name in names:
                contender = CONTENDERS[name]
                if mode not in contender.modes:
                    continue
                settings = BLOCKING_SETTINGS if contender.framework == "mindspore" else ("n/a",)
                for blocking in settings:
                    configs.append(dict(kind="speed", net=net, hidden=NETS[net], contender=name,
                                        mode=mode, blocking=blocking, batch=args.batch,
                                        accumulate=args.accumulate))
    # Peak memory against effective batch N x B: the plain step takes the
    # whole batch at once, the accumulator keeps B and takes N micro-steps.
    if args.sweep:
        for n in (int(v) for v in args.sweep.split(",")):
            for name in SWEPT:
                configs.append(dict(kind="memory", net=args.sweep_net, hidden=NETS[args.sweep_net],
                                    contender=name, mode="graph", blocking="1", batch=args.batch,
                                    accumulate=n))
    return configs


def run_worker(config, args):
    """Runs one configuration in a fresh interpreter and returns its JSON result."""
    env = dict(os.environ)
    env.pop(BLOCKING_ENV, None)
    if config["blocking"] == "1":
        env[BLOCKING_ENV] = "1"
    env.setdefault("GLOG_v", "3")  # MindSpore's C++ warnings would drown the table
    # Peak memory is reached in the first window; a memory row times one block of one window.
    timing = dict(seconds=args.seconds, blocks=args.blocks) if config["kind"] == "speed" else dict(seconds=0, blocks=1)
    spec = dict(config, device_target=args.device_target, **timing)
    command = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
    # Other processes on the machine skew timings: record the load to judge them by.
    load = os.getloadavg()[0]
    # A scratch cwd: MindSpore writes rank_0/ and *.ir files into the current folder.
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout,
                              cwd=scratch)
    config = dict(config, load_before=load)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        return dict(config, error="\n".join(tail) or f"exit code {done.returncode}")
    return dict(config, **json.loads(lines[-1][len("RESULT "):]))


def config_key(config):
    return tuple(config[k] for k in ("kind", "net", "contender", "mode", "blocking", "accumulate"))


def note_load(runs):
    """A warning line when the machine was busy with other work during the runs, else ''."""
    loads = [run["load_before"] for run in runs if "load_before" in run]
    cores = os.cpu_count() or 1
    if loads and statistics.median(loads) > 0.75 * cores:
        return (f"note: median 1-minute load {statistics.median(loads):.1f} on {cores} cores "
                f"(max {max(loads):.1f}): other processes shared the CPU; trust min over median.")
    return ""


def summarise(runs):
    """Merges the repeats of each configuration: min and median over all timed blocks.

    Example:
        >>> summarise([dict(kind="speed", net="mnist", contender="x", mode="graph", blocking="1",
        ...                 accumulate=4, batch=32, block_ms=[2.0, 1.0], compile_s=1.0,
        ...                 state_bytes=0, param_bytes=8, peak_mb=100.0, baseline_mb=90.0)])[0]["median_ms"]
        1.5
    """
    grouped = {}
    for run in runs:
        grouped.setdefault(config_key(run), []).append(run)
    rows = []
    for group in grouped.values():
        ok = [run for run in group if "error" not in run]
        first = dict(group[0])
        first.pop("block_ms", None)
        if not ok:
            rows.append(first)
            continue
        blocks = [ms for run in ok for ms in run["block_ms"]]
        median = statistics.median(blocks)
        first.pop("error", None)
        first.update(
            repeats=len(ok), min_ms=min(blocks), median_ms=median,
            samples_per_s=1000.0 * first["batch"] / median,
            best_samples_per_s=1000.0 * first["batch"] / min(blocks),
            compile_s=statistics.median(run["compile_s"] for run in ok),
            peak_mb=max(run["peak_mb"] for run in ok),
            baseline_mb=min(run["baseline_mb"] for run in ok),
            state_ratio=ok[0]["state_bytes"] / ok[0]["param_bytes"])
        rows.append(first)
    return rows


def best_rows(rows):
    """Per (net, mode, contender), the runtime setting with the higher median throughput."""
    best = {}
    for row in rows:
        if row["kind"] != "speed" or "median_ms" not in row:
            continue
        key = (row["net"], row["mode"], row["contender"])
        if key not in best or row["samples_per_s"] > best[key]["samples_per_s"]:
            best[key] = row
    for (net, mode, _), row in best.items():
        # Reference rows of other frameworks compare against the graph-mode plain step.
        base = best.get((net, mode, "plain_micro")) or best.get((net, "graph", "plain_micro"))
        row["ratio_vs_plain_micro"] = row["samples_per_s"] / base["samples_per_s"] if base else None
        row["min_ratio_vs_plain_micro"] = (row["best_samples_per_s"] / base["best_samples_per_s"]
                                           if base else None)
    return best


def _graph_or_eager(best, net, contender):
    return best.get((net, "graph", contender)) or best.get((net, "eager", contender))


def check_targets(rows, best):
    """Each target of the issues that this run measured, with its ratios and whether it was met.

    Speed ratios are throughput against throughput, on medians and on
    minimums (the minimum is least disturbed by other work on the machine);
    a target counts as met when both are.

    Example:
        >>> check_targets([], {})
        []
    """
    checks = []
    for net, contender, against, minimum in SPEED_TARGETS:
        row, base = _graph_or_eager(best, net, contender), _graph_or_eager(best, net, against)
        if not row or not base:
            continue
        median = row["samples_per_s"] / base["samples_per_s"]
        fastest = row["best_samples_per_s"] / base["best_samples_per_s"]
        checks.append(dict(target=f"{net}: {contender} >= {minimum:.2f}x {against} throughput",
                           median_ratio=median, min_ratio=fastest, met=min(median, fastest) >= minimum))
    row, boost = best.get(("wide", "graph", "accumulator")), best.get(("wide", "graph", "boost"))
    if row and boost:
        checks.append(dict(target="wide: accumulator peak MB < boost peak MB",
                           value=f"{row['peak_mb']:.0f} vs {boost['peak_mb']:.0f}",
                           met=row["peak_mb"] < boost["peak_mb"]))
    if row:
        checks.append(dict(target="accumulator state = 1.0x parameter bytes", value=f"{row['state_ratio']:.3f}",
                           met=abs(row["state_ratio"] - 1.0) < 0.01))
    sweep = {}
    for r in rows:
        if r["kind"] == "memory" and "peak_mb" in r:
            sweep.setdefault(r["contender"], {})[r["accumulate"]] = r["peak_mb"] - r["baseline_mb"]
    plain, accumulator, window = (sweep.get(name, {}) for name in SWEPT)
    if len(accumulator) > 1 and len(plain) > 1:
        spread = max(accumulator.values()) - min(accumulator.values())
        growth = plain[max(plain)] - plain[min(plain)]
        checks.append(dict(target="memory flat in N x B: accumulator spread < 5% of its level, plain step grows",
                           value=f"accumulator spread {spread:.1f} MB, plain step +{growth:.1f} MB",
                           met=spread < 0.05 * max(accumulator.values()) and growth > spread))
    common = sorted(set(accumulator) & set(window))
    if common:
        n = common[-1]
        checks.append(dict(target=f"window peak at N={n} <= 1.15x accumulator's",
                           value=f"{window[n]:.1f} vs {accumulator[n]:.1f} MB above baseline",
                           met=window[n] <= 1.15 * accumulator[n]))
    return checks


def format_targets(checks):
    """The target checks as text lines.

    Example:
        >>> format_targets([dict(target="t", value="v", met=True)])
        'targets:\n  met      t: v'
    """
    lines = ["targets:"]
    for check in checks:
        value = check.get("value") or f"{check['median_ratio']:.2f}x median, {check['min_ratio']:.2f}x min"
        lines.append(f"  {'met' if check['met'] else 'NOT MET':8} {check['target']}: {value}")
    return "\n".join(lines)


def format_table(rows, best):
    """The speed table as text: one line per configuration, ratios on the best setting."""
    head = (f"{'net':6} {'mode':8} {'contender':18} {'block':5} {'ms/micro':>9} {'min':>8} "
            f"{'samples/s':>10} {'x(1)':>6} {'x(1)min':>7} {'compile s':>9} {'state/param':>11} {'peak MB':>8}")
    lines = [head, "-" * len(head)]
    for row in rows:
        if row["kind"] != "speed":
            continue
        block = {"1": "on", "": "off"}.get(row["blocking"], row["blocking"])
        if "error" in row:
            lines.append(f"{row['net']:6} {row['mode']:8} {row['contender']:18} {block:5} "
                         f"ERROR {row['error'].splitlines()[-1][:60]}")
            continue
        chosen = best[(row["net"], row["mode"], row["contender"])] is row
        ratio = f"{row['ratio_vs_plain_micro']:.2f}" if chosen and row.get("ratio_vs_plain_micro") else ""
        min_ratio = f"{row['min_ratio_vs_plain_micro']:.2f}" if chosen and row.get("min_ratio_vs_plain_micro") else ""
        lines.append(f"{row['net']:6} {row['mode']:8} {row['contender']:18} {block:5} "
                     f"{row['median_ms']:9.3f} {row['min_ms']:8.3f} {row['samples_per_s']:10.0f} "
                     f"{ratio:>6} {min_ratio:>7} {row['compile_s']:9.2f} {row['state_ratio']:11.2f} {row['peak_mb']:8.0f}"
                     + (" *" if chosen else ""))
    lines.append("ms/micro: median time per micro-batch of B samples; x(1): samples/s against "
                 "plain_micro, both at their best setting (marked *); x(1)min: the same from the "
                 "fastest blocks; block: "
                 f"{BLOCKING_ENV}=1 on/off.")
    memory = [row for row in rows if row["kind"] == "memory" and "peak_mb" in row]
    if memory:
        lines += ["", "peak memory (MB above the process baseline) against effective batch N x B:"]
        for row in sorted(memory, key=lambda r: (r["contender"], r["accumulate"])):
            lines.append(f"  {row['contender']:12} N={row['accumulate']:<3} N*B={row['accumulate'] * row['batch']:<5} "
                         f"{row['peak_mb'] - row['baseline_mb']:8.1f} (peak {row['peak_mb']:.0f})")
    return "\n".join(lines)


def plot(rows, best, path):
    """Writes throughput bars and peak memory against effective batch to ``path`` (PNG)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib, which is not installed: pip install matplotlib", file=sys.stderr)
        return False
    chosen = sorted(best.values(), key=lambda r: (r["net"], r["mode"], r["contender"]))
    # A fifth of an inch per bar keeps every label readable.
    figure, (bars, lines) = plt.subplots(1, 2, figsize=(14, max(5.0, 0.2 * len(chosen))))
    labels = [f"{r['net']}/{r['mode']} {r['contender']}" for r in chosen]
    bars.barh(range(len(chosen)), [r["samples_per_s"] for r in chosen])
    bars.set_yticks(range(len(chosen)), labels, fontsize=7)
    bars.set_xscale("log")
    bars.set_xlabel("samples/s (median, best runtime setting)")
    for name in SWEPT:
        points = sorted((r["accumulate"] * r["batch"], r["peak_mb"] - r["baseline_mb"])
                        for r in rows if r["kind"] == "memory" and r["contender"] == name and "peak_mb" in r)
        if points:
            lines.plot(*zip(*points), marker="o", label=name)
    lines.set_xscale("log", base=2)
    lines.set_xlabel("effective batch N x B")
    lines.set_ylabel("peak memory above baseline, MB")
    lines.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return True


def kernel_report(args):
    """``--kernels``: times single kernels in this process (blocking run on) and prints them."""
    os.environ[BLOCKING_ENV] = "1"  # read when MindSpore starts, which happens below
    import mindspore as ms
    from benchmarks.kernels import format_kernels, time_kernels
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device(args.device_target)
    rows = time_kernels()
    print(format_kernels(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(dict(kernels=rows), handle, indent=1)
    return 0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nets", default="mnist,wide", help="comma list of: " + ", ".join(NETS))
    parser.add_argument("--contenders", default="",
                        help="comma list (default: all available): " + ", ".join(CONTENDERS))
    parser.add_argument("--experiments", action="store_true",
                        help="add the Accumulator design experiments (benchmarks/variants.py)")
    parser.add_argument("--modes", default="graph,pynative", help="comma list of graph, pynative")
    parser.add_argument("--batch", "-B", type=int, default=32, help="micro-batch size B")
    parser.add_argument("--accumulate", "-N", type=int, default=8, help="micro-batches per window N")
    parser.add_argument("--repeats", type=int, default=2, help="alternating rounds over all configurations")
    # A window of the wide net takes ~0.4 s: with 1 s per worker, medians of
    # the same configuration moved by 10-15% between runs; 4 s steadies them.
    parser.add_argument("--seconds", type=float, default=4.0, help="timed seconds per worker")
    parser.add_argument("--blocks", type=int, default=5, help="timed blocks per worker (whole windows each)")
    # N=256 (N x B = 8192 at B=32) is where the wide net's plain step outgrows the accumulator.
    parser.add_argument("--sweep", default="1,4,16,64,256", help="N values of the memory sweep ('' skips it)")
    parser.add_argument("--sweep-net", default="wide", choices=sorted(NETS))
    parser.add_argument("--device-target", default="CPU", choices=("CPU", "GPU", "Ascend"))
    parser.add_argument("--timeout", type=float, default=300, help="seconds before a worker is killed")
    parser.add_argument("--json", help="write every run and the summary to this path")
    parser.add_argument("--plot", help="write a PNG (needs matplotlib) to this path")
    parser.add_argument("--kernels", action="store_true",
                        help="time single kernels (MatMul, AssignAdd, sums) in MindSpore and PyTorch, then stop")
    parser.add_argument("--quick", action="store_true",
                        help="short run: graph mode, 1 repeat, 0.5 s per worker, small sweep")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.modes, args.repeats, args.seconds, args.blocks, args.sweep = "graph", 1, 0.5, 3, "1,8"
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        from benchmarks.worker import measure
        print("RESULT " + json.dumps(measure(json.loads(args.worker))), flush=True)
        return 0
    if args.kernels:
        return kernel_report(args)
    configs = make_configs(args)
    runs = []
    started = time.time()
    for repeat in range(args.repeats):
        for index, config in enumerate(configs):
            if config["kind"] == "memory" and repeat:
                continue  # peak memory does not drift with load: one round is enough
            result = run_worker(config, args)
            runs.append(dict(result, repeat=repeat))
            status = result.get("error", "").splitlines()[-1:] or [f"{statistics.median(result['block_ms']):.3f} ms"]
            print(f"[{time.time() - started:6.0f}s] {repeat + 1}/{args.repeats} {index + 1}/{len(configs)} "
                  f"{config['net']} {config['mode']} {config['contender']} N={config['accumulate']} "
                  f"block={config['blocking'] or 'off'}: {status[0]}", file=sys.stderr, flush=True)
    rows = summarise(runs)
    best = best_rows(rows)
    checks = check_targets(rows, best)
    print(format_table(rows, best))
    if checks:
        print(format_targets(checks))
    load = note_load(runs)
    if load:
        print(load)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(dict(settings={k: v for k, v in vars(args).items() if k != "worker"},
                           runs=runs, rows=rows, targets=checks), handle, indent=1)
    if args.plot and not plot(rows, best, args.plot):
        return 2
    return 1 if any("error" in row for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
