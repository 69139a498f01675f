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
        >>> from mindspore.train import Model, LossMonitor
        >>> net_with_loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
        >>> optimizer = nn.SGD(net.trainable_params(), 0.01)
        >>> cell = AccumulationTrainCell(net_with_loss, Accumulator(optimizer, 4))
        >>> Model(cell).train(3, dataset, callbacks=[LossMonitor(), FlushAtEpochEnd(cell)],
        ...                   dataset_sink_mode=False)
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

    Example:
        >>> model.train(epochs, dataset, callbacks=[FlushAtEpochEnd(cell)], dataset_sink_mode=False)
    """

    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def on_train_epoch_end(self, run_context):
        self.cell.flush()
