"""What the training tools' command lines share: the flags of a run, their checks, and how a run ends.

A tool (``scripts/train_lm.py``) builds its parser with ``make_parser``,
adds its own data flags, reads a ``TrainConfig`` and its own flags with
``parse_config``, and runs with ``run_tool``, which turns the failures a
user can fix into one ``error:`` line and Ctrl-C or SIGTERM into a line
saying how to resume.
"""
import argparse
import contextlib
import signal
import sys
import time

from accumulator.memory import BUDGET_FRACTION
from training.arguments import (device_target, flag, fraction, in_flags, memory_size, non_negative_int, one_of,
                                positive_float, positive_int)
from training.checkpoints import resume_hint
from training.config import (ADAPTIVE, AUTO, AUTO_STEPS, DEVICES, DRIVERS, FEW_TENSORS, MODES, NOISE_STEPS,
                             PROBE_INTERVAL, PROBE_TOLERANCE, RESUME_FIELDS, SCALE_RULES, TrainConfig)
from training.context import configure_context
from training.errors import TrainingError
from training.interrupts import Interrupted, signals_raise_interrupted
from training.optimizers import MOMENTUM
from training.outputs import check_outputs

# The Python versions setup.py's python_requires allows (tests/test_wheel.py checks that they agree).
PYTHON_VERSIONS = "3.9 to 3.12"
EPILOG = ("Exit status: 0 on success, 1 when data, device, output paths or checkpoints fail, 2 for bad flags, "
          "130 after Ctrl-C and 143 after SIGTERM (the last checkpoint stays whole; the message says how to resume). "
          f"Runs on Python {PYTHON_VERSIONS}.")


def positive_int_or_auto(text):
    """argparse type: a positive integer, 'auto' or 'noise'.

    Example:
        >>> positive_int_or_auto("auto"), positive_int_or_auto("noise"), positive_int_or_auto("4")
        ('auto', 'noise', 4)
    """
    return text if text in ADAPTIVE else positive_int(text)


def micro_batch(text):
    """argparse type: 'auto' or a positive integer (``--micro-batch``).

    Example:
        >>> micro_batch("auto"), micro_batch("8")
        ('auto', 8)
    """
    if text == AUTO:
        return AUTO
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected auto or a positive integer, got {text!r}") from None


