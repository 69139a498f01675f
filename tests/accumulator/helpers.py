"""Small nets, optimizers, reference runs and fast-path sweeps for the library's tests (the tools' tests use them too).

It imports MindSpore, numpy, pytest and ``accumulator``, never a tool
(tests/test_wheel.py checks it); tests/tools/helpers.py holds what only the tools' tests need.
"""
import contextlib
import functools

import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops
from mindspore.experimental import optim

from accumulator import Accumulator

# The optimizers the library is tested with, by name: MindSpore's nn ones and experimental.optim's AdamW
# (mint.optim.AdamW has no CPU kernel), a new-style optimizer; each over (params, learning rate).
OPTIMIZER_CLASSES = {"sgd": nn.SGD, "momentum": lambda params, lr: nn.Momentum(params, lr, 0.9), "adam": nn.Adam,
                     "adamw": lambda params, lr: optim.AdamW(params, lr=lr, weight_decay=0.1)}
OPTIMIZERS = tuple(OPTIMIZER_CLASSES)


def sweep(cases, fast=1):
    """``cases`` for ``parametrize``, all but the first ``fast`` marked slow: the fast path runs those, CI runs all.

    A case is a value, or a tuple of values for several argument names.
    """
    return [case if index < fast else pytest.param(*(case if isinstance(case, tuple) else (case,)),
                                                   marks=pytest.mark.slow)
            for index, case in enumerate(cases)]


def make_net(seed=0):
    """A tiny two-layer classifier with fixed initial weights."""
    ms.set_seed(seed)
    return nn.SequentialCell(nn.Dense(6, 8), nn.ReLU(), nn.Dense(8, 3))


def make_optimizer(name, params, learning_rate=0.1):
    """Optimizer ``name`` of ``OPTIMIZERS`` over ``params``; the Adams take a tenth of the learning rate."""
    return OPTIMIZER_CLASSES[name](params, learning_rate / 10 if name.startswith("adam") else learning_rate)


def make_data(samples, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, 6)).astype(np.float32)
    y = rng.integers(0, 3, samples).astype(np.int32)
    return x, y


def grad_fn_for(net, optimizer, reduction="mean"):
    """value_and_grad of the cross-entropy of ``net`` w.r.t. the optimizer's parameters."""
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction=reduction)

    def forward(x, y):
        return loss_fn(net(x), y)

    return ms.value_and_grad(forward, None, optimizer.parameters)


def large_batch_step(net, optimizer, use_jit=True, reduction="mean"):
    """A plain step: gradient of the whole batch's loss, one update."""
    grad_fn = grad_fn_for(net, optimizer, reduction)

    def step(x, y):
        loss, grads = grad_fn(x, y)
        optimizer(grads)
        return loss

    return ms.jit(step) if use_jit else step


def accumulated_step(accumulator, grad_fn, use_jit=True, with_count=False):
    """A micro-step ``(x, y[, count]) -> (loss, updated)`` feeding ``accumulator``."""
    if with_count:
        def step(x, y, count):
            loss, grads = grad_fn(x, y)
            return loss, accumulator(grads, count)
    else:
        def step(x, y):
            loss, grads = grad_fn(x, y)
            return loss, accumulator(grads)
    return ms.jit(step) if use_jit else step


REFERENCES = {}


def reference_state(optimizer_name, batches, learning_rate=0.1, reduction="mean"):
    """Optimizer state after one plain step per (x, y) large batch, from make_net's weights.

    Kept per process by its arguments: tests that compare with the same large batch share one run (and compile).
    """
    key = (optimizer_name, learning_rate, reduction,
           tuple((a.dtype.str, a.shape, a.tobytes()) for batch in map(_as_numpy, batches) for a in batch))
    if key not in REFERENCES:
        net = make_net()
        optimizer = make_optimizer(optimizer_name, net.trainable_params(), learning_rate)
        step = large_batch_step(net, optimizer, reduction=reduction)
        for x, y in batches:
            step(Tensor(x), Tensor(y))
        REFERENCES[key] = optimizer_state(optimizer)
    return {name: value.copy() for name, value in REFERENCES[key].items()}


