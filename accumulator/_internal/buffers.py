"""What the core does to the window's buffers, one kernel per bucket: add, scale, clear, cast.

Each takes tuples (a HyperMap runs it over the buckets) and is graph code;
helpers sit at module level, as lambdas inside in-graph branches do not
compile (docs/mindspore-behaviours.md#lambdas-inside-in-graph-branches-do-not-compile).
"""
import mindspore as ms
from mindspore import ops

_hyper_map = ops.HyperMap()
_mul_no_nan = ops.MulNoNan()


def _times(factor, grad):
    """``grad * factor`` with 0 wherever ``factor`` is 0, even where ``grad`` is NaN or Inf."""
    if grad.dtype != ms.float32:
        factor = factor.astype(grad.dtype)
    if grad.dtype == ms.bfloat16:  # MulNoNan has no bfloat16 kernel on CPU
        return ops.where(factor != 0, grad * factor, ops.zeros_like(grad))
    # MulNoNan, not where(factor != 0, ...): no zeros or mask tensors (docs/how-it-works.md#one-window-equals-the-large-batch).
    return _mul_no_nan(grad, factor)


def _add_into(buffer, grad):
    return ops.assign_add(buffer, grad)


def _add_if(keep, buffer, grad):
    return ops.assign_add(buffer, _times(keep, grad))


def _scale_into(factor, buffer, grad):
    return ops.assign(buffer, _times(factor, grad))


def _assign(buffer, value):
    return ops.assign(buffer, value)


def _clear(buffer):
    # Assign zeros, not `buffer * 0`: NaN * 0 stays NaN.
    return ops.assign(buffer, ops.zeros_like(buffer))


def _scaled(factor, grad):
    if grad.dtype != ms.float32:
        factor = factor.astype(grad.dtype)
    return grad * factor


def _cast_like(param, grad):
    return grad.astype(param.dtype)


def add(buffers, grads, keep=None):
    """Adds ``grads`` into ``buffers``; times ``keep`` (a 0/1 float32 Tensor) when given, NaN times 0 being 0.

    A multiply, not a branch (docs/mindspore-behaviours.md#every-if-in-a-graph-costs-each-call-taken-or-not).

    Example:
        >>> buffers = (ms.Parameter(ms.Tensor([1.0]), name="b"),)
        >>> _ = add(buffers, (ms.Tensor([float("nan")]),), ms.Tensor(0.0))
        >>> buffers[0].asnumpy().tolist()
        [1.0]
    """
    if keep is None:
        return _hyper_map(_add_into, buffers, grads)
    return _hyper_map(ops.partial(_add_if, keep), buffers, grads)


def scale_into(buffers, grads, factor):
    """Writes ``grads * factor`` into ``buffers`` (0 where ``factor`` is 0), or ``grads`` when ``factor`` is None.

    Example:
        >>> buffers = (ms.Parameter(ms.Tensor([2.0]), name="b"),)
        >>> _ = scale_into(buffers, buffers, ms.Tensor(0.5))
        >>> buffers[0].asnumpy().tolist()
        [1.0]
    """
    if factor is None:
        return _hyper_map(_assign, buffers, grads)
    return _hyper_map(ops.partial(_scale_into, factor), buffers, grads)


def clear(buffers):
    """Sets ``buffers`` to zeros.

    Example:
        >>> buffers = (ms.Parameter(ms.Tensor([2.0]), name="b"),)
        >>> _ = clear(buffers)
        >>> buffers[0].asnumpy().tolist()
        [0.0]
    """
    return _hyper_map(_clear, buffers)


def scaled(grads, factor):
    """``grads`` times the scalar ``factor``, in their dtypes.

    Example:
        >>> scaled((ms.Tensor([2.0]),), ms.Tensor(0.5))[0].asnumpy().tolist()
        [1.0]
    """
    return _hyper_map(ops.partial(_scaled, factor), grads)


def cast_like(parameters, grads):
    """``grads`` in their ``parameters``' dtypes.

    Example:
        >>> cast_like((ms.Parameter(ms.Tensor([0.0], ms.float16), name="p"),), (ms.Tensor([1.0]),))[0].dtype
        mindspore.float16
    """
    return _hyper_map(_cast_like, parameters, grads)
