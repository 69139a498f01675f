"""The MNIST tool's cases of the suite's msrun launch (tests/msrun.py): scripts/train_mnist.py --distributed on two
ranks, its checkpoints in ``folder/ckpt``, on the synthetic MNIST ``prepare`` writes (conftest's
``synthetic_mnist_dir``'s: 200 train and 100 test samples, seed 0). Read by test_train_mnist_ranks.py
(``two_ranks``; ``four_ranks`` and ``dies`` in launches of its own),
tests/training/test_probe.py (``probe``: the adaptive windows) and tests/training/test_memory.py (``memory``).
"""
import os

from data.idx import write_synthetic_mnist
from scripts import train_mnist as tool
from tests.conftest import SYNTHETIC_TEST, SYNTHETIC_TRAIN

COMMON = ["--epochs", "1", "--no-shuffle"]


# An odd number of samples, so the epoch's last window of the run gives the ranks unequal parts: of windows of 8 rows
# (2 ranks x 1 x 4) 7 are left, 3 on rank 0 (one short micro-batch, run op by op) and 4 on rank 1 (a whole one,
# compiled); of windows of 12 (2 x 2 x 3), 7 too: one micro-batch on rank 0, two on rank 1 (docs/devices.md).
ODD_TRAIN = 199


def prepare(folder):
    write_synthetic_mnist(os.path.join(folder, "mnist"), n_train=SYNTHETIC_TRAIN, n_test=SYNTHETIC_TEST, seed=0)
    write_synthetic_mnist(os.path.join(folder, "odd"), n_train=ODD_TRAIN, n_test=SYNTHETIC_TEST, seed=0)


def run(folder, flags, data="mnist", ckpt="ckpt"):
    tool.main(["--data-dir", os.path.join(folder, data), *COMMON, *flags, "--distributed",
               "--ckpt-dir", os.path.join(folder, ckpt)])


# The run's batch of 9: on two ranks 4 and 5 samples, on four 2, 2, 2 and 3 (test_train_mnist_ranks.py).
SHARED_BATCH = ["--lr", "0.1", "--batch-size", "9", "--micro-batch", "4"]


def two_ranks(folder):
    """Epoch 1 of SHARED_BATCH's run on two ranks (``ckpt/``), which ``four_ranks`` resumes. In PyNative, which
    compiles nothing (the ranks' compiled steps: ``probe``)."""
    run(folder, [*SHARED_BATCH, "--mode", "pynative"])


def four_ranks(folder):
    """On four ranks (two launches of two, as two hosts): epoch 2 of SHARED_BATCH's run from ``two_ranks``'s epoch 1,
    copied into ``from_two/``: 2 -> 4 ranks; its log in ``log.json``. In PyNative, as ``two_ranks``."""
    tool.main(["--data-dir", os.path.join(folder, "mnist"), "--no-shuffle", *SHARED_BATCH, "--epochs", "2",
               "--mode", "pynative", "--resume", "--distributed", "--ckpt-dir", os.path.join(folder, "from_two"),
               "--log-json", os.path.join(folder, "log.json")])


PROBE = ["--lr", "0.05", "--accumulate-step", "auto", "--probe-interval", "32", "--scale-rule", "linear",
         "--batch-size", "4"]
NOISE = ["--lr", "0.05", "--accumulate-step", "noise", "--batch-size", "3"]


def dies(folder):
    """After ``four_ranks`` in its launches: once every rank has ended it (an AllGather), rank 3 leaves
    (``os._exit(3)``) as the others start the tool, which under ``--micro-batch auto`` gathers the ranks' hosts
    before it compiles anything, and wait for it there; msrun ends them (docs/devices.md#a-rank-that-dies)."""
    import mindspore as ms
    from mindspore import ops
    from mindspore.communication import get_rank
    ops.AllGather()(ms.Tensor([get_rank()], ms.int32))  # else rank 3's msrun may end rank 2 within four_ranks
    if get_rank() == 3:
        os._exit(3)
    run(folder, ["--batch-size", "9", "--micro-batch", "auto"], ckpt="dies")


def probe(folder):
    """The measured window, probing every 32 samples, under the linear rule (``ckpt/``); then N following the noise
    scale (``noise/``); both on ODD_TRAIN samples, whose last window the ranks share unequally."""
    run(folder, PROBE, data="odd")
    run(folder, NOISE, data="odd", ckpt="noise")


def memory(folder):
    """``--micro-batch auto`` for a batch of 16 per update, up to 8 on each rank, planned through the tool's own
    gathers of the ranks' hosts and choices, where rank 0's measurement chooses 8 and rank 1's 4 (the measurement
    itself, in a child: test_memory's one process); each rank prints the micro-batch and N it will train with
    (training a given micro-batch on several ranks: test_train_mnist_ranks.py, test_probe.py)."""
    from unittest import mock

    from mindspore.communication import get_rank

    import training.memory
    from accumulator.memory import Measurement, MemoryPlan
    from training.context import configure_context
    from training.mnist import mnist_task
    size = 4 if get_rank() else 8

    def measured(make_step, batch, budget, **settings):
        return MemoryPlan(batch, size, budget, 0.1, (Measurement(size, 2 ** 20, 1.0),))
    config, _ = tool.parse_args(["--batch-size", "16", "--micro-batch", "auto", "--distributed"])
    with mock.patch.object(training.memory, "plan_micro_batch", measured):
        config = training.memory.plan_run(configure_context(config), mnist_task, (os.path.join(folder, "mnist"),))
    print(f"rank {get_rank()} trains {config.batch_description()}")
