"""The benchmark's nets, in MindSpore and in PyTorch, with their fixed synthetic data.

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


def torch_net(spec):
    """The spec's net in PyTorch and its mean loss ``loss_fn(net, inputs, targets)``, for the reference rows.

    Example:
        >>> net, loss_fn = torch_net(dict(NETS["deep128"]))  # doctest: +SKIP
        >>> len(list(net.parameters()))  # doctest: +SKIP
        128
    """
    import torch
    sizes = net_spec(spec)
    width, depth = sizes["hidden"], sizes["depth"]
    if sizes["family"] == "lm":
        net = _torch_lm(torch, width, depth)

        def lm_loss(net, inputs, targets):
            return torch.nn.functional.cross_entropy(net(inputs).flatten(0, 1), targets.flatten().long())
        return net, lm_loss
    first = 784 if sizes["family"] == "mnist" else width
    layers = [torch.nn.Flatten()]
    for index in range(depth):
        layers.append(torch.nn.Linear(first if index == 0 else width, width if index < depth - 1 else 10))
        if index < depth - 1:
            layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers)

    def mean_loss(net, inputs, targets):
        return torch.nn.functional.cross_entropy(net(inputs), targets.long())
    return net, mean_loss


def _torch_lm(torch, width, depth):
    """A GPT-2-style model of ``depth`` pre-LayerNorm blocks, output tied to the embedding."""
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
            self.attention = torch.nn.MultiheadAttention(width, 4, batch_first=True)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                           torch.nn.Linear(4 * width, width))

        def forward(self, x, mask):
            h = self.norm1(x)
            x = x + self.attention(h, h, h, attn_mask=mask, need_weights=False)[0]
            return x + self.mlp(self.norm2(x))

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(VOCAB, width)
            self.position = torch.nn.Parameter(torch.zeros(TOKENS, width))
            self.blocks = torch.nn.ModuleList(Block() for _ in range(depth))
            self.norm = torch.nn.LayerNorm(width)

        def forward(self, tokens):
            length = tokens.shape[1]
            mask = torch.triu(torch.ones(length, length, dtype=torch.bool), 1)
            x = self.embedding(tokens.long()) + self.position[:length]
            for block in self.blocks:
                x = block(x, mask)
            return self.norm(x) @ self.embedding.weight.T

    return LM()
