"""End to end: the training tools' epochs against their own compiled step.

``scripts/benchmark.py --end-to-end`` times what ``scripts/train_mnist.py``
runs, through the ``training`` API (``build_run`` and ``train_epoch``, the
progress bar included), on the same data (the ``--synthetic`` set unless
``--data-dir`` names MNIST). One worker process per tool alternates, epoch
by epoch, between:

* ``tool``: ``train_epoch`` with the driver the tool picks (``--driver auto``),
  its data read by ``data.mnist`` from memory;
* one ceiling per driver (``in-graph``, ``host``, ``window``): that driver's
  compiled steps called on an epoch of Tensors built beforehand (the same
  windows, the short last one included, stepped by
  ``training.loop.train_on_windows`` as the tool steps them): what the tool
  would reach with that driver if reading data and its progress bar cost
  nothing. The tool is compared with the fastest of them.

The ``mnist`` worker runs ``scripts/train_mnist.py``'s task; the ``lm`` worker ``scripts/train_lm.py``'s: its task
(``training.lm.lm_task``, on the ``--synthetic`` text, its rows packed as
the tool packs them by default) against its step on the same windows built
beforehand, in tokens/s: every worker counts what its task counts
(``Task.count``: MNIST's samples, the language model's tokens), in the
field ``samples``. Each worker's first epoch is reported apart (it
compiles); the others are the steady state. Workers alternate over the
repeats, as in the main benchmark.
"""
import json
import os
import statistics
import sys
import tempfile
import time

from benchmarks.report import finish, ruled
from benchmarks.runner import run_module
from benchmarks.worker import RESULT_PREFIX

# Which tool each worker runs.
STEPS = ("mnist", "lm")
STEP_NAMES = {"mnist": "MNIST", "lm": "LM, tokens/s"}
DRIVERS = ("in-graph", "host", "window")
PIPELINES = {"tool": "training tool (data in memory)",
             **{driver: f"{driver} driver on Tensors in memory" for driver in DRIVERS}}


def make_specs(batch, accumulate, epochs, data_dir=None, device_target="CPU", text_bytes=None, max_length=None,
               steps=STEPS):
    """One spec per worker of ``steps``: the MNIST tool, the LM tool.

    ``data_dir`` None: each worker writes the ``--synthetic`` set to a
    temporary folder. The LM's synthetic text has ``text_bytes`` and samples
    of ``max_length`` tokens at most (None: ``scripts/train_lm.py
    --synthetic``'s).

    Example:
        >>> [spec["step"] for spec in make_specs(32, 2, epochs=6)]
        ['mnist', 'lm']
        >>> [spec["step"] for spec in make_specs(8, 4, epochs=3, steps=("lm",))]
        ['lm']
    """
    lm = dict(text_bytes=text_bytes, max_length=max_length)
    return [dict(kind="end_to_end", step=step, batch=batch, accumulate=accumulate, epochs=epochs,
                 data_dir=data_dir, device_target=device_target, **(lm if step == "lm" else {})) for step in steps]


def _ceiling_epoch(run, windows, batch_size, accumulate_step, count):
    """The run's compiled steps over windows already in memory, as ``train_epoch`` steps them; returns what ``count`` counted.

    ``training.loop.train_on_windows`` without the data reading, the
    progress bar and the epoch's bookkeeping: the same calls in the same
    order (the short last window op by op, a partial one flushed).
    """
    import mindspore as ms
    from training.loop import train_on_windows
    counted = sum(counted for _, counted, _ in train_on_windows(run, windows, {batch_size}, accumulate_step, count))
    ms.runtime.synchronize()
    return counted


def _timed(function):
    started = time.perf_counter()
    samples = function()
    return dict(seconds=time.perf_counter() - started, samples=samples)


def _lm_task(spec, folder):
    """``scripts/train_lm.py --synthetic``'s task (its AdamW too), its text written into ``folder``."""
    from data.download import write_text
    from data.text import CORPUS_FILE, synthetic_text
    from training.lm import MAX_LENGTH, SYNTHETIC_BYTES, SYNTHETIC_DATA_SEED, lm_task
    path = os.path.join(folder, CORPUS_FILE)
    write_text(path, synthetic_text(spec.get("text_bytes") or SYNTHETIC_BYTES, seed=SYNTHETIC_DATA_SEED))
    return lm_task(path, max_length=spec.get("max_length") or MAX_LENGTH), "adamw"


