"""The Accumulator equals the large batch, step for step: first two cases checkable by hand, then the comparisons.

By hand: gradients 1, 2, 3, 4 in a window of 4 move a weight of 0 at learning rate 1 by their mean, to -2.5;
summed gradients 2 and 12 with counts 1 and 3 move it by (2 + 12) / (1 + 3) = 3.5, to -3.5.
"""
import re
import warnings

import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

from accumulator import Accumulator, make_window_step
from tests.accumulator.helpers import (accumulated_step, assert_states_close, DoublingReducer, grad_fn_for,
                                       large_batch_step, make_data, make_net, make_optimizer, optimizer_state,
                                       reference_state, split, sweep)


class OneWeight(nn.Cell):
    """A network that is one Parameter ``w``, zero: the tests hand the accumulator its gradients themselves."""

    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(np.zeros(1, np.float32)), name="w")


def one_weight_sgd(accumulate_step):
    """``(w, jitted accumulator(grads, count=None))`` for a OneWeight under SGD at learning rate 1."""
    net = OneWeight()
    accumulator = Accumulator(nn.SGD(net.trainable_params(), learning_rate=1.0), accumulate_step)

    @ms.jit
    def step(grads, count=None):
        return accumulator(grads, count)

    return net.w, step


def gradient(value):
    """``value`` as the gradient tuple of a OneWeight, mutable so that one compiled step takes every value."""
    return ms.mutable((Tensor([value], ms.float32),))


def test_gradients_1_2_3_4_in_a_window_of_4_move_the_weight_by_their_mean_2_5():
    w, step = one_weight_sgd(accumulate_step=4)
    applied = [bool(step(gradient(g))) for g in (1.0, 2.0, 3.0)]
    assert applied == [False] * 3 and w.asnumpy().tolist() == [0.0]   # nothing moves inside the window
    assert bool(step(gradient(4.0)))
    assert w.asnumpy().tolist() == [-2.5]                               # 0 - 1 * (1 + 2 + 3 + 4) / 4


def test_counts_1_and_3_weigh_summed_gradients_2_and_12_into_their_mean_3_5():
    # Summed losses: one sample's gradient 2, then three samples' gradients summing to 12.
    w, step = one_weight_sgd(accumulate_step=2)
    assert not bool(step(gradient(2.0), Tensor(1.0, ms.float32)))
    assert bool(step(gradient(12.0), Tensor(3.0, ms.float32)))
    assert w.asnumpy().tolist() == [-3.5]                               # 0 - 1 * (2 + 12) / (1 + 3)


