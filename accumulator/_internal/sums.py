"""Whole-window sums in graph code: the total, the squared norm and the finiteness of a tuple of Tensors.

On CPU they are taken by MatMul, which beats ReduceSum there
(docs/mindspore-behaviours.md#cpu-reductions-are-slower-than-matmul); elsewhere by plain sums and
``ms.amp.all_finite``, which reads the device's own overflow status.
"""
import mindspore as ms
from mindspore import ops

from accumulator._internal.constants import ones

_hyper_map = ops.HyperMap()


def on_cpu():
    """True when the sums take MatMul: on CPU only (Ascend may run a float32 MatMul in float16, where squares overflow).

    Example:
        >>> on_cpu()
        True
    """
    return ms.get_context("device_target") == "CPU"


def float32(tensor):
    """``tensor`` in float32, cast only when it is not (a Cast to the same dtype is still a kernel)."""
    return tensor if tensor.dtype == ms.float32 else tensor.astype(ms.float32)


def _square(tensor):
    tensor = float32(tensor)
    return tensor * tensor


def _plain_sum(tensor):
    return float32(tensor).sum()


# A flat bucket's row length for ``_column_sums``: rows of 64, and the few elements past the last whole row apart.
ROW = 64
# The most elements a flat tensor may have to be summed in one MatMul, a row by a column of ones: faster than rows
# up to here, slower past (docs/mindspore-behaviours.md#cpu-reductions-are-slower-than-matmul).
ONE_ROW_ELEMENTS = 1 << 15
_slice = ops.Slice()


def _column_sums(tensor):
    """A row of partial sums by MatMul: a matrix's column sums; a flat bucket's as rows of ``ROW``, its rest as is."""
    tensor = float32(tensor)
    if tensor.ndim >= 2:
        rows = tensor.reshape((tensor.shape[0], -1))
        # ones @ rows, not rows @ ones: the faster MatMul (docs/mindspore-behaviours.md#cpu-reductions-are-slower-than-matmul).
        return ops.matmul(ones((1, rows.shape[0])), rows)
    if tensor.size <= ONE_ROW_ELEMENTS:
        return ops.matmul(tensor.reshape((1, -1)), ones((tensor.size, 1)))
    whole, rest = tensor.size // ROW, tensor.size % ROW
    if rest == 0:
        return ops.matmul(ones((1, whole)), tensor.reshape((-1, ROW)))
    tail = _slice(tensor, (whole * ROW,), (rest,)).reshape((1, -1))
    head = ops.matmul(ones((1, whole)), _slice(tensor, (0,), (whole * ROW,)).reshape((-1, ROW)))
    return ops.concat((head, tail), 1)


def total(by_matmul, tensors):
    """The float32 sum of every element of ``tensors``, a 0-d Tensor.

    Example:
        >>> float(total(True, (ms.Tensor([[1.0, 2.0]]), ms.Tensor([3.0]))))
        6.0
    """
    if not by_matmul:
        return ops.addn(_hyper_map(_plain_sum, tensors))
    row = ops.concat(_hyper_map(_column_sums, tensors), 1)
    return ops.matmul(row, ones((row.shape[1], 1))).reshape(())


def squared_total(by_matmul, tensors):
    """The float32 sum of squares of every element of ``tensors``: their squared global norm.

    Example:
        >>> float(squared_total(True, (ms.Tensor([3.0]), ms.Tensor([[4.0]]))))
        25.0
    """
    return total(by_matmul, _hyper_map(_square, tensors))


def all_finite(by_matmul, tensors):
    """A bool Tensor, True when no element of ``tensors`` is NaN or Inf.

    Example:
        >>> bool(all_finite(True, (ms.Tensor([1.0, float("nan")]),)))
        False
    """
    if not by_matmul:
        return ms.amp.all_finite(tensors)
    # Any NaN or Inf makes the sum NaN or Inf; a float32 sum of finite values only overflows beyond 3e38.
    return ops.isfinite(total(True, tensors))
