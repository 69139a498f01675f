"""scripts/train_mnist.py --distributed on two msrun ranks trains as one process on the whole batch.

By hand: each rank takes --batch-size 16 with --accumulate-step 2, so a window covers 2 ranks x 2 x 16 = 64 samples:
the 200 synthetic samples make 4 updates, and the checkpoint equals one process's at --batch-size 64 (to float
tolerance); only rank 0 prints.
"""
import os

import mindspore as ms
import numpy as np
import pytest


@pytest.mark.slow
@pytest.mark.msrun("train_mnist")
def test_distributed_ranks_train_like_one_process_on_the_whole_batch(synthetic_mnist_dir, msrun_folder,
                                                                     train_mnist_run):
    # The ranks ran the tool with train_mnist_worker.train_mnist: --batch-size 16 --accumulate-step 2, --lr 0.1.
    # Rank r reads samples r, r+2, ...: a window of 2 x 16 per rank covers the
    # same 64 samples as one 64-batch, and the short last windows (4 + 4 and 8) too.
    rank0, rank1 = ((msrun_folder / f"rank_{rank}.log").read_text() for rank in (0, 1))
    assert "effective 64" in rank0 and "epoch 1/1: train loss" in rank0
    assert "epoch 1/1: train loss" not in rank1   # only rank 0 prints
    assert os.listdir(msrun_folder / "ckpt") == ["epoch_001.ckpt"]

    single, expected = train_mnist_run(synthetic_mnist_dir, epochs=1, lr=0.1, shuffle=False, batch_size=64,
                                       accumulate_step=1)
    saved = ms.load_checkpoint(str(msrun_folder / "ckpt" / "epoch_001.ckpt"))
    assert int(saved["accumulator.update_count"].asnumpy()) == single["updates"] == 4
    for name, value in expected.items():
        np.testing.assert_allclose(saved[name].asnumpy(), value, rtol=1e-5, atol=1e-6, err_msg=name)
