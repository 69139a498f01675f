"""The MNIST tool's cases of the suite's msrun launch (tests/msrun.py): scripts/train_mnist.py --distributed on two
ranks, its checkpoints in ``folder/ckpt``, on the synthetic MNIST ``prepare`` writes (conftest's
``synthetic_mnist_dir``'s: 200 train and 100 test samples, seed 0). Read by test_train_mnist_ranks.py
(``shared_batch``, ``four_ranks``),
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


# The run's batch of 9 over two ranks: 4 and 5 samples, one micro-batch and two (test_train_mnist_ranks.py).
SHARED_BATCH = ["--lr", "0.1", "--batch-size", "9", "--micro-batch", "4"]


def shared_batch(folder):
    """Epoch 1 of SHARED_BATCH's run on both ranks (``ckpt/``); then one process's epoch 1 on each rank alone
    (``alone_<rank>/``, a single process's checkpoint) resumed by both ranks for epoch 2: 1 -> 2 ranks."""
    import mindspore as ms
    from mindspore.communication import get_rank
    run(folder, SHARED_BATCH)
    ms.reset_auto_parallel_context()  # one process's run: no data parallel
    alone = ["--data-dir", os.path.join(folder, "mnist"), "--no-shuffle", *SHARED_BATCH,
             "--ckpt-dir", os.path.join(folder, f"alone_{get_rank()}")]
    tool.main([*alone, "--epochs", "1"])
    tool.main([*alone, "--epochs", "2", "--resume", "--distributed"])


def four_ranks(folder):
    """On four ranks (two launches of two, as two hosts): epoch 1 of SHARED_BATCH's run (``ckpt/``), and epoch 2 of
    the two ranks' run, copied into ``from_two/``: 2 -> 4 ranks."""
    run(folder, SHARED_BATCH)
    tool.main(["--data-dir", os.path.join(folder, "mnist"), "--no-shuffle", *SHARED_BATCH, "--epochs", "2",
               "--resume", "--distributed", "--ckpt-dir", os.path.join(folder, "from_two")])


def probe(folder):
    """The measured window, probing every 32 samples, under the linear rule."""
    run(folder, ["--lr", "0.05", "--accumulate-step", "auto", "--probe-interval", "32", "--scale-rule", "linear",
                 "--batch-size", "4"])


def memory(folder):
    """The micro-batch planned for a batch of 4 per update."""
    run(folder, ["--lr", "0.1", "--batch-size", "4", "--micro-batch", "auto"])
