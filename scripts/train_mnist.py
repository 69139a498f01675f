"""Train the MNIST dense network with gradient accumulation and report test accuracy.

The MindSpore quick-start, as a tool: micro-batches of ``--batch-size``
summed over ``--accumulate-step`` of them per optimizer update (an
effective batch of batch x accumulate-step), evaluated on the test split
after every epoch, with checkpoints, exact resume and JSON/PNG logs. This
file only reads the command line; the run itself is ``training``.

Examples:
    python scripts/train_mnist.py                        # real MNIST, downloaded once
    python scripts/train_mnist.py --synthetic --epochs 2 # offline, learnable look-alike
    python scripts/train_mnist.py --ckpt-dir runs/a --epochs 10
    python scripts/train_mnist.py --ckpt-dir runs/a --epochs 10 --resume
    python scripts/train_mnist.py --ckpt-dir runs/a --epochs 10 --overwrite   # start runs/a again

From Python (the tests import it as ``scripts.train_mnist``):
    >>> summary = main(["--synthetic", "--epochs", "1"])
    synthetic MNIST look-alike from ...: 6000 train / 1000 test samples; batch 32 x 2 = effective 64; sgd lr 0.01; graph mode on CPU
    epoch 1/1: train loss ..., test accuracy ...%, test loss ..., ... samples/s, ... s
    best test accuracy ...% (epoch 1), final ...%; ... samples/s; effective batch 64 (32 x 2), 94 updates
    >>> summary["effective_batch_size"]
    64
"""
import argparse
import contextlib
import os
import signal
import sys
import time

# Run from the checkout: sys.path[0] is scripts/, and training/, models/ and data/ may not be installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from training.interrupts import Interrupted, hold_signals, signals_raise_interrupted  # noqa: E402

if __name__ == "__main__":
    # Before numpy and MindSpore start threads, so that every thread holds
    # SIGINT and SIGTERM for main(), which receives them (training.interrupts).
    hold_signals()

from data.idx import MnistFormatError  # noqa: E402
from data.mnist import DEFAULT_DATA_DIR, MnistUnavailableError  # noqa: E402
from training.arguments import (device_target, in_flags, non_negative_int, one_of, positive_float,  # noqa: E402
                                positive_int)
from training.checkpoints import resume_hint  # noqa: E402
from training.config import AUTO, AUTO_STEPS, DEVICES, MODES, TrainConfig  # noqa: E402
from training.context import configure_context  # noqa: E402
from training.errors import TrainingError  # noqa: E402
from training.loop import train  # noqa: E402
from training.mnist import SYNTHETIC_SIZES, mnist_task, prepare_mnist  # noqa: E402
from training.optimizers import MOMENTUM  # noqa: E402
from training.outputs import check_outputs  # noqa: E402

# The optimizers this tool offers (training.optimizers has adamw too).
OPTIMIZERS = ("sgd", "momentum", "adam")
# The flags that are not TrainConfig fields: where the data comes from.
DATA_FLAGS = ("data_dir", "synthetic", "mnist_url")


