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

From Python (the tests import it as ``scripts.train_mnist``): ``main(argv)``
runs the tool and returns its summary.
"""
import os
import sys

# Run from the checkout: sys.path[0] is scripts/, and training/, models/ and data/ are not installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from training.interrupts import hold_signals  # noqa: E402

if __name__ == "__main__":
    # Before numpy and MindSpore start threads, so that every thread holds
    # SIGINT and SIGTERM for main(), which receives them (training.interrupts).
    hold_signals()

import argparse  # noqa: E402

from data.idx import MnistFormatError  # noqa: E402
from data.mnist import DEFAULT_DATA_DIR, MnistUnavailableError  # noqa: E402
from training.command import make_parser, parse_config, run_tool  # noqa: E402
from training.loop import train  # noqa: E402
from training.memory import plan_run  # noqa: E402
from training.mnist import SYNTHETIC_SIZES, mnist_task, prepare_mnist  # noqa: E402

# The optimizers this tool offers (training.optimizers has adamw too).
OPTIMIZERS = ("sgd", "momentum", "adam")
DEFAULTS = dict(batch_size=32, accumulate_step=2, epochs=3, lr=1e-2, optimizer="sgd")
# The flags that are not TrainConfig fields: where the data comes from.
DATA_FLAGS = ("data_dir", "synthetic", "mnist_url")


def build_parser():
    """The argument parser: ``training.command``'s flags and this tool's data flags.

    Example:
        >>> build_parser().parse_args([]).batch_size
        32
    """
    parser, data = make_parser(
        "train_mnist.py", "Train the MNIST dense network with gradient accumulation and report test accuracy. "
        "Each optimizer update averages the gradient over batch-size x accumulate-step samples.", OPTIMIZERS, DEFAULTS)
    data.add_argument("--data-dir", default=None, metavar="DIR",
                      help=f"folder with train/ and test/ idx files; MNIST is downloaded into it when "
                           f"missing (default {DEFAULT_DATA_DIR}; with --synthetic a temporary folder)")
    data.add_argument("--synthetic", action="store_true",
                      help=f"no download: use a learnable MNIST look-alike "
                           f"({SYNTHETIC_SIZES['train']} train / {SYNTHETIC_SIZES['test']} test samples), "
                           "written into --data-dir unless it is already there")
    # Hidden: a mirror of the tutorial's zip, and the tests' way to simulate being offline.
    data.add_argument("--mnist-url", default=None, help=argparse.SUPPRESS)
    return parser


def parse_args(argv=None):
    """The checked flags as ``(TrainConfig, data flags)``; errors exit with status 2 and a usage line.

    Example:
        >>> config, data_flags = parse_args(["--batch-size", "64", "--accumulate-step", "1", "--synthetic"])
        >>> config.effective_batch_size, data_flags["synthetic"]
        (64, True)
    """
    return parse_config(build_parser(), argv, DATA_FLAGS)


def main(argv=None):
    """Command-line entry point; returns the summary dict.

    Failures the user can fix (no network, bad files, missing device,
    unwritable outputs, unusable checkpoints) print one ``error:`` line to
    stderr and exit 1, before any training. Ctrl-C or SIGTERM ends the run
    with 130 or 143 and a line saying how to resume; the temporary
    ``--synthetic`` folder is removed and the last checkpoint stays whole.

    Example (one epoch of the look-alike in micro-batches of 200; the learning rate follows N, as the epoch line says):
        >>> summary = main(["--synthetic", "--epochs", "1", "--batch-size", "200", "--scale-rule", "linear",
        ...                 "--log-json", "run.json", "--plot", "run.png"])
        synthetic MNIST look-alike from ...: 6000 train / 1000 test samples; batch 200 x 2 = effective 400;
        sgd lr 0.01 for one micro-batch, following N by the linear rule; graph mode on CPU; driver window (a fixed N:
        the fastest; --driver host holds less memory)
        compiled the train step in ... s
        epoch 1/1: train loss ..., test accuracy ...%, test loss ..., ... samples/s, ... s; N 2, lr 0.02
        best test accuracy ...% (epoch 1), final ...%; ... samples/s; effective batch 400 (200 x 2), 15 updates
        >>> summary["updates"], sorted(os.listdir()), open("run.png", "rb").read(4)[1:]
        (15, ['run.json', 'run.png'], b'PNG')
    """
    config, data_flags = parse_args(argv)

    def body(config, stack):
        data_dir = prepare_mnist(data_flags["data_dir"], data_flags["synthetic"], data_flags["mnist_url"], stack)
        config = plan_run(config, mnist_task, (data_dir,))
        summary, _ = train(config, mnist_task(data_dir))
        return summary

    return run_tool(config, argv, __file__, body, errors=(MnistUnavailableError, MnistFormatError))


if __name__ == "__main__":
    main()
