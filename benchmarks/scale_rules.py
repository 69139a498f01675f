"""Scaling rules shown to work (issue 34): validation loss against samples seen and against seconds.

Each run is a training tool (``scripts/train_lm.py`` or
``scripts/train_mnist.py``, ``--synthetic``) in a process of its own, at the
learning rate tuned for N = 1 (``--lr``: the tool's default, or set by
``--flags`` or ``--lr-sweep``): the fixed
windows N = 1, 2, 4, ... each without a rule and with the optimizer's rule
(``RIGHT_RULE``), then ``--accumulate-step auto`` without a rule and with
each rule the optimizer takes. Every run reads the same samples in the
same order each epoch, so epoch e is "equal samples"; seconds are the
epochs' training time (compiles and evaluations left out), and the time to
a target loss is interpolated linearly between the epochs' ends.

The targets, with the optimizer's rule: (1) the adaptive window's
validation loss is closer to N = 1's than the adaptive window's without a
rule, at every epoch; (2) it reaches the target (N = 1's loss after
``TARGET_EPOCH`` epochs) sooner than N = 1 and than the adaptive window
without a rule, and within 10% of the fastest fixed window.

Each seed (``--seeds``) is a sweep of its own, its target its own N = 1's
loss; a target is met when it is met in every seed. ``--lr-sweep`` first
trains N = 1 for ``TARGET_EPOCH`` epochs at each learning rate given and
runs the sweep at the one with the lowest validation loss (mean over the
seeds).

Seconds measured during a sweep carry the machine's load. ``--speed`` times
instead, in one process: every run of the plan built and compiled ahead,
then epoch e of each run in turn (the order reversed every other epoch),
training only. ``--speed-json`` puts those seconds in place of the sweep's
(``--from-json`` reads a saved sweep instead of running one), so the time
to the target is the epochs to reach it, interpolated, times the speed
run's seconds per epoch.

Run it (docs/scale-rules.md and BENCHMARKS.md have the results)::

    python -m benchmarks.scale_rules lm --epochs 5 --windows 1 2 4 8 16 --seeds 0 1 \\
        --lr-sweep 0.001 0.003 0.01 --flags="--batch-size 1" --json scale_rules_lm.json
    python -m benchmarks.scale_rules lm --speed --epochs 5 --windows 1 2 4 8 16 --seeds 0 1 \\
        --flags="--batch-size 1 --lr 0.003" --json scale_rules_speed.json
    python -m benchmarks.scale_rules lm --windows 1 2 4 8 16 --from-json scale_rules_lm.json \\
        --speed-json scale_rules_speed.json --plot docs/scale_rules_lm.png
    python -m benchmarks.scale_rules mnist --epochs 3 --optimizer sgd
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from benchmarks.plot import plot_losses

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = {"lm": "scripts/train_lm.py", "mnist": "scripts/train_mnist.py"}
# Each tool's own flags for a quiet run: no text sampled at the end.
QUIET = {"lm": ["--sample-tokens", "0"], "mnist": []}
WINDOWS = (1, 2, 4, 8, 16, 32)
RIGHT_RULE = {"adamw": "sqrt", "sgd": "linear", "momentum": "linear", "adam": "linear"}
RULES = ("linear", "sqrt", "adascale")
TARGET_EPOCH = 3
FASTEST_WITHIN = 1.10


def plan(optimizer, windows=WINDOWS):
    """The runs, as ``(name, --accumulate-step, --scale-rule)``: fixed windows without and with the rule, then auto.

    N = 1 with a rule is N = 1 (κ = 1), so it runs once; ``sqrt`` runs only with AdamW, the one it can set.

    Example:
        >>> [name for name, _, _ in plan("sgd", (1, 4))]
        ['N=1', 'N=4', 'N=4 linear', 'auto', 'auto linear', 'auto adascale']
    """
    rule = RIGHT_RULE[optimizer]
    runs = []
    for n in windows:
        runs.append((f"N={n}", n, "none"))
        if n > 1:
            runs.append((f"N={n} {rule}", n, rule))
    runs.append(("auto", "auto", "none"))
    runs += [(f"auto {r}", "auto", r) for r in RULES if r != "sqrt" or optimizer == "adamw"]
    return runs


def train(tool, accumulate_step, scale_rule, epochs, optimizer, extra=()):
    """Runs one tool to the end; returns its per-epoch records (``--log-json``'s ``epochs``).

    Example:
        >>> records = train("mnist", 2, "linear", 1, "sgd", ["--batch-size", "64"])  # doctest: +SKIP
    """
    with tempfile.TemporaryDirectory() as folder:
        log = os.path.join(folder, "log.json")
        command = ["nice", "-n", "10", sys.executable, os.path.join(ROOT, TOOLS[tool]), "--synthetic",
                   "--epochs", str(epochs), "--accumulate-step", str(accumulate_step), "--scale-rule", scale_rule,
                   "--optimizer", optimizer, "--log-json", log, *QUIET[tool], *extra]
        done = subprocess.run(command, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip().splitlines()[-1]}")
        with open(log) as f:
            return json.load(f)["epochs"]


def sweep(tool, runs, epochs, optimizer, extra=(), say=print):
    """Every run of ``runs`` (``plan``'s) trained for ``epochs``: ``{name: records}``; ``say`` gets a line per run.

    Example:
        >>> results = sweep("lm", plan("adamw", (1, 2)), 6, "adamw", ["--batch-size", "1"])  # doctest: +SKIP
        >>> list(results)[:3]  # doctest: +SKIP
        ['N=1', 'N=2', 'N=2 sqrt']
    """
    results = {}
    for name, accumulate_step, scale_rule in runs:
        results[name] = train(tool, accumulate_step, scale_rule, epochs, optimizer, extra)
        say(f"{name}: " + ", ".join(f"{r['test_loss']:.4f}" for r in results[name])
            + f" (load {os.getloadavg()[0]:.2f})")
    return results


def tune_lr(tool, lrs, seeds, optimizer, extra=(), say=print):
    """N = 1 for ``TARGET_EPOCH`` epochs at each of ``lrs`` (strings) and ``seeds``; returns ``(best, {lr: loss})``.

    The loss is the validation loss after the last epoch, the mean over the
    seeds; the best learning rate is the one with the lowest.

    Example:
        >>> tune_lr("lm", ["0.003", "0.01"], [0, 1], "adamw", ["--batch-size", "1"])  # doctest: +SKIP
        ('0.003', {'0.003': 0.81, '0.01': 0.94})
    """
    losses = {}
    for lr in lrs:
        last = [train(tool, 1, "none", TARGET_EPOCH, optimizer, [*extra, "--seed", str(seed), "--lr", lr])[-1]
                ["test_loss"] for seed in seeds]
        losses[lr] = sum(last) / len(last)
        say(f"lr {lr} at N=1: validation loss after {TARGET_EPOCH} epochs "
            + ", ".join(f"{loss:.4f}" for loss in last) + f" (seeds {', '.join(map(str, seeds))})")
    return min(losses, key=losses.get), losses


def speed(runs, epochs, flags="", seed=0, text_bytes=None, say=print):
    """Each run's epochs timed in one process, epoch e of every run in turn: ``{name: records}``, one per epoch.

    ``runs`` are ``plan``'s, ``flags`` more ``train_lm.py`` flags (a
    string). Every run is built and compiled first; then, for each epoch,
    every run trains it, in ``runs``' order on odd epochs and reversed on
    even ones, so a change of load falls on all alike. A record holds the
    epoch's training ``seconds`` (no compile, no evaluation), its
    ``samples`` and the window N at its end (``accumulate_step``), which a
    sweep's run from the same seed also records; ``say`` gets a line per
    epoch.

    Example (it compiles both: tests/test_benchmarks_scale_rules.py runs it):
        >>> tiny = "--width 8 --depth 1 --heads 2 --max-length 32 --batch-size 2"
        >>> timed = speed([("N=1", 1, "none"), ("auto sqrt", "auto", "sqrt")], 2, tiny, 0, 3000)  # doctest: +SKIP
        >>> [len(records) for records in timed.values()]  # doctest: +SKIP
        [2, 2]
    """
    from benchmarks.packing import contender, synthetic_corpus
    from training.context import configure_context
    from training.loop import build_run, compile_train_step, train_epoch
    with synthetic_corpus(text_bytes) as path:
        built = {name: contender(f"--accumulate-step {step} --scale-rule {rule} --epochs {epochs} {flags}", path, seed)
                 for name, step, rule in runs}
        configure_context(next(iter(built.values()))[0])
        trained = {}
        for name, (config, task) in built.items():
            trained[name] = build_run(config, task)
            compile_train_step(trained[name], task, config, 1)
        results = {name: [] for name in built}
        for epoch in range(1, epochs + 1):
            load = os.getloadavg()[0]
            for name in (list(built) if epoch % 2 else list(built)[::-1]):
                config, task = built[name]
                stats = train_epoch(trained[name], task, config, epoch, progress=False)
                results[name].append({"seconds": stats["seconds"], "samples": stats["samples"],
                                      "accumulate_step": int(trained[name].accumulator.accumulate_step)})
            say(f"seed {seed}, epoch {epoch} (load {load:.2f}-{os.getloadavg()[0]:.2f}): "
                + ", ".join(f"{name} {records[-1]['seconds']:.1f} s" for name, records in results.items()))
    return results


def with_seconds(results, timed):
    """``results``' records with each epoch's ``seconds`` taken from ``timed`` (a speed run's), and where N differs.

    Returns ``(records, differing)``: ``differing`` names each epoch whose
    window N at its end is not the same in both, whose timing is then not
    that of the run it times. Every run needs as many timed epochs as it has.

    Example:
        >>> swept = {"auto": [{"test_loss": 2.0, "seconds": 9.0, "accumulate_step": 4}]}
        >>> with_seconds(swept, {"auto": [{"seconds": 3.0, "accumulate_step": 8}]})
        ({'auto': [{'test_loss': 2.0, 'seconds': 3.0, 'accumulate_step': 4}]}, ['auto, epoch 1: N 4 swept, 8 timed'])
    """
    retimed, differing = {}, []
    for name, records in results.items():
        clock = timed.get(name, [])
        if len(clock) < len(records):
            raise ValueError(f"{name}: {len(records)} epochs swept, {len(clock)} timed")
        retimed[name] = [{**record, "seconds": timing["seconds"]} for record, timing in zip(records, clock)]
        differing += [f"{name}, epoch {e}: N {record['accumulate_step']} swept, {timing['accumulate_step']} timed"
                      for e, (record, timing) in enumerate(zip(records, clock), 1)
                      if record.get("accumulate_step", timing["accumulate_step"]) != timing["accumulate_step"]]
    return retimed, differing


def curve(records):
    """``(samples seen, training seconds, validation loss)`` at each epoch's end, cumulative.

    Example:
        >>> curve([{"samples": 10, "seconds": 2.0, "test_loss": 1.5},
        ...        {"samples": 10, "seconds": 1.0, "test_loss": 1.0}])
        [(10, 2.0, 1.5), (20, 3.0, 1.0)]
    """
    samples, seconds, points = 0, 0.0, []
    for record in records:
        samples += record["samples"]
        seconds += record["seconds"]
        points.append((samples, seconds, record["test_loss"]))
    return points


def seconds_to(points, target):
    """Training seconds at which the validation loss first reaches ``target``, interpolated; None if never.

    Before the first epoch's end the loss is not measured: reached then, the first epoch's time is given.

    Example:
        >>> seconds_to([(10, 2.0, 1.5), (20, 4.0, 1.0)], 1.25), seconds_to([(10, 2.0, 1.5)], 1.0)
        (3.0, None)
    """
    previous = None
    for _, seconds, loss in points:
        if loss <= target:
            if previous is None:
                return seconds
            (before, before_loss) = previous
            return before + (seconds - before) * (before_loss - target) / (before_loss - loss)
        previous = (seconds, loss)
    return None


def analyse(results, rule):
    """The table's rows and the targets' verdicts from ``{name: records}``, for the optimizer's ``rule``.

    ``epochs_to_target`` is the time to the target counting each epoch as 1.

    Example:
        >>> epoch = lambda loss, seconds: {"samples": 10, "seconds": seconds, "test_loss": loss}
        >>> results = {"N=1": [epoch(2.0, 4), epoch(1.5, 4), epoch(1.0, 4)],
        ...            "N=4": [epoch(2.5, 2), epoch(2.0, 2), epoch(1.6, 2), epoch(1.2, 2), epoch(1.0, 2)],
        ...            "auto": [epoch(2.6, 2), epoch(2.2, 2), epoch(1.9, 2)],
        ...            "auto sqrt": [epoch(2.1, 2), epoch(1.6, 2), epoch(1.0, 2)]}
        >>> report = analyse(results, "sqrt")
        >>> report["target"], report["seconds_to_target"]["auto sqrt"], report["fastest_fixed"]
        (1.0, 6.0, ['N=4', 10.0])
        >>> report["epochs_to_target"]["N=4"], [check["met"] for check in report["checks"]]
        (5.0, [True, True, True, True])
    """
    reference = curve(results["N=1"])
    target = reference[TARGET_EPOCH - 1][2]
    curves = {name: curve(records) for name, records in results.items()}
    reached = {name: seconds_to(points, target) for name, points in curves.items()}
    epochs = {name: seconds_to([(0, e, loss) for e, (_, _, loss) in enumerate(points, 1)], target)
              for name, points in curves.items()}
    fixed = {name: s for name, s in reached.items() if name.startswith("N=") and s is not None}
    fastest = min(fixed.items(), key=lambda item: item[1])
    ruled, plain = curves[f"auto {rule}"], curves["auto"]
    common = min(len(reference), len(ruled), len(plain))
    gaps = [(abs(ruled[e][2] - reference[e][2]), abs(plain[e][2] - reference[e][2])) for e in range(common)]
    mine = reached[f"auto {rule}"]
    checks = [
        {"target": f"(1) |auto {rule} - N=1| < |auto - N=1| at every epoch", "met": all(a < b for a, b in gaps),
         "detail": "; ".join(f"epoch {e + 1}: {a:.3f} vs {b:.3f}" for e, (a, b) in enumerate(gaps))},
    ]
    for other, bound in (("N=1", reached["N=1"]), ("auto", reached["auto"]),
                         (f"{FASTEST_WITHIN:.2f} x the fastest fixed window", FASTEST_WITHIN * fastest[1])):
        met = mine is not None and (bound is None or mine < bound)
        detail = f"{_seconds(mine)} vs {_seconds(bound)}"
        if mine is not None and bound is not None:
            detail += f" ({mine / bound - 1:+.0%})"
        if other.startswith(f"{FASTEST_WITHIN:.2f}"):
            detail += f", {fastest[0]} {_seconds(fastest[1])}"
        checks.append({"target": f"(2) auto {rule} reaches N=1's epoch-{TARGET_EPOCH} loss sooner than {other}",
                       "met": met, "detail": detail})
    return {"target": target, "seconds_to_target": reached, "epochs_to_target": epochs, "fastest_fixed": list(fastest),
            "checks": checks, "curves": curves}


def across_seeds(reports):
    """Each target over the seeds' ``analyse`` reports: met when met in every seed, and in how many it was.

    Example:
        >>> across_seeds({0: {"checks": [{"target": "(1) x", "met": True}]},
        ...               1: {"checks": [{"target": "(1) x", "met": False}]}})
        [{'target': '(1) x', 'met': False, 'seeds': '1 of 2'}]
    """
    checks = zip(*(report["checks"] for report in reports.values()))
    return [{"target": same[0]["target"], "met": all(check["met"] for check in same),
             "seeds": f"{sum(check['met'] for check in same)} of {len(same)}"} for same in checks]


def _seconds(value):
    return "never" if value is None else f"{value:.1f} s"


def format_report(results, report):
    """A markdown table (loss per epoch, epochs and seconds to the target, the last N and lr) and the targets.

    Example:
        >>> epoch = {"samples": 10, "seconds": 1.0, "test_loss": 1.0, "accumulate_step": 4, "lr": 0.02}
        >>> report = {"target": 1.0, "seconds_to_target": {"N=4": 1.0}, "epochs_to_target": {"N=4": 1.0},
        ...           "checks": []}
        >>> print(format_report({"N=4": [epoch]}, report))
        | run | validation loss after epoch 1 | epochs to 1.0000 | s to it | last N, lr |
        |---|---|---|---|---|
        | N=4 | 1.0000 | 1.00 | 1.0 | 4, 0.02 |
    """
    epochs = max(len(records) for records in results.values())
    header = " | ".join(f"{e + 1}" for e in range(epochs))
    target = f"epochs to {report['target']:.4f}"
    lines = [f"| run | validation loss after epoch {header} | {target} | s to it | last N, lr |",
             "|" + "---|" * (epochs + 4)]
    for name, records in results.items():
        losses = " | ".join(f"{r['test_loss']:.4f}" for r in records) + " | " * (epochs - len(records))
        last = records[-1]
        setting = f"{last['accumulate_step']}, {last['lr']:.3g}" if "lr" in last else \
            str(last.get("accumulate_step", name.split("=")[-1]))
        reached, seconds = report["epochs_to_target"].get(name), report["seconds_to_target"].get(name)
        lines.append(f"| {name} | {losses} | {'never' if reached is None else f'{reached:.2f}'} | "
                     f"{'never' if seconds is None else f'{seconds:.1f}'} | {setting} |")
    lines += [f"{'met' if check['met'] else 'MISSED'}: {check['target']}: {check['detail']}"
              for check in report["checks"]]
    return "\n".join(lines)


def load_results(paths):
    """The ``results`` of the JSON files sweeps or speed runs wrote, merged: ``{seed: {name: records}}``.

    Example:
        >>> for path, name in (("one.json", "N=1"), ("two.json", "auto")):
        ...     with open(path, "w") as f:
        ...         json.dump({"results": {"1": {name: []}}}, f)
        >>> load_results(["one.json", "two.json"])
        {1: {'N=1': [], 'auto': []}}
    """
    results = {}
    for path in paths:
        with open(path) as f:
            for seed, runs in json.load(f)["results"].items():
                results.setdefault(int(seed), {}).update(runs)
    return results


def report(results, optimizer, timed=None, say=print):
    """Each seed's table and targets, then each target over the seeds; returns ``{seed: analyse's report}``.

    With ``timed`` (a speed run's ``{seed: {name: records}}``) the seconds
    are its: the same seed's, or its first seed's when it has not that one.

    Example:
        >>> runs = {name: [{"samples": 1, "seconds": 1.0, "test_loss": loss} for loss in (3.0, 2.0, 1.0)]
        ...         for name in ("N=1", "auto", "auto linear")}
        >>> reports = report({0: runs}, "sgd", say=lambda line: None)
        >>> reports[0]["target"], [check["met"] for check in reports[0]["checks"]]
        (1.0, [False, False, False, True])
    """
    reports = {}
    for seed, runs in results.items():
        if timed:
            runs, differing = with_seconds(runs, timed.get(seed, next(iter(timed.values()))))
            for line in differing:
                say(f"seed {seed}: the timed run's window differs: {line}")
        reports[seed] = analyse(runs, RIGHT_RULE[optimizer])
        say(f"seed {seed}:\n{format_report(runs, reports[seed])}")
    for check in across_seeds(reports):
        say(f"{'met' if check['met'] else 'MISSED'} (met in {check['seeds']} seeds): {check['target']}")
    return reports


def main(argv=None):
    """``python -m benchmarks.scale_rules {lm,mnist}``: the sweep (or ``--speed``), its tables and targets."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale_rules", description=__doc__.split("\n")[0])
    parser.add_argument("tool", choices=sorted(TOOLS))
    parser.add_argument("--epochs", type=int, default=6, help="epochs per run (default 6)")
    parser.add_argument("--optimizer", default=None, help="default: adamw for lm, sgd for mnist")
    parser.add_argument("--windows", type=int, nargs="+", default=list(WINDOWS), help="fixed N (default 1 to 32)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="a sweep per --seed (default 0)")
    parser.add_argument("--only", nargs="+", default=None, metavar="NAME",
                        help="of the plan's runs only these ('N=4 sqrt'): sweeps in parallel, merged by --from-json")
    parser.add_argument("--lr-sweep", nargs="+", default=None, metavar="LR",
                        help=f"first N=1 for {TARGET_EPOCH} epochs at each; the sweep takes the best")
    parser.add_argument("--speed", action="store_true",
                        help="time each run's epochs in one process, in turn, instead of the sweep (lm only)")
    parser.add_argument("--from-json", nargs="+", default=None, metavar="PATH",
                        help="the sweep(s) --json wrote, instead of running one (merged; the plan's runs in its order)")
    parser.add_argument("--speed-json", default=None, metavar="PATH", help="the seconds of a --speed run's --json")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the records and the reports as JSON")
    parser.add_argument("--plot", default=None, metavar="PATH",
                        help="the first seed's losses against epochs and seconds, as a PNG (with the reports)")
    parser.add_argument("--flags", default="", help="more flags for every run, one string (--flags='--lr 0.003')")
    args = parser.parse_args(argv)
    if args.speed and args.tool != "lm":
        parser.error("--speed times the language model only")
    # A speed run, a merge and a part of a sweep each leave out something a flag needs.
    for flag, value, needs_not in (("--lr-sweep", args.lr_sweep, ("speed", "from_json")),
                                   ("--speed-json", args.speed_json, ("speed", "only")),
                                   ("--plot", args.plot, ("speed", "only"))):
        for other in needs_not:
            if value and getattr(args, other):
                parser.error(f"{flag} does nothing with --{other.replace('_', '-')}")
    optimizer = args.optimizer or ("adamw" if args.tool == "lm" else "sgd")
    say = lambda line: print(line, flush=True)  # noqa: E731
    load = lambda: " ".join(f"{value:.2f}" for value in os.getloadavg())  # noqa: E731
    say(f"load average before: {load()}")
    runs, flags = plan(optimizer, args.windows), args.flags.split()
    if args.only:
        unknown = set(args.only) - {name for name, _, _ in runs}
        if unknown:
            parser.error(f"--only: no run named {', '.join(sorted(unknown))} in the plan")
        runs = [run for run in runs if run[0] in args.only]
    saved = {"optimizer": optimizer, "epochs": args.epochs, "load_before": load()}
    if args.speed:
        saved["results"] = {seed: speed(runs, args.epochs, f"--optimizer {optimizer} {args.flags}", seed, say=say)
                            for seed in args.seeds}
    elif args.from_json:
        saved["results"] = {seed: {name: swept[name] for name, _, _ in runs if name in swept}  # in the plan's order
                            for seed, swept in load_results(args.from_json).items()}
    else:
        if args.lr_sweep:
            lr, saved["lr_sweep"] = tune_lr(args.tool, args.lr_sweep, args.seeds, optimizer, flags, say)
            say(f"the sweep takes --lr {lr}")
            flags += ["--lr", lr]
        saved["results"] = {seed: sweep(args.tool, runs, args.epochs, optimizer, [*flags, "--seed", str(seed)], say)
                            for seed in args.seeds}
    saved["flags"] = " ".join(flags)
    if not (args.speed or args.only):  # a part of a sweep has no targets of its own
        timed = load_results([args.speed_json]) if args.speed_json else None
        saved["reports"] = report(saved["results"], optimizer, timed, say)
        if args.plot:
            seed, runs = next(iter(saved["results"].items()))
            if timed:
                runs, _ = with_seconds(runs, timed.get(seed, next(iter(timed.values()))))
            plot_losses(runs, args.plot, saved["reports"][seed]["target"])
    saved["load_after"] = load()
    say(f"load average after: {saved['load_after']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(saved, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
