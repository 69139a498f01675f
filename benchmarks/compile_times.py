"""What the language-model tool compiles, and what its first epoch still holds.

Issue 26 wants ``scripts/train_lm.py``'s first epoch "within a few seconds
of a steady one". Two parts, each in a fresh worker (a graph compiles once
per process) with ``MS_DEV_HOST_BLOCKING_RUN=1``, on the tool at its
defaults with ``--synthetic`` (or with the train_lm.py flags given):

* ``graphs``: each compiled graph's first call (compile and run) against a
  later one: the micro-step (``training.loop.MicroStep``), the window update
  of ``Accumulator.step()`` and the validation step (``evaluate``);
* ``epochs``: the tool's path, ``compile_train_step`` then two epochs of
  ``train_on_windows`` and ``evaluate``: each epoch's seconds, its slowest
  windows, and its end-of-epoch window with the flush after it.

Run it with ``python scripts/benchmark.py --compile-times``.
"""
import contextlib
import io
import json
import sys
import time

from benchmarks.report import write_json
from benchmarks.runner import run_module
from benchmarks.worker import RESULT_PREFIX

PARTS = ("graphs", "epochs")
GRAPHS = {"micro_step": "micro-step", "window_update": "window update, step()", "validation": "validation step"}
SLOWEST = 3


def lm_config(lm_flags):
    """train_lm.py's ``(TrainConfig, tool flags)`` for ``--synthetic`` and ``lm_flags``; exits 2 on a bad flag.

    Example:
        >>> config, flags = lm_config(["--width", "16"])
        >>> flags["synthetic"], flags["width"], config.batch_description()
        (True, 16, '5 x 4 = effective 20')
    """
    from training.lm_command import parse_args
    return parse_args(["--synthetic", *lm_flags])


def check_lm_flags(lm_flags):
    """Why ``lm_flags`` cannot be measured (train_lm.py's own error, or a run without the micro-step), or None.

    Example:
        >>> check_lm_flags(["--width", "16"]) is None
        True
        >>> check_lm_flags(["--width", "0"])
        'train_lm.py: error: argument --width: must be a positive integer, got 0'
        >>> check_lm_flags(["--window-step"])
        'measures the micro-step of graph mode: not with --mode pynative, --window-step or --track-noise'
    """
    with contextlib.redirect_stderr(io.StringIO()) as refused:
        try:
            config = lm_config(lm_flags)[0]
        except SystemExit:
            return refused.getvalue().strip().splitlines()[-1]
    if config.mode != "graph" or config.window_step or config.tracks_noise:
        return "measures the micro-step of graph mode: not with --mode pynative, --window-step or --track-noise"
    return None


def timed(call):
    """The seconds ``call()`` takes, its kernels finished.

    Example:
        >>> timed(lambda: time.sleep(0.01)) >= 0.01
        True
    """
    import mindspore as ms
    started = time.perf_counter()
    call()
    ms.runtime.synchronize()
    return time.perf_counter() - started


def measure_graphs(config, task, run):
    """``{graph: [first call s, later call s]}``: two windows of micro-steps, each with ``step()``; two validations.

    Example:
        >>> with build_lm(["--width", "16", "--depth", "1"]) as built:  # 20 s  # doctest: +SKIP
        ...     measure_graphs(*built)
        {'micro_step': [3.1, 0.05], 'window_update': [2.4, 0.01], 'validation': [2.2, 0.04]}
    """
    import mindspore as ms
    from training.loop import epoch_windows, evaluate
    window = next(iter(epoch_windows(config, task, 1)))
    micro, update = [], []
    for _ in range(2):
        for inputs, labels in window:
            count = ms.Tensor(task.count(labels), ms.float32)
            micro.append(timed(lambda: run.micro_step(inputs, labels, count, None)))
        update.append(timed(run.accumulator.step))
    validation = [timed(lambda: evaluate(run, task)) for _ in range(2)]
    return dict(micro_step=[micro[0], micro[-1]], window_update=update, validation=validation)


def measure_epochs(config, task, run, epochs=2):
    """``compile_train_step``'s seconds, then per epoch its seconds, windows, last window's flush and validation.

    Example:
        >>> with build_lm(["--width", "16", "--depth", "1"]) as built:  # 30 s  # doctest: +SKIP
        ...     result = measure_epochs(*built)
        >>> result["compile_s"] > 0, len(result["epochs"]), len(result["epochs"][0]["windows"])  # doctest: +SKIP
        (True, 2, 25)
    """
    from training.loop import compile_train_step, epoch_windows, evaluate, train_on_windows
    result = dict(compile_s=compile_train_step(run, task, config, 1), epochs=[])
    for epoch in range(1, epochs + 1):
        windows, last = [], time.perf_counter()
        for _ in train_on_windows(run, epoch_windows(config, task, epoch), config.batch_size, config.first_step,
                                  task.count):
            now = time.perf_counter()
            windows.append(now - last)
            last = now
        flush = time.perf_counter() - last
        result["epochs"].append(dict(seconds=sum(windows) + flush, windows=windows, flush=flush,
                                     validation=timed(lambda: evaluate(run, task))))
    return result