def build_parser():
    """The argument parser; ``parse_args`` adds the checks between flags.

    Example:
        >>> build_parser().parse_args([]).batch_size
        32
    """
    parser = argparse.ArgumentParser(
        prog="train_mnist.py",
        # Exact flags only: the command printed to resume a run must mean what it says, and an
        # abbreviation that is unique today (--o for --optimizer) stops being so when a flag is added.
        allow_abbrev=False,
        description="Train the MNIST dense network with gradient accumulation and report test accuracy. "
                    "Each optimizer update averages the gradient over batch-size x accumulate-step samples.",
        epilog="Exit status: 0 on success, 1 when data, device, output paths or checkpoints fail, 2 for bad "
               "flags, 130 after Ctrl-C and 143 after SIGTERM (the last checkpoint stays whole; the message "
               "says how to resume).")
    run = parser.add_argument_group("run")
    run.add_argument("--device-target", type=device_target, default="CPU", metavar="{" + ",".join(DEVICES) + "}",
                     help="device MindSpore runs on (default %(default)s)")
    run.add_argument("--mode", type=one_of(*MODES), default="graph", metavar="{" + ",".join(MODES) + "}",
                     help="graph: compile the train step, flush and evaluation once (fast); "
                          "pynative: run them op by op (slow, but print() and pdb work inside); default %(default)s")
    run.add_argument("--seed", type=non_negative_int, default=0, metavar="N",
                     help="seeds the initial weights; epoch e is shuffled with seed + e (default %(default)s)")
    run.add_argument("--window-step", action="store_true",
                     help="run each whole window (forward, backward and update of --accumulate-step "
                          "micro-batches) in one compiled call with an in-graph loop: less host overhead "
                          "per micro-step, same memory, same result")
    run.add_argument("--distributed", action="store_true",
                     help="data parallel under msrun: each rank trains on its shard, gradients are summed "
                          "across ranks once per window; only rank 0 prints and writes files")

    training = parser.add_argument_group("training")
    training.add_argument("--batch-size", type=positive_int, default=32, metavar="N",
                          help="samples per micro-batch, one forward/backward pass (default %(default)s)")
    training.add_argument("--accumulate-step", type=positive_int_or_auto, default=2, metavar="{N,auto}",
                          help="micro-batches summed per optimizer update; an epoch's last, shorter "
                               "window is applied too, weighted by its sample count. 'auto': N follows the "
                               f"measured gradient noise scale, from {AUTO_STEPS[0]} to {AUTO_STEPS[1]} "
                               "(implies --track-noise; not with --window-step) (default %(default)s)")
    training.add_argument("--epochs", type=positive_int, default=3, metavar="N",
                          help="total epochs, with --resume including those already done (default %(default)s)")
    training.add_argument("--lr", type=positive_float, default=1e-2, help="learning rate (default %(default)s)")
    training.add_argument("--optimizer", type=one_of(*OPTIMIZERS), default="sgd",
                          metavar="{" + ",".join(OPTIMIZERS) + "}",
                          help=f"optimizer; momentum uses {MOMENTUM} (default %(default)s)")
    training.add_argument("--shuffle", action=argparse.BooleanOptionalAction, default=True,
                          help="visit the training samples in a new seeded order each epoch (default: shuffle)")
    training.add_argument("--track-noise", action="store_true",
                          help="measure the gradient noise scale (the batch size past which a larger one buys "
                               "little) from each window's micro-batches; printed, logged and plotted per epoch")
    training.add_argument("--check", action="store_true",
                          help="before training, check on the first window that accumulating equals one large "
                               "batch (changes nothing) and print one line")
    training.add_argument("--drop-last", action="store_true",
                          help="drop each epoch's last micro-batch if it is smaller than --batch-size "
                               "(default: train on it)")

    data_group = parser.add_argument_group("data")
    data_group.add_argument("--data-dir", default=None, metavar="DIR",
                            help=f"folder with train/ and test/ idx files; MNIST is downloaded into it when "
                                 f"missing (default {DEFAULT_DATA_DIR}; with --synthetic a temporary folder)")
    data_group.add_argument("--synthetic", action="store_true",
                            help=f"no download: use a learnable MNIST look-alike "
                                 f"({SYNTHETIC_SIZES['train']} train / {SYNTHETIC_SIZES['test']} test samples), "
                                 "written into --data-dir unless it is already there")
    # Hidden: a mirror of the tutorial's zip, and the tests' way to simulate being offline.
    data_group.add_argument("--mnist-url", default=None, help=argparse.SUPPRESS)

    output = parser.add_argument_group("checkpoints and logs")
    output.add_argument("--ckpt-dir", default=None, metavar="DIR",
                        help="save network, optimizer and accumulator state after every epoch as "
                             "DIR/epoch_NNN.ckpt (default: no checkpoints); a DIR holding another run's "
                             "checkpoints needs --resume or --overwrite")
    output.add_argument("--resume", action="store_true",
                        help="continue from the newest checkpoint in --ckpt-dir with its next epoch, "
                             "exactly as if never stopped (an error if there is none)")
    output.add_argument("--overwrite", action="store_true",
                        help="start afresh in a --ckpt-dir that holds another run's checkpoints: they are "
                             "removed once the data is checked and training starts")
    output.add_argument("--log-json", metavar="PATH", default=None,
                        help="write per-epoch records and the summary as JSON, updated after every epoch")
    output.add_argument("--plot", metavar="PATH", default=None,
                        help="write a PNG of training loss and test accuracy per epoch (needs matplotlib)")
    return parser


def positive_int_or_auto(text):
    """argparse type: a positive integer, or 'auto'.

    Example:
        >>> positive_int_or_auto("auto"), positive_int_or_auto("4")
        ('auto', 4)
    """
    return AUTO if text == AUTO else positive_int(text)


def parse_args(argv=None):
    """The checked flags as ``(TrainConfig, data flags)``; errors exit with status 2 and a usage line.

    Example:
        >>> config, data_flags = parse_args(["--batch-size", "64", "--accumulate-step", "1", "--synthetic"])
        >>> config.effective_batch_size, data_flags["synthetic"]
        (64, True)
    """
    parser = build_parser()
    flags = vars(parser.parse_args(argv))
    if flags["plot"]:
        try:
            import matplotlib  # noqa: F401  (checked here, so a long run does not fail at its end)
        except ImportError:
            parser.error("--plot needs matplotlib: pip install matplotlib (or pip install .[plot])")
    data_flags = {name: flags.pop(name) for name in DATA_FLAGS}
    try:
        return TrainConfig(**flags), data_flags
    except ValueError as error:  # flags that exclude each other: TrainConfig checks them, in its fields' names
        parser.error(in_flags(str(error), flags))


def main(argv=None):
    """Command-line entry point; returns the summary dict.

    Failures the user can fix (no network, bad files, missing device,
    unwritable outputs, unusable checkpoints) print a short message to
    stderr and exit 1, before any training. Ctrl-C or SIGTERM ends the run
    with 130 or 143 and a line saying how to resume; the temporary
    ``--synthetic`` folder is removed and the last checkpoint stays whole.

    Example:
        >>> summary = main(["--synthetic", "--epochs", "2", "--log-json", "run.json"])
        synthetic MNIST look-alike from ...
        epoch 1/2: ...
        epoch 2/2: ...
        best test accuracy ...
        >>> summary["best_accuracy"] > 0.9, os.path.isfile("run.json")
        (True, True)
    """
    started = time.time()
    config, data_flags = parse_args(argv)
    command = [sys.executable, *(sys.argv if argv is None else [__file__, *argv])]
    try:
        with contextlib.ExitStack() as stack:
            # First in, last out: a second signal cannot cut short the removal of the temporary data.
            stack.enter_context(signals_raise_interrupted())
            check_outputs(config)
            config = configure_context(config)  # before the data: a missing device should not wait for a download
            data_dir = prepare_mnist(data_flags["data_dir"], data_flags["synthetic"], data_flags["mnist_url"], stack)
            summary, _ = train(config, mnist_task(data_dir))
    except (MnistUnavailableError, MnistFormatError, TrainingError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt as error:
        interrupted = error if isinstance(error, Interrupted) else Interrupted(signal.SIGINT)
        print(f"interrupted by {interrupted.name}; {resume_hint(config, command, started)}", file=sys.stderr)
        raise SystemExit(interrupted.exit_status) from None
    return summary


if __name__ == "__main__":
    main()
