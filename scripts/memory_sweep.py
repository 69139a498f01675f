"""The memory plan against a sweep: a tool's --micro-batch auto run, then every candidate size run fixed.

For ``--batch-size B --memory-budget SIZE``: one run of the tool with
``--micro-batch auto``, then one per candidate size m (``training.memory.candidate_sizes``)
with ``--batch-size B --micro-batch m``, all for ``--epochs``, one after another.
Each run's peak resident memory is the whole process's (``os.wait4``), its
samples/s and final test loss are its JSON log's. Prints a Markdown table
and what docs/memory-plan.md#measuring-it-on-your-machine checks: the chosen
size's peak against the budget, its samples/s over the fastest size that fits,
and the planning time over the fixed run's. Run it on an idle machine.

Example:
    python scripts/memory_sweep.py lm --batch-size 40 --memory-budget 1450MiB --tool-flags=--synthetic
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from accumulator.memory import format_size  # noqa: E402
from training.arguments import memory_size, positive_int  # noqa: E402
from training.memory import candidate_sizes  # noqa: E402

SCRIPTS = {"mnist": "train_mnist.py", "lm": "train_lm.py"}


def run_measured(tool, argv, log):
    """Runs ``scripts/<tool>`` with ``argv`` and ``--log-json log``; returns ``(peak bytes, seconds, log dict)``.

    Example:
        >>> run_measured("mnist", ["--batch-size", "0"], "unused.json")
        Traceback (most recent call last):
        ...
        RuntimeError: train_mnist.py --batch-size 0 --log-json unused.json exited with 2: ...
    """
    command = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), SCRIPTS[tool]), *argv,
               "--log-json", log]
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)  # its own peak and its reaped children's, in KiB
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        if process.returncode:
            output.seek(0)
            raise RuntimeError(f"{' '.join([SCRIPTS[tool], *command[2:]])} exited with {process.returncode}: "
                               f"{output.read()[-2000:]}")
    with open(log, encoding="utf-8") as logged:
        return usage.ru_maxrss * 1024, seconds, json.load(logged)


def report(batch, budget, plan, planned_seconds, rows):
    """The Markdown table and the checks, from the auto run's ``plan`` and the fixed runs' ``rows``.

    ``rows`` are ``(size, peak, seconds, summary)`` per size.

    Example:
        >>> phases = {"start": 0.3, "build": 0.1, "first call": 0.15, "timed": 0.05}
        >>> plan = {"micro_batch": 8, "probes": [{"size": 8, "peak": 500 * 2 ** 20, "seconds": 0.6, "phases": phases},
        ...                                      {"size": 16, "peak": None, "seconds": 0.2, "phases": None}]}
        >>> rows = [(8, 600 * 2 ** 20, 10.0, {"samples_per_second": 90.0, "final_test_loss": 0.5}),
        ...         (16, 700 * 2 ** 20, 9.0, {"samples_per_second": 100.0, "final_test_loss": 0.5})]
        >>> print(report(16, 650 * 2 ** 20, plan, 11.0, rows))
        | micro-batch | N | peak resident | samples/s | final test loss | fits 650.0 MiB | chosen |
        | ---: | ---: | ---: | ---: | ---: | :---: | :---: |
        | 8 | 2 | 600.0 MiB | 90 | 0.500000 | yes | yes |
        | 16 | 1 | 700.0 MiB | 100 | 0.500000 | no |  |
        chosen 8: peak 600.0 MiB within the budget 650.0 MiB: yes; 1.00x the samples/s of the fastest size that fits (8)
        planning 1.0 s: 10.0% of the fixed run at the chosen size (10.0 s)
        the probes' seconds: 8: 0.6 (start 0.3, build 0.1, first call 0.1, timed 0.1), 16: 0.2
    """
    lines = [f"| micro-batch | N | peak resident | samples/s | final test loss | fits {format_size(budget)} | chosen |",
             "| ---: | ---: | ---: | ---: | ---: | :---: | :---: |"]
    for size, peak, _, summary in rows:
        lines.append(f"| {size} | {-(-batch // size)} | {format_size(peak)} | {summary['samples_per_second']:,.0f} | "
                     f"{summary['final_test_loss']:.6f} | {'yes' if peak <= budget else 'no'} | "
                     f"{'yes' if size == plan['micro_batch'] else ''} |")
    chosen = next(row for row in rows if row[0] == plan["micro_batch"])
    fitting = [row for row in rows if row[1] <= budget] or [chosen]
    fastest = max(fitting, key=lambda row: row[3]["samples_per_second"])
    lines.append(f"chosen {chosen[0]}: peak {format_size(chosen[1])} within the budget {format_size(budget)}: "
                 f"{'yes' if chosen[1] <= budget else 'no'}; "
                 f"{chosen[3]['samples_per_second'] / fastest[3]['samples_per_second']:.2f}x the samples/s of the "
                 f"fastest size that fits ({fastest[0]})")
    lines.append(f"planning {planned_seconds - chosen[2]:.1f} s: {(planned_seconds - chosen[2]) / chosen[2]:.1%} of "
                 f"the fixed run at the chosen size ({chosen[2]:.1f} s)")
    probes = [probe for probe in plan["probes"] if probe.get("seconds") is not None]  # plans before #46 have none
    if probes:
        lines.append("the probes' seconds: " + ", ".join(map(_probe_seconds, probes)))
    return "\n".join(lines)


def _probe_seconds(probe):
    """A logged probe's seconds and where they went (the child's start, build, first call, timed calls)."""
    detail = ", ".join(f"{phase} {seconds:.1f}" for phase, seconds in (probe.get("phases") or {}).items())
    return f"{probe['size']}: {probe['seconds']:.1f}" + (f" ({detail})" if detail else "")


def build_parser():
    """The command line: the tool, the batch per update, the budget, the epochs, and the tool's own flags.

    Example:
        >>> flags = build_parser().parse_args(["lm", "--batch-size", "20", "--memory-budget", "8G",
        ...                                    "--tool-flags=--synthetic --width 32"])
        >>> flags.tool, flags.memory_budget, flags.tool_flags
        ('lm', 8589934592, ['--synthetic', '--width', '32'])
    """
    parser = argparse.ArgumentParser(prog="memory_sweep.py", description=__doc__.splitlines()[0])
    parser.add_argument("tool", choices=sorted(SCRIPTS))
    parser.add_argument("--batch-size", type=positive_int, required=True, metavar="B", help="the batch per update")
    parser.add_argument("--memory-budget", type=memory_size, required=True, metavar="SIZE")
    parser.add_argument("--epochs", type=positive_int, default=3, metavar="N")
    parser.add_argument("--out", default=None, metavar="PATH", help="also write the runs as JSON")
    parser.add_argument("--tool-flags", type=shlex.split, default=[], metavar="'FLAGS'",
                        help="the tool's own flags, as one argument: --tool-flags='--synthetic --width 32'")
    return parser


def main(argv=None):
    """Runs the plan and the sweep; prints the report and writes ``--out`` (JSON) if given."""
    flags = build_parser().parse_args(argv)
    common = [*flags.tool_flags, "--epochs", str(flags.epochs)]
    with tempfile.TemporaryDirectory() as folder:
        planned = [*common, "--batch-size", str(flags.batch_size), "--micro-batch", "auto", "--memory-budget",
                   str(flags.memory_budget)]
        _, planned_seconds, logged = run_measured(flags.tool, planned, os.path.join(folder, "auto.json"))
        rows = []
        for size in candidate_sizes(flags.batch_size):
            fixed_argv = [*common, "--batch-size", str(flags.batch_size), "--micro-batch", str(size)]
            peak, seconds, fixed = run_measured(flags.tool, fixed_argv, os.path.join(folder, f"{size}.json"))
            rows.append((size, peak, seconds, fixed["summary"]))
    print(report(flags.batch_size, flags.memory_budget, logged["memory_plan"], planned_seconds, rows))
    if flags.out:
        with open(flags.out, "w", encoding="utf-8") as out:
            json.dump({"plan": logged["memory_plan"], "planned_run": {"seconds": planned_seconds,
                                                                      "summary": logged["summary"]},
                       "sweep": [{"size": size, "peak": peak, "seconds": seconds, "summary": summary}
                                 for size, peak, seconds, summary in rows]}, out, indent=2)


if __name__ == "__main__":
    main()
