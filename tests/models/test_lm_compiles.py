"""Compiles in an epoch of lengths 5-40 (docs/mindspore-behaviours.md, "A compile per padded length"): one per padded
width, or one with dynamic shapes, and the window step one per window length.

By hand: 24 sequences padded to multiples of 16 take at most 3 widths (16, 32, 48): at most 3 compiles where more
than 10 distinct lengths would have compiled one each.
"""
import functools
import glob
import os
import tempfile
from unittest import mock

import numpy as np
import mindspore as ms
import pytest

from accumulator import Accumulator, make_window_step
from data.tokens import pad_batch, random_sequences, window_batches
from models.transformer import TokenLoss
from tests.models.lm_helpers import MICRO_BATCH, OPTIMIZERS, VOCAB, loss_sum_grad, make_lm, tensors, weights


EPOCH = random_sequences(24, VOCAB, min_length=5, max_length=40, seed=1)


def compiles_during(calls):
    """How many graphs ``calls`` (functions of no arguments, called in turn) compiled.

    Counted in the graphs MindSpore saves (``save_graphs``): each compile writes one
    ``00_bootstrap_*.ir``, on every supported release, where its cache of compiled graphs is
    internal and moved between releases (docs/mindspore-behaviours.md#versions).
    """
    folder = tempfile.mkdtemp()
    # The bootstrap pass's graphs alone, read at the process's first save: every pass's would double each compile
    # (docs/mindspore-behaviours.md, "A compile per padded length").
    with mock.patch.dict(os.environ, MS_DEV_DUMP_IR_PASSES="bootstrap"):  # put back as it was
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
