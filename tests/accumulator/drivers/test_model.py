"""Model.train with AccumulationTrainCell equals the hand-written jitted loop and, with token counts, the large batch.

By hand: ``AccumulationTrainCell(loss, accumulator, counts=True)`` with an Accumulator of ``reduction='sum'`` is
refused when the cell is made: counts divide a sum by the samples, which a summing Accumulator never does.
"""
import os

import numpy as np
import pytest
import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn, ops
from mindspore.train import Callback, CheckpointConfig, Model, ModelCheckpoint

from accumulator import Accumulator, load_checkpoint
from accumulator.drivers.model import AccumulationTrainCell, FlushAtEpochEnd
from tests.accumulator.helpers import (SummedTokenLoss, TokenNet, assert_states_close, grad_fn_for, make_data, make_net,
                                       make_optimizer, optimizer_state, split, token_large_batch_state, token_windows)

EPOCHS = 2
MICRO_BATCH = 4
SAMPLES = 20   # 5 micro-batches: two full windows of 2 and a partial one per epoch


class RecordLosses(Callback):
    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_step_end(self, run_context):
        self.losses.append(float(run_context.original_args().net_outputs.asnumpy()))


def hand_written_run(x, y):
    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    accumulator = Accumulator(optimizer, 2)
    grad_fn = grad_fn_for(net, optimizer)

    @ms.jit
    def step(data, label):
        loss, grads = grad_fn(data, label)
        accumulator(grads)
        return loss

    flush = ms.jit(accumulator.flush)
    losses = []
    for _ in range(EPOCHS):
        for data, label in split(x, y, [MICRO_BATCH] * (SAMPLES // MICRO_BATCH)):
            losses.append(float(step(data, label).asnumpy()))
        flush()
    return optimizer_state(optimizer), losses


def model_train_setup(x, y, optimizer_name):
    """Optimizer, accumulator (N=2), training cell and batched dataset, from make_net's weights."""
    net = make_net()
    optimizer = make_optimizer(optimizer_name, net.trainable_params())
    accumulator = Accumulator(optimizer, 2)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    cell = AccumulationTrainCell(nn.WithLossCell(net, loss_fn), accumulator)
    dataset = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(MICRO_BATCH)
    return optimizer, accumulator, cell, dataset


def test_model_train_equals_the_hand_written_loop(tmp_path):
    x, y = make_data(SAMPLES)
    expected, expected_losses = hand_written_run(x, y)

    optimizer, accumulator, cell, dataset = model_train_setup(x, y, "adam")
    recorder = RecordLosses()
    saver = ModelCheckpoint("run", str(tmp_path), CheckpointConfig(save_checkpoint_steps=SAMPLES // MICRO_BATCH))
    Model(cell).train(EPOCHS, dataset, callbacks=[recorder, FlushAtEpochEnd(cell), saver],
                      dataset_sink_mode=False)

    assert_states_close(optimizer_state(optimizer), expected)
    assert int(accumulator.update_count) == 3 * EPOCHS
    np.testing.assert_allclose(recorder.losses, expected_losses, rtol=1e-5)

    # ModelCheckpoint's file carries the accumulator, and load_checkpoint reads it.
    checkpoints = sorted(name for name in os.listdir(tmp_path) if name.endswith(".ckpt"))
    fresh_net = make_net(seed=1)
    fresh_optimizer = make_optimizer("adam", fresh_net.trainable_params())
    fresh_accumulator = Accumulator(fresh_optimizer, 2)
    load_checkpoint(str(tmp_path / checkpoints[-1]), fresh_net, fresh_optimizer, fresh_accumulator)
    assert "accumulator.micro_step" in ms.load_checkpoint(str(tmp_path / checkpoints[-1]))
    # The last save came at the epoch's last step, with its partial window applied.
    assert (int(fresh_accumulator.update_count), int(fresh_accumulator.micro_step)) == (3 * EPOCHS, 0)


def model_train_run(x, y, checkpoint_dir=None, resume_from=None):
    """Model.train for 3 epochs, saving every step into ``checkpoint_dir``, or resuming from a file it wrote."""
    optimizer, accumulator, cell, dataset = model_train_setup(x, y, "momentum")
    callbacks = [FlushAtEpochEnd(cell)]
    if checkpoint_dir:
        # The default CheckpointConfig: a file every step, mid-window ones included.
        callbacks.append(ModelCheckpoint("run", checkpoint_dir, CheckpointConfig(keep_checkpoint_max=100)))
    initial_epoch = 0
    if resume_from:
        load_checkpoint(resume_from, cell, optimizer, accumulator)
        epoch, step = (int(v) for v in os.path.basename(resume_from)[len("run-"):-len(".ckpt")].split("_"))
        # A file from the middle of an epoch resumes inside it, at the next step.
        initial_epoch = epoch if step == SAMPLES // MICRO_BATCH else epoch - 1
        if step < SAMPLES // MICRO_BATCH:
            dataset.set_init_step(step)
    Model(cell).train(3, dataset, callbacks=callbacks, dataset_sink_mode=False, initial_epoch=initial_epoch)
    return optimizer_state(optimizer), int(accumulator.update_count)


def test_resuming_from_any_model_checkpoint_file_ends_as_the_uninterrupted_run(tmp_path):
    x, y = make_data(SAMPLES)
    expected, expected_updates = model_train_run(x, y, checkpoint_dir=str(tmp_path))
    assert expected_updates == 9
    files = sorted(os.listdir(tmp_path), key=lambda name: os.path.getmtime(tmp_path / name))
    files = [name for name in files if name.endswith(".ckpt")]
    assert len(files) == 15
    # Epoch ends, windows cut in half, and the first step of a later epoch.
    for name in ("run-1_5.ckpt", "run-2_3.ckpt", "run-1_1.ckpt", "run-2_1.ckpt", "run-3_4.ckpt"):
        actual, updates = model_train_run(x, y, resume_from=str(tmp_path / name))
        assert updates == expected_updates, name
        assert_states_close(actual, expected, rtol=0, atol=1e-6)


class MeanTokenLoss(nn.Cell):
    """The mean of micro-batch means: each micro-batch's summed loss over its own count."""

    def __init__(self, summed):
        super().__init__()
        self.summed = summed

    def construct(self, inputs, targets):
        loss_sum, count = self.summed(inputs, targets)
        return loss_sum / count


def token_model_train(windows, counts, checkpoint_dir=None, resume_from=None):
    """Model.train for one epoch over padded micro-batches of varying lengths, N = a window's micro-batches."""
    loss = SummedTokenLoss(TokenNet())
    optimizer = make_optimizer("momentum", loss.net.trainable_params())
    accumulator = Accumulator(optimizer, len(windows[0]))
    cell = AccumulationTrainCell(loss if counts else MeanTokenLoss(loss), accumulator, counts=counts)
    micro_batches = [batch for window in windows for batch in window]
    dataset = ds.GeneratorDataset([(i.asnumpy(), t.asnumpy()) for i, t in micro_batches], ["inputs", "targets"],
                                  shuffle=False)
    callbacks = [FlushAtEpochEnd(cell)]
    if checkpoint_dir:
        callbacks.append(ModelCheckpoint("run", checkpoint_dir, CheckpointConfig(keep_checkpoint_max=100)))
    if resume_from:
        load_checkpoint(resume_from, cell, optimizer, accumulator)
        dataset.set_init_step(int(os.path.basename(resume_from)[len("run-1_"):-len(".ckpt")]))
    Model(cell).train(1, dataset, callbacks=callbacks, dataset_sink_mode=False)
    assert int(accumulator.update_count) == len(windows)
    return optimizer_state(optimizer)


def test_model_train_with_token_counts_equals_the_large_batch(tmp_path):
    windows = token_windows()
    shapes = {tuple(inputs.shape) for window in windows for inputs, _ in window}
    assert len(shapes) > 1   # micro-batches padded to different lengths
    expected = token_large_batch_state(windows, "momentum")

    assert_states_close(token_model_train(windows, True, checkpoint_dir=str(tmp_path)), expected)
    # A file saved mid-window (3 of the second window's 4) resumes to the same end.
    assert_states_close(token_model_train(windows, True, resume_from=str(tmp_path / "run-1_7.ckpt")), expected)
    mean_of_means = token_model_train(windows, False)
    assert max(float(np.abs(mean_of_means[k] - expected[k]).max()) for k in expected) > 1e-3


def test_counts_need_a_mean_accumulator_before_anything_compiles():
    loss = SummedTokenLoss(TokenNet())
    accumulator = Accumulator(make_optimizer("sgd", loss.net.trainable_params()), 2, reduction="sum")
    with pytest.raises(ValueError, match="counts were given to an Accumulator with reduction='sum'"):
        AccumulationTrainCell(loss, accumulator, counts=True)


class ReturnsValues(nn.Cell):
    """A summed loss returned alone (``values=1``), with its count (2), or with one value too many (3)."""

    def __init__(self, values):
        super().__init__()
        self.net = nn.Dense(3, 1)
        self.values = values

    def construct(self, x):
        loss = (self.net(x) ** 2).sum()
        returned = (loss, ops.cast(x.shape[0], ms.float32), loss)[:self.values]
        return loss if self.values == 1 else returned


@pytest.mark.parametrize("values, counts, message", [
    (2, False, r"network returned 2 values, not one loss: for \(loss_sum, count\) pass .*counts=True"),
    (1, True, r"counts=True\) needs a network that returns \(loss_sum, count\), got one Tensor of shape \[\]"),
    (3, True, r"counts=True\) needs a network that returns \(loss_sum, count\), got 3 values"),
])
def test_a_network_output_that_does_not_fit_counts_is_named_before_any_state_changes(mode, values, counts, message):
    # Without the check a forgotten counts=True trained on summed gradients as if they were means.
    network = ReturnsValues(values)
    accumulator = Accumulator(nn.SGD(network.trainable_params(), 0.1), 2)
    cell = AccumulationTrainCell(network, accumulator, counts=counts)
    with pytest.raises(ValueError, match=message):
        cell(ms.Tensor(np.ones((4, 3), np.float32)))
    assert int(accumulator.micro_step) == 0 and int(cell.epoch_step) == 0


def test_an_optimizer_over_another_networks_parameters_is_refused_when_the_cell_is_made():
    # Same names ("weight", "bias"), other Parameters: the gradients were zeros and nothing trained.
    network, other = nn.Dense(3, 1), nn.Dense(3, 1)
    accumulator = Accumulator(nn.SGD(other.trainable_params(), 0.1), 2)
    with pytest.raises(ValueError, match=r"the optimizer holds 2 parameters the network does not \(first \['weight', "
                                         r"'bias'\]\), which nothing would train"):
        AccumulationTrainCell(nn.WithLossCell(network, nn.MSELoss()), accumulator)
