"""The train_lm case of the suite's msrun launch (tests/msrun.py), read by test_train_lm.py.

Before the launch, ``prepare`` trains one process on the small synthetic text the tests use (3,000 bytes), which it
writes: two epochs of each packing with the window of both ranks. Then scripts/train_lm.py on two ranks (batch 4
each), once per packing, one run after the other in the same ranks: packed within windows from the start
(``TWO_RANKS``), padded rows from the one process's epoch 1 (``ONE_TO_TWO``).
"""
import contextlib
import os
import shutil

import mindspore as ms

import training.lm
from scripts import train_lm

# The ranks' run of each packing: epoch 1 from the start, which one process resumes in the test (2 -> 1 ranks); and
# epoch 2 resumed from one process's epoch 1 (1 -> 2). Padded rows are split by position, as packed ones are
# (unbounded packing: test_packing_on_by_default...); packed within windows, a window is both ranks' rows.
TWO_RANKS, ONE_TO_TWO = "--pack-within-windows", "--no-packing"
WIDTH = 32
TEXT = "text"  # the case folder's data dir
ONE_PROCESS = "one_process"  # the case folder's folder of each packing's one-process run


def two_rank_flags(data_dir, packing, accumulate_step=2):
    """The flags both the ranks (``accumulate_step`` 2 each) and one process (4: the run's window) train with, but
    the batch size and --ckpt-dir."""
    return ["--synthetic", "--data-dir", str(data_dir), "--epochs", "1", "--no-shuffle", "--drop-last",
            "--accumulate-step", str(accumulate_step), "--width", str(WIDTH), "--depth", "1", "--max-length", "64",
            "--sample-tokens", "0", packing]


def one_process_flags(data_dir, packing):
    """The flags of one process's two epochs of ``packing`` with both ranks' window (N 4), in PyNative (the ranks
    compile: the same updates to the tests' tolerance, for less than a compile), but --ckpt-dir."""
    return [*two_rank_flags(data_dir, packing, accumulate_step=4), "--batch-size", "4", "--epochs", "2",
            "--mode", "pynative"]


@contextlib.contextmanager
def small_synthetic_text():
    """--synthetic writes 3,000 bytes (75 samples of up to 64 tokens) in the block instead of the tool's default."""
    before = training.lm.SYNTHETIC_BYTES
    training.lm.SYNTHETIC_BYTES = 3000
    try:
        yield
    finally:
        training.lm.SYNTHETIC_BYTES = before


def prepare(folder):
    """Before the launch, in the test's process: the synthetic text in ``folder/TEXT``, which the ranks read, and each
    packing's one-process run in ``folder/ONE_PROCESS/<packing>/``, once for both ranks and the tests; ONE_TO_TWO's
    epoch 1 copied to ``folder/ONE_TO_TWO/`` for the ranks to resume. The test's process keeps its mode."""
    mode = ms.get_context("mode")
    with small_synthetic_text():
        for packing in (TWO_RANKS, ONE_TO_TWO):
            train_lm.main([*one_process_flags(os.path.join(folder, TEXT), packing),
                           "--ckpt-dir", os.path.join(folder, ONE_PROCESS, packing)])
    ms.set_context(mode=mode)
    os.mkdir(os.path.join(folder, ONE_TO_TWO))
    shutil.copy(os.path.join(folder, ONE_PROCESS, ONE_TO_TWO, "epoch_001.ckpt"), os.path.join(folder, ONE_TO_TWO))


def main(folder):
    """Each packing's run on both ranks (N 2 each), its checkpoints in ``folder/<packing>/``: TWO_RANKS's epoch 1, and
    ONE_TO_TWO's epoch 2 resumed from one process's epoch 1 (N 4)."""
    text = os.path.join(folder, TEXT)
    with small_synthetic_text():
        train_lm.main([*two_rank_flags(text, TWO_RANKS), "--batch-size", "4", "--distributed",
                       "--ckpt-dir", os.path.join(folder, TWO_RANKS)])
        train_lm.main([*two_rank_flags(text, ONE_TO_TWO), "--batch-size", "4", "--epochs", "2", "--resume",
                       "--distributed", "--ckpt-dir", os.path.join(folder, ONE_TO_TWO)])
