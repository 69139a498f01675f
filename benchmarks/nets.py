"""The benchmark's nets, with their fixed synthetic data.

``NETS`` names each net and its sizes; a configuration carries them as
they are (``hidden``, ``depth``, ``family``). The MNIST nets hold 6
parameter tensors each, dominated by large MatMuls; real models hold
dozens to hundreds of small tensors, where a cost per tensor (a kernel per
buffer, a branch the tensors flow through) shows: the deep MLPs (``depth``
Dense layers of width ``hidden``: 2 x depth tensors) and the small
transformer language model.
"""
import numpy as np

NETS = {
    "mnist": dict(family="mnist", hidden=512, depth=3),
    "wide": dict(family="mnist", hidden=4096, depth=3),
    "deep48": dict(family="deep", hidden=128, depth=24),
    "deep128": dict(family="deep", hidden=64, depth=64),
    # A 2-layer GPT-2-style model on 40-token sequences, as the issue measured.
    "lm": dict(family="lm", hidden=64, depth=2),
}
VOCAB, TOKENS = 256, 40


def net_spec(spec):
    """The net's sizes from a worker's spec; a spec without ``family`` is an MNIST net of its ``hidden``.

    Example:
        >>> net_spec(dict(hidden=8))
        {'family': 'mnist', 'hidden': 8, 'depth': 3}
        >>> net_spec(dict(NETS["deep48"]))["depth"]
        24
    """
    return dict(family=spec.get("family", "mnist"), hidden=spec["hidden"], depth=spec.get("depth", 3))


def numpy_data(spec, rows):
    """Fixed inputs and targets of ``rows`` samples for the spec's net, as numpy arrays.

    Example:
        >>> [a.shape for a in numpy_data(dict(NETS["deep48"]), 4)]
        [(4, 128), (4,)]
        >>> [a.dtype.name for a in numpy_data(dict(NETS["lm"]), 2)]
        ['int32', 'int32']
    """
    rng = np.random.default_rng(0)
    family, hidden = net_spec(spec)["family"], spec["hidden"]
    if family == "lm":
        tokens = rng.integers(1, VOCAB, (rows, TOKENS + 1)).astype(np.int32)
        return tokens[:, :-1].copy(), tokens[:, 1:].copy()
    shape = (rows, 1, 28, 28) if family == "mnist" else (rows, hidden)
    return rng.normal(size=shape).astype(np.float32), rng.integers(0, 10, rows).astype(np.int32)


def mindspore_net(spec):
    """The spec's net as a MindSpore Cell and its mean loss ``loss_fn(net, inputs, targets)``.

    Example:
        >>> import mindspore as ms
        >>> net, loss_fn = mindspore_net(dict(NETS["deep48"]))
        >>> len(net.trainable_params())
        48
        >>> x, y = (ms.Tensor(a) for a in numpy_data(dict(NETS["deep48"]), 2))
        >>> loss_fn(net, x, y).shape
        ()
    """
    from mindspore import nn
    from models.mnist import MnistDenseNet, mnist_loss
    sizes = net_spec(spec)
    if sizes["family"] == "mnist":
        net, loss = MnistDenseNet(hidden=sizes["hidden"]), mnist_loss()
    elif sizes["family"] == "deep":
        net, loss = _deep_mlp(nn, sizes["hidden"], sizes["depth"]), mnist_loss()
    else:
        from models.transformer import CausalLM, TokenLoss
        lm = TokenLoss(CausalLM(VOCAB, width=sizes["hidden"], depth=sizes["depth"], max_length=TOKENS))

        def lm_loss(net, inputs, targets):
            total, count = net(inputs, targets)
            return total / count
        return lm, lm_loss

    def mean_loss(net, inputs, targets):
        return loss(net(inputs), targets)
    return net, mean_loss


def _deep_mlp(nn, width, depth):
    layers = []
    for index in range(depth):
        layers.append(nn.Dense(width, width if index < depth - 1 else 10))
        if index < depth - 1:
            layers.append(nn.ReLU())
    return nn.SequentialCell(layers)