def test_the_old_tally_adds_kept_share_to_its_tally_and_warns_once(monkeypatch):
    from accumulator._internal import deprecation
    monkeypatch.setattr(deprecation, "warned", set())
    accumulator = Accumulator(nn.SGD([Parameter(Tensor([0.0]), name="w")], 1.0), 2)
    tally = (Tensor(2, ms.int32), Tensor(7.0))
    with pytest.warns(DeprecationWarning, match="Accumulator.tally is deprecated .*Accumulator.kept_share"):
        kept = accumulator.tally(tally, Tensor(5.0), Tensor(True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dropped = accumulator.tally(tally, Tensor(5.0), Tensor(False))
    assert [float(x) for x in kept + dropped] == [3.0, 12.0, 2.0, 7.0]      # 2 + 1 steps, 7 + 5; a dropped one adds 0


# N is a state Parameter, not a constant of the graph: every N compiles the same step. 4 holds several micro-steps
# back per window, 1 closes every one; a third N would run the same graph on other values. The optimizer sees the
# window's gradient whatever N made it, so each optimizer runs once: the fast path each N, with a stateless and a
# stateful optimizer, CI the other two. Without a gate (skip_nonfinite=False) the call closes and applies in one
# branch, with it in two: the fast path runs each once.
@pytest.mark.parametrize("accumulate_step, optimizer_name, skip_nonfinite", sweep(
    [(4, "sgd", False), (1, "adam", True), (4, "momentum", True), (1, "adamw", True)], fast=2))
def test_windows_equal_large_batch_steps(graph_mode, optimizer_name, accumulate_step, skip_nonfinite):
    x, y = make_data(24)
    windows = [(x[:12], y[:12]), (x[12:], y[12:])]
    expected = reference_state(optimizer_name, windows)

    net = make_net()
    optimizer = make_optimizer(optimizer_name, net.trainable_params())
    accumulator = Accumulator(optimizer, accumulate_step, skip_nonfinite=skip_nonfinite)
    step = accumulated_step(accumulator, grad_fn_for(net, optimizer))
    micro = 12 // accumulate_step
    updates = []
    before = optimizer_state(optimizer)
    for window_x, window_y in windows:
        for data, label in split(window_x, window_y, [micro] * accumulate_step):
            updates.append(bool(step(data, label)[1]))
            if len(updates) < accumulate_step:
                # Inside the first window: held in the buffers, no weight, moment or step of the optimizer moved.
                assert_states_close(optimizer_state(optimizer), before, rtol=0, atol=0)
                assert int(accumulator.micro_step) == len(updates)
                assert any(b.asnumpy().any() for b in accumulator.grad_buffers)
    # Every Parameter the optimizer holds, its step counter too, as after the large batch's two steps.
    assert_states_close(optimizer_state(optimizer), expected)
    assert updates == ([False] * (accumulate_step - 1) + [True]) * 2
    assert int(accumulator.update_count) == 2 and int(accumulator.micro_step) == 0
    assert all(not b.asnumpy().any() for b in accumulator.grad_buffers)


# Jitted is how every other test here runs the step: the fast path runs it op by op, CI both.
@pytest.mark.parametrize("use_jit", sweep([False, True]))
def test_with_and_without_jit(graph_mode, use_jit):
    x, y = make_data(8)
    expected = reference_state("momentum", [(x, y)])
    net = make_net()
    optimizer = make_optimizer("momentum", net.trainable_params())
    accumulator = Accumulator(optimizer, 2)
    step = accumulated_step(accumulator, grad_fn_for(net, optimizer), use_jit=use_jit)
    for data, label in split(x, y, [4, 4]):
        step(data, label)
    assert_states_close(optimizer_state(optimizer), expected)


@pytest.mark.parametrize("skip_nonfinite", [True, False])
def test_the_in_graph_call_compiles_without_a_warning(graph_mode, capfd, skip_nonfinite):
    # MindSpore warns "Some side effect nodes were eliminated by mistake" when a close's result is left unread.
    x, y = make_data(8)
    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params())
    accumulator = Accumulator(optimizer, 2, skip_nonfinite=skip_nonfinite)
    step = accumulated_step(accumulator, grad_fn_for(net, optimizer))
    for data, label in split(x, y, [4, 4]):
        step(data, label)
    assert "eliminated by mistake" not in capfd.readouterr().err


@pytest.mark.parametrize("name", sweep(["sgd", "adam"]))
def test_the_window_step_hands_the_reduced_window_to_the_optimizer(name):
    # flush() scales the reduced window as it hands it over, with no write-back.
    x, y = make_data(16)
    expected = reference_state(name, [(x, y)])
    net = make_net()
    optimizer = make_optimizer(name, net.trainable_params())
    reducer = DoublingReducer()
    accumulator = Accumulator(optimizer, 3, grad_reducer=reducer)
    window_step = make_window_step(grad_fn_for(net, optimizer, "sum"), accumulator)
    loss_sum, updated = window_step(split(x, y, [5, 3, 8]), counts=[5, 3, 8])
    assert bool(updated) and float(reducer.seen_weight) == 16.0
    assert_states_close(optimizer_state(optimizer), expected)
    assert all(not b.asnumpy().any() for b in accumulator.grad_buffers)


def test_uneven_micro_batches_without_counts_are_a_mean_of_means():
    # The mistake count weighting exists to avoid: this must NOT match.
    x, y = make_data(16)
    expected = reference_state("sgd", [(x, y)])
    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params())
    # Op by op: three shapes would compile three graphs, and a graph weighs the micro-batches alike.
    step = accumulated_step(Accumulator(optimizer, 3), grad_fn_for(net, optimizer), use_jit=False)
    for data, label in split(x, y, [5, 3, 8]):
        step(data, label)
    actual = optimizer_state(optimizer)
    assert not all(np.allclose(actual[k], expected[k], rtol=1e-5, atol=1e-6) for k in expected)


