"""Packed rows (data.packing): the sixteen sequences, several to a row of 48, each attending to itself alone, train a
window equal to the large batch of the same sequences padded one to a row.

By hand: packed, the sequences fill fewer than 8 rows, whose token counts differ and sum to every sequence's length
less one (its first token is no target); the window's update is the padded large batch's.
"""
import numpy as np
import mindspore as ms
import pytest

from accumulator import Accumulator, check_equivalence, make_window_step
from data.packing import pack_rows
from data.tokens import token_count
from models.transformer import TokenLoss
from tests.accumulator.helpers import sweep
from tests.models.lm_helpers import (OPTIMIZERS, SEQUENCES, loss_sum_grad, make_lm, reference, relative_change_error,
                                     tensors, weights)


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
