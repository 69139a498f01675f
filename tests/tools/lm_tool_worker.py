"""The train_lm case of the suite's msrun launch (tests/msrun.py), read by test_train_lm.py.

Before the launch, ``prepare`` trains one process on the small synthetic text the tests use (3,000 bytes), which it
writes: each packing's run with the window of both ranks. Then scripts/train_lm.py on two ranks (batch 4 each),
once per packing, one run after the other in the same ranks; then the run moved from one process to two ranks
(``MOVED``): the one process's epoch 1 resumed on both for epoch 2.
"""
import contextlib
import os
import shutil

import mindspore as ms

import training.lm
from scripts import train_lm

# Each packing and the updates its one epoch makes. Padded rows, and packed ones split by position (within windows:
# the window is both ranks' rows); unbounded packing is the same split of other rows (test_packing_on_by_default...).
PACKINGS = {"--no-packing": 4, "--pack-within-windows": 4}
WIDTH = 32
TEXT = "text"  # the case folder's data dir
# The packing whose run moves between 1 and 2 ranks: its one process trains 2 epochs, the others' 1.
MOVED = "--no-packing"
ONE_PROCESS = "one_process"  # the case folder's folder of each packing's one-process run
ONE_TO_TWO = "one_to_two"  # where the ranks resume MOVED's one-process epoch 1


def two_rank_flags(data_dir, packing, accumulate_step=2):
    """The flags both the ranks (``accumulate_step`` 2 each) and one process (4: the run's window) train with, but
    the batch size and --ckpt-dir."""
    return ["--synthetic", "--data-dir", str(data_dir), "--epochs", "1", "--no-shuffle", "--drop-last",
            "--accumulate-step", str(accumulate_step), "--width", str(WIDTH), "--depth", "1", "--max-length", "64",
            "--sample-tokens", "0", packing]


def one_process_flags(data_dir, packing):
    """The flags of one process's run of ``packing`` with both ranks' window (N 4), in PyNative (the ranks compile:
    the same updates to the tests' tolerance, for less than a compile), but --ckpt-dir."""
    epochs = "2" if packing == MOVED else "1"
    return [*two_rank_flags(data_dir, packing, accumulate_step=4), "--batch-size", "4", "--epochs", epochs,
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
    packing's one-process run in ``folder/ONE_PROCESS/<packing>/``, once for both ranks and the tests; MOVED's epoch 1
    copied to ``folder/ONE_TO_TWO`` for the ranks to resume. The test's process keeps its mode."""
    mode = ms.get_context("mode")
    with small_synthetic_text():
        for packing in PACKINGS:
            train_lm.main([*one_process_flags(os.path.join(folder, TEXT), packing),
                           "--ckpt-dir", os.path.join(folder, ONE_PROCESS, packing)])
    ms.set_context(mode=mode)
    os.mkdir(os.path.join(folder, ONE_TO_TWO))
    shutil.copy(os.path.join(folder, ONE_PROCESS, MOVED, "epoch_001.ckpt"), os.path.join(folder, ONE_TO_TWO))


def main(folder):
    """Each packing's run, its checkpoints in ``folder/<packing>/``; then both ranks resume one process's epoch 1 of
    MOVED (N 4) in ``folder/ONE_TO_TWO`` for epoch 2 (N 2 each): 1 -> 2 ranks."""
    with small_synthetic_text():
        for packing in PACKINGS:
            train_lm.main([*two_rank_flags(os.path.join(folder, TEXT), packing), "--batch-size", "4",
                           "--distributed", "--ckpt-dir", os.path.join(folder, packing)])
        train_lm.main([*two_rank_flags(os.path.join(folder, TEXT), MOVED), "--batch-size", "4", "--epochs", "2",
                       "--resume", "--distributed", "--ckpt-dir", os.path.join(folder, ONE_TO_TWO)])
