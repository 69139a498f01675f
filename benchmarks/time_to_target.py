"""Time to a target loss (issue 47): N = 1, the fixed windows, the noise-scale window and the measured window.

``scripts/benchmark.py --time-to-target`` runs each training tool
(``scripts/train_mnist.py`` and ``scripts/train_lm.py``, ``--synthetic``) in
the scale rules' regime (docs/scale-rules.md#shown-to-work: the learning rate
tuned at N = 1; MNIST with SGD and the linear rule, the language model with
one packed row per micro-batch, AdamW and the square-root rule) once per
configuration and seed, as a user runs it: a process of its own, one after
the other, its ``--log-json`` read back. The configurations: N = 1, each
fixed window N > 1 without and with the rule, ``--accumulate-step noise``
and ``--accumulate-step auto`` (both with the rule).

N = 1 trains ``target_epoch`` epochs first; its validation loss after the
last is the seed's **target**. Every other run trains until its loss has
reached the target and it has trained ``target_epoch`` epochs (equal samples
with N = 1), or ``CAP`` times N = 1's samples: the harness stops it
(SIGTERM, which the tools handle) at the first epoch's end past both.

The **time to target** is the training seconds (the tools' epoch
``seconds``: probes included, the compiles and the evaluation not) until the
validation loss first reaches the target. The tools evaluate once per epoch,
so it is interpolated linearly between the epochs' ends (reached in the
first epoch: that epoch's end).
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.report import finish, ruled, write_json
from benchmarks.runner import REPO_ROOT, worker_env

TOOLS = {"mnist": "scripts/train_mnist.py", "lm": "scripts/train_lm.py"}
TOOL_NAMES = {"mnist": "MNIST (samples)", "lm": "LM (tokens)"}
# The scale rules' regime, the learning rate tuned at N = 1: docs/scale-rules.md#shown-to-work.
REGIME = {"mnist": ["--optimizer", "sgd", "--lr", "0.01"],
          "lm": ["--optimizer", "adamw", "--lr", "0.003", "--batch-size", "1", "--sample-tokens", "0"]}
RULES = {"mnist": "linear", "lm": "sqrt"}
ADAPTIVE = ("noise", "auto")
WINDOWS = (1, 2, 4, 8, 16, *ADAPTIVE)
TARGET_EPOCH = 3
CAP = 2  # a run is "not reached" after CAP x N = 1's samples
WITHIN = 1.15  # the bound on the measured window against the best fixed one
TIMEOUT = 1200  # seconds per run: the language model's capped runs under some load
POLL_SECONDS = 0.5
HEADER = ("s to target: training seconds (epochs' seconds, probes included; compile and evaluation not) until the "
          "validation loss first reaches N = 1's after epoch {epoch}, same seed; the tools evaluate once per epoch, "
          "so it is interpolated linearly between the epochs' ends. 'not reached': not within {cap}x N = 1's samples.")


def window_list(text):
    """An argparse ``type``: a comma list of fixed windows N (whole numbers above 0) and ``noise``, ``auto``; with 1.

    N = 1 sets the target, so the list must hold it.

    Example:
        >>> window_list("1,4,auto")
        [1, 4, 'auto']
        >>> window_list("2,auto")
        Traceback (most recent call last):
        argparse.ArgumentTypeError: invalid value: '2,auto' (must hold 1: N = 1 sets the target)
    """
    windows = []
    for value in text.split(","):
        value = value.strip()
        if value not in ADAPTIVE and not (value.isdigit() and int(value) > 0):
            raise argparse.ArgumentTypeError(f"invalid value: {value!r} (a whole number above 0, noise or auto)")
        windows.append(value if value in ADAPTIVE else int(value))
    if 1 not in windows:
        raise argparse.ArgumentTypeError(f"invalid value: {text!r} (must hold 1: N = 1 sets the target)")
    return windows


def seed_list(text):
    """An argparse ``type``: a comma list of seeds, whole numbers 0 or above.

    Example:
        >>> seed_list("0,1")
        [0, 1]
        >>> seed_list("0,-1")
        Traceback (most recent call last):
        argparse.ArgumentTypeError: invalid value: '-1' (must be a whole number, 0 or above)
    """
    seeds = [value.strip() for value in text.split(",")]
    for value in seeds:
        if not value.isdigit():
            raise argparse.ArgumentTypeError(f"invalid value: {value!r} (must be a whole number, 0 or above)")
    return [int(value) for value in seeds]


def make_configs(tool, windows=WINDOWS):
    """The runs of ``tool``: ``[(name, --accumulate-step, --scale-rule)]``, N = 1 first.

    Each fixed N > 1 runs without and with the tool's rule; ``noise`` and
    ``auto`` with it (the learning rate was tuned at N = 1).

    Example:
        >>> [name for name, _, _ in make_configs("lm", [4, 1, "auto"])]
        ['N=1', 'N=4', 'N=4 sqrt', 'auto sqrt']
    """
    rule = RULES[tool]
    configs = [("N=1", 1, "none")]
    for window in windows:
        if window in ADAPTIVE:
            configs.append((f"{window} {rule}", window, rule))
        elif window > 1:
            configs += [(f"N={window}", window, "none"), (f"N={window} {rule}", window, rule)]
    return configs


def command(tool, accumulate_step, scale_rule, seed, epochs, log, data_dir=None):
    """The tool's command line for one run: its regime's flags, ``--synthetic`` unless ``data_dir`` names the data.

    Example:
        >>> " ".join(command("mnist", "auto", "linear", 1, 6, "log.json")[2:-2])
        '--synthetic --optimizer sgd --lr 0.01 --accumulate-step auto --scale-rule linear --seed 1 --epochs 6'
    """
    data = ["--data-dir", data_dir] if data_dir else ["--synthetic"]
    return [sys.executable, os.path.join(REPO_ROOT, TOOLS[tool]), *data, *REGIME[tool],
            "--accumulate-step", str(accumulate_step), "--scale-rule", scale_rule, "--seed", str(seed),
            "--epochs", str(epochs), "--log-json", log]


def _logged(path):
    """The epochs' records ``--log-json`` holds so far ([] before the first epoch ends); written atomically."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)["epochs"]


