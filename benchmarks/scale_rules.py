"""Scaling rules shown to work (issue 34): validation loss against samples seen and against seconds.

Each run is a training tool (``scripts/train_lm.py`` or
``scripts/train_mnist.py``, ``--synthetic``) in a process of its own, at the
learning rate tuned for N = 1 (the tool's default ``--lr``): the fixed
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

Run it (docs/scale-rules.md and BENCHMARKS.md have the results)::

    python -m benchmarks.scale_rules lm --epochs 6 --json scale_rules_lm.json
    python -m benchmarks.scale_rules mnist --epochs 3 --optimizer sgd
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

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

    Example:
        >>> epoch = lambda loss, seconds: {"samples": 10, "seconds": seconds, "test_loss": loss}
        >>> results = {"N=1": [epoch(2.0, 4), epoch(1.5, 4), epoch(1.0, 4)],
        ...            "N=4": [epoch(2.5, 2), epoch(2.0, 2), epoch(1.6, 2), epoch(1.2, 2), epoch(1.0, 2)],
        ...            "auto": [epoch(2.6, 2), epoch(2.2, 2), epoch(1.9, 2)],
        ...            "auto sqrt": [epoch(2.1, 2), epoch(1.6, 2), epoch(1.0, 2)]}
        >>> report = analyse(results, "sqrt")
        >>> report["target"], report["seconds_to_target"]["auto sqrt"], report["fastest_fixed"]
        (1.0, 6.0, ['N=4', 10.0])
        >>> [check["met"] for check in report["checks"]]
        [True, True, True, True]
    """
    reference = curve(results["N=1"])
    target = reference[TARGET_EPOCH - 1][2]
    curves = {name: curve(records) for name, records in results.items()}
    reached = {name: seconds_to(points, target) for name, points in curves.items()}
    fixed = {name: s for name, s in reached.items() if name.startswith("N=") and s is not None}
    fastest = min(fixed.items(), key=lambda item: item[1])
    ruled, plain = curves[f"auto {rule}"], curves["auto"]
    epochs = min(len(reference), len(ruled), len(plain))
    gaps = [(abs(ruled[e][2] - reference[e][2]), abs(plain[e][2] - reference[e][2])) for e in range(epochs)]
    mine = reached[f"auto {rule}"]
    checks = [
        {"target": f"(1) |auto {rule} - N=1| < |auto - N=1| at every epoch", "met": all(a < b for a, b in gaps),
         "detail": "; ".join(f"epoch {e + 1}: {a:.3f} vs {b:.3f}" for e, (a, b) in enumerate(gaps))},
    ]
    for other, bound in (("N=1", reached["N=1"]), ("auto", reached["auto"]),
                         (f"{FASTEST_WITHIN:.2f} x fastest fixed ({fastest[0]})", FASTEST_WITHIN * fastest[1])):
        met = mine is not None and (bound is None or mine < bound)
        detail = f"{_seconds(mine)} vs {_seconds(bound)}"
        if mine is not None and bound is not None:
            detail += f" ({mine / bound - 1:+.0%})"
        checks.append({"target": f"(2) auto {rule} reaches {target:.4f} sooner than {other}", "met": met,
                       "detail": detail})
    return {"target": target, "seconds_to_target": reached, "fastest_fixed": list(fastest), "checks": checks,
            "curves": curves}


def _seconds(value):
    return "never" if value is None else f"{value:.1f} s"


def format_report(results, report):
    """A markdown table (loss per epoch, seconds to the target, the last N and lr) and the targets, one per line.

    Example:
        >>> epoch = {"samples": 10, "seconds": 1.0, "test_loss": 1.0, "accumulate_step": 4, "lr": 0.02}
        >>> report = {"target": 1.0, "seconds_to_target": {"N=4": 1.0}, "checks": []}
        >>> print(format_report({"N=4": [epoch]}, report))
        | run | validation loss after epoch 1 | s to 1.0000 | last N, lr |
        |---|---|---|---|
        | N=4 | 1.0000 | 1.0 | 4, 0.02 |
    """
    epochs = max(len(records) for records in results.values())
    header = " | ".join(f"{e + 1}" for e in range(epochs))
    lines = [f"| run | validation loss after epoch {header} | s to {report['target']:.4f} | last N, lr |",
             "|" + "---|" * (epochs + 3)]
    for name, records in results.items():
        losses = " | ".join(f"{r['test_loss']:.4f}" for r in records) + " | " * (epochs - len(records))
        last = records[-1]
        setting = f"{last['accumulate_step']}, {last['lr']:.3g}" if "lr" in last else \
            str(last.get("accumulate_step", name.split("=")[-1]))
        reached = report["seconds_to_target"].get(name)
        lines.append(f"| {name} | {losses} | {'never' if reached is None else f'{reached:.1f}'} | {setting} |")
    lines += [f"{'met' if check['met'] else 'MISSED'}: {check['target']}: {check['detail']}"
              for check in report["checks"]]
    return "\n".join(lines)


def main(argv=None):
    """``python -m benchmarks.scale_rules {lm,mnist}``: runs the sweep, prints the table and the targets."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale_rules", description=__doc__.split("\n")[0])
    parser.add_argument("tool", choices=sorted(TOOLS))
    parser.add_argument("--epochs", type=int, default=6, help="epochs per run (default 6)")
    parser.add_argument("--optimizer", default=None, help="default: adamw for lm, sgd for mnist")
    parser.add_argument("--windows", type=int, nargs="+", default=list(WINDOWS), help="fixed N (default 1 to 32)")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the records and the report as JSON")
    parser.add_argument("--flags", default="", help="more flags for every run, one string (--flags='--seed 1')")
    args = parser.parse_args(argv)
    optimizer = args.optimizer or ("adamw" if args.tool == "lm" else "sgd")
    extra = args.flags.split()
    say = lambda line: print(line, flush=True)  # noqa: E731
    load = lambda: " ".join(f"{value:.2f}" for value in os.getloadavg())  # noqa: E731
    say(f"load average before: {load()}")
    results = {}
    for name, accumulate_step, scale_rule in plan(optimizer, args.windows):
        results[name] = train(args.tool, accumulate_step, scale_rule, args.epochs, optimizer, extra)
        say(f"{name}: " + ", ".join(f"{r['test_loss']:.4f}" for r in results[name]) + f" (load {load()})")
    report = analyse(results, RIGHT_RULE[optimizer])
    say(format_report(results, report))
    say(f"load average after: {load()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "report": report, "optimizer": optimizer, "epochs": args.epochs}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
