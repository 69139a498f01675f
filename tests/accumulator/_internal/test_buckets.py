"""The bucket layout: packing by dtype up to a cap, and an exact round trip through the graph.

By hand: with a cap of 8 elements, parameters of 6 (float16), 3, 16, 2 (float16) and 5 elements pack as
(0,), (1, 4), (2,), (3,): the 16 is over the cap and alone, 6 + 3 = 9 would pass it, so p1 opens a bucket p4 joins
(8 elements); p3, summed in float16, has a bucket of its own.
"""
import warnings

import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, ParameterTuple, Tensor, nn

from accumulator import Accumulator
from accumulator.policies import SkipNonFiniteMicroBatches
from accumulator._internal.buckets import MAX_BUCKET_ELEMENTS, MAX_PACKED_PARAMETER_ELEMENTS, Buckets
from accumulator.core.checkpoints import load_checkpoint, training_state
from tests.accumulator.helpers import SPLIT_PIECES, split_round_trip


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


@pytest.mark.parametrize("count", [5, pytest.param(SPLIT_PIECES, marks=pytest.mark.slow)])
def test_flatten_then_split_gives_back_every_gradient_exactly_in_a_graph(count):
    """Many pieces within a call depth that ops.split's Python loop exceeds (tests/accumulator/helpers.py: as 128 under the default)."""
    rng = np.random.default_rng(0)
    shapes = [(3, 2) if i % 2 else (3,) for i in range(count)]
    dtypes = [ms.float16 if i == 1 else ms.float32 for i in range(count)]
    params = _parameters(shapes, dtypes)
    buckets = Buckets(params, [ms.float32] * count)
    grads = tuple(Tensor(rng.normal(size=shape), dtype) for shape, dtype in zip(shapes, dtypes))
    assert len(buckets.groups) == 1
    backs = split_round_trip(buckets, grads)
    assert len(backs) == count
    for grad, back in zip(grads, backs):
        assert back.shape == grad.shape and back.dtype == ms.float32
        np.testing.assert_array_equal(back.asnumpy(), grad.asnumpy().astype(np.float32))


# ---------------------------------------------------------------- the accumulator over every bucket
# Parameters laid out to fill three buckets: a packed one (small.a and mid.0-14, 983,048 elements), one
# of its own (large, over MAX_PACKED_PARAMETER_ELEMENTS) and a second packed one (mid.15 does not fit the first
# under MAX_BUCKET_ELEMENTS).
# Expectations come from NumPy or from a plain optimizer call, never from the Accumulator at N=1.
LAYOUT = [("small.a", (8,)), ("large", (300, 256))] + [(f"mid.{i}", (256, 256)) for i in range(16)] + [
    ("small.b", (5, 3))]
BUCKETS = ((0,) + tuple(range(2, 17)), (1,), (17, 18))
# One parameter of each bucket, where a non-finite value is planted.
IN_EACH_BUCKET = {"first packed": 0, "alone": 1, "second packed": 18}


# A packed bucket and one of its own, for what needs both kinds but not the caps' sizes.
SMALL_LAYOUT = [LAYOUT[0], LAYOUT[1], LAYOUT[-1]]


def _layout_parameters(seed=0, layout=LAYOUT):
    rng = np.random.default_rng(seed)
    return [Parameter(Tensor(rng.normal(size=shape).astype(np.float32)), name=name) for name, shape in layout]


def _known_grads(count, seed=1, layout=LAYOUT):
    rng = np.random.default_rng(seed)
    return [[rng.normal(size=shape).astype(np.float32) for _, shape in layout] for _ in range(count)]


def _tensors(grads):
    # mutable: a plain tuple argument is a constant of the graph, compiled anew for every call.
    return ms.mutable(tuple(Tensor(g) for g in grads))