def done(records, target, target_epoch):
    """True when a run can stop: ``target_epoch`` epochs trained and the target loss reached.

    Example:
        >>> done([{"test_loss": 2.0}, {"test_loss": 0.9}], 1.0, 3), done([{"test_loss": 0.9}] * 3, 1.0, 3)
        (False, True)
    """
    return len(records) >= target_epoch and any(record["test_loss"] <= target for record in records)


def train(tool, accumulate_step, scale_rule, seed, epochs, target=None, target_epoch=TARGET_EPOCH, data_dir=None,
          timeout=TIMEOUT):
    """Runs one tool in a process of its own: ``{"records", "command", "load_before", "load_after", "stopped"}``.

    With ``target`` the run is stopped once :func:`done` (``stopped`` True);
    ``records`` are ``--log-json``'s epochs; the loads are the 1-minute
    load averages at its start and end. A run that fails, or outlasts
    ``timeout`` seconds, gives ``error`` too, the tail of its output.

    Example (it trains: tests/test_benchmarks_time_to_target.py runs the whole command):
        >>> run = train("mnist", 2, "linear", 0, 1)  # doctest: +SKIP
        >>> len(run["records"]), run["stopped"]  # doctest: +SKIP
        (1, False)
    """
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="time_to_target_") as scratch:
        log, output = os.path.join(scratch, "log.json"), os.path.join(scratch, "output.txt")
        argv = command(tool, accumulate_step, scale_rule, seed, epochs, log, data_dir)
        run = dict(command=" ".join(argv[1:]), load_before=load, stopped=False)
        started = time.time()
        # Output to a file: a pipe left unread would fill with the progress bar and stall the run.
        with open(output, "w", encoding="utf-8") as sink:
            process = subprocess.Popen(argv, env=worker_env("1"), cwd=scratch, stdout=sink, stderr=subprocess.STDOUT)
            while process.poll() is None:
                if time.time() - started > timeout:
                    process.kill()
                    process.wait()
                    return dict(run, error=f"timed out after {timeout} s (--timeout)", records=_logged(log),
                                load_after=os.getloadavg()[0])
                if target is not None and done(_logged(log), target, target_epoch):
                    process.send_signal(signal.SIGTERM)
                    process.wait()
                    run["stopped"] = True
                    break
                time.sleep(POLL_SECONDS)
        run.update(records=_logged(log), load_after=os.getloadavg()[0])
        if process.returncode and not run["stopped"]:
            with open(output, encoding="utf-8") as handle:
                tail = handle.read().strip().splitlines()[-5:]
            run["error"] = "\n".join(tail) or f"exit code {process.returncode}"
        return run


