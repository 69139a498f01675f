"""The language model through Model.train (AccumulationTrainCell with token counts) and check_equivalence.

By hand: four micro-batches padded to their own widths under Model.train make one update equal to the large batch's;
check_equivalence accepts them with their counts and names the mean of micro-batch means "uneven counts".
"""
import mindspore as ms
import mindspore.dataset as ds
import pytest
from mindspore.train import Model

from accumulator import AccumulationTrainCell, Accumulator, FlushAtEpochEnd, check_equivalence
from data.tokens import pad_batch, token_count
from models.transformer import TokenLoss
from tests.models.lm_helpers import (MICRO_BATCH, OPTIMIZERS, SEQUENCES, STEPS, loss_sum_grad, make_lm, micro_batches,
                                     reference, relative_change_error, tensors,
                                     weights)


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


@pytest.mark.slow  # long; check_equivalence on the fast path: tests/accumulator/core/test_selfcheck.py
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