def make_parser(prog, description, optimizers, defaults, sample="sample", run_flags=()):
    """A parser with the run, training, checkpoint and log flags every tool has; returns ``(parser, data group)``.

    ``optimizers`` are the ``--optimizer`` choices, ``defaults`` the tool's
    defaults for ``batch_size``, ``accumulate_step``, ``epochs``, ``lr`` and
    ``optimizer``; ``sample`` names what a micro-batch holds, for the help;
    ``run_flags`` the tool's own flags that ``--resume`` must see unchanged
    (``parse_config``'s), named in its help after the shared ones.

    Example:
        >>> parser, data = make_parser("tool.py", "A tool.", ("sgd",), dict(batch_size=8, accumulate_step=2,
        ...                            epochs=1, lr=0.1, optimizer="sgd"))
        >>> parser.parse_args([]).batch_size, data.title
        (8, 'data')
    """
    parser = argparse.ArgumentParser(
        prog=prog, description=description, epilog=EPILOG,
        # Exact flags only: the command printed to resume a run must mean what it says, and an
        # abbreviation that is unique today (--o for --optimizer) stops being so when a flag is added.
        allow_abbrev=False)
    parser.set_defaults(**defaults)
    run = parser.add_argument_group("run")
    run.add_argument("--device-target", type=device_target, default="CPU", metavar="{" + ",".join(DEVICES) + "}",
                     help="device MindSpore runs on (default %(default)s)")
    run.add_argument("--mode", type=one_of(*MODES), default="graph", metavar="{" + ",".join(MODES) + "}",
                     help="graph: compile the train step, flush and evaluation once (fast); "
                          "pynative: run them op by op (slow, but print() and pdb work inside); default %(default)s")
    run.add_argument("--seed", type=non_negative_int, default=0, metavar="N",
                     help="seeds the initial weights; epoch e is shuffled with seed + e (default %(default)s)")
    run.add_argument("--driver", type=one_of(*DRIVERS), default="auto", metavar="{" + ",".join(DRIVERS) + "}",
                     help="how windows are driven, all to the same weights: in-graph (the accumulator called in "
                          "the compiled step), host (the compiled step only adds, step() applies from the host), "
                          "window (one compiled call per window, an in-graph loop); auto: window at a fixed N; "
                          f"while N changes, in-graph for nets of at most {FEW_TENSORS} parameter tensors, else "
                          "host; docs/performance.md (default %(default)s)")
    run.add_argument("--window-step", dest="driver", action="store_const", const="window",
                     help="the same as --driver window")
    run.add_argument("--distributed", action="store_true",
                     help="data parallel under msrun: each rank trains its part of each of the run's windows, "
                          "gradients are summed across ranks once per window (--accumulate-step counts one rank's "
                          "micro-batches; --batch-size with --micro-batch is the run's); only rank 0 prints and "
                          "writes files; docs/devices.md")

    training = parser.add_argument_group("training")
    training.add_argument("--batch-size", type=positive_int, metavar="N",
                          help=f"{sample}s per micro-batch, one forward/backward pass; with --micro-batch, "
                               f"the {sample}s per update, all ranks together (default %(default)s)")
    training.add_argument("--micro-batch", type=micro_batch, default=None, metavar="{auto,M}",
                          help="auto: measure the micro-batch: run the train step for a few candidate sizes (powers "
                               "of two below --batch-size per rank, each in a child process), read each one's peak "
                               "memory and speed, and train with the fastest that fits --memory-budget; M: train "
                               "with micro-batches of M. N is --batch-size over it, rounded up: where it does not "
                               "divide, each window's last micro-batch is smaller. Not with --accumulate-step; a "
                               "--resume keeps the plan; docs/memory-plan.md"),
    training.add_argument("--memory-budget", type=memory_size, default=None, metavar="SIZE",
                          help="with --micro-batch auto: the peak memory a run may take, e.g. 512MiB, 6GiB, 6G "
                               "(binary units); on a CPU the process's peak resident memory; under msrun each "
                               f"rank's (default: {BUDGET_FRACTION:.0%}% of the available memory, shared among the "
                               "ranks on the host)")
    training.add_argument("--accumulate-step", type=positive_int_or_auto, metavar="{N,auto,noise}",
                          help="micro-batches summed per optimizer update; an epoch's last, shorter "
                               "window is applied too, weighted by its count. 'auto': N measured by short "
                               f"branched runs, from {AUTO_STEPS[0]} to {AUTO_STEPS[1]}, growing only "
                               "(docs/batch-size.md); 'noise': N follows the measured gradient noise scale, from "
                               f"{NOISE_STEPS[0]} to {NOISE_STEPS[1]}, which overshoots (docs/scale-rules.md); "
                               "either implies --track-noise, not with --driver window (default %(default)s)")
    training.add_argument("--probe-interval", type=positive_int, default=None, metavar="X",
                          help=f"with --accumulate-step auto: {sample}s seen (tokens for a language model) from the "
                               "start to the probe after the first that keeps N (a probe that grows N is followed "
                               f"at once); each gap after is twice the one before (default {PROBE_INTERVAL})")
    training.add_argument("--probe-tolerance", type=positive_float, default=None, metavar="F",
                          help="with --accumulate-step auto: a larger window is kept while its samples buy at "
                               "least 1 - F of the smallest window's drop of the held-out loss, 0 < F < 1 (default "
                               f"{PROBE_TOLERANCE})")
    training.add_argument("--scale-rule", type=one_of(*SCALE_RULES), default="none",
                          metavar="{" + ",".join(SCALE_RULES) + "}",
                          help="how the learning rate follows N, --lr being tuned for one micro-batch: linear (SGD: "
                               "lr x N), sqrt (AdamW: lr x sqrt N, betas 1 - N (1 - beta), eps / sqrt N), adascale "
                               "(SGD: lr x a gain from the measured noise, between 1 and N; implies --track-noise); "
                               "none leaves lr as set; docs/scale-rules.md (default %(default)s)")
    training.add_argument("--update-cost", type=positive_float, default=None, metavar="X",
                          help="with --accumulate-step noise: one update's seconds over one micro-step's; N is then "
                               "the window that trains fastest in seconds, sqrt(X x the noise scale in micro-batches), "
                               "not the noise scale; docs/batch-size.md (default: the noise scale)")
    training.add_argument("--clip-norm", type=positive_float, default=None, metavar="X",
                          help="clip each window's mean gradient to global norm X, as the large batch's would be "
                               "(default: not clipped)")
    training.add_argument("--ema", type=fraction, default=None, metavar="DECAY",
                          help="evaluate (and sample) a moving average of the weights, moved once per update by "
                               "DECAY at the first window's size, by DECAY^k at k times it (docs/ema.md; "
                               "default: none)")
    training.add_argument("--epochs", type=positive_int, metavar="N",
                          help="total epochs, with --resume including those already done (default %(default)s)")
    training.add_argument("--lr", type=positive_float, help="learning rate (default %(default)s)")
    training.add_argument("--optimizer", type=one_of(*optimizers), metavar="{" + ",".join(optimizers) + "}",
                          help=f"optimizer; momentum uses {MOMENTUM}; adamw is decoupled weight decay "
                               "(default %(default)s)")
    training.add_argument("--shuffle", action=argparse.BooleanOptionalAction, default=True,
                          help=f"visit the training {sample}s in a new seeded order each epoch (default: shuffle)")
    training.add_argument("--track-noise", action="store_true",
                          help="measure the gradient noise scale (the batch size past which a larger one buys "
                               "little) from each window's micro-batches; printed, logged and plotted per epoch")
    training.add_argument("--check", action="store_true",
                          help="before training, check on the first window that accumulating equals one large "
                               "batch (changes nothing) and print one line")
    training.add_argument("--drop-last", action="store_true",
                          help="drop each epoch's last micro-batch if it is smaller than --batch-size "
                               "(default: train on it)")
    data = parser.add_argument_group("data")

    output = parser.add_argument_group("checkpoints and logs")
    output.add_argument("--ckpt-dir", default=None, metavar="DIR",
                        help="save network, optimizer and accumulator state after every epoch as "
                             "DIR/epoch_NNN.ckpt (default: no checkpoints); a DIR holding another run's "
                             "checkpoints needs --resume or --overwrite")
    output.add_argument("--keep-checkpoints", type=positive_int, default=None, metavar="K",
                        help="keep only the newest K epoch checkpoints in --ckpt-dir, removing older ones as each "
                             "new one is written (default: keep all)")
    output.add_argument("--resume", action="store_true",
                        help="continue from the newest checkpoint in --ckpt-dir with its next epoch, "
                             "exactly as if never stopped (an error if there is none, or if one of these "
                             "differs from the checkpoint's: " + ", ".join(
                                 [flag(name) for name in RESUME_FIELDS if name != "ranks"]
                                 + [flag(name) for name in run_flags]
                                 + ["the number of ranks with --accumulate-step auto or noise"])
                             + "; another number of ranks continues a fixed window, docs/devices.md)")
    output.add_argument("--overwrite", action="store_true",
                        help="start afresh in a --ckpt-dir that holds another run's checkpoints: they are "
                             "removed once the data is checked and training starts")
    output.add_argument("--log-json", metavar="PATH", default=None,
                        help="write per-epoch records and the summary as JSON, updated after every epoch")
    output.add_argument("--plot", metavar="PATH", default=None,
                        help="write a PNG of training loss and test accuracy per epoch (needs matplotlib)")
    return parser, data


