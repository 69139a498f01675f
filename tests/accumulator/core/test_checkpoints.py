"""Checkpoints resume a run exactly, even mid-window, and refuse what does not fit.

By hand: windows of 3, saved after micro-step 5 (two micro-batches held in the window), restored, and run to the
end: every weight, moment and buffer equals the uninterrupted run's bit for bit.
"""
import os

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor

from accumulator import Accumulator
from accumulator.policies import LossScaling
from accumulator.core.checkpoints import CheckpointMismatchError, load_checkpoint, save_checkpoint, training_state
from tests.accumulator.helpers import grad_fn_for, make_data, make_net, make_optimizer, optimizer_state, sweep

ACCUMULATE_STEP = 3
MICRO_BATCH = 4
TOTAL_STEPS = 10


def build_run(accumulate_step=ACCUMULATE_STEP, loss_scaler=None):
    """A net, an Adam optimizer, an accumulator and its jitted micro-step."""
    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    accumulator = Accumulator(optimizer, accumulate_step, loss_scaler=loss_scaler)
    grad_fn = grad_fn_for(net, optimizer)

    @ms.jit
    def step(x, y):
        loss, grads = grad_fn(x, y)
        return accumulator(grads)

    return net, optimizer, accumulator, step


def run_steps(step, first, last):
    x, y = make_data(MICRO_BATCH * TOTAL_STEPS, seed=1)
    for index in range(first, last):
        rows = slice(index * MICRO_BATCH, (index + 1) * MICRO_BATCH)
        step(Tensor(x[rows]), Tensor(y[rows]))


def full_state(optimizer, accumulator):
    state = optimizer_state(optimizer)
    state.update({p.name: p.asnumpy().copy() for p in accumulator.state_parameters()})
    return state


def assert_identical(actual, expected):
    assert actual.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


# The fast path restores in place mid-window; CI also at a window boundary, and once into a fresh run as a new process
# builds it (its own objects and compile, one micro-step on so nothing matches by chance): the file alone restores
# it. In a new process too: tests/tools/test_train_mnist_signals.py's printed command resumes the run.
@pytest.mark.parametrize("saved_at, fresh", sweep([(5, False), (6, False), (5, True)]))
def test_resume_continues_bit_identically(tmp_path, saved_at, fresh):
    # saved_at=5 is mid-window (5 % 3 != 0), 6 at a window boundary.
    path = str(tmp_path / "run.ckpt")
    net, optimizer, accumulator, step = build_run()
    run_steps(step, 0, saved_at)
    save_checkpoint(path, net, optimizer, accumulator, extra={"next_step": saved_at})
    assert int(accumulator.micro_step) == saved_at % ACCUMULATE_STEP
    run_steps(step, saved_at, TOTAL_STEPS)
    uninterrupted = full_state(optimizer, accumulator)

    if fresh:
        net, optimizer, accumulator, step = build_run()
        run_steps(step, 0, 1)
    # Otherwise the same run, after the step has compiled: restore in place.
    extra = load_checkpoint(path, net, optimizer, accumulator)
    assert extra["next_step"] == saved_at
    assert int(accumulator.micro_step) == saved_at % ACCUMULATE_STEP
    run_steps(step, saved_at, TOTAL_STEPS)
    assert_identical(full_state(optimizer, accumulator), uninterrupted)


def test_checkpoint_holds_network_optimizer_and_accumulator_state(tmp_path):
    net, optimizer, accumulator, step = build_run(loss_scaler=ms.amp.DynamicLossScaler(2.0 ** 8, 2, 10))
    names = set(training_state(net, optimizer, accumulator, accumulator.find(LossScaling).scaler))
    assert {"0.weight", "moment1.0.weight", "global_step", accumulator.buffers[0].name,
            "accumulator.micro_step", "accumulator.accumulate_step", "loss_scaler.scale_value"} <= names
    assert accumulator.buffers[0].name.startswith("accumulator.0.weight")


def test_mismatched_checkpoint_raises_and_changes_nothing(tmp_path):
    path = str(tmp_path / "run.ckpt")
    net, optimizer, accumulator, step = build_run(accumulate_step=3)
    run_steps(step, 0, 4)
    save_checkpoint(path, net, optimizer, accumulator)

    # Fresh, uncompiled: a partial load would show in its initial weights or its empty buffers.
    other_net, other_optimizer, other_accumulator, _ = build_run(accumulate_step=2)
    before = full_state(other_optimizer, other_accumulator)
    with pytest.raises(CheckpointMismatchError, match="accumulate_step is 3.*gives 2"):
        load_checkpoint(path, other_net, other_optimizer, other_accumulator)
    assert_identical(full_state(other_optimizer, other_accumulator), before)

    deeper = ms.nn.SequentialCell(ms.nn.Dense(6, 16), ms.nn.ReLU(), ms.nn.Dense(16, 3), ms.nn.ReLU(),
                                  ms.nn.Dense(3, 3))
    with pytest.raises(CheckpointMismatchError, match=r"0.weight has shape \(8, 6\), expected \(16, 6\).*4.weight is missing"):
        load_checkpoint(path, deeper, make_optimizer("sgd", deeper.trainable_params()))

    half = make_net()
    half.to_float(ms.float16)
    for param in half.trainable_params():
        param.set_dtype(ms.float16)
    with pytest.raises(CheckpointMismatchError, match="0.weight has dtype Float32, expected Float16"):
        load_checkpoint(path, half, make_optimizer("sgd", half.trainable_params()))


def test_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = str(tmp_path / "run.ckpt")
    net, optimizer, accumulator, step = build_run()
    save_checkpoint(path, net, optimizer, accumulator, extra={"next_step": 0})
    original = open(path, "rb").read()

    def crash(save_obj, ckpt_file_name, **kwargs):
        with open(ckpt_file_name, "wb") as half_written:
            half_written.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(ms, "save_checkpoint", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, net, optimizer, accumulator, extra={"next_step": 1})
    assert open(path, "rb").read() == original
    assert os.listdir(tmp_path) == ["run.ckpt"]


# A checkpoint written before the buckets (a buffer per parameter) loads into them and resumes exactly:
# tests/accumulator/_internal/test_buckets.py, into a packed bucket and one of its own. Here what it lacks is named.
def test_an_old_checkpoint_missing_a_parameters_buffer_names_the_bucket(tmp_path):
    net, optimizer, accumulator, _ = build_run()
    state = training_state(net, optimizer, accumulator)
    bucket = accumulator.buffers[0].name
    entries = [{"name": name, "data": param} for name, param in state.items() if name != bucket]
    first = optimizer.parameters[accumulator.buckets.groups[0][0]]
    entries.append({"name": f"accumulator.{first.name}", "data": first})  # the others' are missing
    path = str(tmp_path / "old.ckpt")
    ms.save_checkpoint(entries, path)
    with pytest.raises(CheckpointMismatchError, match=f"{bucket} is missing"):
        load_checkpoint(path, net, optimizer, accumulator)
