"""Model.train with AccumulationTrainCell equals the hand-written jitted loop."""
import os

import numpy as np
import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn
from mindspore.train import Callback, CheckpointConfig, Model, ModelCheckpoint

from accumulator import Accumulator, load_checkpoint
from accumulator.cell import AccumulationTrainCell, FlushAtEpochEnd
from helpers import assert_states_close, grad_fn_for, make_data, make_net, make_optimizer, optimizer_state, split

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


def test_model_train_equals_the_hand_written_loop(tmp_path):
    x, y = make_data(SAMPLES)
    expected, expected_losses = hand_written_run(x, y)

    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    accumulator = Accumulator(optimizer, 2)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    cell = AccumulationTrainCell(nn.WithLossCell(net, loss_fn), accumulator)
    dataset = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(MICRO_BATCH)
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
    # The last save came after the final micro-step, before the epoch-end flush.
    assert (int(fresh_accumulator.update_count), int(fresh_accumulator.micro_step)) == (3 * EPOCHS - 1, 1)