def _as_numpy(batch):
    return tuple(value.asnumpy() if isinstance(value, Tensor) else np.asarray(value) for value in batch)


def optimizer_state(optimizer):
    """Every Parameter the optimizer holds (weights, moments, step), as numpy."""
    return {name: p.asnumpy().copy() for name, p in optimizer.parameters_and_names()}


def assert_states_close(actual, expected, rtol=1e-5, atol=1e-6):
    assert actual.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=rtol, atol=atol, err_msg=name)


def split(x, y, sizes):
    """Consecutive micro-batches of the given sizes, as Tensors."""
    bounds = np.cumsum([0] + list(sizes))
    return [(Tensor(x[a:b]), Tensor(y[a:b])) for a, b in zip(bounds[:-1], bounds[1:])]


def _double(tensor):
    return tensor * 2


@ms.jit_class
class DoublingReducer:
    """Acts as an AllReduce over two ranks that saw the same data: every tensor, the weight too, doubles."""

    def __init__(self):
        self.seen_weight = Parameter(Tensor(0.0, ms.float32), name="seen_weight", requires_grad=False)
        self.map = ops.HyperMap()

    def __call__(self, tensors):
        ops.assign(self.seen_weight, tensors[-1])
        return self.map(_double, tensors)


class Scale(nn.Cell):
    """``sum(w * x)`` over a ``size``-vector of ``dtype``: its gradient is ``x``, so a test picks the gradient."""

    def __init__(self, dtype=ms.float32, size=2):
        super().__init__()
        self.w = Parameter(Tensor(np.zeros(size), dtype), name="w")

    def construct(self, x):
        return (self.w.astype(ms.float32) * x).sum()


TOKEN_VOCAB = 11
PAD = 0  # the token id that SummedTokenLoss leaves out


class TokenNet(nn.Cell):
    """A tiny language model: an embedding and a Dense layer over int32 tokens, logits [B, T, TOKEN_VOCAB]."""

    def __init__(self, seed=0):
        super().__init__()
        ms.set_seed(seed)
        self.embedding = nn.Embedding(TOKEN_VOCAB, 8)
        self.dense = nn.Dense(8, TOKEN_VOCAB)

    def construct(self, tokens):
        return self.dense(self.embedding(tokens))


class SummedTokenLoss(nn.Cell):
    """``(inputs, targets) -> (loss_sum, count)``: cross-entropy summed over non-PAD targets, and their count."""

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.cross_entropy = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="none")

    def construct(self, inputs, targets):
        targets = targets.reshape((-1,))
        losses = self.cross_entropy(self.net(inputs).reshape((-1, TOKEN_VOCAB)), targets)
        mask = (targets != PAD).astype(ms.float32)
        return (losses * mask).sum(), mask.sum()