def _measure_mindspore(spec, data_dir, progress):
    import dataclasses
    from training.config import TrainConfig
    from training.context import configure_context
    from training.loop import build_run, train_epoch
    from training.mnist import mnist_task

    task, optimizer = _lm_task(spec, data_dir) if spec["step"] == "lm" else (mnist_task(data_dir), "sgd")
    config = configure_context(TrainConfig(batch_size=spec["batch"], accumulate_step=spec["accumulate"],
                                           epochs=spec["epochs"], optimizer=optimizer,
                                           device_target=spec.get("device_target", "CPU")))
    run = build_run(config, task)
    epoch = iter(range(1, 10 ** 6))

    def tool():  # what the task counts: samples, or tokens (a single process counts them all)
        return train_epoch(run, task, config, next(epoch), progress)["counted"]

    variants = {"tool": tool}
    first = _timed(variants["tool"])
    windows = list(task.train_windows(config.batch_size, config.accumulate_step, shuffle=True, seed=0,
                                      drop_remainder=False, num_shards=None, shard_id=None))
    for driver in DRIVERS:
        driven = build_run(dataclasses.replace(config, driver=driver), task)
        _ceiling_epoch(driven, windows, config.batch_size, config.accumulate_step, task.count)  # compiles
        variants[driver] = (lambda driven: lambda: _ceiling_epoch(driven, windows, config.batch_size,
                                                                  config.accumulate_step, task.count))(driven)
    epochs = {name: [] for name in variants}
    names = list(variants)
    for index in range(spec["epochs"] - 1):
        # Rotate the order, so that no variant always runs right after another.
        for name in names[index % len(names):] + names[:index % len(names)]:
            epochs[name].append(_timed(variants[name]))
    return dict(first=first, driver=run.driver, epochs=epochs)


def measure(spec, progress=True):
    """Runs one worker's epochs; returns ``{"first": {...}, "driver", "epochs": {variant: [{seconds, samples}]}}``.

    ``spec`` comes from :func:`make_specs`; the tool's first epoch is apart (each
    ceiling's first, which compiles, is not timed), then ``epochs - 1`` of each
    variant; ``driver`` is the tool's pick. MindSpore's mode and device are set for
    the whole process.

    Example (four runs compile, so it is not run here: tests/benchmarks/test_end_to_end.py runs it):
        >>> import tempfile
        >>> from data.idx import write_synthetic_mnist
        >>> folder = tempfile.mkdtemp()
        >>> _ = write_synthetic_mnist(folder, n_train=64, n_test=16)
        >>> result = measure(dict(step="mnist", batch=16, accumulate=2, epochs=2, data_dir=folder),
        ...                  progress=False)  # doctest: +SKIP
        >>> list(result["epochs"]), result["driver"], result["epochs"]["host"][0]["samples"]  # doctest: +SKIP
        (['tool', 'in-graph', 'host', 'window'], 'in-graph', 64)
    """
    missing = sorted({"step", "batch", "accumulate", "epochs"} - set(spec))
    if missing or spec["step"] not in STEPS:
        raise ValueError(f"an end-to-end spec needs step (one of {', '.join(STEPS)}), batch, accumulate and "
                         f"epochs; got {spec}")
    with tempfile.TemporaryDirectory(prefix="mnist_synthetic_") as scratch:
        data_dir = spec.get("data_dir") if spec["step"] != "lm" else scratch
        if not data_dir:
            from data.idx import write_synthetic_mnist
            from training.mnist import SYNTHETIC_DATA_SEED, SYNTHETIC_SIZES
            data_dir = scratch
            write_synthetic_mnist(data_dir, n_train=SYNTHETIC_SIZES["train"], n_test=SYNTHETIC_SIZES["test"],
                                  seed=SYNTHETIC_DATA_SEED)
        return _measure_mindspore(spec, data_dir, progress)