def test_sum_reduction_applies_the_raw_sum(graph_mode):
    x, y = make_data(8)
    expected = reference_state("sgd", [(x, y)], learning_rate=0.01, reduction="sum")
    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params(), 0.01)
    accumulator = Accumulator(optimizer, 2, reduction="sum")
    step = accumulated_step(accumulator, grad_fn_for(net, optimizer, "sum"))
    for data, label in split(x, y, [4, 4]):
        step(data, label)
    assert_states_close(optimizer_state(optimizer), expected)


@pytest.mark.parametrize("with_count", sweep([True, False]))
def test_flush_applies_a_partial_window_like_a_step_on_its_data(graph_mode, with_count):
    sizes = [4, 3] if with_count else [4, 4]
    x, y = make_data(sum(sizes))
    expected = reference_state("momentum", [(x, y)])
    net = make_net()
    optimizer = make_optimizer("momentum", net.trainable_params())
    accumulator = Accumulator(optimizer, 4)
    grad_fn = grad_fn_for(net, optimizer, "sum" if with_count else "mean")
    step = accumulated_step(accumulator, grad_fn, with_count=with_count)
    flush = ms.jit(accumulator.flush)
    for data, label in split(x, y, sizes):
        if with_count:
            step(data, label, Tensor(len(data), ms.int32))
        else:
            step(data, label)
    assert int(accumulator.update_count) == 0
    assert bool(flush())
    assert_states_close(optimizer_state(optimizer), expected)
    assert int(accumulator.update_count) == 1 and int(accumulator.micro_step) == 0


# Every option at once (each one's state must survive the empty flush), and none.
EVERY_FLUSH_OPTION = {"clip_norm": 0.5, "spike_factor": 3.0, "spike_warmup": 0, "skip_nonfinite": "micro_batch",
                      "track_noise": True, "micro_batch_size": 4, "loss_scaler": "dynamic"}


@pytest.mark.parametrize("options", sweep([EVERY_FLUSH_OPTION, {}]), ids=str)
def test_flush_on_an_empty_window_does_nothing(options):
    # After a window has applied, so running means and noise averages hold values an empty flush could disturb.
    if options.get("loss_scaler") == "dynamic":
        options = {**options, "loss_scaler": ms.amp.DynamicLossScaler(1024.0, 2, 1)}
    x, y = make_data(8)
    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    accumulator = Accumulator(optimizer, 2, **options)
    step = accumulated_step(accumulator, grad_fn_for(net, optimizer))
    for data, label in split(x, y, [4, 4]):
        step(data, label)
    assert int(accumulator.update_count) == 1
    state = optimizer.parameters + tuple(accumulator.state_parameters())
    if "loss_scaler" in options:
        state += (options["loss_scaler"].scale_value, options["loss_scaler"].counter)
    before = [p.asnumpy().copy() for p in state]
    flush = ms.jit(accumulator.flush)
    assert not bool(flush()) and not bool(flush())
    for p, value in zip(state, before):
        np.testing.assert_array_equal(p.asnumpy(), value, err_msg=p.name)


