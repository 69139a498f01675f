"""check_equivalence: the accumulated window against the large batch, and what it must not touch.

By hand: four micro-batches of 4 of a mean loss are equivalent to their batch of 16 (relative difference under
1e-5); the same loss without counts on micro-batches of 5, 3 and 8 is a mean of means, and named so.
"""
import numpy as np
import pytest
import mindspore as ms
from mindspore import nn

from accumulator import Accumulator, convert_batchnorm
from accumulator.core.selfcheck import RTOL, check_equivalence
from accumulator.core.checkpoints import training_state
from tests.accumulator.helpers import (SummedTokenLoss, TokenNet, accumulated_step, grad_fn_for, make_data, make_net,
                                       make_optimizer, PAD, one_batch, split, token_windows)

# One buffer per parameter, plus a few scalar counters (5 of 4 bytes today): the bound on the rest.
MAX_COUNTER_BYTES = 100


def _net_with(layer, seed=0):
    """make_net's classifier with ``layer`` after its first Dense, in training mode."""
    ms.set_seed(seed)
    net = nn.SequentialCell(nn.Dense(6, 8), layer, nn.ReLU(), nn.Dense(8, 3))
    net.set_train()
    return net


def _setup(net=None, reduction="mean", loss_reduction="mean", optimizer="sgd", accumulate_step=4):
    net = net or make_net()
    optimizer = make_optimizer(optimizer, net.trainable_params())
    accumulator = Accumulator(optimizer, accumulate_step, reduction=reduction)
    return net, accumulator, grad_fn_for(net, optimizer, loss_reduction)


def _window(sizes, seed=0):
    x, y = make_data(sum(sizes), seed)
    return split(x, y, sizes)


def test_mean_loss_on_even_micro_batches_is_equivalent(mode):
    net, accumulator, grad_fn = _setup()
    report = check_equivalence(grad_fn, _window([4, 4, 4, 4]), accumulator, network=net)
    assert report.equivalent and report.reasons == ()
    assert report.max_abs_diff < 1e-6 and report.max_rel_diff < 1e-5
    assert report.verdict.startswith("equivalent")
    assert report.param_bytes == (6 * 8 + 8 + 8 * 3 + 3) * 4
    assert 0 < report.state_bytes - report.param_bytes < MAX_COUNTER_BYTES
    assert "\n" not in str(report) and str(report) == report.summary()


def test_counts_with_a_summed_loss_on_uneven_micro_batches_are_equivalent(graph_mode):
    net, accumulator, grad_fn = _setup(loss_reduction="sum", accumulate_step=3)
    report = check_equivalence(grad_fn, _window([5, 3, 8]), accumulator, counts=[5, 3, 8], network=net)
    assert report.equivalent and report.reasons == ()
    assert report.max_rel_diff < 1e-5


def test_uneven_micro_batches_without_counts_are_a_mean_of_means(graph_mode):
    # A dropout layer of rate 0 in training mode draws nothing: it must not be blamed.
    net, accumulator, grad_fn = _setup(_net_with(nn.Dropout(p=0.0)), accumulate_step=3)
    report = check_equivalence(grad_fn, _window([5, 3, 8]), accumulator, network=net)
    assert not report.equivalent and report.max_rel_diff > 1e-2
    assert len(report.reasons) == 1
    # Measured weights 5, 3, 8 over their mean, 16/3.
    assert report.reasons[0].startswith("uneven counts: the large batch weighs the micro-batches 0.94, 0.56, 1.50 ")
    assert "they hold 5, 3, 8 samples" in report.reasons[0] and "pass each micro-batch's count" in report.reasons[0]
    assert report.verdict.startswith("NOT equivalent") and report.reasons[0] in report.verdict



def test_a_difference_between_rtol_and_ten_times_it_is_told_apart_both_ways(graph_mode):
    # Micro-batches of 300 and 301 without counts: a mean of means, off by under a thousandth.
    net, accumulator, grad_fn = _setup(accumulate_step=2)
    window = _window([300, 301])
    report = check_equivalence(grad_fn, window, accumulator, network=net)
    assert RTOL < report.max_rel_diff < 10 * RTOL and not report.equivalent
    assert report.reasons[0].startswith("uneven counts")
    looser = check_equivalence(grad_fn, window, accumulator, network=net, rtol=10 * RTOL)
    assert looser.equivalent and looser.max_rel_diff == pytest.approx(report.max_rel_diff, rel=1e-3)