def _driver(accumulator, kind):
    """One micro-step of the library's in-graph call, or of accumulate() plus the host's step()."""
    if kind == "call":
        call = ms.jit(accumulator.__call__)
        return lambda grads: bool(call(_tensors(grads)))
    accumulate = ms.jit(accumulator.accumulate)

    def micro_step(grads):
        accumulate(_tensors(grads))
        return accumulator.step()
    return micro_step


def _weights(params):
    return [p.asnumpy().copy() for p in params]


def test_the_layout_fills_three_buckets_one_of_them_a_parameter_over_alone():
    params = _layout_parameters()
    assert Buckets(params, [ms.float32] * len(params)).groups == BUCKETS
    assert params[1].size > MAX_PACKED_PARAMETER_ELEMENTS
    assert sum(params[i].size for i in BUCKETS[0]) + params[17].size > MAX_BUCKET_ELEMENTS


# Both drivers close a window by the same stages (Accumulator._closed): each test runs one of them.
def test_a_window_over_every_bucket_equals_the_plain_large_batch_update():
    params = _layout_parameters()
    reference = _layout_parameters()
    accumulator = Accumulator(nn.Adam(params, 1e-2), accumulate_step=3)
    plain = nn.Adam(reference, 1e-2)
    windows = _known_grads(6)
    micro_step = _driver(accumulator, "step")
    for window in (windows[:3], windows[3:]):
        assert not micro_step(window[0])
        # Each buffer holds the window's first micro-batch of known gradients once, exactly.
        for name, grad, buffer in zip([name for name, _ in LAYOUT], window[0], accumulator.grad_buffers):
            np.testing.assert_array_equal(buffer.asnumpy(), grad, err_msg=name)
        assert [micro_step(grads) for grads in window[1:]] == [False, True]
        # The large batch's mean gradient, summed in float32 as a batch's would be, in one plain Adam step.
        plain(tuple(Tensor(g) for g in [(a + b + c) * np.float32(1 / 3) for a, b, c in zip(*window)]))
        for name, got, expected in zip([name for name, _ in LAYOUT], _weights(params), _weights(reference)):
            np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7, err_msg=name)
    assert int(accumulator.update_count) == 2


def _plantings():
    """A NaN, then an Inf, in a parameter of each bucket in turn: ``(where, index, value)``."""
    return [(f"{bucket}, {value}", index, value) for bucket, index in IN_EACH_BUCKET.items() for value in (np.nan, np.inf)]


def _plant(grads, index, value):
    grads = [g.copy() for g in grads]
    grads[index].reshape(-1)[-1] = value
    return grads


def test_a_nan_or_inf_in_any_bucket_skips_the_window():
    params = _layout_parameters()
    accumulator = Accumulator(nn.SGD(params, 1.0), accumulate_step=2)
    micro_step = _driver(accumulator, "call")
    clean = _known_grads(2)
    for skipped, (where, index, value) in enumerate(_plantings(), start=1):
        before = _weights(params)
        # The window closes and the optimizer does not run.
        assert [micro_step(clean[0]), micro_step(_plant(clean[1], index, value))] == [False, False]
        assert int(accumulator.skipped_windows) == skipped, where
        assert int(accumulator.micro_step) == 0 and int(accumulator.update_count) == 0
        for name, got, expected in zip([name for name, _ in LAYOUT], _weights(params), before):
            np.testing.assert_array_equal(got, expected, err_msg=f"{where}: {name}")
        assert all(not b.asnumpy().any() for b in accumulator.buffers), where
    # A clean window after them all applies its mean, so nothing of the skipped ones stayed behind.
    before = _weights(params)
    assert [micro_step(clean[0]), micro_step(clean[1])] == [False, True]
    for got, start, a, b in zip(_weights(params), before, *clean):
        np.testing.assert_allclose(got, start - (a + b) * np.float32(0.5), rtol=1e-6, atol=1e-6)
    assert int(accumulator.update_count) == 1


