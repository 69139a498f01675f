"""Accumulation inside ``mindspore.train.Model``: a training cell, its epoch-end flush and a per-update lr scheduler step."""
import mindspore as ms
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from mindspore.train import Callback

from accumulator.core.accumulator import Accumulator
from accumulator._internal.checks import boolean
from accumulator._internal.constants import ZERO_INT
from accumulator.core.checkpoints import group_learning_rates


class AccumulationTrainCell(nn.Cell):
    """Like ``nn.TrainOneStepCell``, but the optimizer runs once per window.

    Wraps a network that returns the loss and an ``Accumulator`` (which holds
    the optimizer). Each call computes one micro-batch's loss and gradients,
    accumulates them and returns the loss, so ``LossMonitor`` and friends see
    micro-batch losses.

    ``counts=True``: the network returns ``(loss_sum, count)``, a loss summed
    over the micro-batch's samples or tokens and how many there are (a
    float32 scalar); the cell passes the count to the accumulator, so the
    update is the whole window's sum over its whole count: exact for
    variable-length, padded batches, where a mean per micro-batch weighs a
    short batch's tokens more. The cell then returns ``loss_sum / count``,
    the micro-batch's mean loss per item. Needs ``reduction="mean"``. A
    network whose output does not fit ``counts`` (one loss without it, the
    pair with it) raises ``ValueError`` as the step compiles; an optimizer
    over another network's parameters, when the cell is made. Once ``FlushAtEpochEnd`` has told it the epoch's
    length, the cell applies each epoch's last, partial window inside the
    epoch's last step, so every callback, ``ModelCheckpoint`` included, sees
    the window applied.

    Its parameters are the whole run's state: the network's, the
    optimizer's, the accumulator's and the position in the epoch
    (``epoch_step``, ``steps_per_epoch``). A ``ModelCheckpoint`` file holds
    them all; resume by loading it with
    ``accumulator.load_checkpoint(path, cell, optimizer, accumulator)`` and
    training on (see the README for a file saved mid-epoch).

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

    With a summed loss and its count (``counts=True``):
        >>> class SummedLoss(nn.Cell):
        ...     def __init__(self, net):
        ...         super().__init__()
        ...         self.net = net
        ...     def construct(self, x, y):
        ...         return ((self.net(x) - y) ** 2).sum(), ops.cast(y.shape[0], ms.float32)
        >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.01), accumulate_step=4)
        >>> cell = AccumulationTrainCell(SummedLoss(net), accumulator, counts=True)
        >>> batch = (Tensor(np.ones((3, 3), np.float32)), Tensor(np.zeros((3, 2), np.float32)))
        >>> _ = cell(*batch)
        >>> float(accumulator.weight_total)
        3.0
    """

    def __init__(self, network: nn.Cell, accumulator: Accumulator, counts: bool = False) -> None:
        super().__init__(auto_prefix=False)
        if boolean(counts, "counts"):
            accumulator.check_counts()
        # By identity: two networks' parameters share their names ("weight", "bias").
        network_params = {id(param) for param in network.get_parameters()}
        foreign = [param.name for param in accumulator.optimizer.parameters if id(param) not in network_params]
        if foreign:
            raise ValueError(f"AccumulationTrainCell: the optimizer holds {len(foreign)} parameters the network does "
                             f"not (first {foreign[:3]}), which nothing would train: build the optimizer over this "
                             "network's trainable_params()")
        self.counts = counts
        self.network = network
        self.network.set_grad()
        self.accumulator = accumulator
        self.optimizer = accumulator.optimizer
        self.weights = self.optimizer.parameters
        self.accumulator_state = ParameterTuple(accumulator.state_parameters())
        # An experimental.optim optimizer's learning rates are not its Parameters: make them the cell's, for ModelCheckpoint.
        self.learning_rates = ParameterTuple(group_learning_rates(self.optimizer))
        # 0 until FlushAtEpochEnd says the epoch's length: no flush in the step.
        self.steps_per_epoch = Parameter(Tensor(0, ms.int32), name="cell.steps_per_epoch", requires_grad=False)
        self.epoch_step = Parameter(Tensor(0, ms.int32), name="cell.epoch_step", requires_grad=False)
        self.grad = ops.GradOperation(get_by_list=True)

    def construct(self, *inputs):
        loss = self.network(*inputs)
        _check_network_output(loss, self.counts)
        # With counts, the count's own gradient is zero: it depends on no weight.
        grads = self.grad(self.network, self.weights)(*inputs)
        step = self.epoch_step + 1
        epoch_end = ops.logical_and(self.steps_per_epoch > 0, step >= self.steps_per_epoch)
        ops.assign(self.epoch_step, ops.select(epoch_end, ZERO_INT, step))
        if self.counts:
            loss_sum, count = loss
            return ops.depend(loss_sum / count, self.accumulator(grads, count, flush=epoch_end))
        return ops.depend(loss, self.accumulator(grads, flush=epoch_end))


