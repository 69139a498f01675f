"""Accumulator.step(): the branch-free micro-step (accumulate) with the window applied from the host.

By hand: micro-batches of 6, 4 and 4 samples with their counts in a window of 4: ``step()`` says False three times,
``step(flush=True)`` True, and the state equals one SGD step on the 14 samples together.
"""
import os

import numpy as np
import mindspore as ms
from mindspore import Tensor

from accumulator import Accumulator
from accumulator.core.checkpoints import load_checkpoint, save_checkpoint
from tests.accumulator.helpers import (accumulated_step, assert_states_close, grad_fn_for, make_data, make_net,
                                       make_optimizer, optimizer_state, reference_state, split)


def accumulating(accumulator, grad_fn, with_count=False):
    """The README's recommended micro-step, jitted: ``accumulate`` in the graph, nothing applied."""
    if with_count:
        @ms.jit
        def micro_step(x, y, count):
            loss, grads = grad_fn(x, y)
            accumulator.accumulate(grads, count)
            return loss
    else:
        @ms.jit
        def micro_step(x, y):
            loss, grads = grad_fn(x, y)
            accumulator.accumulate(grads)
            return loss
    return micro_step


def host_applied(accumulator, grad_fn, with_count=False):
    """The README's recommended step: ``accumulating``'s micro-step, then ``step()`` on the host."""
    micro_step = accumulating(accumulator, grad_fn, with_count)

    def step(*inputs):
        micro_step(*inputs)
        return accumulator.step()
    return step

def sgd_run(accumulate_step):
    """make_net under SGD, an Accumulator of ``accumulate_step`` and its recommended step: ``(net, optimizer, accumulator, step)``."""
    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params())
    accumulator = Accumulator(optimizer, accumulate_step)
    return net, optimizer, accumulator, host_applied(accumulator, grad_fn_for(net, optimizer))

def test_the_host_step_compiles_ahead_then_equals_the_large_batch_and_applies_every_n_micro_steps():
    x, y = make_data(48)
    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    accumulator = Accumulator(optimizer, 4)
    before = optimizer_state(optimizer)
    accumulator.host.compile()   # changes nothing
    assert_states_close(optimizer_state(optimizer), before, rtol=0, atol=0)
    assert int(accumulator.micro_step) == 0 and int(accumulator.update_count) == 0
    step = host_applied(accumulator, grad_fn_for(net, optimizer))
    updates = [step(*batch) for batch in split(x, y, [4] * 12)]
    assert updates == [False, False, False, True] * 3
    assert int(accumulator.update_count) == 3 and int(accumulator.micro_step) == 0
    expected = reference_state("adam", [(x[i:i + 16], y[i:i + 16]) for i in (0, 16, 32)])
    assert_states_close(optimizer_state(optimizer), expected)


def uneven_micro_batches(accumulate_step):
    """Micro-batches of 6, 4 and 4 samples, with their counts, through the recommended step and plain SGD.

    Uneven counts in two shapes: two compiles.

    Returns the optimizer, the accumulator, what each ``step()`` returned and the data.
    """
    x, y = make_data(14)
    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params())
    accumulator = Accumulator(optimizer, accumulate_step)
    step = host_applied(accumulator, grad_fn_for(net, optimizer, "sum"), with_count=True)
    updates = [step(xb, yb, Tensor(float(xb.shape[0]), ms.float32)) for xb, yb in split(x, y, [6, 4, 4])]
    return optimizer, accumulator, updates, (x, y)


def test_a_nonfinite_window_is_skipped_as_by_the_in_graph_call():
    x, y = make_data(8)
    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params())
    before = optimizer_state(optimizer)
    accumulator = Accumulator(optimizer, 2)
    step = host_applied(accumulator, grad_fn_for(net, optimizer))
    bad = x.copy()
    bad[0, 0] = np.nan
    assert step(Tensor(bad[:4]), Tensor(y[:4])) is False
    assert step(Tensor(x[4:]), Tensor(y[4:])) is False  # the window closed, the optimizer did not run
    assert int(accumulator.skipped_windows) == 1 and int(accumulator.micro_step) == 0
    assert_states_close(optimizer_state(optimizer), before)


def test_noise_tracking_samples_the_windows_last_micro_batch_as_the_in_graph_call_does():
    x, y = make_data(32)
    records = []
    for drive in ("call", "step"):
        net = make_net()
        optimizer = make_optimizer("sgd", net.trainable_params())
        accumulator = Accumulator(optimizer, 4, track_noise=True, micro_batch_size=4)
        grad_fn = grad_fn_for(net, optimizer)
        step = accumulated_step(accumulator, grad_fn) if drive == "call" else host_applied(accumulator, grad_fn)
        for batch in split(x, y, [4] * 8):
            step(*batch)
        records.append([p.asnumpy().copy() for p in accumulator.noise.state_parameters()])
        assert int(accumulator.update_count) == 2
    for by_call, by_step in zip(*records):
        np.testing.assert_allclose(by_step, by_call, rtol=1e-5, atol=1e-7)
    assert any(np.any(value != 0) for value in records[1])