def run_end_to_end(specs, repeats, timeout=600, log=None):
    """Runs every worker ``repeats`` times, alternating, each in a fresh interpreter.

    Writes a progress line per worker to ``log`` (default stderr); returns
    every run: the spec with ``repeat`` and what :func:`measure` returned,
    or ``error``.

    Example:
        >>> import io
        >>> runs = run_end_to_end([dict(kind="end_to_end", step="nope")], repeats=1, log=io.StringIO())
        >>> runs[0]["error"].splitlines()[-1]
        "ValueError: an end-to-end spec needs step (one of mnist, lm), batch, accumulate and epochs; got {'kind': 'end_to_end', 'step': 'nope'}"
    """
    log = log or sys.stderr
    runs = []
    started = time.time()
    for repeat in range(repeats):
        for spec in specs:
            result = dict(spec, repeat=repeat, **run_module("benchmarks.end_to_end", spec, "1", timeout))
            runs.append(result)
            status = result.get("error", "").splitlines()[-1:] or [f"first epoch {result['first']['seconds']:.2f} s"]
            print(f"[{time.time() - started:6.0f}s] {repeat + 1}/{repeats} end to end {spec['step']}: {status[0]}",
                  file=log, flush=True)
    return runs


def _throughput(epochs):
    rates = [epoch["samples"] / epoch["seconds"] for epoch in epochs]
    return statistics.median(rates), max(rates)


def end_to_end_rows(runs):
    """Rows per (step, pipeline): steady samples/s (median and fastest epoch) and the first epoch.

    Each tool row names the driver it ran (``driver``) and the fastest
    driver on Tensors in the same workers (``ceiling``, by median
    samples/s), and gets against that one ``vs_ceiling`` (median samples/s
    against median), ``paired_vs_ceiling`` (the median of the ratios of
    epochs run in the same round, back to back: the least disturbed by load
    that comes and goes) and ``min_vs_ceiling`` (fastest epoch against
    fastest epoch). A step whose every run failed gives a row with its ``error``.

    Example:
        >>> epochs = lambda s: [dict(seconds=s, samples=100)] * 3
        >>> run = dict(step="mnist", driver="in-graph", first=dict(seconds=2.0, samples=100),
        ...            epochs={"tool": epochs(1.0), "in-graph": epochs(0.95), "host": epochs(0.9)})
        >>> rows = end_to_end_rows([run])
        >>> [(row["driver"], row["ceiling"], round(row["vs_ceiling"], 2), round(row["paired_vs_ceiling"], 2))
        ...  for row in rows if "vs_ceiling" in row]
        [('in-graph', 'host', 0.9, 0.9)]
        >>> rows[0]["first_extra_s"]
        1.0
    """
    rows = []
    for step in STEPS:
        ran = [run for run in runs if run["step"] == step]
        ok = [run for run in ran if "error" not in run]
        if ran and not ok:
            rows.append(dict(step=step, pipeline="tool", error=ran[-1]["error"]))
        if not ok:
            continue
        by_pipeline = {}
        for pipeline in ok[0]["epochs"]:
            epochs = [epoch for run in ok for epoch in run["epochs"][pipeline]]
            median, best = _throughput(epochs)
            by_pipeline[pipeline] = dict(step=step, pipeline=pipeline, epochs=len(epochs), samples_per_s=median,
                                         best_samples_per_s=best,
                                         epoch_s=statistics.median(epoch["seconds"] for epoch in epochs),
                                         min_epoch_s=min(epoch["seconds"] for epoch in epochs))
        tool = by_pipeline["tool"]
        ceiling = max((name for name in by_pipeline if name != "tool"),
                      key=lambda name: by_pipeline[name]["samples_per_s"])
        # Epoch i of every variant ran in round i of the same worker.
        paired = statistics.median(
            (epoch["samples"] / epoch["seconds"]) / (other["samples"] / other["seconds"])
            for run in ok for epoch, other in zip(run["epochs"]["tool"], run["epochs"][ceiling]))
        # The first epoch against the median steady one, per worker.
        extra = [run["first"]["seconds"] - statistics.median(e["seconds"] for e in run["epochs"]["tool"])
                 for run in ok]
        tool.update(driver=ok[0]["driver"], ceiling=ceiling,
                    vs_ceiling=tool["samples_per_s"] / by_pipeline[ceiling]["samples_per_s"],
                    paired_vs_ceiling=paired,
                    min_vs_ceiling=tool["best_samples_per_s"] / by_pipeline[ceiling]["best_samples_per_s"],
                    first_epoch_s=statistics.median(run["first"]["seconds"] for run in ok),
                    first_extra_s=statistics.median(extra), worst_first_extra_s=max(extra))
        rows.extend(by_pipeline.values())
    return rows


