"""Packed rows against padded ones in the language-model tool (issue 35): useful tokens/s, and the loss per token.

Each contender is ``scripts/train_lm.py --synthetic`` with some of its flags
(``training.lm_command.parse_args``), so "the defaults" are the tool's own;
the first contender is the reference the others are compared with.

* ``speed``: every contender built and compiled ahead in one process, then
  one epoch of each in turn for ``rounds`` rounds (the order reversed every
  other round): useful tokens/s (target tokens that are not padding, over
  the epoch's time), the median and the median of the rounds' ratios to
  the reference; with each contender's rows per epoch and padding, what
  the ratio would be if a row cost the same, packed or not.
* ``loss``: for each seed, each contender trained from the same initial
  weights (``--seed``) over the same sample order (the shuffle is seeded
  by the seed and the epoch alone), the validation loss after every epoch.
  At equal tokens per update the contenders have seen the same useful
  tokens at every epoch's end; the table gives the paired relative
  differences to the reference per epoch, their mean, spread and 95%
  interval over the seeds.

Run it (docs/language-model-tool.md and BENCHMARKS.md have the results)::

    taskset -c 0 python -m benchmarks.packing speed --rounds 10
    python -m benchmarks.packing loss --seeds 4 --epochs 6 \\
        --contender="--no-packing --batch-size 8" --contender="--packing --batch-size 5"

Runs of the same seed give the same losses in any process, so the seeds
and contenders can run in parallel processes (``--json`` each) and be
merged into one table with ``--from-json``.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys

import numpy as np

# Today's tool (one padded sample per row, 8 x 4), and packed rows at the same rows and at the same tokens per update.
CONTENDERS = ("--no-packing --batch-size 8", "--packing --batch-size 8", "--packing --batch-size 5")
LOSS_CONTENDERS = ("--no-packing --batch-size 8", "--packing --batch-size 5", "--packing --batch-size 8")


def contender(flags, path, seed=0):
    """``(config, task)`` of ``train_lm.py --synthetic --seed seed`` with ``flags`` (a string), on the text at ``path``.

    Example:
        >>> from data.text import synthetic_text
        >>> _ = open("input.txt", "w").write(synthetic_text(3000))
        >>> config, task = contender("--no-packing --batch-size 5 --width 16", "input.txt", seed=2)
        >>> config.batch_description(), config.seed, "packed" in task.description
        ('5 x 4 = effective 20', 2, False)
    """
    from training.lm import lm_task_from_flags
    from training.lm_command import parse_args
    config, tool = parse_args(["--synthetic", "--seed", str(seed), *flags.split()])
    return config, lm_task_from_flags(path, tool)


def rows_and_padding(config, task):
    """Rows an epoch computes (filler rows included) and the fraction of their target slots that is padding.

    Example:
        >>> from data.text import synthetic_text
        >>> _ = open("input.txt", "w").write(synthetic_text(3000))
        >>> padded = rows_and_padding(*contender("--no-packing --batch-size 4", "input.txt"))
        >>> packed = rows_and_padding(*contender("--packing --batch-size 4", "input.txt"))
        >>> padded[0] > packed[0], packed[1] < padded[1]
        (True, True)
    """
    from training.loop import epoch_windows
    windows = [window.stacked[1].asnumpy() for window in epoch_windows(config, task, 1)]
    targets = np.concatenate([targets.reshape(-1, targets.shape[-1]) for targets in windows])
    return len(targets), 1 - np.count_nonzero(targets) / targets.size


@contextlib.contextmanager
def synthetic_corpus(text_bytes=None):
    """The path of ``train_lm.py --synthetic``'s text (or ``text_bytes`` of it) in a folder removed afterwards.

    Example:
        >>> from data.text import synthetic_text
        >>> with synthetic_corpus(2000) as path:
        ...     open(path).read() == synthetic_text(2000)
        True
    """
    from data.text import synthetic_text
    from training.lm import SYNTHETIC_BYTES, SYNTHETIC_DATA_SEED, prepare_text
    with contextlib.ExitStack() as stack:
        path = prepare_text(None, True, None, stack)
        if text_bytes not in (None, SYNTHETIC_BYTES):
            with open(path, "w", encoding="utf-8") as f:
                f.write(synthetic_text(text_bytes, SYNTHETIC_DATA_SEED))
        yield path


def speed(contenders=CONTENDERS, rounds=10, text_bytes=None, say=print):
    """Useful tokens/s of each contender, one epoch of each in turn per round; ``{flags: {...}}``.

    Each entry holds ``rates`` (one per round), ``rows`` and ``padding``
    (``rows_and_padding``); ``say`` gets a line per round.

    Example (it compiles both: tests/test_benchmarks_packing.py runs it):
        >>> tiny = "--width 8 --depth 1 --heads 2 --max-length 32 --batch-size 4"
        >>> padded, packed = speed((f"--no-packing {tiny}", tiny), 1, 3000).values()  # doctest: +SKIP
        >>> len(packed["rates"]), packed["rows"] < padded["rows"]  # doctest: +SKIP
        (1, True)
    """
    from training.context import configure_context
    from training.loop import build_run, compile_train_step, train_epoch
    with synthetic_corpus(text_bytes) as path:
        built = {flags: contender(flags, path) for flags in contenders}
        configure_context(built[contenders[0]][0])
        results, runs = {}, {}
        for flags, (config, task) in built.items():
            runs[flags] = build_run(config, task)
            compile_train_step(runs[flags], task, config, 1)
            rows, padding = rows_and_padding(config, task)
            results[flags] = dict(rows=rows, padding=padding, rates=[])
        for round_ in range(1, rounds + 1):
            load = os.getloadavg()[0]
            for flags in (contenders if round_ % 2 else contenders[::-1]):
                config, task = built[flags]
                stats = train_epoch(runs[flags], task, config, round_, progress=False)
                results[flags]["rates"].append(stats["counted"] / stats["seconds"])
            say(f"round {round_} (load {load:.2f}-{os.getloadavg()[0]:.2f}): "
                + ", ".join(f"{flags or 'defaults'} {results[flags]['rates'][-1]:,.0f}" for flags in contenders))
    return results


def format_speed(results):
    """The speed table: per contender its median useful tokens/s, ratio to the first, rows and padding.

    ``if rows cost alike``: the first contender's rows over this one's,
    the ratio if every row took as long to compute, packed or padded.

    Example:
        >>> print(format_speed({"a": dict(rows=800, padding=0.5, rates=[100.0, 110.0]),
        ...                     "b": dict(rows=500, padding=0.2, rates=[150.0, 170.0])}))
        contender  useful tokens/s   ratio (rounds)       rows  padding  if rows cost alike
        a                      105   1.00                 800      50%   1.00
        b                      160   1.52 (1.50-1.55)     500      20%   1.60
    """
    first = next(iter(results.values()))
    width = _width(results)
    lines = [f"{'contender':<{width}}useful tokens/s   ratio (rounds)       rows  padding  if rows cost alike"]
    for flags, result in results.items():
        ratios = [a / b for a, b in zip(result["rates"], first["rates"])]
        spread = f" ({min(ratios):.2f}-{max(ratios):.2f})" if result is not first else ""
        ratio = f"{statistics.median(ratios):.2f}{spread}"
        lines.append(f"{flags or 'defaults':<{width}}{statistics.median(result['rates']):>15,.0f}   {ratio:<19}"
                     f"{result['rows']:>5} {result['padding']:>8.0%}   {first['rows'] / result['rows']:.2f}")
    return "\n".join(lines)


def _width(results):
    return max(len("contender") + 2, *(len(flags or "defaults") + 2 for flags in results))


def loss(contenders=LOSS_CONTENDERS, seeds=(0, 1, 2), epochs=3, text_bytes=None, say=print):
    """Validation loss after each epoch, per contender and seed: ``{flags: {seed: [loss per epoch]}}``.

    Every run starts from ``--seed``'s weights and reads the samples in the
    order that the seed and the epoch give; ``say`` gets a line per run.

    Example (it compiles a run per seed: tests/test_benchmarks_packing.py runs it):
        >>> tiny = "--width 8 --depth 1 --heads 2 --max-length 32"
        >>> loss((tiny,), seeds=(3,), epochs=2, text_bytes=3000)[tiny]  # doctest: +SKIP
        seed 3, --width 8 --depth 1 --heads 2 --max-length 32: 4 updates, validation loss ..., ... (load ...)
        {3: [..., ...]}
    """
    from training.context import configure_context
    from training.loop import build_run, compile_train_step, evaluate, train_epoch
    results = {flags: {} for flags in contenders}
    with synthetic_corpus(text_bytes) as path:
        for seed in seeds:
            for flags in contenders:
                config, task = contender(flags, path, seed)
                config = configure_context(config)
                run = build_run(config, task)
                compile_train_step(run, task, config, 1)
                losses = []
                for epoch in range(1, epochs + 1):
                    train_epoch(run, task, config, epoch, progress=False)
                    losses.append(evaluate(run, task)["test_loss"])
                results[flags][seed] = losses
                say(f"seed {seed}, {flags or 'defaults'}: {int(run.accumulator.update_count)} updates, "
                    f"validation loss " + ", ".join(f"{value:.4f}" for value in losses)
                    + f" (load {os.getloadavg()[0]:.2f})")
    return results


def paired_differences(reference, other):
    """Per epoch, ``other``'s loss relative to ``reference``'s over the seeds both ran: mean, spread, 95% interval.

    ``reference`` and ``other`` map seeds to losses per epoch. Returns one
    dict per epoch: ``mean`` and ``sd`` (sample standard deviation) of the
    relative differences ``other / reference - 1``, ``low`` and ``high``
    (Student's t 95% interval of the mean), ``each`` (per seed).

    Example:
        >>> rows = paired_differences({0: [2.0], 1: [3.0], 2: [2.5]}, {0: [2.02], 1: [2.97], 2: [2.525]})
        >>> [round(rows[0][key], 4) for key in ("mean", "sd", "low", "high")]
        [0.0033, 0.0115, -0.0254, 0.032]
    """
    from scipy.stats import t
    seeds = [seed for seed in reference if seed in other]
    table = []
    for epoch in range(min(len(reference[seed]) for seed in seeds)):
        each = [other[seed][epoch] / reference[seed][epoch] - 1 for seed in seeds]
        mean, sd = statistics.mean(each), statistics.stdev(each) if len(each) > 1 else float("nan")
        half = t.ppf(0.975, len(each) - 1) * sd / len(each) ** 0.5 if len(each) > 1 else float("nan")
        table.append(dict(mean=mean, sd=sd, low=mean - half, high=mean + half, each=each))
    return table


def format_loss(results):
    """The loss table: each contender's mean validation loss per epoch, and its paired differences to the first.

    Example:
        >>> print(format_loss({"a": {0: [2.0, 1.8], 1: [3.0, 2.0]}, "b": {0: [2.2, 1.8], 1: [2.7, 2.0]}}))
        contender  epoch  mean loss   paired difference: mean ± sd  95% interval        per seed
        a              1     2.5000
        a              2     1.9000
        b              1     2.4500   +0.0% ± 14.1%                 -127.1% to +127.1%  +10.0%, -10.0%
        b              2     1.9000   +0.0% ± 0.0%                  +0.0% to +0.0%      +0.0%, +0.0%
    """
    reference = next(iter(results.values()))
    width = _width(results)
    header = f"{'paired difference: mean ± sd':<30}{'95% interval':<20}per seed"
    lines = [f"{'contender':<{width}}epoch  mean loss   {header}"]
    for flags, runs in results.items():
        paired = paired_differences(reference, runs) if runs is not reference else []
        for epoch in range(min(len(losses) for losses in runs.values())):
            mean = statistics.mean(losses[epoch] for losses in runs.values())
            line = f"{flags or 'defaults':<{width}}{epoch + 1:>5}  {mean:9.4f}"
            if paired:
                row = paired[epoch]
                spread, interval = f"{row['mean']:+.1%} ± {row['sd']:.1%}", f"{row['low']:+.1%} to {row['high']:+.1%}"
                line += f"   {spread:<30}{interval:<20}" + ", ".join(f"{value:+.1%}" for value in row["each"])
            lines.append(line)
    return "\n".join(lines)


def load_loss(paths, contenders=None):
    """The ``loss`` results that ``--json`` wrote to ``paths``, merged: ``{flags: {seed: [loss per epoch]}}``.

    Seeds are merged per contender (a seed saved twice must agree), in
    seed order; ``contenders`` picks and orders the contenders (the first
    the reference), by default all, in the order the files name them.

    Example:
        >>> for path, seeds in (("one.json", {"0": [2.0]}), ("two.json", {"1": [3.0]})):
        ...     with open(path, "w") as f:
        ...         json.dump({"--no-packing": seeds, "--packing": seeds}, f)
        >>> load_loss(["one.json", "two.json"], ["--packing"])
        {'--packing': {0: [2.0], 1: [3.0]}}
    """
    merged = {}
    for path in paths:
        with open(path) as f:
            for flags, runs in json.load(f).items():
                for seed, losses in runs.items():
                    saved = merged.setdefault(flags, {}).setdefault(int(seed), losses)
                    if saved != losses:
                        raise ValueError(f"{path}: seed {seed} of {flags!r} differs from an earlier file's")
    missing = [flags for flags in contenders or () if flags not in merged]
    if missing:
        raise ValueError(f"no results for {', '.join(map(repr, missing))} in {', '.join(paths)}")
    return {flags: dict(sorted(merged[flags].items())) for flags in contenders or merged}


def main(argv=None):
    """``python -m benchmarks.packing {speed,loss}``: runs one experiment, prints its table, writes ``--json``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.packing", description=__doc__.split("\n")[0])
    parser.add_argument("experiment", choices=("speed", "loss"))
    parser.add_argument("--contender", action="append", metavar="FLAGS",
                        help="train_lm.py flags of one contender, the first the reference; repeat "
                             "(--contender=--no-packing); default: the three of CONTENDERS or LOSS_CONTENDERS")
    parser.add_argument("--rounds", type=int, default=10, help="speed: epochs of each contender (default 10)")
    parser.add_argument("--seeds", type=int, default=8, help="loss: how many seeds (default 8)")
    parser.add_argument("--first-seed", type=int, default=0, help="loss: the first seed (default 0)")
    parser.add_argument("--epochs", type=int, default=3, help="loss: epochs per run (default 3)")
    parser.add_argument("--text-bytes", type=int, default=None, help="a shorter synthetic text (tests)")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--from-json", nargs="+", default=None, metavar="PATH",
                        help="loss: the table of results --json wrote (merged), instead of running; --contender "
                             "picks and orders them (default: all, the first file's first the reference)")
    args = parser.parse_args(argv)
    if args.from_json and args.experiment != "loss":
        parser.error("--from-json reads loss results only")
    say = lambda line: print(line, flush=True)  # noqa: E731
    say(f"load average {' '.join(f'{value:.2f}' for value in os.getloadavg())}")
    if args.experiment == "speed":
        results = speed(tuple(args.contender or CONTENDERS), args.rounds, args.text_bytes, say)
        say(format_speed(results))
    elif args.from_json:
        results = load_loss(args.from_json, args.contender)
        say(format_loss(results))
    else:
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        results = loss(tuple(args.contender or LOSS_CONTENDERS), seeds, args.epochs, args.text_bytes, say)
        say(format_loss(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
