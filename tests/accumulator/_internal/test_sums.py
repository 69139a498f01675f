"""Float32 sums for float16 and bfloat16 parameters: the window's mean does not stall.

By hand: 4096 float16 gradients of 1 summed in float16 stall at 2048 (2048 + 1 is 2048), a mean of 0.5; in
float32 sums the mean is 1. bfloat16 has no 257, yet 256 + 1 summed into the float32 buffer is 257.
"""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, nn, ops
from mindspore.amp import DynamicLossScaler

from accumulator import Accumulator, CheckpointMismatchError, load_checkpoint, save_checkpoint
from tests.accumulator.helpers import Scale


def add_many(accumulator):
    """A compiled loop adding the same gradient ``n`` times, then applying the window."""
    @ms.jit
    def run(grads, n):
        i = ops.zeros((), ms.int32)
        while i < n:
            accumulator.add(grads)
            i = i + 1
        accumulator.count(n)
        return accumulator.flush()
    return run


@pytest.mark.parametrize("accumulate_dtype, mean", [(None, 1.0), (ms.float16, 0.5)])
def test_4096_float16_gradients_of_one_average_to_one(accumulate_dtype, mean):
    # float16 counts 2048 + 1 as 2048: summed in float16 the mean stalls at 0.5.
    net = Scale(ms.float16)
    optimizer = nn.SGD(net.trainable_params(), 1.0)
    accumulator = Accumulator(optimizer, 4096, accumulate_dtype=accumulate_dtype)
    assert add_many(accumulator)((Tensor(np.ones(2), ms.float16),), Tensor(4096, ms.int32))
    assert net.w.dtype == ms.float16
    np.testing.assert_array_equal(net.w.asnumpy(), [-mean, -mean])


def test_bfloat16_256_plus_1_is_257_in_the_sums():
    # bfloat16 itself has no 257 (MindSpore's CPU has no bfloat16 AssignAdd to show the stall).
    assert float(Tensor(257.0, ms.bfloat16).astype(ms.float32)) == 256.0
    net = Scale(ms.bfloat16)
    accumulator = Accumulator(nn.SGD(net.trainable_params(), 1.0), 2, reduction="sum")
    for value in (256.0, 1.0):
        accumulator.accumulate((Tensor(np.full(2, value), ms.bfloat16),))
    buffer = accumulator.grad_buffers[0]
    assert buffer.dtype == ms.float32
    np.testing.assert_array_equal(buffer.asnumpy(), [257.0, 257.0])


class MixedNet(nn.Cell):
    """A float16 layer under a float32 one, as mixed-precision nets keep their head."""

    def __init__(self):
        super().__init__()
        self.body = nn.Dense(6, 8, dtype=ms.float16)
        self.head = nn.Dense(8, 3)

    def construct(self, x):
        return self.head(ops.relu(self.body(x.astype(ms.float16))).astype(ms.float32))


def mixed_run(scaler, x, y, sizes):
    """One window of ``sizes`` micro-batches on a fresh MixedNet; returns (net, accumulator, initial weights)."""
    ms.set_seed(0)
    net = MixedNet()
    initial = [p.asnumpy().copy() for p in net.trainable_params()]
    optimizer = nn.SGD(net.trainable_params(), 0.5)
    accumulator = Accumulator(optimizer, max(len(sizes), 1), loss_scaler=scaler)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def forward(data, label):
        return scaler.scale(loss_fn(net(data), label))

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    @ms.jit
    def step(data, label):
        return accumulator(grad_fn(data, label)[1])

    bounds = np.cumsum([0] + sizes)
    for start, stop in zip(bounds[:-1], bounds[1:]):
        step(Tensor(x[start:stop]), Tensor(y[start:stop]))
    return net, accumulator, initial, grad_fn


def test_mixed_net_sums_in_float32_and_updates_each_parameter_in_its_own_dtype():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 6)).astype(np.float32), rng.integers(0, 3, 16).astype(np.int32)
    scaler = DynamicLossScaler(scale_value=2 ** 10, scale_factor=2, scale_window=1000)
    net, accumulator, initial, _ = mixed_run(scaler, x, y, [4, 4, 4, 4])
    params = net.trainable_params()
    assert [p.dtype for p in params] == [ms.float16, ms.float16, ms.float32, ms.float32]
    assert all(b.dtype == ms.float32 for b in accumulator.grad_buffers)
    assert int(accumulator.update_count) == 1 and int(accumulator.skipped_windows) == 0
    # State: float32 sums of float16 weights take twice their bytes, float32 weights' once.
    param_bytes = {str(p.dtype): 0 for p in params}
    for p in params:
        param_bytes[str(p.dtype)] += p.nbytes
    buffer_bytes = sum(b.nbytes for b in accumulator.grad_buffers)
    assert buffer_bytes == 2 * param_bytes["Float16"] + param_bytes["Float32"]

    # The update is the mean of the four micro-batch gradients, unscaled once, taken at the
    # initial weights: the same gradient function on a fresh net gives each of them.
    _, _, _, grad_fn = mixed_run(DynamicLossScaler(2 ** 10, 2, 1000), x, y, [])
    grad_fn = ms.jit(grad_fn)  # compiled like the step: float16 kernels round alike
    grads = [[g.asnumpy().astype(np.float64) for g in grad_fn(Tensor(x[i:i + 4]), Tensor(y[i:i + 4]))[1]]
             for i in range(0, 16, 4)]
    for param, start, micro in zip(params, initial, zip(*grads)):
        expected = start.astype(np.float64) - 0.5 * np.mean(micro, axis=0) / 2 ** 10
        tolerance = 2e-3 if param.dtype == ms.float16 else 1e-6
        np.testing.assert_allclose(param.asnumpy().astype(np.float64), expected, rtol=tolerance, atol=tolerance)


def test_a_checkpoint_keeps_the_buffer_dtype_and_refuses_another(tmp_path):
    net = Scale(ms.float16)
    optimizer = nn.SGD(net.trainable_params(), 1.0)
    accumulator = Accumulator(optimizer, 4)
    accumulator.accumulate((Tensor(np.full(2, 3.0), ms.float16),))
    path = str(tmp_path / "run.ckpt")
    save_checkpoint(path, net, optimizer, accumulator)
    assert ms.load_checkpoint(path)["accumulator.w"].dtype == ms.float32

    restored = Accumulator(optimizer, 4)
    load_checkpoint(path, net, optimizer, restored)
    np.testing.assert_array_equal(restored.grad_buffers[0].asnumpy(), [3.0, 3.0])
    with pytest.raises(CheckpointMismatchError, match="accumulator.w has dtype Float32, expected Float16"):
        load_checkpoint(path, net, optimizer, Accumulator(optimizer, 4, accumulate_dtype=ms.float16))


def test_bad_accumulate_dtype_is_rejected():
    optimizer = nn.SGD(Scale(ms.float32).trainable_params(), 1.0)
    with pytest.raises(ValueError, match="accumulate_dtype must be None or one of .*, got Int32"):
        Accumulator(optimizer, 2, accumulate_dtype=ms.int32)