def test_learning_rate_list_advances_per_update_not_per_micro_step():
    x, y = make_data(24)
    learning_rates = [0.1, 0.02, 0.005]
    windows = [(x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]) for i in range(3)]
    net = make_net()
    optimizer = nn.SGD(net.trainable_params(), learning_rates)
    step = large_batch_step(net, optimizer)
    for data, label in windows:
        step(Tensor(data), Tensor(label))
    expected = optimizer_state(optimizer)

    net = make_net()
    optimizer = nn.SGD(net.trainable_params(), learning_rates)
    step = accumulated_step(Accumulator(optimizer, 2), grad_fn_for(net, optimizer))
    for data, label in windows:
        for micro in split(data, label, [4, 4]):
            step(*micro)
    assert_states_close(optimizer_state(optimizer), expected)
    assert int(optimizer.global_step.asnumpy()) == 3


def test_accumulator_holds_the_parameters_bytes_in_one_bucket():
    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    accumulator = Accumulator(optimizer, 2)
    assert len(accumulator.buffers) == 1 < len(optimizer.parameters)
    buffer_bytes = sum(b.asnumpy().nbytes for b in accumulator.grad_buffers)
    param_bytes = sum(p.asnumpy().nbytes for p in optimizer.parameters)
    state_bytes = sum(p.asnumpy().nbytes for p in accumulator.state_parameters())
    assert buffer_bytes == param_bytes
    assert state_bytes - buffer_bytes < 64


@pytest.mark.parametrize("accumulate_step", [0, -1, True, 2.5, "2", None])
def test_bad_accumulate_step_is_rejected(accumulate_step):
    optimizer = make_optimizer("sgd", make_net().trainable_params())
    message = f"accumulate_step must be a positive int, got {re.escape(repr(accumulate_step))}"
    with pytest.raises(ValueError, match=message):
        Accumulator(optimizer, accumulate_step)


def test_bad_optimizer_and_reduction_are_rejected():
    net = make_net()
    with pytest.raises(TypeError, match="optimizer must be a mindspore.nn.Optimizer or .*, got list"):
        Accumulator(net.trainable_params(), 2)
    optimizer = make_optimizer("sgd", net.trainable_params())
    with pytest.raises(ValueError, match="reduction.*'avg'"):
        Accumulator(optimizer, 2, reduction="avg")


def test_mismatched_grads_are_rejected_before_any_state_changes(mode):
    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params())
    accumulator = Accumulator(optimizer, 2)
    grads = tuple(ops.ones_like(p) for p in optimizer.parameters)
    with pytest.raises(ValueError, match="grads holds 3 gradients but the optimizer has 4 parameters"):
        accumulator(grads[:3])
    # value_and_grad(forward) without weights: the gradient of the first input, one Tensor.
    one_tensor = Tensor(np.ones((8, 6), np.float32))
    single = (r"grads must be a tuple with one gradient per optimizer parameter \(4\), got one Tensor of shape "
              r"\[8, 6\]: take them with ms.value_and_grad\(forward, None, optimizer.parameters\)")
    with pytest.raises(ValueError, match=single):
        accumulator(one_tensor)
    with pytest.raises(ValueError, match=single):
        ms.jit(accumulator.__call__)(one_tensor)
    wrong_shape = grads[:1] + (ops.ones((9,), ms.float32),) + grads[2:]
    with pytest.raises(ValueError, match=r"grads\[1\] has shape \[9\], expected \[8\]"):
        ms.jit(accumulator.__call__)(wrong_shape)
    assert int(accumulator.micro_step) == 0
    assert all(np.all(b.asnumpy() == 0) for b in accumulator.grad_buffers)


def test_count_with_sum_reduction_is_rejected():
    optimizer = make_optimizer("sgd", make_net().trainable_params())
    accumulator = Accumulator(optimizer, 2, reduction="sum")
    grads = tuple(ops.ones_like(p) for p in optimizer.parameters)
    with pytest.raises(ValueError, match="counts were given to an Accumulator with reduction='sum'"):
        accumulator(grads, Tensor(3, ms.int32))
    assert int(accumulator.micro_step) == 0


