"""The language-model workload: token-count windows on CausalLM equal the large batch.

Sixteen random sequences of 5-40 tokens: one large batch, or a window of four
micro-batches of four, each padded to its own length. With the summed token
loss and each micro-batch's token count the window's update is the large
batch's; the mean of micro-batch means is measurably not.
"""
import functools
import glob
import os
import tempfile

import numpy as np
import mindspore as ms
import mindspore.dataset as ds
import pytest
from mindspore import amp, mint, nn
from mindspore.experimental import optim
from mindspore.train import Model

from tests.models import lm_distributed_worker
from accumulator import AccumulationTrainCell, Accumulator, FlushAtEpochEnd, check_equivalence, make_window_step
from data.packing import pack_rows
from data.tokens import pad_batch, random_sequences, token_count, window_batches
from tests.accumulator.helpers import sweep
from models.transformer import TokenLoss

VOCAB, MICRO_BATCH, STEPS = 100, 4, 4
SEQUENCES = lm_distributed_worker.SEQUENCES


def tensors(*arrays):
    return tuple(ms.Tensor(a) for a in arrays)


def micro_batches(multiple=8):
    """The window's micro-batches, each padded to its own length."""
    return [tensors(*pad_batch(SEQUENCES[i:i + MICRO_BATCH], multiple))
            for i in range(0, len(SEQUENCES), MICRO_BATCH)]


# One small CausalLM (width 32, one block) everywhere, the msrun ranks' too: compiles dominate these tests.
make_lm = lm_distributed_worker.make_lm


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


def mean_of_means_update(make_net, make_optimizer):
    """Weights after one window averaging each micro-batch's mean loss: the common mistake."""
    net = make_net()
    optimizer = make_optimizer(net.trainable_params())
    accumulator = Accumulator(optimizer, accumulate_step=STEPS)
    loss_fn = TokenLoss(net)

    def forward(inputs, targets):
        loss_sum, count = loss_fn(inputs, targets)
        return loss_sum / count

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    for inputs, targets in micro_batches():
        accumulator(grad_fn(inputs, targets)[1])
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


@pytest.mark.parametrize("optimizer", ["mint.optim.SGD", "mint.optim.Adam"])
def test_mint_optimizers_called_eagerly_leave_the_weights_as_they_were(optimizer):
    """Why EAGER leaves mint.optim out: outside a compiled graph its update writes nothing (inside one, it does).

    A MindSpore defect: mint.optim.SGD's on 2.8 to 2.10, mint.optim.Adam's on 2.10 only (2.8 and 2.9 update
    eagerly; 2.7's CPU has no eager Adam kernel); skipped where absent, told by what the release does
    (docs/mindspore-behaviours.md#versions).
    """
    net = nn.Dense(3, 2)
    before = net.weight.asnumpy().copy()
    name, optimizer = optimizer, OPTIMIZERS[optimizer](net.trainable_params())
    grads = tuple(ms.ops.ones_like(p) for p in optimizer.parameters)
    try:
        optimizer(grads)
    except RuntimeError as error:
        pytest.skip(f"no eager {name} on this release and device (2.7's CPU): {str(error).splitlines()[0]}")
    if not np.array_equal(net.weight.asnumpy(), before):
        pytest.skip(f"the defect is absent from this release (2.8, 2.9 for Adam): eager {name} updates the weights")
    ms.jit(optimizer.construct)(grads)
    if np.array_equal(net.weight.asnumpy(), before):
        pytest.skip(f"compiled, {name} updates nothing either on this release (2.7's CPU): a MindSpore defect "
                    "that leaves no way to run it (docs/mindspore-behaviours.md#versions)")
    assert np.abs(net.weight.asnumpy() - before).min() > 1e-4


@functools.lru_cache(maxsize=None)
def reference(optimizer):
    """The large batch's update from make_lm's weights, computed once per optimizer."""
    return large_batch_update(make_lm, OPTIMIZERS[optimizer], compiled=optimizer not in EAGER)


@pytest.mark.parametrize("optimizer", ["nn.SGD"] + [pytest.param(name, marks=pytest.mark.slow) for name in EAGER[1:]])
def test_eager_token_windows_equal_the_large_batch(optimizer):
    start, large = reference(optimizer)
    trained = window_update(make_lm, OPTIMIZERS[optimizer], "eager")
    assert relative_change_error(trained, large, start) < 1e-5