def parse_config(parser, argv, tool_flags, run_flags=()):
    """The checked flags as ``(TrainConfig, {tool flag: value})``; errors exit with status 2 and a usage line.

    ``tool_flags`` name the parser's destinations that are not
    ``TrainConfig`` fields (where the data comes from, the model's size);
    those of them in ``run_flags`` define the run (the model's size, not
    where the data comes from): they go into the config's ``tool_settings``,
    so that a resume with other values is refused, naming the flag.

    Example:
        >>> parser, data = make_parser("tool.py", "A tool.", ("sgd",), dict(batch_size=8, accumulate_step=2,
        ...                            epochs=1, lr=0.1, optimizer="sgd"))
        >>> _ = data.add_argument("--synthetic", action="store_true")
        >>> config, flags = parse_config(parser, ["--batch-size", "4", "--synthetic"], ("synthetic",))
        >>> config.effective_batch_size, flags
        (8, {'synthetic': True})
        >>> parse_config(parser, ["--synthetic"], ("synthetic",), run_flags=("synthetic",))[0].tool_settings
        {'synthetic': True}
    """
    flags = vars(parser.parse_args(argv))
    if flags["plot"]:
        try:
            import matplotlib  # noqa: F401  (checked here, so a long run does not fail at its end)
        except ImportError:
            parser.error("--plot needs matplotlib: pip install matplotlib (or pip install .[plot])")
    own = {name: flags.pop(name) for name in tool_flags}
    if flags["micro_batch"] is not None:  # --batch-size is then the batch per update: N is the plan's
        if any(arg.split("=")[0] == "--accumulate-step" for arg in (sys.argv[1:] if argv is None else argv)):
            measured = " measured" if flags["micro_batch"] == AUTO else ""
            parser.error(f"--accumulate-step with --micro-batch {flags['micro_batch']}: --batch-size is then the "
                         f"batch per update and N follows from the{measured} micro-batch; pass one")
        flags["accumulate_step"] = 1
    try:
        return TrainConfig(**flags, tool_settings={name: own[name] for name in run_flags}), own
    except ValueError as error:  # flags that exclude each other: TrainConfig checks them, in its fields' names
        parser.error(in_flags(str(error), flags))