@ms.jit_class
class WindowLog:
    """A member that sums a per-window tensor across the window's reducer and records what it saw."""

    def __init__(self):
        self.local = Parameter(Tensor(3.0, ms.float32), name="log.local", requires_grad=False)
        self.reduced = Parameter(Tensor(0.0, ms.float32), name="log.reduced", requires_grad=False)
        self.applied = Parameter(Tensor(0, ms.int32), name="log.applied", requires_grad=False)

    def state_parameters(self):
        return [self.local, self.reduced, self.applied]

    def window_tensors(self):
        return (self.local,)

    def close_window(self, tensors, summary):
        ops.assign(self.reduced, tensors[0])
        ops.assign_add(self.applied, summary["applied"].astype(ms.int32))


def test_attached_members_ride_the_reducer_and_hear_of_every_window(graph_mode):
    # Doubled sums over a doubled weight are the same mean: the state equals the large batch's only if the
    # window's weight went through the reducer with the gradients and the member's tensors.
    x, y = make_data(16)
    expected = reference_state("sgd", [(x, y)])
    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params())
    reducer = DoublingReducer()
    accumulator = Accumulator(optimizer, 3, grad_reducer=reducer)
    log = WindowLog()
    accumulator.attach(log)
    step = accumulated_step(accumulator, grad_fn_for(net, optimizer, "sum"), with_count=True)
    for data, label in split(x, y, [6, 4, 6]):   # uneven counts in two shapes: two compiles
        step(data, label, Tensor(len(data), ms.int32))
    assert_states_close(optimizer_state(optimizer), expected)
    assert float(reducer.seen_weight) == 16.0
    assert (float(log.reduced), int(log.applied)) == (6.0, 1)
    assert [p.name for p in accumulator.state_parameters()][-3:] == ["log.local", "log.reduced", "log.applied"]


def float32_ones_and_zeros(monkeypatch):
    """Replaces ops.ones/ops.zeros as mindnlp 0.3 does at import: ``(*size, dtype=None)``, float32 whatever is asked."""
    for name in ("ones", "zeros"):
        def patched(*size, dtype=None, original=getattr(ops, name)):
            shape = size[0] if size and isinstance(size[0], (tuple, list)) else tuple(
                s for s in size if isinstance(s, int))
            return original(shape, dtype or ms.float32)
        monkeypatch.setattr(ops, name, patched)


def window_counts_run(x, y, sizes):
    """Per micro-step with counts, then the same window by make_window_step: the optimizer's state after each."""
    states = []
    for window_step in (False, True):
        net = make_net()
        optimizer = make_optimizer("momentum", net.trainable_params())
        accumulator = Accumulator(optimizer, len(sizes))
        grad_fn = grad_fn_for(net, optimizer, "sum")
        if window_step:
            window = [tuple(batch) for batch in split(x, y, sizes)]
            make_window_step(grad_fn, accumulator)(window, counts=sizes)
        else:
            step = accumulated_step(accumulator, grad_fn, with_count=True)
            for data, label in split(x, y, sizes):
                step(data, label, Tensor(len(data), ms.int32))
        assert int(accumulator.update_count) == 1
        states.append(optimizer_state(optimizer))
    return states


@pytest.mark.slow  # compiles both drivers' graphs anew under the patch
def test_a_library_patching_ops_ones_and_zeros_changes_nothing(monkeypatch):
    # Against the large batch, as unpatched: the unpatched drivers equal it in test_attached_members_ride_the_reducer
    # and test_the_window_step_hands_the_reduced_window_to_the_optimizer, so no unpatched run of its own.
    sizes = [3, 3, 2]
    x, y = make_data(sum(sizes))
    expected = reference_state("momentum", [(x, y)])
    with monkeypatch.context() as patch:
        float32_ones_and_zeros(patch)
        assert ops.ones((), ms.int32).dtype == ms.float32   # the patch bites
        patched = window_counts_run(x, y, sizes)
    assert ops.ones((), ms.int32).dtype == ms.int32
    for actual in patched:
        assert_states_close(actual, expected)