def run_all(tools, seeds, windows=WINDOWS, target_epoch=TARGET_EPOCH, data_dir=None, timeout=TIMEOUT, log=None,
            save=None):
    """Every configuration of every tool and seed, one after the other, N = 1 first: a list of runs.

    Each run is :func:`train`'s with ``tool``, ``seed``, ``name`` and, but
    for N = 1's, the ``target`` it ran to. ``data_dir`` is MNIST's (the
    language model takes ``--synthetic``). A progress line per run goes to
    ``log`` (default stderr), and ``save(runs)``, when given, is called
    after each run. When N = 1 fails, the seed's other runs are not started.

    Example (it trains: tests/test_benchmarks_time_to_target.py runs the whole command):
        >>> runs = run_all(["mnist"], [0], [1, "auto"], target_epoch=1)  # doctest: +SKIP
        >>> [(run["name"], len(run["records"])) for run in runs]  # doctest: +SKIP
        [('N=1', 1), ('auto linear', 2)]
    """
    log = log or sys.stderr
    runs, started = [], time.time()
    for tool in tools:
        for seed in seeds:
            target = None
            for name, step, rule in make_configs(tool, windows):
                epochs = target_epoch if target is None else CAP * target_epoch
                run = dict(tool=tool, seed=seed, name=name, target=target,
                           **train(tool, step, rule, seed, epochs, target, target_epoch,
                                   data_dir if tool == "mnist" else None, timeout))
                runs.append(run)
                if save:
                    save(runs)
                losses = ", ".join(f"{record['test_loss']:.4f}" for record in run["records"])
                status = run.get("error", "").splitlines()[-1:] or [f"validation loss {losses}"]
                print(f"[{time.time() - started:6.0f}s] {tool} seed {seed} {name} (load {run['load_before']:.2f}"
                      f"-{run['load_after']:.2f}): {status[0]}", file=log, flush=True)
                if target is None:
                    if "error" in run or len(run["records"]) < target_epoch:
                        break
                    target = run["records"][target_epoch - 1]["test_loss"]
    return runs


def curve(records):
    """``(seen, seconds, validation loss)`` at each epoch's end, cumulative; seen in what the task counts.

    Example:
        >>> curve([{"counted": 10, "seconds": 2.0, "test_loss": 1.5},
        ...        {"counted": 10, "seconds": 1.0, "test_loss": 1.0}])
        [(10, 2.0, 1.5), (20, 3.0, 1.0)]
    """
    seen, seconds, points = 0, 0.0, []
    for record in records:
        seen += record["counted"]
        seconds += record["seconds"]
        points.append((seen, seconds, record["test_loss"]))
    return points


def seconds_to(points, target):
    """Seconds at which the validation loss first reaches ``target``, linear between epochs' ends; None if never.

    Reached at the first epoch's end, that end's seconds: the loss before it is not measured.

    Example:
        >>> points = [(10, 2.0, 1.5), (20, 4.0, 1.0)]
        >>> seconds_to(points, 1.25), seconds_to(points, 1.5), seconds_to(points, 0.5)
        (3.0, 2.0, None)
    """
    previous = None
    for _, seconds, loss in points:
        if loss <= target:
            if previous is None:
                return seconds
            before, before_loss = previous
            return before + (seconds - before) * (before_loss - target) / (before_loss - loss)
        previous = (seconds, loss)
    return None


def probe_shares(records, seconds):
    """The probes' share of the first ``seconds`` of training: all their seconds, and those beyond the kept branch.

    Counts the probes of the epochs that ended by ``seconds`` and of the one
    running then (its probes come early in it). Returns ``(share, spent)``.

    Example:
        >>> probe = {"seconds": 3.0, "accumulate_step": 2, "branch_seconds": {"1": 1.0, "2": 1.0}}
        >>> probe_shares([{"seconds": 10.0, "probes": [probe]}, {"seconds": 10.0, "probes": []}], 10.0)
        (0.3, 0.2)
    """
    total, spent = 0.0, 0.0
    elapsed = 0.0
    for record in records:
        for probe in record.get("probes", []):
            total += probe["seconds"]
            spent += probe["seconds"] - probe["branch_seconds"][str(probe["accumulate_step"])]
        elapsed += record["seconds"]
        if elapsed >= seconds:
            break
    return total / seconds, spent / seconds


