"""The weights' moving average in the tools (issue 57): validation loss with and without it, its horizon beside N.

``scripts/benchmark.py --ema`` runs each training tool (``scripts/train_mnist.py``, ``scripts/train_lm.py``,
``--synthetic``) once per seed with ``--ema`` (``DECAYS``) and ``--accumulate-step auto`` (the tool's scale rule, as
docs/batch-size.md#in-the-tools asks: the learning rate is tuned for N = 1), a process of its own, and reads its
``--log-json`` back. Each epoch's record holds the validation loss of the average (``test_loss``) and of the
trained weights (``trained_test_loss``): with and without the average, on the same run's weights. It also holds
every window's count (``ema_windows``) and the average's reference (``ema_reference``), from which each window's
``rho = decay ** (window / reference)`` and the average's horizon after it, ``window / (1 - rho)`` samples or
tokens (docs/ema.md#why-decay-follows-n), follow; beside it the horizon a fixed decay per update would give,
``window / (1 - decay)``, which grows with N.
"""
import json
import os
import subprocess
import sys
import tempfile

from benchmarks.report import finish
from benchmarks.runner import REPO_ROOT, worker_env

TOOLS = {"mnist": "scripts/train_mnist.py", "lm": "scripts/train_lm.py"}
TOOL_NAMES = {"mnist": "MNIST (samples)", "lm": "LM (tokens)"}
# The measured window's regime of docs/scale-rules.md#shown-to-work: the learning rate tuned at N = 1, its rule.
REGIME = {"mnist": ["--optimizer", "sgd", "--lr", "0.01", "--scale-rule", "linear"],
          "lm": ["--optimizer", "adamw", "--lr", "0.003", "--batch-size", "1", "--sample-tokens", "0",
                 "--clip-norm", "1", "--scale-rule", "sqrt"]}
# A horizon of about a tenth of each run (docs/ema.md#in-the-tools): 0.97 spans about 33 first windows, of 64
# samples on MNIST (auto's first probe keeps N = 2), 0.99 about 100, of about 110 tokens on the LM.
DECAYS = {"mnist": 0.97, "lm": 0.99}
SEEDS = (0, 1)
TIMEOUT = 1200  # seconds per run: the language model under some load


def command(tool, seed, decay, log, data_dir):
    """The tool's command line for one run: ``--synthetic`` data in ``data_dir``, its regime, auto, the average.

    Example:
        >>> print(" ".join(command("mnist", 1, 0.97, "run.json", "data")[1:]))  # doctest: +NORMALIZE_WHITESPACE
        scripts/train_mnist.py --synthetic --data-dir data --seed 1 --accumulate-step auto
        --optimizer sgd --lr 0.01 --scale-rule linear --ema 0.97 --log-json run.json
    """
    return [sys.executable, TOOLS[tool], "--synthetic", "--data-dir", data_dir, "--seed", str(seed),
            "--accumulate-step", "auto", *REGIME[tool], "--ema", str(decay), "--log-json", log]