def _check_network_output(loss, counts):
    # Runs while the step compiles, on the output's structure alone: without
    # it a forgotten counts=True trains on summed gradients as if they were means.
    if counts and not isinstance(loss, tuple):
        raise ValueError(f"AccumulationTrainCell(..., counts=True) needs a network that returns (loss_sum, count), "
                         f"got one Tensor of shape {list(loss.shape)}: return the count too, or leave out counts=True")
    if counts and len(loss) != 2:
        raise ValueError(f"AccumulationTrainCell(..., counts=True) needs a network that returns (loss_sum, count), "
                         f"got {len(loss)} values")
    if not counts and isinstance(loss, tuple):
        raise ValueError(f"AccumulationTrainCell's network returned {len(loss)} values, not one loss: for "
                         "(loss_sum, count) pass AccumulationTrainCell(..., counts=True)")


class FlushAtEpochEnd(Callback):
    """Applies the last partial window of every epoch, so no gradient is dropped.

    Tells ``cell`` (an ``AccumulationTrainCell``) how many steps an epoch
    has when training begins; the cell then applies the partial window in
    the epoch's last step itself, before any callback runs. Example: see
    ``AccumulationTrainCell``.
    """

    def __init__(self, cell: AccumulationTrainCell) -> None:
        super().__init__()
        self.cell = cell

    def on_train_begin(self, run_context):
        steps = run_context.original_args().batch_num
        ops.assign(self.cell.steps_per_epoch, Tensor(steps, ms.int32))


class StepSchedulerPerUpdate(Callback):
    """Steps an ``experimental.optim.lr_scheduler`` once per applied window under ``Model.train``.

    The scheduler's position (``last_epoch``) is kept at the accumulator's
    ``update_count``: set from it when training begins, so a run resumed
    from a checkpoint (whose file holds the learning rates and the count)
    continues the schedule exactly, and stepped after each step that
    applied a window. Outside ``Model.train``, step the scheduler yourself
    when the accumulator's call returns True.

    Example:
        >>> from mindspore.experimental import optim
        >>> from accumulator import Accumulator
        >>> optimizer = optim.SGD(nn.Dense(3, 1).trainable_params(), lr=0.1)
        >>> scheduler = optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.5)
        >>> callback = StepSchedulerPerUpdate(scheduler, Accumulator(optimizer, 4))
    """

    def __init__(self, lr_scheduler, accumulator):
        super().__init__()
        self.lr_scheduler = lr_scheduler
        self.accumulator = accumulator

    def on_train_begin(self, run_context):
        ops.assign(self.lr_scheduler.last_epoch, Tensor(int(self.accumulator.update_count), ms.float32))

    def on_train_step_end(self, run_context):
        while int(self.lr_scheduler.last_epoch) < int(self.accumulator.update_count):
            self.lr_scheduler.step()