def _token_grad_fns(loss, parameters):
    """The gradient of the summed token loss (for counts), and of each micro-batch's mean per token."""
    def summed(inputs, targets):
        return loss(inputs, targets)[0]

    def mean(inputs, targets):
        loss_sum, count = loss(inputs, targets)
        return loss_sum / count

    return ms.value_and_grad(summed, None, parameters), ms.value_and_grad(mean, None, parameters)


def test_token_batches_padded_to_their_own_lengths_check_against_the_batch_padded_together(graph_mode):
    loss = SummedTokenLoss(TokenNet())
    accumulator = Accumulator(make_optimizer("sgd", loss.net.trainable_params()), 4)
    summed, mean = _token_grad_fns(loss, accumulator.optimizer.parameters)
    micro_batches = token_windows(windows=1)[0]
    assert len({tuple(inputs.shape) for inputs, _ in micro_batches}) > 1
    large_batch = one_batch(micro_batches)
    counts = [float((targets.asnumpy() != PAD).sum()) for _, targets in micro_batches]
    assert len(set(counts)) > 1

    report = check_equivalence(summed, micro_batches, accumulator, counts=counts, network=loss, large_batch=large_batch)
    assert report.equivalent, report
    uneven = check_equivalence(mean, micro_batches, accumulator, network=loss, large_batch=large_batch)
    assert not uneven.equivalent and len(uneven.reasons) == 1
    relative = ", ".join(f"{c / np.mean(counts):.2f}" for c in counts)
    assert uneven.reasons[0].startswith(f"uneven counts: the large batch weighs the micro-batches {relative} ")
    assert "in proportion to what each holds (tokens or samples)" in uneven.reasons[0]
    with pytest.raises(ValueError, match=r"input 0 has different shapes beyond axis 0 \(\[8\], \[16\]\).*large_batch="):
        check_equivalence(summed, micro_batches, accumulator, counts=counts)


@pytest.mark.parametrize("reduction, loss_reduction, counts", [
    ("sum", "sum", None),       # the window's raw sum is the large batch's summed-loss gradient
    ("sum", "mean", None),      # a mean loss (divided by N or not): N times the large batch's, through grad_fn
])
def test_sum_reduction_fits_a_summed_loss_and_a_mean_divided_by_n(graph_mode, reduction, loss_reduction, counts):
    net, accumulator, grad_fn = _setup(reduction=reduction, loss_reduction=loss_reduction)
    report = check_equivalence(grad_fn, _window([4, 4, 4, 4]), accumulator, counts=counts, network=net)
    assert report.equivalent and report.max_rel_diff < 1e-5


@pytest.mark.parametrize("loss_reduction, counts, scale, hint", [
    ("sum", None, "0.25x", "a loss summed over samples needs counts"),
    ("mean", [4, 4, 4, 4], "4x", "counts need the gradient of a loss summed over samples"),
])
def test_a_loss_normalised_unlike_the_accumulator_is_a_normalisation_mismatch(graph_mode, loss_reduction, counts, scale,
                                                                              hint):
    net, accumulator, grad_fn = _setup(loss_reduction=loss_reduction)
    report = check_equivalence(grad_fn, _window([4, 4, 4, 4]), accumulator, counts=counts, network=net)
    assert not report.equivalent
    assert len(report.reasons) == 1 and f"is {scale} the large batch's" in report.reasons[0]
    assert hint in report.reasons[0]


def test_batch_norm_in_training_mode_is_named_and_its_statistics_restored(graph_mode):
    net = _net_with(nn.BatchNorm1d(8))
    net, accumulator, grad_fn = _setup(net)
    statistics = [p.asnumpy().copy() for p in (net[1].moving_mean, net[1].moving_variance)]
    report = check_equivalence(grad_fn, _window([4, 4, 4, 4]), accumulator, network=net)
    assert not report.equivalent and report.max_rel_diff > 1e-2
    assert report.reasons[0].startswith("BatchNorm in training mode (1): ")
    assert "convert_batchnorm" in report.reasons[0]
    assert not any("randomness" in reason for reason in report.reasons)
    for before, after in zip(statistics, (net[1].moving_mean, net[1].moving_variance)):
        assert before.tobytes() == after.asnumpy().tobytes()


