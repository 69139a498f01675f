"""Benchmark gradient accumulation on the MNIST dense nets, graph mode first.

Every configuration (net x contender x mode x runtime setting) runs in its own
subprocess (``python -m benchmarks.worker``), so compile caches, memory pools
and peak RSS never leak from one contender into the next. Configurations
alternate A B C A B C over ``--repeats`` so slow drift of the machine hits
every contender alike.

MindSpore 2.10's asynchronous runtime makes small graphs without control flow
several times slower on a 2-core CPU; ``MS_DEV_HOST_BLOCKING_RUN=1`` turns it
off. Each MindSpore configuration is therefore measured with the variable set
and unset, and contenders are compared best setting against best setting.

Examples:
    python scripts/benchmark.py --quick               # a short graph-mode run
    python scripts/benchmark.py --json bench.json --plot bench.png
    python scripts/benchmark.py --nets wide --contenders plain_micro,accumulator
    python scripts/benchmark.py --paired --nets mnist,deep48,deep128,lm --optimizer adam -B 16 -N 4 \\
        --contenders plain_micro,micro_floor,recommended,apply_floor,window,accumulator,tutorial,boost
    python scripts/benchmark.py --end-to-end          # train_mnist.py's epochs against its own step
    python scripts/benchmark.py --ema --json ema.json --plot docs/ema_horizon.png  # the average in both tools

Earlier harnesses (single kernels, the profiler, compile times, packing,
scaling rules, whole-batch memory) are in the git history: BENCHMARKS.md
names the commit and command of each.
"""
import argparse
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from benchmarks.configs import MODES, NETS, make_configs, name_list, positive, positive_int_list  # noqa: E402
from benchmarks.contenders import CONTENDERS, OPTIMIZERS, default_contenders  # noqa: E402
from benchmarks.report import best_rows, finish, format_table, summarize  # noqa: E402
from benchmarks.runner import run_configs  # noqa: E402
from benchmarks.end_to_end import STEPS  # noqa: E402


