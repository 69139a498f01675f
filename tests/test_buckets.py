"""The bucket layout: packing by dtype up to a cap, and an exact round trip through the graph."""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor

from accumulator.buckets import Buckets


def _parameters(shapes, dtypes):
    return [Parameter(Tensor(np.zeros(shape), dtype), name=f"p{i}") for i, (shape, dtype) in
            enumerate(zip(shapes, dtypes))]


def test_parameters_pack_by_dtype_in_order_and_a_large_one_keeps_its_own_shape():
    shapes = [(2, 3), (3,), (4, 4), (2,), (5,)]
    dtypes = [ms.float16, ms.float32, ms.float32, ms.float16, ms.float32]
    params = _parameters(shapes, dtypes)
    buckets = Buckets(params, [ms.float32, ms.float32, ms.float32, ms.float16, ms.float32], cap=8)
    # p2 (16 elements) is over the cap: alone. p0 and p1 would fill 9 > 8, so p1 opens a bucket that p4 joins.
    assert buckets.groups == ((0,), (1, 4), (2,), (3,))
    buffers = buckets.zeros(params, "sum")
    assert [(b.name, tuple(b.shape), b.dtype) for b in buffers] == [
        ("sum.p0", (2, 3), ms.float32), ("sum.p1..p4", (8,), ms.float32), ("sum.p2", (4, 4), ms.float32),
        ("sum.p3", (2,), ms.float16)]
    assert sum(b.size for b in buffers) == sum(p.size for p in params)


@pytest.mark.parametrize("count", [5, pytest.param(128, marks=pytest.mark.slow)])
def test_flatten_then_split_gives_back_every_gradient_exactly_in_a_graph(count):
    """128 pieces: ops.split's Python loop exceeds the graph's call depth there (docs/mindspore-behaviours.md)."""
    rng = np.random.default_rng(0)
    shapes = [(3, 2) if i % 2 else (3,) for i in range(count)]
    dtypes = [ms.float16 if i == 1 else ms.float32 for i in range(count)]
    params = _parameters(shapes, dtypes)
    buckets = Buckets(params, [ms.float32] * count)
    grads = tuple(Tensor(rng.normal(size=shape), dtype) for shape, dtype in zip(shapes, dtypes))

    @ms.jit
    def round_trip(grads):
        return buckets.split(buckets.flatten(grads))

    assert len(buckets.groups) == 1
    for grad, back in zip(grads, round_trip(ms.mutable(grads))):
        assert back.shape == grad.shape and back.dtype == ms.float32
        np.testing.assert_array_equal(back.asnumpy(), grad.asnumpy().astype(np.float32))
