"""The language-model case of the suite's msrun launch (tests/msrun.py), read by test_lm_msrun.py.

Each rank runs one window step over its own two micro-batches of padded
sequences with their token counts; WindowAllReduce sums the gradients and
the token counts of both ranks once, so the update is the mean over every
token of all 16 sequences: the large batch's.
"""
import os

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn
from mindspore.communication import get_rank

from accumulator import Accumulator, WindowAllReduce, make_window_step
from data.tokens import window_batches
from models.transformer import TokenLoss
from tests.accumulator.helpers import in_data_parallel_graph
from tests.models.lm_helpers import MICRO_BATCH, SEQUENCES, make_lm

STEPS_PER_RANK, RANKS = 2, 2


def rank_sequences(rank):
    """Rank ``rank``'s micro-batches, the ranks taking turns along the sequences."""
    return [s for start in range(rank * MICRO_BATCH, len(SEQUENCES), RANKS * MICRO_BATCH)
            for s in SEQUENCES[start:start + MICRO_BATCH]]


@in_data_parallel_graph
def main(folder):
    """Each rank's token count, update count and weights in ``folder/rank_<rank>.npz``."""
    rank = get_rank()
    net = make_lm()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.1)
    accumulator = Accumulator(optimizer, STEPS_PER_RANK, grad_reducer=WindowAllReduce())
    loss_fn = TokenLoss(net)

    def loss_sum(inputs, targets):
        return loss_fn(inputs, targets)[0]

    window_step = make_window_step(ms.value_and_grad(loss_sum, None, optimizer.parameters), accumulator)
    (inputs, targets, counts), = window_batches(rank_sequences(rank), MICRO_BATCH, STEPS_PER_RANK, multiple=16)
    window_step(Tensor(inputs), Tensor(targets), counts=counts)
    np.savez(os.path.join(folder, f"rank_{rank}.npz"), tokens=counts.sum(),
             update_count=accumulator.update_count.asnumpy(), *[p.asnumpy() for p in net.get_parameters()])