def run_tool(tool, seed, decay, timeout=TIMEOUT):
    """Runs one tool once in a scratch folder; returns its JSON log, or ``{"error": the output's tail}``.

    Example:
        >>> round(run_tool("mnist", 0, 0.97)["epochs"][-1]["trained_test_loss"], 4)  # 20 s  # doctest: +SKIP
        0.0167
    """
    with tempfile.TemporaryDirectory(prefix="ema_") as scratch:
        log = os.path.join(scratch, "run.json")
        try:
            done = subprocess.run(command(tool, seed, decay, log, os.path.join(scratch, "data")),
                                  env=worker_env("1"), cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout} s"}
        if done.returncode != 0:
            return {"error": "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])}
        with open(log, encoding="utf-8") as handle:
            return json.load(handle)


def horizons(log):
    """Every window of a run's JSON log, in order: ``{"seen", "kappa", "rho", "horizon", "fixed_horizon"}``.

    ``seen``: the samples or tokens trained when the window closed; ``kappa``: its count over the reference (N over
    the first window's, for whole windows); ``horizon``: the average's after it, ``window / (1 - rho)``;
    ``fixed_horizon``: a fixed decay per update's, ``window / (1 - decay)``.

    Example: windows of 2, 4 and 1 (a short last one) samples after a reference of 2, at decay 0.5.
        >>> log = {"config": {"ema": 0.5}, "epochs": [{"ema_windows": [2, 4], "ema_reference": 2.0},
        ...                                          {"ema_windows": [1], "ema_reference": 2.0}]}
        >>> [(w["seen"], w["kappa"], round(w["rho"], 4), round(w["horizon"], 4), w["fixed_horizon"])
        ...  for w in horizons(log)]
        [(2, 1.0, 0.5, 4.0, 4.0), (6, 2.0, 0.25, 5.3333, 8.0), (7, 0.5, 0.7071, 3.4142, 2.0)]
    """
    decay, windows, seen = log["config"]["ema"], [], 0
    for record in log["epochs"]:
        for window in record["ema_windows"]:
            seen += window
            kappa = window / record["ema_reference"]
            rho = decay ** kappa
            windows.append(dict(seen=seen, kappa=kappa, rho=rho, horizon=window / (1 - rho),
                                fixed_horizon=window / (1 - decay)))
    return windows


def loss_rows(runs):
    """One row per run: the last epoch's validation loss with and without the average, N at the end, the horizons.

    ``runs``: ``{"tool", "seed", "log"}``, the log a tool's ``--log-json`` (or ``{"error"}``). ``kappas``,
    ``horizon`` and ``fixed``: the least and the most over the run's windows of ``horizons``' fields.

    Example:
        >>> log = {"config": {"ema": 0.5}, "epochs": [{"test_loss": 0.3, "trained_test_loss": 0.4,
        ...        "accumulate_step": 2, "ema_windows": [2, 4, 1], "ema_reference": 2.0}]}
        >>> row = loss_rows([dict(tool="mnist", seed=0, log=log)])[0]
        >>> row["with"], row["without"], row["n"], row["kappas"], [round(h, 2) for h in row["horizon"]], row["fixed"]
        (0.3, 0.4, 2, (0.5, 2.0), [3.41, 5.33], (2.0, 8.0))
    """
    rows = []
    for run in runs:
        log = run["log"]
        if "error" in log:
            rows.append(dict(tool=run["tool"], seed=run["seed"], error=log["error"]))
            continue
        last = log["epochs"][-1]
        windows = horizons(log)

        def spread(name):
            return min(w[name] for w in windows), max(w[name] for w in windows)

        rows.append(dict(tool=run["tool"], seed=run["seed"], **{"with": last["test_loss"]},
                         without=last["trained_test_loss"], n=last["accumulate_step"], kappas=spread("kappa"),
                         horizon=spread("horizon"), fixed=spread("fixed_horizon")))
    return rows


def format_rows(rows):
    """The rows as the markdown table BENCHMARKS.md holds.

    Example:
        >>> print(format_rows([dict(tool="mnist", seed=0, **{"with": 0.3}, without=0.4, n=2, kappas=(0.5, 2.0),
        ...                         horizon=(3.4, 5.3), fixed=(2.0, 8.0))]).splitlines()[-1])
        | MNIST (samples) | 0 | 0.3000 | 0.4000 | -0.1000 | 2 | 0.5-2 | 3-5 | 2-8 |
    """
    lines = ["| tool | seed | with the average | without | difference | N at the end | window / first | "
             "horizon | fixed decay's |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {TOOL_NAMES[row['tool']]} | {row['seed']} | ERROR {row['error'].splitlines()[-1]} |")
            continue
        kappas = "{:.2g}-{:.2g}".format(*row["kappas"])
        horizon, fixed = ("{:,.0f}-{:,.0f}".format(*row[name]) for name in ("horizon", "fixed"))
        lines.append(f"| {TOOL_NAMES[row['tool']]} | {row['seed']} | {row['with']:.4f} | {row['without']:.4f} | "
                     f"{row['with'] - row['without']:+.4f} | {row['n']} | {kappas} | {horizon} | {fixed} |")
    return "\n".join(lines)


def report(tools=tuple(TOOLS), seeds=SEEDS, json_path=None, plot_path=None, log=None):
    """Runs every tool once per seed, prints the table and the load before and after, writes the JSON and the plot.

    Returns the exit status: 1 when a run failed, 2 when the plot could not be written, else 0.

    Example:
        >>> report(("mnist",), seeds=(0,))  # a minute  # doctest: +SKIP
        0
    """
    log = log or sys.stderr
    load_before = os.getloadavg()
    runs = []
    for tool in tools:
        for seed in seeds:
            runs.append(dict(tool=tool, seed=seed, log=run_tool(tool, seed, DECAYS[tool])))
            print(f"ema: {tool} seed {seed}: {runs[-1]['log'].get('error', 'done').splitlines()[-1]}", file=log,
                  flush=True)
    load_after = os.getloadavg()
    rows = loss_rows(runs)
    print(format_rows(rows))
    print(f"decay at the first window {DECAYS}; load (1, 5, 15 min) before {load_before}, after {load_after}")

    def draw(path):
        from benchmarks.plot import plot_ema
        return plot_ema({(run["tool"], run["seed"]): horizons(run["log"]) for run in runs if "error" not in run["log"]},
                        path, TOOL_NAMES)

    return finish(rows, json_path, plot_path, draw, decays=DECAYS, load_before=load_before, load_after=load_after,
                  rows=rows, runs=runs)