def test_the_mean_of_micro_batch_means_is_not_the_large_batch():
    start, large = reference("nn.SGD")
    assert relative_change_error(mean_of_means_update(make_lm, OPTIMIZERS["nn.SGD"]), large, start) > 0.1


# CI only: the fast path's compiled window step on token counts is the recomputed blocks' test below.
@pytest.mark.slow
@pytest.mark.parametrize("mode, optimizer", [("window", "nn.SGD"), ("window", "mint.optim.SGD"),
                                             ("window", "mint.optim.Adam"), ("jit", "nn.SGD")])
def test_compiled_token_windows_equal_the_large_batch(mode, optimizer):
    start, large = reference(optimizer)
    assert relative_change_error(window_update(make_lm, OPTIMIZERS[optimizer], mode), large, start) < 1e-5


# Packed rows (data.packing): the same sequences, several to a row, each attending to itself alone.

def packed_micro_batches(rows=2):
    """SEQUENCES packed into rows of 48 (make_lm's max_length), in micro-batches of ``rows``, filler rows last."""
    inputs, targets = pack_rows(SEQUENCES, 48)
    filler = -len(inputs) % rows
    inputs, targets = np.pad(inputs, ((0, filler), (0, 0), (0, 0))), np.pad(targets, ((0, filler), (0, 0)))
    return [tensors(inputs[i:i + rows], targets[i:i + rows]) for i in range(0, len(inputs), rows)]


# Packing is in the data: the eager loop sees it on the fast path; the compiled window step on token counts runs
# in test_recomputed_blocks_train_a_window_equal_to_the_large_batch, here in CI.
@pytest.mark.parametrize("mode", sweep(["eager", "window"]))
def test_packed_token_windows_equal_the_large_batch_of_the_same_sequences_padded(mode):
    start, large = reference("nn.SGD")                 # one batch of the 16 sequences, each padded
    window = packed_micro_batches()
    counts = [token_count(targets.asnumpy()) for _, targets in window]
    assert len(window) < len(SEQUENCES) / 2 and len(set(counts)) > 1 and sum(counts) == sum(len(s) - 1 for s in SEQUENCES)
    net = make_lm()
    accumulator = Accumulator(OPTIMIZERS["nn.SGD"](net.trainable_params()), accumulate_step=len(window))
    if mode == "window":
        window_step = make_window_step(loss_sum_grad(TokenLoss(net), accumulator.optimizer.parameters), accumulator)
        stacked = (ms.Tensor(np.stack([batch[i].asnumpy() for batch in window])) for i in range(2))
        window_step(*stacked, counts=counts)
    else:
        grad_fn = ms.value_and_grad(TokenLoss(net), None, accumulator.optimizer.parameters, has_aux=True)
        for inputs, targets in window:
            (_, count), grads = grad_fn(inputs, targets)
            accumulator(grads, count)
    assert int(accumulator.update_count) == 1
    assert relative_change_error(weights(net), large, start) < 1e-5


def test_check_equivalence_accepts_a_packed_window_as_it_is():
    """Packed micro-batches concatenate (one row length): the large batch is their rows together."""
    net = make_lm()
    accumulator = Accumulator(OPTIMIZERS["nn.SGD"](net.trainable_params()), accumulate_step=4)
    window = packed_micro_batches()
    counts = [token_count(targets.asnumpy()) for _, targets in window]
    report = check_equivalence(loss_sum_grad(TokenLoss(net), accumulator.optimizer.parameters), window, accumulator,
                               counts=counts, network=net)
    assert report.equivalent, report.summary()


# Shapes real models have. The tied embedding is CausalLM itself (every test above).

def test_frozen_parameters_train_a_window_equal_to_the_large_batch():
    """An optimizer over a subset, as in adapter/LoRA fine-tuning: the rest stays as it was."""
    def mlp_sgd(params):
        return nn.SGD([p for p in params if p.name.startswith("blocks.0.mlp.")], learning_rate=0.1)

    start, large = large_batch_update(make_lm, mlp_sgd)
    trained = window_update(make_lm, mlp_sgd, "eager")
    assert relative_change_error(trained, large, start) < 1e-5
    changed = [not np.array_equal(a, b) for a, b in zip(start, trained)]
    assert any(changed) and not all(changed)