def test_a_micro_batch_with_a_nan_or_inf_in_any_bucket_is_left_out_of_its_window():
    params = _layout_parameters()
    accumulator = Accumulator(nn.SGD(params, 1.0), accumulate_step=3, skip_nonfinite="micro_batch")
    micro_step = _driver(accumulator, "step")
    clean = _known_grads(3)
    for dropped, (where, index, value) in enumerate(_plantings(), start=1):
        before = _weights(params)
        bad = _plant(clean[1], index, value)
        assert [micro_step(clean[0]), micro_step(bad), micro_step(clean[2])] == [False, False, True]
        assert int(accumulator.find(SkipNonFiniteMicroBatches).dropped_micro_batches) == dropped, where
        # Applied, as the mean of the two micro-batches it kept.
        for got, start, a, c in zip(_weights(params), before, clean[0], clean[2]):
            np.testing.assert_allclose(got, start - (a + c) * np.float32(0.5), rtol=1e-5, atol=1e-6, err_msg=where)
    assert int(accumulator.skipped_windows) == 0 and int(accumulator.update_count) == dropped


class _Holder(nn.Cell):
    """The layout's parameters as a network, for checkpoints."""

    def __init__(self, params):
        super().__init__()
        self.weights = ParameterTuple(params)


def test_a_checkpoint_with_one_buffer_per_parameter_loads_into_every_bucket(tmp_path):
    # Written as before the buckets: each parameter's running sum as accumulator.<name>, two of three
    # micro-batches into the window; the third then ends it exactly as in the run that was not interrupted.
    grads = _known_grads(3, layout=SMALL_LAYOUT)

    def run():
        params = _layout_parameters(layout=SMALL_LAYOUT)
        accumulator = Accumulator(nn.Adam(params, 1e-2), accumulate_step=3)
        return _Holder(params), accumulator, _driver(accumulator, "step")

    net, accumulator, micro_step = run()
    assert [micro_step(grads[0]), micro_step(grads[1])] == [False, False]
    state = training_state(net, accumulator.optimizer, accumulator)
    entries = [{"name": name, "data": value} for name, value in state.items()
               if name not in {buffer.name for buffer in accumulator.buffers}]
    entries += [{"name": f"accumulator.{param.name}", "data": buffer}
                for param, buffer in zip(accumulator.optimizer.parameters, accumulator.grad_buffers)]
    path = str(tmp_path / "old.ckpt")
    ms.save_checkpoint(entries, path)
    assert micro_step(grads[2])
    uninterrupted = _weights(accumulator.optimizer.parameters)

    net, accumulator, micro_step = run()
    load_checkpoint(path, net, accumulator.optimizer, accumulator)
    assert len(accumulator.buffers) == 2  # a packed bucket and one of its own
    for name, first, second, buffer in zip([name for name, _ in SMALL_LAYOUT], grads[0], grads[1],
                                           accumulator.grad_buffers):
        np.testing.assert_array_equal(buffer.asnumpy(), first + second, err_msg=name)
    assert micro_step(grads[2])
    for name, got, expected in zip([name for name, _ in SMALL_LAYOUT], _weights(accumulator.optimizer.parameters),
                                   uninterrupted):
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_the_old_names_cap_and_alone_still_read_and_warn_once(monkeypatch):
    from accumulator import buckets, deprecation
    monkeypatch.setattr(deprecation, "warned", set())
    with pytest.warns(DeprecationWarning, match="accumulator._internal.buckets.CAP is deprecated .*MAX_BUCKET_ELEMENTS"):
        assert buckets.CAP == MAX_BUCKET_ELEMENTS == 1 << 20
    with pytest.warns(DeprecationWarning, match="ALONE is deprecated .*MAX_PACKED_PARAMETER_ELEMENTS"):
        assert buckets.ALONE == MAX_PACKED_PARAMETER_ELEMENTS == 1 << 16
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert buckets.CAP == MAX_BUCKET_ELEMENTS     # once: the second read says nothing
