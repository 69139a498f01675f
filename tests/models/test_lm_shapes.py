"""Shapes real models have, under token-count windows: frozen parameters, recomputed blocks, mixed precision,
bfloat16. The tied embedding is CausalLM itself (every test_lm_*.py).

By hand: an optimizer over the MLP of block 0 only trains that MLP, and its window equals the large batch's update;
the other parameters keep their bytes.
"""
import numpy as np
import mindspore as ms
import pytest
from mindspore import amp, nn

from accumulator import Accumulator
from models.transformer import TokenLoss
from tests.accumulator.helpers import sweep
from tests.models.lm_helpers import (OPTIMIZERS, STEPS, large_batch_update, make_lm, micro_batches, reference,
                                     relative_change_error, weights, window_update)


def test_frozen_parameters_train_a_window_equal_to_the_large_batch():
    """An optimizer over a subset, as in adapter/LoRA fine-tuning: the rest stays as it was."""
    def mlp_sgd(params):
        return nn.SGD([p for p in params if p.name.startswith("blocks.0.mlp.")], learning_rate=0.1)

    start, large = large_batch_update(make_lm, mlp_sgd)
    trained = window_update(make_lm, mlp_sgd, "eager")
    assert relative_change_error(trained, large, start) < 1e-5
    changed = [not np.array_equal(a, b) for a, b in zip(start, trained)]
    assert any(changed) and not all(changed)


# The LM's compiled window step of token counts with nn.SGD, on the fast path and in CI alike
# (test_compiled_token_windows_...: Adam's and the jitted micro-step's, in CI).
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
