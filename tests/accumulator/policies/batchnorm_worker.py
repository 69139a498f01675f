"""The BatchNorm case of the suite's msrun launch (tests/msrun.py), read by test_batchnorm.py.

The ranks feed micro-batches of different sizes (5 and 3 samples) at mean
300, std 0.5, taking turns along the data, and save their moving statistics.
Rank 1's micro-batches sit 0.8 higher than rank 0's, so the spread between
the ranks' means is a good part of the variance.
"""
import os

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn
from mindspore.communication import get_rank

from accumulator import Accumulator, WindowAllReduce
from accumulator.policies.batchnorm import convert_batchnorm
from tests.accumulator.helpers import in_data_parallel_graph

SIZES = (5, 3)
ACCUMULATE_STEP = 2
WINDOWS = 2
CHANNELS = 3


def window_batches():
    """Each window's whole batch (both ranks' micro-batches, in turn), float32 ``[samples, C, 4, 4]``."""
    rng = np.random.default_rng(7)
    return [np.concatenate([(299.6 + 0.8 * rank + 0.5 * rng.standard_normal((size, CHANNELS, 4, 4)))
                            for _ in range(ACCUMULATE_STEP) for rank, size in enumerate(SIZES)]).astype(np.float32)
            for _ in range(WINDOWS)]


def rank_micro_batches(batch, rank):
    """This rank's micro-batches of one window's ``batch``."""
    bounds = np.cumsum([0] + list(SIZES) * ACCUMULATE_STEP)
    return [batch[bounds[i]:bounds[i + 1]] for i in range(rank, len(bounds) - 1, len(SIZES))]


@in_data_parallel_graph
def main(folder):
    """Each rank's moving statistics and update count in ``folder/rank_<rank>.npz``."""
    rank = get_rank()
    net = nn.SequentialCell(nn.BatchNorm2d(CHANNELS))
    optimizer = nn.SGD(net.trainable_params(), 0.01)
    accumulator = Accumulator(optimizer, ACCUMULATE_STEP, grad_reducer=WindowAllReduce())
    convert_batchnorm(net, accumulator)
    net.set_train()

    def forward(x):
        return (net(x) ** 2).mean()

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    @ms.jit
    def step(x):
        return accumulator(grad_fn(x)[1])

    for batch in window_batches():
        for micro_batch in rank_micro_batches(batch, rank):
            step(Tensor(micro_batch))
    np.savez(os.path.join(folder, f"rank_{rank}.npz"), moving_mean=net[0].moving_mean.asnumpy(),
             moving_variance=net[0].moving_variance.asnumpy(), updates=accumulator.update_count.asnumpy())

