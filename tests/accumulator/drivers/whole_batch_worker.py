"""The whole-batch case of the suite's msrun launch (tests/msrun.py), read by test_whole_batch.py.

Each rank holds half of the pairs, in micro-batches of 2 and 4; the CLIP
loss runs over both ranks' representations, gathered.
"""
import os

import numpy as np
from mindspore import nn
from mindspore.communication import get_rank

from accumulator import Accumulator, WindowAllReduce, make_whole_batch_step
from accumulator.drivers import AllGatherRepresentations
from tests.accumulator.drivers.test_whole_batch import PAIRS, TwoTowers, clip_loss, micro_batches, pairs


def main(folder):
    """Each rank's trained weights, loss and whether it updated in ``folder/rank_<rank>.npz``."""
    rank = get_rank()
    first, second = pairs(PAIRS, 5)
    rows = slice(rank * PAIRS // 2, (rank + 1) * PAIRS // 2)
    net = TwoTowers()
    accumulator = Accumulator(nn.SGD(net.trainable_params(), 1.0), accumulate_step=2, grad_reducer=WindowAllReduce())
    step = make_whole_batch_step(net, clip_loss, accumulator, gather=AllGatherRepresentations())
    loss, updated = step(micro_batches(first[rows], second[rows], (2, 4)))
    np.savez(os.path.join(folder, f"rank_{rank}.npz"), *[p.asnumpy() for p in net.trainable_params()],
             loss=loss.asnumpy(), updated=updated.asnumpy())