# The fast path's one compiled window step of token counts on the LM (test_compiled_token_windows_... in CI).
def test_recomputed_blocks_train_a_window_equal_to_the_large_batch():
    def recomputed_lm():
        net = make_lm()
        for block in net.blocks:
            block.recompute()
        return net

    start, large = reference("nn.SGD")
    assert relative_change_error(window_update(recomputed_lm, OPTIMIZERS["nn.SGD"], "window"), large, start) < 1e-5


def scaled_window_update(loss_cell):
    """One eager window of ``loss_cell(TokenLoss(make_lm()))`` with a DynamicLossScaler: scaled loss, unscaled once."""
    net = make_lm()
    optimizer = OPTIMIZERS["nn.SGD"](net.trainable_params())
    scaler = amp.DynamicLossScaler(2.0 ** 10, 2, 1000)
    accumulator = Accumulator(optimizer, accumulate_step=STEPS, loss_scaler=scaler)
    loss_fn = loss_cell(TokenLoss(net))

    def forward(inputs, targets):
        loss_sum, count = loss_fn(inputs, targets)
        return scaler.scale(loss_sum), count

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters, has_aux=True)
    for inputs, targets in micro_batches():
        (_, count), grads = grad_fn(inputs, targets)
        accumulator(grads, count)
    assert int(accumulator.update_count) == 1
    return weights(net)


@pytest.mark.parametrize("level", sweep(["O2", "O1"]))
def test_mixed_precision_windows_equal_the_float32_large_batch_within_float16(level):
    """auto_mixed_precision computes in float16; float32 sums keep the window within float16's error of float32."""
    start, large = reference("nn.SGD")
    error = relative_change_error(scaled_window_update(lambda cell: amp.auto_mixed_precision(cell, level)),
                                  large, start)
    assert error < 5e-3           # measured 7e-4 (O1) and 1e-3 (O2); the mean of means is 0.64 off


@pytest.mark.skipif(ms.get_context("device_target") == "CPU",
                    reason="MindSpore 2.10's CPU has no bfloat16 Gather, LayerNorm or MatMul kernel")
def test_bfloat16_parameters_train_a_window_within_bfloat16_of_the_large_batch():
    def bfloat16_lm():
        net = make_lm()
        net.to_float(ms.bfloat16)
        for parameter in net.get_parameters():
            parameter.set_dtype(ms.bfloat16)
        return net

    start, large = reference("nn.SGD")
    assert relative_change_error(window_update(bfloat16_lm, OPTIMIZERS["nn.SGD"], "eager"), large, start) < 3e-2


# Compiles in an epoch of lengths 5-40 (docs/mindspore-behaviours.md, "A compile per padded length").

EPOCH = random_sequences(24, VOCAB, min_length=5, max_length=40, seed=1)


def compiles_during(calls):
    """How many graphs ``calls`` (functions of no arguments, called in turn) compiled.

    Counted in the graphs MindSpore saves (``save_graphs``): each compile writes one
    ``00_bootstrap_*.ir``, on every supported release, where its cache of compiled graphs is
    internal and moved between releases (docs/mindspore-behaviours.md#versions).
    """
    folder = tempfile.mkdtemp()
    ms.set_context(save_graphs=1, save_graphs_path=folder)
    try:
        for call in calls:
            call()
    finally:
        ms.set_context(save_graphs=0)
    return len(glob.glob(os.path.join(folder, "**", "00_bootstrap_*.ir"), recursive=True))


def micro_step_epoch(dynamic):
    """Weights and compiles after an epoch of jitted micro-steps on batches padded to a multiple of 16."""
    net = make_lm()
    accumulator = Accumulator(OPTIMIZERS["nn.SGD"](net.trainable_params()), accumulate_step=2)
    grad_fn = ms.value_and_grad(TokenLoss(net), None, accumulator.optimizer.parameters, has_aux=True)

    def step(inputs, targets):
        (_, count), grads = grad_fn(inputs, targets)
        return accumulator(grads, count)

    step = ms.jit(step)
    if dynamic:
        any_shape = ms.Tensor(shape=[None, None], dtype=ms.int32)
        step = ms.enable_dynamic(inputs=any_shape, targets=any_shape)(step)
    batches = [tensors(*pad_batch(EPOCH[i:i + MICRO_BATCH], multiple=16)) for i in range(0, len(EPOCH), MICRO_BATCH)]
    compiles = compiles_during([functools.partial(step, *batch) for batch in batches])
    return weights(net), compiles, {inputs.shape[1] for inputs, _ in batches}


