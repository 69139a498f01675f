"""The weights' average under data parallel, a scenario of the suite's msrun launch (tests/msrun.py).

Each rank trains on its own interleaved shard, micro-batches of 5 and 3 rows with their counts, and writes its
average (read by tests/accumulator/policies/test_ema.py): equal on both ranks, and the large batch's.
"""
import os

import numpy as np
import mindspore as ms
from mindspore import Tensor
from mindspore.communication import get_rank

from accumulator import Accumulator
from accumulator.devices.all_reduce import WindowAllReduce
from accumulator.policies import EMA
from tests.accumulator.devices.all_reduce_worker import ACCUMULATE_STEP, WINDOWS, micro_batch_rows
from tests.accumulator.helpers import grad_fn_for, in_data_parallel_graph, make_data, make_net, make_optimizer

DECAY = 0.7
SIZES = (5, 3)


@in_data_parallel_graph
def main(folder):
    """This rank's average, its window weight (the reference) and its moves in ``folder/ema_<rank>.npz``."""
    rank = get_rank()
    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    ema = EMA(optimizer.parameters, DECAY)
    accumulator = Accumulator(optimizer, ACCUMULATE_STEP, grad_reducer=WindowAllReduce(), policies=[ema])
    grad_fn = grad_fn_for(net, optimizer, "sum")

    @ms.jit
    def step(x, y, count):
        return accumulator(grad_fn(x, y)[1], count)

    x, y = make_data(sum(SIZES) * ACCUMULATE_STEP * WINDOWS)
    for micro_step in range(ACCUMULATE_STEP * WINDOWS):
        rows = micro_batch_rows(rank, micro_step, SIZES)
        step(Tensor(x[rows]), Tensor(y[rows]), Tensor(SIZES[rank], ms.int32))
    np.savez(os.path.join(folder, f"ema_{rank}.npz"), reference=ema.reference.asnumpy(), moves=ema.moves.asnumpy(),
             **{f"average_{i}": average.asnumpy() for i, average in enumerate(ema.average)})
