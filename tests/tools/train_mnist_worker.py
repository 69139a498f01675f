"""The MNIST tool's cases of the suite's msrun launch (tests/msrun.py): scripts/train_mnist.py --distributed on two
ranks, its checkpoints in ``folder/ckpt``, on the synthetic MNIST ``prepare`` writes (conftest's
``synthetic_mnist_dir``'s: 200 train and 100 test samples, seed 0). Read by test_train_mnist_msrun.py (``train_mnist``),
tests/training/test_probe.py (``probe``) and tests/training/test_memory.py (``memory``).
"""
import os

from data.idx import write_synthetic_mnist
from scripts import train_mnist as tool
from tests.conftest import SYNTHETIC_TEST, SYNTHETIC_TRAIN

COMMON = ["--epochs", "1", "--no-shuffle"]


def prepare(folder):
    write_synthetic_mnist(os.path.join(folder, "mnist"), n_train=SYNTHETIC_TRAIN, n_test=SYNTHETIC_TEST, seed=0)


def run(folder, flags):
    tool.main(["--data-dir", os.path.join(folder, "mnist"), *COMMON, *flags, "--distributed",
               "--ckpt-dir", os.path.join(folder, "ckpt")])


def train_mnist(folder):
    """Windows of 2 x 16 per rank: one process's batch of 64."""
    run(folder, ["--lr", "0.1", "--batch-size", "16", "--accumulate-step", "2"])


def probe(folder):
    """The measured window, probing every 32 samples, under the linear rule."""
    run(folder, ["--lr", "0.05", "--accumulate-step", "auto", "--probe-interval", "32", "--scale-rule", "linear",
                 "--batch-size", "4"])


def memory(folder):
    """The micro-batch planned for a batch of 4 per update."""
    run(folder, ["--lr", "0.1", "--batch-size", "4", "--micro-batch", "auto"])
