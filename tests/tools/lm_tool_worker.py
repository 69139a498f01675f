"""The train_lm case of the suite's msrun launch (tests/msrun.py), read by test_train_lm.py.

scripts/train_lm.py on two ranks (batch 4 each), once per packing, one run after the other in the same ranks,
on the small synthetic text the tests use (3,000 bytes), which ``prepare`` writes before the launch; then the run
moved from one process to two ranks (``MOVED``).
"""
import contextlib
import os

import training.lm
from scripts import train_lm

# Each packing and the updates its one epoch makes. Padded rows, and packed ones split by position (within windows:
# the window is both ranks' rows); unbounded packing is the same split of other rows (test_packing_on_by_default...).
PACKINGS = {"--no-packing": 4, "--pack-within-windows": 4}
WIDTH = 32
TEXT = "text"  # the case folder's data dir


def two_rank_flags(data_dir, packing, accumulate_step=2):
    """The flags both the ranks (``accumulate_step`` 2 each) and the test's one process (4: the run's window) train
    with, but the batch size and --ckpt-dir."""
    return ["--synthetic", "--data-dir", str(data_dir), "--epochs", "1", "--no-shuffle", "--drop-last",
            "--accumulate-step", str(accumulate_step), "--width", str(WIDTH), "--depth", "1", "--max-length", "64",
            "--sample-tokens", "0", packing]


@contextlib.contextmanager
def small_synthetic_text():
    """--synthetic writes 3,000 bytes (about 40 samples) in the block instead of the tool's default."""
    before = training.lm.SYNTHETIC_BYTES
    training.lm.SYNTHETIC_BYTES = 3000
    try:
        yield
    finally:
        training.lm.SYNTHETIC_BYTES = before


def prepare(folder):
    """Writes the synthetic text to ``folder/TEXT`` before the launch: the ranks read the test's process's text."""
    with small_synthetic_text(), contextlib.ExitStack() as stack:
        training.lm.prepare_text(os.path.join(folder, TEXT), synthetic=True, url=None, stack=stack)


# The packing whose run moves between 1 and 2 ranks: one process's epoch 1 resumed on both for epoch 2.
MOVED = "--no-packing"


def main(folder):
    """Each packing's run, its checkpoints in ``folder/<packing>/``; then on each rank alone one process's epoch 1
    of MOVED (``folder/alone_<rank>/``, N 4) resumed by both ranks for epoch 2 (N 2 each): 1 -> 2 ranks."""
    import mindspore as ms
    from mindspore.communication import get_rank
    with small_synthetic_text():
        for packing in PACKINGS:
            train_lm.main([*two_rank_flags(os.path.join(folder, TEXT), packing), "--batch-size", "4",
                           "--distributed", "--ckpt-dir", os.path.join(folder, packing)])
        ms.reset_auto_parallel_context()  # one process's run: no data parallel
        alone = ["--batch-size", "4", "--ckpt-dir", os.path.join(folder, f"alone_{get_rank()}")]
        train_lm.main([*two_rank_flags(os.path.join(folder, TEXT), MOVED, accumulate_step=4), *alone])
        train_lm.main([*two_rank_flags(os.path.join(folder, TEXT), MOVED), *alone, "--epochs", "2", "--resume",
                       "--distributed"])