def test_a_run_restored_mid_window_applies_at_the_same_micro_step(tmp_path):
    x, y = make_data(32)
    batches = split(x, y, [4] * 8)
    path = os.path.join(tmp_path, "mid.ckpt")
    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    accumulator = Accumulator(optimizer, 4)
    step = host_applied(accumulator, grad_fn_for(net, optimizer))
    for batch in batches[:6]:
        step(*batch)
    save_checkpoint(path, net, optimizer, accumulator)
    for batch in batches[6:]:
        step(*batch)
    expected = optimizer_state(optimizer)

    net = make_net(seed=1)
    optimizer = make_optimizer("adam", net.trainable_params())
    accumulator = Accumulator(optimizer, 4)
    step = host_applied(accumulator, grad_fn_for(net, optimizer))
    step(*batches[0])  # this process's step has run before the load: its position must not matter
    load_checkpoint(path, net, optimizer, accumulator)
    assert [step(*batch) for batch in batches[6:]] == [False, True]
    assert_states_close(optimizer_state(optimizer), expected)


def test_a_schedule_changes_n_between_windows():
    x, y = make_data(24)
    net = make_net()
    optimizer = make_optimizer("sgd", net.trainable_params())
    accumulator = Accumulator(optimizer, {0: 2, 1: 4})
    step = host_applied(accumulator, grad_fn_for(net, optimizer))
    updates = [step(*batch) for batch in split(x, y, [4] * 6)]
    assert updates == [False, True, False, False, False, True]
    assert_states_close(optimizer_state(optimizer), reference_state("sgd", [(x[:8], y[:8]), (x[8:], y[8:])]))


def test_step_with_flush_applies_a_partial_window_of_uneven_counts_weighing_each_sample_once():
    optimizer, accumulator, updates, data = uneven_micro_batches(4)
    assert updates == [False, False, False]    # 3 of 4 micro-batches: not full
    assert accumulator.step(flush=True) is True
    assert accumulator.step(flush=True) is False    # an empty window: nothing to apply, nothing run
    assert int(accumulator.update_count) == 1 and int(accumulator.micro_step) == 0
    assert_states_close(optimizer_state(optimizer), reference_state("sgd", [data]))


def test_step_reads_the_device_once_a_window_and_never_on_a_micro_step_that_applies_nothing(monkeypatch):
    x, y = make_data(48)
    _, _, _, step = sgd_run({0: 2, 1: 4})  # N read back from the device after each window
    batches = split(x, y, [4] * 12)
    assert [step(*batch) for batch in batches[:2]] == [False, True]  # compiled: from here on, count the reads
    reads = []
    for name in ("asnumpy", "__int__", "__bool__", "__float__", "item"):
        original = getattr(Tensor, name)
        monkeypatch.setattr(Tensor, name, lambda self, *args, _original=original, _name=name, **kwargs: (
            reads.append(_name), _original(self, *args, **kwargs))[1])
    per_micro_step = []
    for batch in batches[2:]:
        before = len(reads)
        per_micro_step.append((step(*batch), len(reads) - before))
    assert per_micro_step == [(False, 0), (False, 0), (False, 0), (True, 1)] * 2 + [(False, 0), (False, 0)]


def test_step_with_flush_applies_a_window_the_host_did_not_count():
    # An epoch's short last micro-batch, added by the in-graph call, op by op: step() did not see it.
    x, y = make_data(12)
    net, optimizer, accumulator, step = sgd_run(2)
    assert [step(*batch) for batch in split(x, y, [4, 4])] == [False, True]
    accumulated_step(accumulator, grad_fn_for(net, optimizer), use_jit=False)(Tensor(x[8:]), Tensor(y[8:]))
    assert accumulator.step(flush=True) is True
    assert int(accumulator.update_count) == 2 and int(accumulator.micro_step) == 0
    assert_states_close(optimizer_state(optimizer), reference_state("sgd", [(x[:8], y[:8]), (x[8:], y[8:])]))
    assert [step(*batch) for batch in split(x[:8], y[:8], [4, 4])] == [False, True]  # counting from 0 again


def test_a_window_that_holds_more_than_step_counted_is_applied_whole_and_said(recwarn):
    # step() once per window of 2 accumulate() calls: it counts 1 per window, so the window it closes holds 4.
    x, y = make_data(16)
    net, optimizer, accumulator, _ = sgd_run(2)
    micro_step = accumulating(accumulator, grad_fn_for(net, optimizer))

    updates = []
    for pair in (split(x[:8], y[:8], [4, 4]), split(x[8:], y[8:], [4, 4])):
        for batch in pair:
            micro_step(*batch)
        updates.append(accumulator.step())
    assert updates == [False, True]
    said = [str(w.message) for w in recwarn if str(w.message).startswith("step() applied a window")]
    assert said == ["step() applied a window of 4 micro-batches where it counted 2: call it once after each "
                    "accumulate(), and host.sync_position() after changing the state another way"]
    # Nothing lost: the update is the mean over all four micro-batches.
    assert_states_close(optimizer_state(optimizer), reference_state("sgd", [(x, y)]))
