"""The MNIST dense net and its loss; accumulation on it equals the large batch.

By hand: the dense net maps a batch of 784-pixel images to 10 logits; ``hidden=0`` is refused with ``hidden must be
a positive int, got 0``.
"""
import numpy as np
import pytest
import mindspore as ms
from mindspore import nn

from accumulator import Accumulator, check_equivalence
from models import MnistDenseNet, mnist_loss


def _images(batch, seed=0):
    return ms.Tensor(np.random.default_rng(seed).normal(size=(batch, 1, 28, 28)).astype(np.float32))


def test_net_shapes_and_parameters():
    net = MnistDenseNet()
    logits = net(_images(3))
    assert logits.shape == (3, 10) and logits.dtype == ms.float32
    shapes = {p.name: p.shape for p in net.trainable_params()}
    # Tutorial-compatible names, so its checkpoints load into this net.
    assert shapes == {
        "dense_relu_sequential.0.weight": (512, 784), "dense_relu_sequential.0.bias": (512,),
        "dense_relu_sequential.2.weight": (512, 512), "dense_relu_sequential.2.bias": (512,),
        "dense_relu_sequential.4.weight": (10, 512), "dense_relu_sequential.4.bias": (10,),
    }


def test_wide_variant_and_class_count():
    net = MnistDenseNet(hidden=4096, num_classes=7)
    assert net(_images(2)).shape == (2, 7)
    assert sum(int(np.prod(p.shape)) for p in net.trainable_params()) == \
        784 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 7 + 7


@pytest.mark.parametrize("kwargs, message", [
    ({"hidden": 0}, "hidden must be a positive int, got 0"),
    ({"num_classes": 2.5}, "num_classes must be a positive int, got 2.5"),
    ({"hidden": True}, "hidden must be a positive int, got True"),
])
def test_net_rejects_bad_sizes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MnistDenseNet(**kwargs)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_loss_matches_cross_entropy_loss(reduction):
    rng = np.random.default_rng(0)
    logits = ms.Tensor(rng.normal(scale=5.0, size=(16, 10)).astype(np.float32))
    labels = ms.Tensor(rng.integers(0, 10, 16).astype(np.int32))
    ours = mnist_loss(reduction)(logits, labels).asnumpy()
    reference = nn.CrossEntropyLoss(reduction=reduction)(logits, labels).asnumpy()
    assert ours.shape == reference.shape
    np.testing.assert_allclose(ours, reference, rtol=1e-6, atol=1e-6)
    # And both are the textbook value, computed in float64.
    x = logits.asnumpy().astype(np.float64)
    per_sample = np.log(np.exp(x).sum(axis=1)) - x[np.arange(16), labels.asnumpy()]
    expected = {"mean": per_sample.mean(), "sum": per_sample.sum(), "none": per_sample}[reduction]
    np.testing.assert_allclose(ours, expected, rtol=1e-5)


def test_loss_rejects_unknown_reduction():
    with pytest.raises(ValueError, match="reduction must be one of .* got 'avg'"):
        mnist_loss("avg")


def test_one_sgd_step_lowers_the_loss():
    net = MnistDenseNet(hidden=32)
    loss_fn = mnist_loss()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.1)
    images, labels = _images(8), ms.Tensor(np.arange(8, dtype=np.int32))
    def forward(x, y):  # a def, not a lambda: graph mode (left by an earlier test) cannot parse a lambda here
        return loss_fn(net(x), y)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    before, grads = grad_fn(images, labels)
    optimizer(grads)
    after, _ = grad_fn(images, labels)
    assert float(after) < float(before)


def test_the_mnist_net_with_a_summed_loss_and_counts_is_equivalent(mode):
    # What train_mnist.py --check runs: batch 32 x 2, the gradient of a summed loss, sample counts.
    ms.set_seed(0)
    net = MnistDenseNet()
    optimizer = nn.SGD(net.trainable_params(), 0.1)
    accumulator = Accumulator(optimizer, 2)
    loss_fn = mnist_loss("sum")

    def forward(x, y):
        return loss_fn(net(x), y)

    rng = np.random.default_rng(0)
    images = rng.random((64, 1, 28, 28), np.float32)
    labels = rng.integers(0, 10, 64).astype(np.int32)
    window = [(ms.Tensor(images[part]), ms.Tensor(labels[part])) for part in (slice(0, 32), slice(32, 64))]
    report = check_equivalence(ms.value_and_grad(forward, None, optimizer.parameters), window, accumulator,
                               counts=[32, 32], network=net)
    assert report.equivalent, report.summary()
    assert report.max_rel_diff < 1e-5
    assert report.param_bytes == 669_706 * 4