def parse_args(argv=None):
    """The command line, checked: a bad value exits 2 with a usage line before any worker starts.

    Example:
        >>> args = parse_args(["--quick", "--nets", "wide"])
        >>> args.nets, args.modes, args.sweep, args.contenders
        (['wide'], ['graph'], [1, 8], [])
    """
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nets", default="mnist,wide", type=name_list(NETS),
                        help="comma list of: " + ", ".join(NETS))
    parser.add_argument("--contenders", default="", type=name_list(CONTENDERS, allow_empty=True),
                        help="comma list (default: all but the floors): " + ", ".join(CONTENDERS))
    parser.add_argument("--experiments", action="store_true",
                        help="add the floors to the default list: "
                        + ", ".join(n for n, c in CONTENDERS.items() if c.experiment))
    parser.add_argument("--modes", default="graph,pynative", type=name_list(MODES),
                        help="comma list of " + ", ".join(MODES))
    parser.add_argument("--optimizer", default="sgd", choices=OPTIMIZERS,
                        help="the optimizer of every row")
    parser.add_argument("--batch", "-B", type=positive(int), default=32, help="micro-batch size B")
    parser.add_argument("--accumulate", "-N", type=positive(int), default=None,
                        help="micro-batches per window N (default 8; with --end-to-end 2, as train_mnist.py)")
    parser.add_argument("--repeats", type=positive(int), default=2, help="alternating rounds over all configurations")
    # Long enough for whole windows of the wide net in every block (docs/performance.md#noise).
    parser.add_argument("--seconds", type=positive(float), default=4.0, help="timed seconds per worker")
    parser.add_argument("--blocks", type=positive(int), default=5, help="timed blocks per worker (whole windows each)")
    # Up to where the plain full-batch step's memory outgrows the accumulator's:
    # BENCHMARKS.md#separate-processes-sgd-n8-pynative-memory
    parser.add_argument("--sweep", default="1,4,16,64,256", type=positive_int_list,
                        help="N values of the memory sweep ('' skips it)")
    parser.add_argument("--sweep-net", default="wide", choices=sorted(NETS))
    parser.add_argument("--device-target", default="CPU", choices=("CPU", "GPU", "Ascend"))
    parser.add_argument("--timeout", type=positive(float), default=300, help="seconds before a worker is killed")
    parser.add_argument("--json", help="write every run and the summary to this path")
    parser.add_argument("--plot", help="write a PNG (needs matplotlib) to this path")
    parser.add_argument("--end-to-end", action="store_true",
                        help="time train_mnist.py's training (training.train_epoch, data from memory) against "
                             "its own compiled step on Tensors in memory, per-micro-step and --window-step, "
                             "then stop")
    parser.add_argument("--epochs", type=positive(int), default=6,
                        help="with --end-to-end: epochs per worker, the first (compile) reported apart")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="with --end-to-end: MNIST's train/ and test/ (default: train_mnist.py's --synthetic set)")
    parser.add_argument("--paired", action="store_true",
                        help="time the --contenders (graph mode, blocking runtime) in one process per net, "
                             "block by block in turn, each against the first: for ratios within a few percent")
    parser.add_argument("--tools", default=",".join(STEPS), type=name_list(STEPS),
                        help="with --end-to-end or --ema: comma list of " + ", ".join(STEPS))
    parser.add_argument("--ema", action="store_true",
                        help="run each tool (--tools) with --ema and --accumulate-step auto, seeds 0 and 1: the "
                             "validation loss with and without the weights' average, its horizon beside N "
                             "(--plot), then stop")
    parser.add_argument("--quick", action="store_true",
                        help="short run: graph mode, 1 repeat, 0.5 s per worker, small sweep "
                             "(--end-to-end: 1 repeat of 3 epochs)")
    args = parser.parse_args(argv)
    if args.accumulate is None:
        args.accumulate = 2 if args.end_to_end else 8
    if args.paired and len(args.contenders) < 2:
        parser.error("argument --paired: needs --contenders with two or more names (the first is the baseline)")
    if args.quick:
        args.modes, args.repeats, args.seconds, args.blocks, args.sweep = ["graph"], 1, 0.5, 3, [1, 8]
        args.epochs = min(args.epochs, 3)
    if args.end_to_end and args.epochs < 2:
        parser.error("argument --epochs: --end-to-end needs 2 or more (the first compiles and is reported apart)")
    return args


def main(argv=None):
    """Runs the benchmark the command line asks for and prints its table; returns the exit status.

    0 when every configuration ran, 1 when one failed, 2 when the plot could not be written.

    Example:
        >>> main(["--quick", "--nets", "mnist", "--json", "bench.json"])  # a few minutes  # doctest: +SKIP
        0
    """
    args = parse_args(argv)
    if args.ema:
        from benchmarks.ema import report as report_ema
        return report_ema(tuple(args.tools), json_path=args.json, plot_path=args.plot)
    if args.end_to_end:
        from benchmarks.end_to_end import report
        return report(args.batch, args.accumulate, args.epochs, args.repeats, args.data_dir, args.device_target,
                      args.timeout, args.json, vars(args), args.plot, steps=tuple(args.tools))
    names = args.contenders or default_contenders(args.experiments)
    if args.paired:
        from benchmarks.paired import report as report_paired
        return report_paired(args.nets, names, args.batch, args.accumulate, args.seconds, args.blocks,
                             args.device_target, args.timeout, args.json, vars(args), args.optimizer)
    configs = make_configs(args.nets, args.modes, names, args.batch, args.accumulate, args.sweep, args.sweep_net,
                           args.optimizer)
    runs = run_configs(configs, args.repeats, args.seconds, args.blocks, args.device_target, args.timeout)
    rows = summarize(runs)
    best = best_rows(rows)
    print(format_table(rows, best))

    def draw(path):
        from benchmarks.plot import plot
        return plot(rows, best, path)

    return finish(runs, args.json, args.plot, draw, settings=vars(args), runs=runs, rows=rows)


if __name__ == "__main__":
    sys.exit(main())
