"""The floors the docs cite: the least a window's apply, the recommended step's design and the window step's can cost.

``make_apply_floor``: the optimizer and a clear over one buffer per
parameter, one compiled call; ``make_two_graph_floor``: a jitted micro-step
adding into those buffers, then that apply as a graph of its own once a
window; ``make_window_floor``: the micro-steps in a ``while`` loop and the
apply under an ``if``, one graph a window. No mean, no checks, no counters,
no buckets: the gap between a floor and the Accumulator's row is what its
bookkeeping costs. The helpers are this module's own, so the floors stay
bare whatever the Accumulator does.
(The micro floor is the Accumulator's own micro-step with no window applied:
``contenders``' ``micro_floor``.)
"""
import mindspore as ms
from mindspore import ops

_hyper_map = ops.HyperMap()
_TRUE, _FALSE = ms.Tensor(True), ms.Tensor(False)


# Module-level helpers: MindSpore 2.10 fails to compile lambdas inside in-graph branches.
def _add_into(buffer, grad):
    return ops.assign_add(buffer, grad)


def _clear(buffer):
    return ops.assign(buffer, ops.zeros_like(buffer))


def _total(tensor):
    flat = tensor.reshape((1, -1))
    return ops.matmul(flat, ops.ones((flat.shape[1], 1), ms.float32)).reshape(())


def finite(tensors):
    """True when every element of ``tensors`` is finite, as their sum then is; graph code.

    The least an exact skip checks: one MatMul with ones per tensor, the
    cheapest CPU sum (docs/mindspore-behaviours.md#cpu-reductions-are-slower-than-matmul).

    Example:
        >>> bool(finite((ms.Tensor([[1.0, 2.0]]), ms.Tensor([3.0])))), bool(finite((ms.Tensor([float("inf")]),)))
        (True, False)
    """
    return ops.isfinite(ops.addn(_hyper_map(_total, tensors)))


def make_apply_floor(optimizer, checked=False):
    """A jitted ``apply()``: the optimizer and a clear over one buffer per parameter; and the buffers.

    The least a window's apply costs: what any accumulator must run once a
    window, with no checks, no mean, no counters and no split. The
    ``apply_floor`` row times it against what the recommended step pays per
    window beyond its micro-steps. ``checked``: the optimizer runs only when
    the buffers are ``finite``, under an ``if``, the least an exact skip of a
    window of NaN or Inf costs (the Accumulator's default).
    The buffers start as ones, so the first call moves the weights; the
    kernels cost the same on the zeros after it.

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

    Checked, a window holding a NaN moves nothing and is cleared:
        >>> checked, buffers = make_apply_floor(optimizer, checked=True)
        >>> _ = buffers[1].set_data(ms.Tensor([float("nan")]))
        >>> bias = float(net.bias.asnumpy()[0])
        >>> _ = checked()
        >>> float(net.bias.asnumpy()[0]) == bias, float(buffers[1].asnumpy()[0])
        (True, 0.0)
    """
    buffers = optimizer.parameters.clone(prefix="apply_floor", init="ones")

    def apply():
        if checked:  # a Python test: the unchecked apply has no `if`
            if finite(buffers):
                optimizer(buffers)
        else:
            optimizer(buffers)
        _hyper_map(_clear, buffers)
        # One scalar out, as step()'s calls return: each output a graph returns costs its own copy.
        return buffers[0].sum()

    return ms.jit(apply), buffers


def make_two_graph_floor(grad_fn, optimizer, accumulate_step, checked=False):
    """A ``step(x, y)``: the least the recommended step's design (a micro-step graph, an apply graph) can cost.

    A jitted micro-step that adds its gradients into one buffer per
    parameter, and, after every ``accumulate_step``-th, ``make_apply_floor``'s
    optimizer-and-clear as a graph of its own, called from the host: no mean,
    no check, no counters, no buckets and no split. The ``two_graph_floor``
    row times it beside the recommended step, which does the same work plus
    those; ``checked_floor`` with ``checked`` (``make_apply_floor``'s).
    Returns the step and the buffers.

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
    apply, buffers = make_apply_floor(optimizer, checked)

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


def make_window_floor(grad_fn, optimizer, checked=False):
    """A jitted ``window(x, y, n)``: the least the window step's design (a window per compiled call) can cost.

    The two-graph floor's micro-steps in a ``while`` loop over the stacked
    window (``x``, ``y``: ``[n, B, ...]``), then the optimizer and a clear
    under an ``if`` on a Parameter, in the same graph, as the window step
    applies a window it may skip: no mean, no check, no counters, no buckets
    and no split. The ``window_floor`` row times it beside the window step;
    ``checked_window_floor`` with ``checked``: the ``if`` on the buffers being
    ``finite``, as ``make_apply_floor``'s. Returns the function, which returns
    the losses summed and whether it applied, and the buffers.

    Example: two micro-batches whose bias gradient is -2, summed, one SGD step at learning rate 0.5.
        >>> from mindspore import nn
        >>> net = nn.Dense(3, 1, weight_init="zeros", bias_init="zeros")
        >>> loss_fn = nn.WithLossCell(net, nn.MSELoss())
        >>> window, _ = make_window_floor(ms.value_and_grad(loss_fn, None, net.trainable_params()),
        ...                               nn.SGD(net.trainable_params(), learning_rate=0.5))
        >>> loss_sum, applied = window(ops.ones((2, 4, 3)), ops.ones((2, 4, 1)), ms.Tensor(2, ms.int32))
        >>> float(loss_sum), bool(applied), net.bias.asnumpy()
        (2.0, True, array([2.], dtype=float32))
    """
    buffers = optimizer.parameters.clone(prefix="window_floor", init="zeros")
    applies = None if checked else ms.Parameter(ms.Tensor(True), name="window_floor.applies", requires_grad=False)

    def apply():
        # Every path returns, and unchecked the `if` reads a Parameter: as the Accumulator's flush.
        if (finite(buffers) if checked else applies):
            optimizer(buffers)
            _hyper_map(_clear, buffers)
            return _TRUE
        return _FALSE

    def window(x, y, n):
        i = ms.Tensor(0, ms.int32)
        loss_sum = ms.Tensor(0.0, ms.float32)
        while i < n:
            loss, grads = grad_fn(x[i], y[i])
            _hyper_map(_add_into, buffers, grads)
            loss_sum = loss_sum + loss
            i = i + 1
        return loss_sum, apply()

    return ms.jit(window), buffers
