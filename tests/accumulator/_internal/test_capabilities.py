"""What the installed MindSpore can do, checked once: the answer is right, the library follows it, both ways work.

Run on every supported release (docs/mindspore-behaviours.md#versions): on 2.7 the check says no and the
buckets slice; from 2.8 it says yes and they split in one SplitWithSize kernel. The sliced way is also
forced and checked on the releases that do not need it, so it cannot break unseen.

By hand: on 2.10 the check says yes, and buckets of (2, 3) and (4,) split in one SplitWithSize kernel.
"""
import subprocess
import sys

import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor, nn

from accumulator import Accumulator, capabilities
from accumulator._internal.buckets import Buckets
from tests.accumulator.helpers import SPLIT_PIECES, split_round_trip


def _parameters(shapes):
    rng = np.random.default_rng(0)
    return [Parameter(Tensor(rng.normal(size=shape).astype(np.float32)), name=f"p{i}") for i, shape in
            enumerate(shapes)]


def test_the_check_says_what_a_jitted_split_with_size_does():
    flat, sizes = np.arange(7, dtype=np.float32), (3, 4)

    @ms.jit
    def split(x):
        return capabilities.SplitWithSize()(x, sizes, 0)

    if capabilities.split_with_size():
        pieces = split(Tensor(flat))
        assert [p.asnumpy().tolist() for p in pieces] == [[0, 1, 2], [3, 4, 5, 6]]
    else:
        # MindSpore 2.7 on CPU: "Unsupported op [SplitWithSize] on CPU", the failure the check spares a window.
        with pytest.raises(RuntimeError, match="SplitWithSize"):
            split(Tensor(flat))


def test_buckets_split_as_the_check_says():
    buckets = Buckets(_parameters([(2, 3), (4,)]), (ms.float32, ms.float32))
    assert buckets.one_kernel_split is capabilities.split_with_size()


@pytest.fixture
def sliced(monkeypatch):
    """Buckets built under it cut their pieces with Slices, as where SplitWithSize is missing."""
    monkeypatch.setattr(capabilities, "split_with_size", lambda: False)


# SPLIT_PIECES under SPLIT_DEPTH_LIMIT stand for 128 pieces under the default call depth (tests/accumulator/helpers.py): slow.
@pytest.mark.parametrize("count", [5, pytest.param(SPLIT_PIECES, marks=pytest.mark.slow)])
def test_the_sliced_split_gives_back_every_gradient_exactly_in_a_graph(sliced, count):
    """Many pieces: within a call depth that ops.split's loop exceeds, and no SplitWithSize kernel needed."""
    shapes = [(3, 2) if i % 2 else (3,) for i in range(count)]
    buckets = Buckets(_parameters(shapes), [ms.float32] * count)
    assert not buckets.one_kernel_split and len(buckets.groups) == 1
    grads = tuple(Tensor(np.random.default_rng(i).normal(size=shape).astype(np.float32))
                  for i, shape in enumerate(shapes))
    back = split_round_trip(buckets, grads)
    assert len(back) == count
    for grad, piece in zip(grads, back):
        assert piece.shape == grad.shape
        np.testing.assert_array_equal(piece.asnumpy(), grad.asnumpy())
    # Eagerly too (PyNative's accumulator): the same pieces.
    for grad, piece in zip(grads, buckets.split(buckets.flatten(grads))):
        np.testing.assert_array_equal(piece.asnumpy(), grad.asnumpy())


# The split as checked is the way every other test's windows take: here the sliced one, forced.
def test_a_window_applies_the_large_batch_mean_by_the_sliced_split(monkeypatch):
    monkeypatch.setattr(capabilities, "split_with_size", lambda: False)
    params = _parameters([(2, 3), (3,), (4,)])
    start = [p.asnumpy().copy() for p in params]
    accumulator = Accumulator(nn.SGD(params, 0.5), accumulate_step=2)
    rng = np.random.default_rng(1)
    window = [[rng.normal(size=p.shape).astype(np.float32) for p in params] for _ in range(2)]
    call = ms.jit(accumulator.__call__)
    assert [bool(call(tuple(Tensor(g) for g in grads))) for grads in window] == [False, True]
    for param, before, a, b in zip(params, start, *window):
        np.testing.assert_allclose(param.asnumpy(), before - 0.5 * (a + b) / 2, rtol=1e-6, atol=1e-6)


def test_importing_the_library_checks_nothing_building_buckets_checks_once():
    # A fresh process: this one's answer is already kept. Importing compiles no graph; the first Buckets asks.
    code = ("import accumulator\n"
            "from accumulator._internal import capabilities\n"
            "from accumulator._internal.buckets import Buckets\n"
            "import mindspore as ms, numpy as np\n"
            "assert capabilities.split_with_size.cache_info().currsize == 0\n"
            "p = [ms.Parameter(ms.Tensor(np.zeros(2, np.float32)), name=n) for n in 'ab']\n"
            "Buckets(p, (ms.float32, ms.float32)); Buckets(p, (ms.float32, ms.float32))\n"
            "info = capabilities.split_with_size.cache_info()\n"
            "print(info.currsize, info.misses, info.hits)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-3:] == ["1", "1", "1"]