def format_end_to_end(rows, title=""):
    """The end-to-end rows as text: steady samples/s, ratios against the fastest driver, the first epoch.

    Example:
        >>> row = dict(step="mnist", pipeline="tool", epochs=10, samples_per_s=22000.0, best_samples_per_s=24000.0,
        ...            epoch_s=0.27, min_epoch_s=0.25, vs_ceiling=0.93, paired_vs_ceiling=0.94, min_vs_ceiling=0.95,
        ...            first_epoch_s=1.4, driver="in-graph", ceiling="host")
        >>> print(format_end_to_end([row]).splitlines()[2])
        MNIST           training tool (data in memory)           0.270   0.250    22000    24000   0.93   0.94   0.95     1.40 in-graph vs host
    """
    head = (f"{'step':15} {'pipeline':38} {'epoch s':>7} {'min s':>7} {'samples/s':>8} {'best/s':>8} "
            f"{'x ceil':>6} {'x pair':>6} {'x min':>6} {'first s':>8}")
    lines = ([title] if title else []) + ruled(head)
    for row in rows:
        label = f"{STEP_NAMES[row['step']]:15} {PIPELINES[row['pipeline']]:38}"
        if "error" in row:
            lines.append(f"{label} ERROR {row['error'].splitlines()[-1][:60]}")
            continue
        ratio = (f"{row['vs_ceiling']:6.2f} {row['paired_vs_ceiling']:6.2f} {row['min_vs_ceiling']:6.2f}"
                 if "vs_ceiling" in row else " " * 20)
        first = f"{row['first_epoch_s']:8.2f} {row['driver']} vs {row['ceiling']}" if "first_epoch_s" in row else ""
        lines.append(f"{label} {row['epoch_s']:7.3f} {row['min_epoch_s']:7.3f} "
                     f"{row['samples_per_s']:8.0f} {row['best_samples_per_s']:8.0f} {ratio} {first}".rstrip())
    lines.append("epoch s: median steady epoch (the first apart); x ceil: median samples/s against the fastest "
                 "driver on Tensors in memory, in the same workers; x pair: median ratio of the epochs run back to "
                 "back; x min: fastest epoch against fastest; first s: the first epoch, compile included; then the "
                 "tool's driver vs the fastest.")
    return "\n".join(lines)


def report(batch, accumulate, epochs, repeats, data_dir=None, device_target="CPU", timeout=600, json_path=None,
           settings=None, plot_path=None, steps=STEPS):
    """The ``--end-to-end`` run of the workers ``steps``: table and load note printed, JSON and plot written.

    Returns the exit status. ``steps=("lm",)`` times the language-model tool alone.

    Example:
        >>> report(32, 2, epochs=3, repeats=1)  # a few minutes  # doctest: +SKIP
        0
    """
    specs = make_specs(batch, accumulate, epochs, data_dir, device_target=device_target, steps=steps)
    runs = run_end_to_end(specs, repeats, timeout)
    rows = end_to_end_rows(runs)
    print(format_end_to_end(rows, f"end to end: {data_dir or 'the --synthetic set'}, batch {batch} x {accumulate}, "
                             f"graph mode on {device_target}, {repeats} x {epochs} epochs per step"))

    def draw(path):
        from benchmarks.plot import plot_end_to_end
        return plot_end_to_end(rows, path, lambda row: f"{STEP_NAMES[row['step']]}: {PIPELINES[row['pipeline']]}")

    return finish(runs, json_path, plot_path, draw, settings=settings, runs=runs, rows=rows)


def main(argv=None):
    """Measures the worker spec given as JSON in ``argv[0]`` and prints the ``RESULT`` line.

    Example:
        >>> main(['{"step": "micro"}'])
        Traceback (most recent call last):
        ValueError: an end-to-end spec needs step (one of mnist, lm), batch, accumulate and epochs; got {'step': 'micro'}
    """
    spec = json.loads((sys.argv[1:] if argv is None else argv)[0])
    print(RESULT_PREFIX + json.dumps(measure(spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
