"""The constants the library's graphs use, built so another library's patches cannot change them.

A model library may replace ``mindspore.ops.ones``/``ops.zeros`` at import
(mindnlp 0.3 does, with a ``(*size, dtype=None)`` signature that returns
float32 whatever dtype is asked): a counter built with ``ops.ones((),
ms.int32)`` then turns float32 and the step fails to compile. So scalars
are Tensors made here once, and ``ones`` is a ``Ones`` primitive of our own
(docs/mindspore-behaviours.md#libraries-may-patch-opsones-and-opszeros).
"""
import mindspore as ms
from mindspore import Parameter, Tensor, ops

TRUE = Tensor(True, ms.bool_)
FALSE = Tensor(False, ms.bool_)
ZERO_INT = Tensor(0, ms.int32)
ONE_INT = Tensor(1, ms.int32)
ZERO_FLOAT = Tensor(0.0, ms.float32)
ONE_FLOAT = Tensor(1.0, ms.float32)

_ones = ops.Ones()


def ones(shape):
    """A float32 Tensor of ones of ``shape``, whatever ``ops.ones`` has been replaced with.

    Example:
        >>> ones((2, 1)).asnumpy().tolist()
        [[1.0], [1.0]]
    """
    return _ones(shape, ms.float32)


def state_parameter(value, dtype, name):
    """A Parameter of the accumulator's state, ``accumulator.<name>``, not trained: what checkpoints hold.

    Example:
        >>> state_parameter(0, ms.int32, "micro_step").name
        'accumulator.micro_step'
    """
    return Parameter(Tensor(value, dtype), name=f"accumulator.{name}", requires_grad=False)
