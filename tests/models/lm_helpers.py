"""The language-model workload's shared data and runs: sixteen random sequences of 5-40 tokens, the small CausalLM
(width 32, one block: compiles dominate these tests) every test and both msrun ranks start from, and the large
batch's update they are compared with (tests/models/test_lm_*.py, lm_distributed_worker.py)."""
import functools

import numpy as np
import mindspore as ms
from mindspore import mint, nn
from mindspore.experimental import optim

from accumulator import Accumulator, make_window_step
from data.tokens import pad_batch, random_sequences, window_batches
from models.transformer import CausalLM, TokenLoss

VOCAB, MICRO_BATCH, STEPS = 100, 4, 4
SEQUENCES = random_sequences(16, VOCAB, min_length=5, max_length=40, seed=0)


def make_lm():
    """The small model both the ranks and the test's single process start from."""
    ms.set_seed(0)
    return CausalLM(VOCAB, width=32, depth=1, heads=2, max_length=48)


def tensors(*arrays):
    return tuple(ms.Tensor(a) for a in arrays)


def micro_batches(multiple=8):
    """The window's micro-batches, each padded to its own length."""
    return [tensors(*pad_batch(SEQUENCES[i:i + MICRO_BATCH], multiple))
            for i in range(0, len(SEQUENCES), MICRO_BATCH)]


def weights(net):
    return [p.asnumpy().astype(np.float32) for p in net.get_parameters()]


def relative_change_error(trained, reference, start):
    """|accumulated update - large-batch update| / |large-batch update|, over all weights."""
    difference = sum(float(np.sum((a - b) ** 2)) for a, b in zip(trained, reference))
    update = sum(float(np.sum((b - a) ** 2)) for a, b in zip(start, reference))
    return (difference / update) ** 0.5


def loss_sum_grad(loss_fn, parameters):
    """Gradient of the summed token loss alone (the count comes from the data)."""
    def forward(inputs, targets):
        return loss_fn(inputs, targets)[0]
    return ms.value_and_grad(forward, None, parameters)


def large_batch_update(make_net, make_optimizer, compiled=False):
    """Weights before, and after one update on all sequences (mean over their tokens)."""
    net = make_net()
    start = weights(net)
    optimizer = make_optimizer(net.trainable_params())
    loss_fn = TokenLoss(net)

    def forward(inputs, targets):
        loss_sum, count = loss_fn(inputs, targets)
        return loss_sum / count

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    def step(inputs, targets):
        return optimizer(grad_fn(inputs, targets)[1])

    (ms.jit(step) if compiled else step)(*tensors(*pad_batch(SEQUENCES)))
    return start, weights(net)


def window_update(make_net, make_optimizer, mode, **accumulator_options):
    """Weights after one window of token-count micro-batches, run per micro-step (eager or jit) or as a window step."""
    net = make_net()
    optimizer = make_optimizer(net.trainable_params())
    accumulator = Accumulator(optimizer, accumulate_step=STEPS, **accumulator_options)
    loss_fn = TokenLoss(net)
    if mode == "window":
        window_step = make_window_step(loss_sum_grad(loss_fn, optimizer.parameters), accumulator)
        (inputs, targets, counts), = window_batches(SEQUENCES, MICRO_BATCH, STEPS)
        window_step(*tensors(inputs, targets), counts=counts)
    else:
        grad_fn = ms.value_and_grad(loss_fn, None, optimizer.parameters, has_aux=True)

        def step(inputs, targets):
            (_, count), grads = grad_fn(inputs, targets)
            return accumulator(grads, count)

        step = ms.jit(step) if mode == "jit" else step
        for inputs, targets in micro_batches():
            step(inputs, targets)
    assert int(accumulator.update_count) == 1
    return weights(net)


# Adam's first update is lr * g / (|g| + eps): the attention key bias has a
# gradient that is mathematically zero (softmax ignores a shift), float noise
# near 1e-8 that eps=1e-8 would turn into updates of order lr; 1e-6 keeps them small.
OPTIMIZERS = {
    "nn.SGD": lambda params: nn.SGD(params, learning_rate=0.1),
    "nn.Adam": lambda params: nn.Adam(params, learning_rate=1e-3, eps=1e-6),
    "experimental.optim.AdamW": lambda params: optim.AdamW(params, lr=1e-3, eps=1e-6, weight_decay=0.1),
    "mint.optim.SGD": lambda params: mint.optim.SGD(params, lr=0.1, momentum=0.9),
    "mint.optim.Adam": lambda params: mint.optim.Adam(params, lr=1e-3, eps=1e-6),
}


# mint.optim optimizers called eagerly update nothing (docs/mindspore-behaviours.md): graph mode only.
EAGER = [name for name in OPTIMIZERS if not name.startswith("mint")]


@functools.lru_cache(maxsize=None)
def reference(optimizer):
    """The large batch's update from make_lm's weights, computed once per optimizer."""
    return large_batch_update(make_lm, OPTIMIZERS[optimizer], compiled=optimizer not in EAGER)
