"""The MindSpore tutorial's gradient accumulator, as the benchmark's baseline.

Its design, as the tutorial writes it: a second clone of the parameters full
of zeros to clear from (state 2.0x the parameter bytes), a branch on
``counter % N``, the loss divided by N by the caller, and no checks.
"""
import mindspore as ms
from mindspore import Parameter, Tensor, ops

from benchmarks import floor


@ms.jit_class
class TutorialAccumulator:
    """The MindSpore tutorial's accumulator: a second zeros clone, ``counter % N``.

    The caller divides the loss by ``accumulate_step``; the summed buffer
    goes to the optimizer as it is. The counter starts at 1, as in the
    tutorial, so the first update comes at the N-th call.

    Example:
        >>> import numpy as np
        >>> from mindspore import nn
        >>> net = nn.Dense(2, 1, weight_init="zeros", bias_init="zeros")
        >>> optimizer = nn.SGD(net.trainable_params(), learning_rate=0.5)
        >>> accumulator = TutorialAccumulator(optimizer, 2)
        >>> grads = tuple(ops.ones_like(p) for p in optimizer.parameters)
        >>> accumulator(grads), net.bias.asnumpy()  # summed, not applied yet
        (True, array([0.], dtype=float32))
        >>> accumulator(grads), net.bias.asnumpy()  # the second call applies the sum
        (True, array([-1.], dtype=float32))
    """

    def __init__(self, optimizer, accumulate_step):
        self.optimizer = optimizer
        self.inner_grads = optimizer.parameters.clone(prefix="accumulate_", init="zeros")
        self.zeros = optimizer.parameters.clone(prefix="zeros_", init="zeros")
        self.counter = Parameter(Tensor(1, ms.int32), "counter_")
        self.accumulate_step = accumulate_step
        self.map = ops.HyperMap()

    def __call__(self, grads):
        self.map(ops.partial(ops.assign_add), self.inner_grads, grads)
        if self.counter % self.accumulate_step == 0:
            self.optimizer(self.inner_grads)
            self.map(ops.partial(ops.assign), self.inner_grads, self.zeros)
        ops.assign_add(self.counter, Tensor(1, ms.int32))
        return True


@ms.jit_class
class TutorialSkippingAccumulator(TutorialAccumulator):
    """The tutorial's design with what the Accumulator adds by default: a window holding NaN or Inf skipped exactly.

    The optimizer must not run on such a window, which is known whole only in the branch on ``counter % N`` and
    known finite only after a pass over its sums there: an ``if`` inside that branch decides, on a Parameter, and
    every path of both returns, as a branch that returns nothing leaks host memory: the least code that pays for
    an exact skip (docs/mindspore-behaviours.md#branches-that-leak-host-memory).

    Example:
        >>> import numpy as np
        >>> from mindspore import nn
        >>> net = nn.Dense(2, 1, weight_init="zeros", bias_init="zeros")
        >>> accumulator = TutorialSkippingAccumulator(nn.SGD(net.trainable_params(), learning_rate=0.5), 1)
        >>> nan = tuple(ops.ones_like(p) * float("nan") for p in net.trainable_params())
        >>> bool(accumulator(nan)), net.bias.asnumpy()  # skipped: the weights keep their values
        (False, array([0.], dtype=float32))
        >>> bool(accumulator(tuple(ops.ones_like(p) for p in net.trainable_params()))), net.bias.asnumpy()
        (True, array([-0.5], dtype=float32))
    """

    def __init__(self, optimizer, accumulate_step):
        super().__init__(optimizer, accumulate_step)
        self.due = Parameter(Tensor(False), "due_")

    def __call__(self, grads):
        self.map(ops.partial(ops.assign_add), self.inner_grads, grads)
        full = self.counter % self.accumulate_step == 0
        ops.assign_add(self.counter, Tensor(1, ms.int32))
        if full:
            finite = floor.finite(self.inner_grads)
            ops.assign(self.due, finite)
            self.map(ops.partial(_clear_unless, finite), self.inner_grads, self.zeros)  # a skipped window
            return self._apply_if_due()
        return Tensor(False)

    def _apply_if_due(self):
        if self.due:
            self.optimizer(self.inner_grads)
            self.map(ops.partial(ops.assign), self.inner_grads, self.zeros)
            return Tensor(True)
        return Tensor(False)


def _clear_unless(keep, buffer, zeros):
    return ops.assign(buffer, ops.select(keep, buffer, zeros))