def test_a_converted_batch_norm_is_named_as_converted_and_its_statistics_restored(graph_mode):
    net = _net_with(nn.BatchNorm1d(8))
    net, accumulator, grad_fn = _setup(net)
    convert_batchnorm(net, accumulator)
    state = [p.asnumpy().copy() for p in accumulator.state_parameters()] + \
        [p.asnumpy().copy() for p in (net[1].moving_mean, net[1].moving_variance)]
    report = check_equivalence(grad_fn, _window([4, 4, 4, 4]), accumulator, network=net)
    assert not report.equivalent and len(report.reasons) == 1
    assert report.reasons[0].startswith("BatchNorm in training mode (1), converted by convert_batchnorm")
    after = [p.asnumpy() for p in accumulator.state_parameters()] + \
        [p.asnumpy() for p in (net[1].moving_mean, net[1].moving_variance)]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(state, after))


def test_batch_norm_in_inference_mode_is_equivalent(graph_mode):
    net = _net_with(nn.BatchNorm1d(8))
    net.set_train(False)
    net, accumulator, grad_fn = _setup(net)
    assert check_equivalence(grad_fn, _window([4, 4, 4, 4]), accumulator, network=net).equivalent


def test_dropout_is_named_and_seen_as_randomness_even_without_the_network(graph_mode):
    net = _net_with(nn.Dropout(p=0.5))
    net, accumulator, grad_fn = _setup(net)
    report = check_equivalence(grad_fn, _window([4, 4, 4, 4]), accumulator, network=net)
    assert not report.equivalent
    assert report.reasons[0].startswith("dropout in training mode (1, rate 0.5)")
    assert report.reasons[1].startswith("randomness: two runs of the same large batch differ")
    unnamed = check_equivalence(grad_fn, _window([4, 4, 4, 4]), accumulator)
    assert len(unnamed.reasons) == 1 and unnamed.reasons[0].startswith("randomness")


def _coupled_grad_fn(net, parameters):
    def forward(x, y):
        # A batch statistic squared: the mean over the batch comes before the square.
        return (net(x).mean(axis=0) ** 2).sum()
    return ms.value_and_grad(forward, None, parameters)


def test_a_loss_that_couples_samples_is_not_equivalent(graph_mode):
    net, accumulator, _ = _setup()
    grad_fn = _coupled_grad_fn(net, accumulator.optimizer.parameters)
    report = check_equivalence(grad_fn, _window([4, 4, 4, 4]), accumulator, network=net)
    assert not report.equivalent and report.max_rel_diff > 1e-2
    assert len(report.reasons) == 1 and report.reasons[0].startswith("no factor maps the window's gradient")


def _state_bytes(net, accumulator):
    state = training_state(net, accumulator.optimizer, accumulator)
    state["accumulator.ready"] = accumulator.ready
    return {name: param.asnumpy().tobytes() for name, param in state.items()}


def _mid_window_run(check):
    """Adam on a BatchNorm net: one window applied, one micro-batch into the next, maybe a check, then the rest."""
    net = _net_with(nn.BatchNorm1d(8))
    net, accumulator, grad_fn = _setup(net, optimizer="adam", accumulate_step=2)
    step = accumulated_step(accumulator, grad_fn)
    batches = _window([4, 4, 4, 4], seed=1)
    for data, label in batches[:3]:
        step(data, label)
    before = _state_bytes(net, accumulator)
    if check:
        check_equivalence(grad_fn, _window([4, 4, 4, 4]), accumulator, network=net)
    after = _state_bytes(net, accumulator)
    step(*batches[3])
    return before, after, _state_bytes(net, accumulator)


def test_weights_optimizer_and_accumulator_state_are_bit_identical_after_a_check(graph_mode):
    before, after, trained = _mid_window_run(check=True)
    assert after == before
    # Mid-window, with Adam's moments, BatchNorm's statistics and the buffers all non-zero.
    assert int(np.frombuffer(before["accumulator.micro_step"], np.int32)[0]) == 1
    for name in ("moment1.0.weight", "moment2.0.weight", "accumulator.0.weight..3.bias", "1.moving_mean"):
        assert np.frombuffer(before[name], np.float32).any(), name
    # The compiled step goes on training the same Parameters: as if no check had run.
    assert trained == _mid_window_run(check=False)[2]


def test_bad_arguments_are_rejected_before_anything_runs():
    net, accumulator, grad_fn = _setup()
    with pytest.raises(ValueError, match="at least one micro-batch"):
        check_equivalence(grad_fn, [], accumulator)
    with pytest.raises(ValueError, match="one number per micro-batch"):
        check_equivalence(grad_fn, _window([4, 4]), accumulator, counts=[4])
    _, summing, _ = _setup(reduction="sum")
    with pytest.raises(ValueError, match="counts were given to an Accumulator with reduction='sum'"):
        check_equivalence(grad_fn, _window([4, 4]), summing, counts=[4, 4])
