"""benchmarks/tutorial.py: the tutorial's baseline applies SGD to the window's summed gradients.

By hand: with N = 2, the first call leaves the weights as they were; the second applies one SGD step on the sum of
the two gradients.
"""
import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

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