def token_windows(windows=2, accumulate_step=4, batch=2, seed=0):
    """``windows`` lists of ``accumulate_step`` micro-batches ``(inputs, targets)``: int32 Tensors of ``batch`` rows.

    Each row holds 2 to 13 random next-token targets, then PAD; a micro-batch
    is as wide as its longest row rounded up to 8, so micro-batches differ in
    their tokens and in their widths.
    """
    rng = np.random.default_rng(seed)

    def micro_batch():
        lengths = rng.integers(2, 14, batch)
        width = -(-int(lengths.max()) // 8) * 8
        tokens = rng.integers(1, TOKEN_VOCAB, (batch, width + 1))
        kept = np.arange(width) < lengths[:, None]
        return tuple(Tensor(np.where(kept, shifted, PAD).astype(np.int32))
                     for shifted in (tokens[:, :-1], tokens[:, 1:]))

    return [[micro_batch() for _ in range(accumulate_step)] for _ in range(windows)]


def one_batch(micro_batches):
    """``micro_batches`` of ``(inputs, targets)`` as one large batch, each padded with PAD to the widest."""
    width = max(inputs.shape[1] for inputs, _ in micro_batches)
    return tuple(Tensor(np.concatenate([np.pad(part.asnumpy(), ((0, 0), (0, width - part.shape[1])),
                                               constant_values=PAD) for part in parts]))
                 for parts in zip(*micro_batches))


def token_large_batch_state(windows, optimizer_name):
    """Optimizer state after one update per window on all its sequences padded together: summed loss / count."""
    loss = SummedTokenLoss(TokenNet())
    optimizer = make_optimizer(optimizer_name, loss.net.trainable_params())

    def forward(inputs, targets):
        loss_sum, count = loss(inputs, targets)
        return loss_sum / count

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    @ms.jit
    def step(inputs, targets):
        optimizer(grad_fn(inputs, targets)[1])

    for window in windows:
        step(*one_batch(window))
    return optimizer_state(optimizer)


# Splitting many gradients in a graph: MindSpore stops a compile whose calls nest deeper than max_call_depth
# (1000 by default). ops.split's Python loop nests about 10 calls per piece: it fails at 128 pieces there
# (docs/mindspore-behaviours.md); Buckets.split nests about 2 per piece sliced, 4 with SplitWithSize (about
# 290 and 550 of the 1000 at 128). SPLIT_PIECES under SPLIT_DEPTH_LIMIT keep those proportions (ops.split
# needs about 350 there, Buckets.split about 95 sliced and 155 with SplitWithSize) and compile far faster
# than 128 pieces.
SPLIT_PIECES = 32
SPLIT_DEPTH_LIMIT = 250


@contextlib.contextmanager
def call_depth_limit(depth):
    """MindSpore's graph call depth limited to ``depth`` for the compiles in the block, then put back."""
    before = ms.get_context("max_call_depth")
    ms.set_context(max_call_depth=depth)
    try:
        yield
    finally:
        ms.set_context(max_call_depth=before)


def split_round_trip(buckets, grads):
    """``buckets.split(buckets.flatten(grads))`` compiled under SPLIT_DEPTH_LIMIT; at SPLIT_PIECES gradients it
    first shows that ops.split exceeds that depth on the same pieces."""
    @ms.jit
    def round_trip(grads):
        return buckets.split(buckets.flatten(grads))

    with call_depth_limit(SPLIT_DEPTH_LIMIT):
        if len(grads) == SPLIT_PIECES:
            assert_ops_split_exceeds_the_call_depth(buckets.sizes[0])
        return round_trip(ms.mutable(grads))


def assert_ops_split_exceeds_the_call_depth(sizes):
    """ops.split into ``sizes``, compiled, fails on the call depth: the limit in force bites at this many pieces."""
    sizes = [int(size) for size in sizes]

    @ms.jit
    def split_in_a_graph(flat):
        return ops.split(flat, sizes)

    with pytest.raises(RuntimeError, match="Exceed function call depth limit"):
        split_in_a_graph(Tensor(np.zeros(sum(sizes), np.float32)))


def scaled_grad_fn(net, optimizer, scaler):
    """Gradients of the loss scaled by ``scaler``, as mixed-precision training computes them."""
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def forward(data, label):
        return scaler.scale(loss_fn(net(data), label))

    return ms.value_and_grad(forward, None, optimizer.parameters)


def scale_setup(accumulate_step, **accumulator_args):
    """A ``Scale`` net under SGD at learning rate 1 and an Accumulator: ``(net, accumulator, grad_fn)``.

    The weight moves by minus the window's gradient.
    """
    net = Scale()
    optimizer = nn.SGD(net.trainable_params(), 1.0)
    accumulator = Accumulator(optimizer, accumulate_step, **accumulator_args)
    grad_fn = ms.value_and_grad(net, None, optimizer.parameters)
    return net, accumulator, grad_fn


def per_micro_step(accumulator, grad_fn, with_count=False):
    """The jitted micro-step ``(x[, count]) -> updated`` of a ``scale_setup`` run."""
    def step(x):
        return accumulator(grad_fn(x)[1])

    def step_with_count(x, count):
        return accumulator(grad_fn(x)[1], count)

    return ms.jit(step_with_count if with_count else step)


def in_data_parallel_graph(case):
    """An msrun case (tests/msrun.py) in GRAPH_MODE with data parallel's gradient mean, as users' msrun scripts."""
    @functools.wraps(case)
    def run(folder):
        ms.set_context(mode=ms.GRAPH_MODE)
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
        return case(folder)
    return run
