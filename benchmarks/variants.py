"""Accumulators the benchmark compares against, and experiments on this project's.

``TutorialAccumulator`` is the design of the MindSpore tutorial on gradient
accumulation, as a baseline. The ``Accumulator`` subclasses try cheaper
designs without touching ``accumulator/accumulator.py``; the benchmark says
whether they are worth moving into the library.
"""
import mindspore as ms
from mindspore import Parameter, Tensor, ops

from accumulator.accumulator import Accumulator, _add_into, _hyper_map


@ms.jit_class
class TutorialAccumulator:
    """The MindSpore tutorial's accumulator: a second zeros clone, ``counter % N``.

    The caller divides the loss by ``accumulate_step``; the summed buffer
    goes to the optimizer as it is.

    Example:
        >>> accumulator = TutorialAccumulator(optimizer, 4)
        >>> accumulator(grads)  # inside a jitted train step
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


def _assign(buffer, grad):
    return ops.assign(buffer, grad)


def _scale_into(factor, buffer):
    return ops.assign(buffer, buffer * factor.astype(buffer.dtype))


@ms.jit_class
class AssignFirstAccumulator(Accumulator):
    """Writes a window's first micro-step with ``assign``: no clearing pass per window.

    Costs an in-graph branch on every micro-step instead. A skipped
    (non-finite) window needs no clearing either: the next window's first
    micro-step overwrites it.
    """

    def accumulate(self, grads, count=None):
        self._check_grads(grads)
        weight = self._weight(count)
        if self.micro_step == 0:
            _hyper_map(_assign, self.grad_buffers, grads)
        else:
            _hyper_map(_add_into, self.grad_buffers, grads)
        ops.assign_add(self.weight_total, weight)
        return ops.assign_add(self.micro_step, ops.ones((), ms.int32))

    def _clear_buffers(self):
        pass


@ms.jit_class
class InplaceMeanAccumulator(Accumulator):
    """Scales the window's sum inside the buffers, not into new tensors.

    Saves one set of parameter-sized temporaries at the update (peak
    memory); the buffers are cleared right after anyway.
    """

    def _scaled(self, grads, factor):
        _hyper_map(ops.partial(_scale_into, factor), self.grad_buffers)
        return self.grad_buffers


@ms.jit_class
class LeanAccumulator(AssignFirstAccumulator):
    """Both experiments at once: assign-first windows and the mean taken in place.

    No parameter-sized temporary is made at the update, as in the tutorial's
    design, while keeping one buffer instead of two.
    """

    _scaled = InplaceMeanAccumulator._scaled