def run_tool(config, argv, script, body, errors=()):
    """Runs ``body(config, stack)`` as a command-line tool does; returns what it returns.

    First Ctrl-C and SIGTERM become ``training.interrupts.Interrupted``
    (the script called ``hold_signals`` at its start), the outputs are
    checked and the device set (``configure_context``: ``body`` gets the
    config with the real ranks). ``TrainingError`` and ``errors`` (the
    tool's data errors) print ``error: <message>`` to stderr and exit 1; an
    interrupt prints how to resume and exits 130 or 143. ``stack`` is a
    ``contextlib.ExitStack`` closed before either, for temporary folders.
    ``argv`` (None: ``sys.argv``) and ``script`` make the command to resume with.

    Example:
        >>> import mindspore as ms
        >>> previous = ms.get_context("mode")
        >>> run_tool(TrainConfig(mode="pynative"), [], "tool.py", lambda config, stack: config.ranks)
        1
        >>> run_tool(TrainConfig(mode="pynative"), [], "tool.py", lambda config, stack: 1 / 0,
        ...          errors=(ZeroDivisionError,))
        Traceback (most recent call last):
        ...
        SystemExit: 1
        >>> ms.set_context(mode=previous)
    """
    started = time.time()
    command = [sys.executable, *(sys.argv if argv is None else [script, *argv])]
    try:
        with contextlib.ExitStack() as stack:
            # First in, last out: a second signal cannot cut short the removal of the temporary data.
            stack.enter_context(signals_raise_interrupted())
            check_outputs(config)
            config = configure_context(config)  # before the data: a missing device should not wait for a download
            return body(config, stack)
    except (*errors, TrainingError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt as error:
        interrupted = error if isinstance(error, Interrupted) else Interrupted(signal.SIGINT)
        print(f"interrupted by {interrupted.name}; {resume_hint(config, command, started)}", file=sys.stderr)
        raise SystemExit(interrupted.exit_status) from None