def _fixed_window(name):
    """N of a fixed configuration's name (``'N=4 sqrt'``: 4), None for an adaptive one."""
    return int(name.split()[0][2:]) if name.startswith("N=") else None


def _median(values):
    """The median of ``values``, None (never reached) counting as the slowest; None when that is the median."""
    middle = statistics.median([float("inf") if value is None else value for value in values])
    return None if middle == float("inf") else middle


def analyse(runs, target_epoch=TARGET_EPOCH):
    """Per tool, a row per configuration and the issue's checks on the measured window, from :func:`run_all`'s runs.

    A row: ``seconds`` per seed (None: not reached), their ``median``, its
    ratio ``vs_n1`` to N = 1's and ``vs_best`` to the best fixed window's
    (the fixed configuration with the lowest median), ``n_epoch1`` (N at the
    first epoch's end, per seed), ``loss`` after ``target_epoch`` epochs per
    seed (equal samples), and for ``auto`` runs ``probe_share`` and
    ``probe_spent`` (:func:`probe_shares` up to the target, or of the whole
    run when it is not reached; per seed). The checks count
    seeds: the measured window faster than N = 1; within ``WITHIN`` of the
    best fixed window; its N after the first epoch within one doubling of
    the best fixed window's; after each of the first ``target_epoch``
    epochs not worse than N = 1 by more than N = 1's spread over the seeds.

    Example:
        >>> epochs = lambda seconds, *losses, n=None: [dict(counted=10, seconds=seconds, test_loss=loss,
        ...                                                 accumulate_step=n) for loss in losses]
        >>> runs = [dict(tool="mnist", seed=0, name="N=1", records=epochs(4.0, 2.0, 1.5, 1.0)),
        ...         dict(tool="mnist", seed=0, name="N=2 linear", records=epochs(2.0, 1.8, 1.2, 1.0)),
        ...         dict(tool="mnist", seed=0, name="auto linear", records=epochs(3.0, 1.9, 1.4, 0.8, n=4))]
        >>> result = analyse(runs)["mnist"]
        >>> [(row["name"], row["median"], row["vs_best"]) for row in result["rows"]]
        [('N=1', 12.0, 2.0), ('N=2 linear', 6.0, 1.0), ('auto linear', 8.0, 1.3333333333333333)]
        >>> result["best"], [check["met"] for check in result["checks"]]  # 8 s > 1.15 x 6 s; N 4 vs 2: one doubling
        ('N=2 linear', [1, 0, 1, 1])
    """
    analysed = {}
    for tool in [tool for tool in TOOLS if any(run["tool"] == tool for run in runs)]:
        ran = {(run["name"], run["seed"]): run for run in runs if run["tool"] == tool}
        seeds = sorted({seed for name, seed in ran if name == "N=1" and "error" not in ran[name, seed]})
        targets = {seed: ran["N=1", seed]["records"][target_epoch - 1]["test_loss"] for seed in seeds}
        rows = []
        for name in dict.fromkeys(name for name, _ in ran):
            row = dict(name=name, seconds={}, n_epoch1={}, loss={}, errors=[])
            for seed in seeds:
                run = ran.get((name, seed))
                if run is None:
                    continue
                if "error" in run:
                    row["errors"].append(run["error"].splitlines()[-1])
                records = run["records"]
                row["seconds"][seed] = seconds_to(curve(records), targets[seed])
                row["n_epoch1"][seed] = records[0].get("accumulate_step", _fixed_window(name)) if records else None
                row["loss"][seed] = records[target_epoch - 1]["test_loss"] if len(records) >= target_epoch else None
                if name.startswith("auto") and records:
                    until = row["seconds"][seed] or curve(records)[-1][1]  # never reached: the whole run
                    row.setdefault("probe_share", {})[seed], row.setdefault("probe_spent", {})[seed] = probe_shares(
                        records, until)
            row["median"] = _median(list(row["seconds"].values()))
            rows.append(row)
        analysed[tool] = _compare(rows, ran, seeds, target_epoch)
    return analysed