@pytest.mark.slow  # two epochs compiling every bucket's graph
def test_bucketed_lengths_compile_once_per_bucket_and_dynamic_shapes_once():
    bucketed, bucketed_compiles, widths = micro_step_epoch(dynamic=False)
    dynamic, dynamic_compiles, _ = micro_step_epoch(dynamic=True)
    assert len({len(s) - 1 for s in EPOCH}) > 10 and 1 < len(widths) <= 3
    assert bucketed_compiles == len(widths)
    assert dynamic_compiles == 1
    for a, b in zip(bucketed, dynamic):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # counts compiles: a speed property, CI sees a recompile
def test_window_step_compiles_once_per_window_length():
    net = make_lm()
    accumulator = Accumulator(OPTIMIZERS["nn.SGD"](net.trainable_params()), accumulate_step=2)
    window_step = make_window_step(loss_sum_grad(TokenLoss(net), accumulator.optimizer.parameters), accumulator)
    windows = list(window_batches(EPOCH, MICRO_BATCH, 2, multiple=16))
    compiles = compiles_during([functools.partial(window_step, *tensors(x, y), counts=c) for x, y, c in windows])
    assert compiles == len({inputs.shape[2] for inputs, _, _ in windows}) < len(windows)
    assert int(accumulator.update_count) == len(windows)


@pytest.mark.slow
@pytest.mark.msrun("language_model")  # lm_distributed_worker.py
def test_two_ranks_under_msrun_count_every_ranks_tokens(msrun_folder):
    """Each rank's window holds a different number of tokens; the update divides by both ranks' total."""
    start, large = reference("nn.SGD")
    ranks = [np.load(msrun_folder / f"rank_{rank}.npz") for rank in range(2)]
    assert ranks[0]["tokens"] != ranks[1]["tokens"]
    for rank in ranks:
        assert int(rank["update_count"]) == 1
        trained = [rank[f"arr_{i}"] for i in range(len(start))]
        assert relative_change_error(trained, large, start) < 1e-5


def test_model_train_with_token_counts_equals_the_large_batch():
    """AccumulationTrainCell(TokenLoss(net), accumulator, counts=True) under Model.train, batches padded each to its own length."""
    net = make_lm()
    accumulator = Accumulator(OPTIMIZERS["nn.SGD"](net.trainable_params()), accumulate_step=STEPS)
    cell = AccumulationTrainCell(TokenLoss(net), accumulator, counts=True)
    batches = [pad_batch(SEQUENCES[i:i + MICRO_BATCH], multiple=8) for i in range(0, len(SEQUENCES), MICRO_BATCH)]
    assert len({inputs.shape for inputs, _ in batches}) > 1
    dataset = ds.GeneratorDataset(batches, column_names=["inputs", "targets"], shuffle=False)
    Model(cell).train(1, dataset, callbacks=[FlushAtEpochEnd(cell)], dataset_sink_mode=False)
    assert int(accumulator.update_count) == 1
    start, large = reference("nn.SGD")
    assert relative_change_error(weights(net), large, start) < 1e-5


def test_check_equivalence_on_the_language_model():
    """Micro-batches padded to their own lengths, the large batch padded together: equivalent with the counts;
    the mean of micro-batch means is named as uneven counts."""
    net = make_lm()
    accumulator = Accumulator(OPTIMIZERS["nn.SGD"](net.trainable_params()), accumulate_step=STEPS)
    window = micro_batches()
    counts = [token_count(targets.asnumpy()) for _, targets in window]
    large_batch = tensors(*pad_batch(SEQUENCES))
    grad_fn = loss_sum_grad(TokenLoss(net), accumulator.optimizer.parameters)
    report = check_equivalence(grad_fn, window, accumulator, counts=counts, network=net, large_batch=large_batch)
    assert report.equivalent, report.summary()
    loss_fn = TokenLoss(net)

    def mean_loss(inputs, targets):
        loss_sum, count = loss_fn(inputs, targets)
        return loss_sum / count

    mean_of_means = ms.value_and_grad(mean_loss, None, accumulator.optimizer.parameters)
    report = check_equivalence(mean_of_means, window, accumulator, network=net, large_batch=large_batch)
    assert not report.equivalent and report.reasons[0].startswith("uneven counts")
