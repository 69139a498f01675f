"""One rank of the whole-batch data-parallel test (started by msrun from test_whole_batch.py).

Each rank holds half of the pairs, in micro-batches of 2 and 4; the CLIP
loss runs over both ranks' representations, gathered.
"""
import sys

import numpy as np
from mindspore import nn
from mindspore.communication import get_rank, init

from accumulator import Accumulator, AllGatherRepresentations, WindowAllReduce, make_whole_batch_step
from test_whole_batch import PAIRS, TwoTowers, clip_loss, micro_batches, pairs


def main(out_prefix):
    init()
    rank = get_rank()
    first, second = pairs(PAIRS, 5)
    rows = slice(rank * PAIRS // 2, (rank + 1) * PAIRS // 2)
    net = TwoTowers()
    accumulator = Accumulator(nn.SGD(net.trainable_params(), 1.0), accumulate_step=2, grad_reducer=WindowAllReduce())
    step = make_whole_batch_step(net, clip_loss, accumulator, gather=AllGatherRepresentations())
    loss, updated = step(micro_batches(first[rows], second[rows], (2, 4)))
    np.savez(f"{out_prefix}{rank}.npz", *[p.asnumpy() for p in net.trainable_params()], loss=loss.asnumpy(),
             updated=updated.asnumpy())


if __name__ == "__main__":
    main(sys.argv[1])
