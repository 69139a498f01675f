"""The data-parallel case of the suite's msrun launch (tests/msrun.py), read by test_all_reduce.py.

Each rank trains on its own interleaved shard, once with equal micro-batches
("mean") and once with micro-batches of different sizes per rank, which
count weighting keeps exact ("count").
"""
import os

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor, ops
from mindspore.communication import get_rank

from accumulator import Accumulator
from accumulator.devices.all_reduce import WindowAllReduce
from tests.accumulator.helpers import grad_fn_for, in_data_parallel_graph, make_data, make_net, make_optimizer

ACCUMULATE_STEP = 2
WINDOWS = 3


@ms.jit_class
class CountingAllReduce(WindowAllReduce):
    """WindowAllReduce that also counts its calls in a Parameter."""

    def __init__(self):
        super().__init__()
        self.calls = Parameter(Tensor(0, ms.int32), name="calls", requires_grad=False)

    def __call__(self, tensors):
        ops.assign_add(self.calls, ops.ones((), ms.int32))
        return super().__call__(tensors)


def micro_batch_rows(rank, micro_step, sizes):
    """Rows of rank's micro-batch: the ranks take turns along the data."""
    start = sum(sizes) * micro_step + sum(sizes[:rank])
    return slice(start, start + sizes[rank])


def train(weighting, folder):
    rank = get_rank()
    sizes = (4, 4) if weighting == "mean" else (5, 3)
    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    reducer = CountingAllReduce()
    accumulator = Accumulator(optimizer, ACCUMULATE_STEP, grad_reducer=reducer)
    grad_fn = grad_fn_for(net, optimizer, "mean" if weighting == "mean" else "sum")

    @ms.jit
    def step(x, y, count):
        grads = grad_fn(x, y)[1]
        if weighting == "mean":
            return accumulator(grads)
        return accumulator(grads, count)

    x, y = make_data(sum(sizes) * ACCUMULATE_STEP * WINDOWS)
    for micro_step in range(ACCUMULATE_STEP * WINDOWS):
        rows = micro_batch_rows(rank, micro_step, sizes)
        step(Tensor(x[rows]), Tensor(y[rows]), Tensor(sizes[rank], ms.int32))
    state = {name: p.asnumpy() for name, p in optimizer.parameters_and_names()}
    np.savez(os.path.join(folder, f"{weighting}_{rank}.npz"), allreduce_calls=reducer.calls.asnumpy(), **state)


@in_data_parallel_graph
def main(folder):
    """Both weightings, each rank's final state in ``folder/<weighting>_<rank>.npz``."""
    for weighting in ("mean", "count"):
        train(weighting, folder)
