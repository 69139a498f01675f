"""The least any MindSpore window step can cost: the ``window_floor`` rows.

A bare in-graph ``while`` loop of forward, backward and ``assign_add`` into
one buffer per parameter, then one optimizer call and a clear: no mean, no
checks, no counters. The project's window step does all of that on top;
the gap between the two rows is what its bookkeeping costs. The ``checked``
floor adds only what the Accumulator's defaults cannot do without: the
mean's multiply and a finiteness check deciding, in a branch, whether the
optimizer runs; the ``mean`` and ``check`` floors add one of the two
each. The helpers are this module's own, so the floors stay bare whatever
the Accumulator does.
"""
import mindspore as ms
from mindspore import ops

_hyper_map = ops.HyperMap()


# Module-level helpers: MindSpore 2.10 fails to compile lambdas inside in-graph branches.
def _add_into(buffer, grad):
    return ops.assign_add(buffer, grad)


def _clear(buffer):
    return ops.assign(buffer, ops.zeros_like(buffer))


def _scale(factor, buffer):
    return buffer * factor


def _row_sums(buffer):
    if buffer.ndim < 2:
        return buffer.reshape((-1, 1))
    rows = buffer.reshape((buffer.shape[0], -1))
    return ops.matmul(rows, ops.ones((rows.shape[1], 1), ms.float32))


def _window_gradient(mean, buffers, k):
    if mean:
        return _hyper_map(ops.partial(_scale, 1.0 / k.astype(ms.float32)), buffers)
    return buffers


def total(tensors):
    """The sum of every element of float32 ``tensors``: the cheapest full read of a gradient found on CPU.

    Row sums by MatMul, joined, summed by one more MatMul (MindSpore 2.10's
    CPU ReduceSum is far slower). Whatever a per-micro-step statistic
    computes, it reads the gradient at least once: the ``acc_read_pass`` row.

    Example:
        >>> import numpy as np
        >>> from mindspore import Tensor
        >>> float(total((Tensor(np.ones((2, 3), np.float32)), Tensor(np.ones(4, np.float32)))))
        10.0
    """
    column = ops.concat(_hyper_map(_row_sums, tensors))
    return ops.matmul(ops.ones((1, column.shape[0]), ms.float32), column).reshape(())


def make_floor_step(grad_fn, optimizer, mean=False, check=False):
    """A jitted ``window_step(x, y, k)`` over stacked micro-batches, and its buffers.

    ``x[i], y[i]`` for ``i < k`` go through ``grad_fn`` (which returns
    ``loss, grads`` for ``optimizer.parameters``); their gradients are summed
    into zero-initialised buffers, the optimizer runs once on the sum, and the
    buffers are cleared. ``k`` is an int32 Tensor, so the loop is never
    unrolled. The two things the Accumulator's defaults add, each on its own
    so that their prices can be told apart: ``mean``, the optimizer gets the
    sum over ``k`` (one multiply per buffer); ``check``, it runs only when the
    sum is finite (a MatMul sum and a branch). Returns the step and the
    buffers (one per parameter).

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
        >>> checked_step, _ = make_floor_step(grad_fn, optimizer, mean=True, check=True)
        >>> _ = checked_step(x, y, Tensor(2, ms.int32))
        >>> net.bias.asnumpy()  # it predicts 3 x 2 + 2 = 8: one SGD step on the mean gradient, 2 x (8 - 1)
        array([-5.], dtype=float32)
    """
    buffers = optimizer.parameters.clone(prefix="floor", init="zeros")

    def window_step(x, y, k):
        i = ops.zeros((), ms.int32)
        while i < k:
            _, grads = grad_fn(x[i], y[i])
            _hyper_map(_add_into, buffers, grads)
            i = i + 1
        # Python constants: the graph keeps only the chosen form, with the
        # mean's multiply inside the branch as the Accumulator has it.
        if check:
            if ops.isfinite(total(buffers)):
                optimizer(_window_gradient(mean, buffers, k))
        else:
            optimizer(_window_gradient(mean, buffers, k))
        _hyper_map(_clear, buffers)
        return i

    return ms.jit(window_step), buffers


def make_apply_floor(optimizer):
    """A jitted ``apply()``: the optimizer and a clear over one buffer per parameter; and the buffers.

    The least a window's apply costs: what any accumulator must run once a
    window, with no checks, no mean, no counters and no split. The
    ``apply_floor`` row times it against what the recommended step pays per
    window beyond its micro-steps. The buffers start as ones, so the first
    call moves the weights; the kernels cost the same on the zeros after it.

    Example:
        >>> import numpy as np
        >>> from mindspore import nn
        >>> net = nn.Dense(3, 1)
        >>> optimizer = nn.SGD(net.trainable_params(), learning_rate=0.5)
        >>> apply, buffers = make_apply_floor(optimizer)
        >>> bias = float(net.bias.asnumpy()[0])
        >>> _ = apply()
        >>> round(float(net.bias.asnumpy()[0]) - bias, 4), float(buffers[1].asnumpy()[0])  # one SGD step on ones
        (-0.5, 0.0)
    """
    buffers = optimizer.parameters.clone(prefix="apply_floor", init="ones")

    def apply():
        optimizer(buffers)
        _hyper_map(_clear, buffers)
        # One scalar out, as step()'s calls return: each output a graph returns costs its own copy.
        return buffers[0].sum()

    return ms.jit(apply), buffers


def make_two_graph_floor(grad_fn, optimizer, accumulate_step):
    """A ``step(x, y)``: the least the recommended step's design (a micro-step graph, an apply graph) can cost.

    A jitted micro-step that adds its gradients into one buffer per
    parameter, and, after every ``accumulate_step``-th, ``make_apply_floor``'s
    optimizer-and-clear as a graph of its own, called from the host: no mean,
    no check, no counters, no buckets and no split. The ``two_graph_floor``
    row times it beside the recommended step, which does the same work plus
    those. Returns the step and the buffers.

    Example:
        >>> import numpy as np
        >>> from mindspore import Tensor, nn
        >>> net = nn.Dense(3, 1, weight_init="zeros", bias_init="zeros")
        >>> optimizer = nn.SGD(net.trainable_params(), learning_rate=0.5)
        >>> grad_fn = ms.value_and_grad(nn.WithLossCell(net, nn.MSELoss()), None, optimizer.parameters)
        >>> step, buffers = make_two_graph_floor(grad_fn, optimizer, 2)
        >>> x, y = Tensor(np.ones((4, 3), np.float32)), Tensor(np.ones((4, 1), np.float32))
        >>> step(x, y); net.bias.asnumpy()  # half a window: nothing applied
        array([0.], dtype=float32)
        >>> step(x, y); net.bias.asnumpy(), float(buffers[1].asnumpy()[0])  # ones + 2 gradients of -2, cleared
        (array([1.5], dtype=float32), 0.0)
    """
    apply, buffers = make_apply_floor(optimizer)

    def micro_step(x, y):
        loss, grads = grad_fn(x, y)
        _hyper_map(_add_into, buffers, grads)
        return loss

    micro_step = ms.jit(micro_step)
    position = 0

    def step(x, y):
        nonlocal position
        micro_step(x, y)
        position = (position + 1) % accumulate_step
        if position == 0:
            apply()

    return step, buffers