def _compare(rows, ran, seeds, target_epoch):
    """The rows' ratios, the best fixed window and the checks of the measured window (``analyse``'s)."""
    by_name = {row["name"]: row for row in rows}
    fixed = [row for row in rows if _fixed_window(row["name"]) and row["median"] is not None]
    best = min(fixed, key=lambda row: row["median"]) if fixed else None
    base = by_name.get("N=1", {}).get("median")
    for row in rows:
        row["vs_n1"] = row["median"] / base if row["median"] is not None and base else None
        row["vs_best"] = row["median"] / best["median"] if row["median"] is not None and best else None
    auto = next((row for row in rows if row["name"].startswith("auto")), None)
    if auto is None or best is None:
        return dict(rows=rows, best=best and best["name"], seeds=seeds, checks=[], gaps=[])
    auto_seeds = [seed for seed in seeds if (auto["name"], seed) in ran]

    def loss(name, seed, epoch):
        records = ran[name, seed]["records"]
        return records[epoch]["test_loss"] if len(records) > epoch else None

    # After each epoch (equal samples), the measured window's loss less N = 1's, and N = 1's spread over the seeds.
    gaps = [dict(epoch=e + 1, spread=max(loss("N=1", seed, e) for seed in seeds)
                 - min(loss("N=1", seed, e) for seed in seeds),
                 gaps={seed: loss(auto["name"], seed, e) - loss("N=1", seed, e) for seed in auto_seeds
                       if loss(auto["name"], seed, e) is not None})
            for e in range(target_epoch)]
    best_n = _fixed_window(best["name"])
    reached, n_first = auto["seconds"], auto["n_epoch1"]
    tests = [
        ("faster than N = 1", lambda seed: reached[seed] is not None
         and reached[seed] < by_name["N=1"]["seconds"][seed]),
        (f"within {WITHIN}x the best fixed window", lambda seed: reached[seed] is not None and (
            best["seconds"].get(seed) is None or reached[seed] <= WITHIN * best["seconds"][seed])),
        ("N after epoch 1 within one doubling of the best fixed", lambda seed: n_first[seed] is not None
         and best_n / 2 <= n_first[seed] <= 2 * best_n),
        ("after equal samples not worse than N = 1 by more than the seeds' spread", lambda seed: all(
            seed in gap["gaps"] and gap["gaps"][seed] <= gap["spread"] for gap in gaps)),
    ]
    checks = [dict(name=name, met=sum(bool(test(seed)) for seed in auto_seeds), of=len(seeds)) for name, test in tests]
    return dict(rows=rows, best=best["name"], seeds=seeds, checks=checks, gaps=gaps)


def _seconds(value):
    return "not reached" if value is None else f"{value:.1f}"


def _ratio(value):
    return "" if value is None else f"{value:.2f}"


def _per_seed(values, form):
    return " / ".join(form(values[seed]) for seed in sorted(values))


def format_time_to_target(analysed, target_epoch=TARGET_EPOCH):
    """The table per tool: time to target per seed and median, ratios, N after epoch 1, loss at equal samples, checks.

    Example:
        >>> row = dict(name="auto sqrt", seconds={0: 30.0, 1: None}, median=None, vs_n1=None, vs_best=None,
        ...            n_epoch1={0: 2, 1: 4}, loss={0: 0.8, 1: 0.9}, errors=[], probe_share={0: 0.1},
        ...            probe_spent={0: 0.05})
        >>> table = format_time_to_target({"lm": dict(rows=[row], best=None, seeds=[0, 1], checks=[], gaps=[])})
        >>> columns, probes = table.splitlines()[3].split(" probes ")
        >>> columns.split("  ")[0], probes
        ('auto sqrt', '10% (5% beyond the kept branch)')
        >>> print(columns)
        auto sqrt              30.0 / not reached  not reached                  2 / 4    0.8000 / 0.9000
    """
    head = (f"{'run':14} {'s to target, per seed':>26} {'median s':>12} {'x N=1':>6} {'x best':>6} "
            f"{'N ep.1':>8} {f'loss ep.{target_epoch}':>18}")
    lines = []
    for tool, result in analysed.items():
        lines += ["", f"{TOOL_NAMES[tool]}, seeds {', '.join(map(str, result['seeds']))}; "
                  f"best fixed window: {result['best'] or 'none reached'}"] + ruled(head)
        for row in result["rows"]:
            line = (f"{row['name']:14} {_per_seed(row['seconds'], _seconds):>26} {_seconds(row['median']):>12} "
                    f"{_ratio(row['vs_n1']):>6} {_ratio(row['vs_best']):>6} "
                    f"{_per_seed(row['n_epoch1'], str):>8} "
                    f"{_per_seed(row['loss'], lambda loss: 'n/a' if loss is None else f'{loss:.4f}'):>18}")
            if "probe_share" in row:
                line += (f" probes {statistics.median(row['probe_share'].values()):.0%} "
                         f"({statistics.median(row['probe_spent'].values()):.0%} beyond the kept branch)")
            if row["errors"]:
                line += f" ERROR {row['errors'][-1][:60]}"
            lines.append(line)
        lines += [f"  after epoch {gap['epoch']}: {result['rows'][-1]['name']} less N=1 "
                  f"{_per_seed(gap['gaps'], lambda value: f'{value:+.4f}')} (N=1's spread over the seeds "
                  f"{gap['spread']:.4f})" for gap in result["gaps"]]
        lines += [f"  {check['name']}: {check['met']} of {check['of']} seeds (the goal: 2)"
                  for check in result["checks"]]
    lines.append(HEADER.format(epoch=target_epoch, cap=CAP))
    return "\n".join(lines[1:])