@contextlib.contextmanager
def build_lm(lm_flags):
    """The tool's ``(config, task, run)`` for ``lm_flags`` (``lm_config``), its synthetic text removed afterwards.

    Example:
        >>> with build_lm(["--width", "16", "--depth", "1"]) as (config, task, run):
        ...     run.micro_step is not None, task.train_samples
        (True, 788)
    """
    from training.context import configure_context
    from training.lm import lm_task_from_flags, prepare_text
    from training.loop import build_run
    config, flags = lm_config(lm_flags)
    config = configure_context(config)
    with contextlib.ExitStack() as stack:
        path = prepare_text(flags["data_dir"], True, None, stack)
        task = lm_task_from_flags(path, flags)
        yield config, task, build_run(config, task)


def measure(part, lm_flags):
    """Part ``part`` of ``PARTS`` on a freshly built tool: ``measure_graphs``' or ``measure_epochs``' result."""
    with build_lm(lm_flags) as built:
        return dict(graphs=measure_graphs(*built)) if part == "graphs" else measure_epochs(*built)


def format_compile_times(result):
    """The graphs' first and later calls, the compile ahead, and per epoch its time, slowest windows and last window.

    Example:
        >>> epoch = dict(seconds=9.0, windows=[1.0, 5.0, 0.5, 2.0], flush=0.5, validation=0.2)
        >>> print(format_compile_times(dict(lm_flags=[], load_before=2.3, compile_s=4.0, epochs=[epoch],
        ...                                 graphs=dict(micro_step=[4.0, 0.1], window_update=[7.5, 0.05],
        ...                                             validation=[4.2, 0.3]))))
        train_lm.py --synthetic, MS_DEV_HOST_BLOCKING_RUN=1, load before 2.3
        graph                    first call s  later call s
        micro-step                      4.00          0.10
        window update, step()           7.50          0.05
        validation step                 4.20          0.30
        compiled ahead (compile_train_step): 4.0 s
        epoch  seconds  slowest windows, s (index)         last window + flush, s validation s
        1         9.00  5.00 (1), 2.00 (3), 1.00 (0)       2.50 (flush 0.50)              0.20
    """
    lines = [f"train_lm.py {' '.join(['--synthetic', *result['lm_flags']])}, MS_DEV_HOST_BLOCKING_RUN=1, "
             f"load before {result['load_before']:.1f}",
             f"{'graph':24} {'first call s':>13} {'later call s':>13}"]
    lines += [f"{label:24} {result['graphs'][name][0]:13.2f} {result['graphs'][name][1]:13.2f}"
              for name, label in GRAPHS.items()]
    lines.append(f"compiled ahead (compile_train_step): {result['compile_s']:.1f} s")
    lines.append(f"{'epoch':5} {'seconds':>8}  {'slowest windows, s (index)':34} {'last window + flush, s':22} "
                 "validation s")
    for number, epoch in enumerate(result["epochs"], 1):
        order = sorted(range(len(epoch["windows"])), key=lambda index: -epoch["windows"][index])
        slowest = ", ".join(f"{epoch['windows'][index]:.2f} ({index})" for index in order[:SLOWEST])
        tail = f"{epoch['windows'][-1] + epoch['flush']:.2f} (flush {epoch['flush']:.2f})"
        lines.append(f"{number:<5} {epoch['seconds']:8.2f}  {slowest:34} {tail:22} {epoch['validation']:12.2f}")
    return "\n".join(lines)


def report_compile_times(lm_flags=(), timeout=600, json_path=None):
    """Runs both parts in workers and prints the table (``format_compile_times``); returns 0, or 1 if one failed.

    Example:
        >>> report_compile_times()  # two minutes  # doctest: +SKIP
        0
    """
    result = dict(lm_flags=list(lm_flags))
    for part in PARTS:
        measured = run_module("benchmarks.compile_times", dict(part=part, lm_flags=list(lm_flags)), blocking="1",
                              timeout=timeout)
        if "error" in measured:
            print(f"{part}: ERROR {measured['error'].splitlines()[-1]}")
            return 1
        result.update(measured)  # load_before: the epochs' worker's, the one that times the tool
    print(format_compile_times(result), flush=True)
    if json_path:
        write_json(json_path, compile_times=result)
    return 0


def main(argv=None):
    """Measures the part given as JSON in ``argv[0]`` (``part``, ``lm_flags``) and prints the ``RESULT`` line."""
    spec = json.loads((sys.argv[1:] if argv is None else argv)[0])
    print(RESULT_PREFIX + json.dumps(measure(**spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
