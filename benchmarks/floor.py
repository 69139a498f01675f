"""The least any MindSpore window step can cost: the ``window_floor`` row.

A bare in-graph ``while`` loop of forward, backward and ``assign_add`` into
one buffer per parameter, then one optimizer call and a clear: no mean, no
checks, no counters. The project's window step does all of that on top;
the gap between the two rows is what its bookkeeping costs. The helpers are
this module's own, so the floor stays bare whatever the Accumulator does.
"""
import mindspore as ms
from mindspore import ops

_hyper_map = ops.HyperMap()


# Module-level helpers: MindSpore 2.10 fails to compile lambdas inside in-graph branches.
def _add_into(buffer, grad):
    return ops.assign_add(buffer, grad)


def _clear(buffer):
    return ops.assign(buffer, ops.zeros_like(buffer))


def make_floor_step(grad_fn, optimizer):
    """A jitted ``window_step(x, y, k)`` over stacked micro-batches, and its buffers.

    ``x[i], y[i]`` for ``i < k`` go through ``grad_fn`` (which returns
    ``loss, grads`` for ``optimizer.parameters``); their gradients are summed
    into zero-initialised buffers, the optimizer runs once on the sum, and the
    buffers are cleared. ``k`` is an int32 Tensor, so the loop is never
    unrolled. Returns the step and the buffers (one per parameter).

    Example:
        >>> import numpy as np
        >>> from mindspore import Tensor, nn
        >>> net = nn.Dense(3, 1, weight_init="zeros", bias_init="zeros")
        >>> optimizer = nn.SGD(net.trainable_params(), learning_rate=0.5)
        >>> loss_net = nn.WithLossCell(net, nn.MSELoss())
        >>> grad_fn = ms.value_and_grad(loss_net, None, optimizer.parameters)
        >>> window_step, buffers = make_floor_step(grad_fn, optimizer)
        >>> x, y = Tensor(np.ones((2, 4, 3), np.float32)), Tensor(np.ones((2, 4, 1), np.float32))
        >>> int(window_step(x, y, Tensor(2, ms.int32)))  # micro-steps summed
        2
        >>> net.bias.asnumpy()  # one SGD step on the sum of two gradients of -2
        array([2.], dtype=float32)
        >>> float(buffers[0].asnumpy().sum())  # cleared for the next window
        0.0
    """
    buffers = optimizer.parameters.clone(prefix="floor", init="zeros")

    @ms.jit
    def window_step(x, y, k):
        i = ops.zeros((), ms.int32)
        while i < k:
            _, grads = grad_fn(x[i], y[i])
            _hyper_map(_add_into, buffers, grads)
            i = i + 1
        optimizer(buffers)
        _hyper_map(_clear, buffers)
        return i

    return window_step, buffers
