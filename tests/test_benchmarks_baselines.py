"""benchmarks/tutorial.py and benchmarks/floor.py: the two baselines apply SGD to the window's summed gradients."""
import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

from benchmarks.floor import make_floor_step
from benchmarks.tutorial import TutorialAccumulator

LR = 0.1


def _net_and_sgd():
    ms.set_seed(0)
    net = nn.Dense(3, 2)
    return net, nn.SGD(net.trainable_params(), learning_rate=LR)


def _data(n):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 4, 3)).astype(np.float32), rng.normal(size=(n, 4, 2)).astype(np.float32)


def _expected(net, x, y):
    """numpy: one SGD step on the sum of the micro-batches' MSE gradients."""
    w, b = net.weight.asnumpy().astype(np.float64), net.bias.asnumpy().astype(np.float64)
    gw, gb = np.zeros_like(w), np.zeros_like(b)
    for xi, yi in zip(x, y):
        d = 2 * (xi @ w.T + b - yi) / yi.size
        gw, gb = gw + d.T @ xi, gb + d.sum(0)
    return w - LR * gw, b - LR * gb


def test_floor_step_applies_the_sum_once_and_clears():
    net, optimizer = _net_and_sgd()
    x, y = _data(3)
    want = _expected(net, x, y)
    grad_fn = ms.value_and_grad(nn.WithLossCell(net, nn.MSELoss()), None, optimizer.parameters)
    window_step, buffers = make_floor_step(grad_fn, optimizer)
    assert int(window_step(Tensor(x), Tensor(y), Tensor(3, ms.int32))) == 3
    np.testing.assert_allclose(net.weight.asnumpy(), want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.bias.asnumpy(), want[1], rtol=1e-5, atol=1e-6)
    assert all(not buffer.asnumpy().any() for buffer in buffers)


def test_floor_parts_apply_the_mean_and_skip_a_nonfinite_window():
    net, optimizer = _net_and_sgd()
    x, y = _data(2)
    start = [net.weight.asnumpy().copy(), net.bias.asnumpy().copy()]
    want = _expected(net, x, y)
    grad_fn = ms.value_and_grad(nn.WithLossCell(net, nn.MSELoss()), None, optimizer.parameters)
    mean_step, _ = make_floor_step(grad_fn, optimizer, mean=True)
    mean_step(Tensor(x), Tensor(y), Tensor(2, ms.int32))
    # Half the summed step: the optimizer got the sum divided by the 2 micro-steps.
    np.testing.assert_allclose(net.bias.asnumpy(), (start[1] + want[1]) / 2, rtol=1e-5, atol=1e-6)
    check_step, buffers = make_floor_step(grad_fn, optimizer, check=True)
    after_mean = net.weight.asnumpy().copy()
    x[1, 0, 0] = np.nan
    check_step(Tensor(x), Tensor(y), Tensor(2, ms.int32))
    np.testing.assert_array_equal(net.weight.asnumpy(), after_mean)
    assert all(not buffer.asnumpy().any() for buffer in buffers)


def test_tutorial_accumulator_applies_every_nth_call():
    net, optimizer = _net_and_sgd()
    x, y = _data(2)
    want = _expected(net, x, y)
    grad_fn = ms.value_and_grad(nn.WithLossCell(net, nn.MSELoss()), None, optimizer.parameters)
    accumulator = TutorialAccumulator(optimizer, 2)
    start = net.weight.asnumpy().copy()
    accumulator(grad_fn(Tensor(x[0]), Tensor(y[0]))[1])
    np.testing.assert_array_equal(net.weight.asnumpy(), start)
    accumulator(grad_fn(Tensor(x[1]), Tensor(y[1]))[1])
    np.testing.assert_allclose(net.weight.asnumpy(), want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.bias.asnumpy(), want[1], rtol=1e-5, atol=1e-6)
    assert all(not buffer.asnumpy().any() for buffer in accumulator.inner_grads)