def plot_data(runs, analysed):
    """What the plot draws, per tool: validation loss over seen for N = 1, the best fixed and auto, and auto's N.

    ``{tool: {"losses": {label: [(seen, loss)]}, "windows": {label: [(seen, N)]}}}``: N as each probe set it
    (from the probe's point), ending where the run ended.

    Example:
        >>> records = [dict(counted=10, seconds=1.0, test_loss=1.0, accumulate_step=2,
        ...                 probes=[dict(seen=0, accumulate_step=2)])]
        >>> runs = [dict(tool="lm", seed=0, name=name, records=records) for name in ("N=1", "auto sqrt")]
        >>> plot_data(runs, {"lm": dict(best=None)})["lm"]["windows"]
        {'auto sqrt, seed 0': [(0, 1), (0, 2), (10, 2)]}
    """
    data = {}
    for tool, result in analysed.items():
        shown = {"N=1", result["best"]}
        losses, windows = {}, {}
        for run in runs:
            measured = run["name"].startswith("auto")
            if run["tool"] != tool or not run["records"] or not (run["name"] in shown or measured):
                continue
            label = f"{run['name']}, seed {run['seed']}"
            losses[label] = [(seen, loss) for seen, _, loss in curve(run["records"])]
            if measured:
                steps = [(0, 1)] + [(probe["seen"], probe["accumulate_step"])
                                    for record in run["records"] for probe in record.get("probes", [])]
                windows[label] = steps + [(losses[label][-1][0], steps[-1][1])]
        data[tool] = dict(losses=losses, windows=windows)
    return data


def report(tools, seeds, windows=WINDOWS, target_epoch=TARGET_EPOCH, data_dir=None, timeout=TIMEOUT, json_path=None,
           settings=None, plot_path=None, from_json=None):
    """The ``--time-to-target`` run: every configuration trained; table and load note printed, JSON and plot written.

    The runs are written to ``json_path`` as each is done (an interrupted
    run keeps them), then again with the analysis. ``from_json`` names such a file: its runs
    (and the ``target_epoch`` they ran to) are analysed again instead of
    trained. Returns the exit status (:func:`benchmarks.report.finish`'s).

    Example:
        >>> report(["mnist", "lm"], [0, 1], json_path="ttt.json", plot_path="ttt.png")  # doctest: +SKIP
        0
    """
    if from_json:
        with open(from_json, encoding="utf-8") as handle:
            saved = json.load(handle)
        runs, target_epoch = saved["runs"], saved["settings"]["target_epoch"]
    else:
        runs = run_all(tools, seeds, windows, target_epoch, data_dir, timeout,
                       save=json_path and (lambda runs: write_json(json_path, settings=settings, runs=runs)))
    analysed = analyse(runs, target_epoch)
    print(format_time_to_target(analysed, target_epoch))

    def draw(path):
        from benchmarks.plot import plot_time_to_target
        return plot_time_to_target(plot_data(runs, analysed), path, TOOL_NAMES)

    return finish(runs, json_path, plot_path, draw, settings=settings, runs=runs, analysed=analysed)
