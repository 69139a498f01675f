"""Accumulation inside ``mindspore.train.Model``: a training cell and an epoch-end flush."""
from mindspore import ParameterTuple, nn, ops
from mindspore.train import Callback


class AccumulationTrainCell(nn.Cell):
    """Like ``nn.TrainOneStepCell``, but the optimizer runs once per window.

    Wraps a network that returns the loss and an ``Accumulator`` (which holds
    the optimizer). Each call computes one micro-batch's loss and gradients,
    accumulates them and returns the loss, so ``LossMonitor`` and friends see
    micro-batch losses. The accumulator's state is registered as this cell's
    parameters, so ``ModelCheckpoint`` saves it with the network.

    Example:
        >>> import numpy as np
        >>> import mindspore.dataset as ds
        >>> from mindspore.train import Model
        >>> from accumulator import Accumulator
        >>> net = nn.Dense(3, 2)
        >>> net_with_loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
        >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.01), accumulate_step=4)
        >>> cell = AccumulationTrainCell(net_with_loss, accumulator)
        >>> x, y = np.ones((12, 3), np.float32), np.zeros(12, np.int32)
        >>> dataset = ds.NumpySlicesDataset((x, y), column_names=["x", "y"], shuffle=False).batch(2)
        >>> Model(cell).train(2, dataset, callbacks=[FlushAtEpochEnd(cell)], dataset_sink_mode=False)
        >>> int(accumulator.update_count)   # 6 micro-batches an epoch: a window of 4, then 2 flushed
        4
    """

    def __init__(self, network, accumulator):
        super().__init__(auto_prefix=False)
        self.network = network
        self.network.set_grad()
        self.accumulator = accumulator
        self.optimizer = accumulator.optimizer
        self.weights = self.optimizer.parameters
        self.accumulator_state = ParameterTuple(accumulator.state_parameters())
        self.grad = ops.GradOperation(get_by_list=True)

    def construct(self, *inputs):
        loss = self.network(*inputs)
        grads = self.grad(self.network, self.weights)(*inputs)
        return ops.depend(loss, self.accumulator(grads))

    def flush(self):
        """Applies the accumulator's partial window; see ``Accumulator.flush``."""
        return self.accumulator.flush()


class FlushAtEpochEnd(Callback):
    """Applies the last partial window of every epoch, so no gradient is dropped.

    Example: see ``AccumulationTrainCell``.
    """

    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def on_train_epoch_end(self, run_context):
        self.cell.flush()
