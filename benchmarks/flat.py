"""A design experiment: one contiguous buffer for the whole gradient (the ``flat`` row).

As DDP, DeepSpeed and Megatron keep it: each micro-step concatenates the
gradients and adds them with one ``AssignAdd``; the window splits the
buffer once, for the optimizer. No checks, counts or mean weights: what the
layout alone buys against one buffer per parameter.
"""
import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, ops

_hyper_map = ops.HyperMap()


def _flatten(grad):
    return grad.reshape((-1,))


@ms.jit_class
class FlatAccumulator:
    """Sums float32 gradients into one flat buffer; ``apply()`` hands their mean to the optimizer.

    Example:
        >>> from mindspore import nn
        >>> net = nn.Dense(2, 1, weight_init="zeros", bias_init="zeros")
        >>> flat = FlatAccumulator(nn.SGD(net.trainable_params(), learning_rate=1.0), 2)
        >>> grads = tuple(ops.ones_like(p) for p in net.trainable_params())
        >>> _ = flat.accumulate(grads); _ = flat.accumulate(grads)
        >>> flat.buffer.asnumpy()
        array([2., 2., 2.], dtype=float32)
        >>> _ = flat.apply()
        >>> net.bias.asnumpy(), flat.buffer.asnumpy()
        (array([-1.], dtype=float32), array([0., 0., 0.], dtype=float32))
    """

    def __init__(self, optimizer, accumulate_step):
        self.optimizer = optimizer
        self.accumulate_step = accumulate_step
        self.scale = 1.0 / accumulate_step
        self.shapes = tuple(tuple(p.shape) for p in optimizer.parameters)
        self.sizes = tuple(int(np.prod(shape)) for shape in self.shapes)
        self.buffer = Parameter(Tensor(np.zeros(sum(self.sizes), np.float32)), name="flat.buffer",
                                requires_grad=False)

    def accumulate(self, grads):
        """Adds one micro-batch's gradients: a concat and one AssignAdd."""
        return ops.assign_add(self.buffer, ops.concat(_hyper_map(_flatten, grads)))

    def apply(self):
        """Runs the optimizer on the window's mean and clears the buffer."""
        parts = ops.split(self.buffer * self.scale, self.sizes)
        # A comprehension, not a loop adding to a tuple: 128 tensors exceed the graph's call depth.
        self.optimizer(tuple([part.reshape(shape) for part, shape in zip(parts, self.shapes)]))
        return ops.assign(self.buffer, ops.zeros_like(self.buffer))
