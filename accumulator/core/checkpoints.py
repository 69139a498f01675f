"""Save and restore a training run, accumulator included, mid-window and exactly.

``write_atomically``, the atomic write the checkpoints use, and ``unfinished_writes``, what a killed one left,
are public here for any file a run writes (the tools' logs, plots and data).
"""
from typing import Any, Dict, Mapping, Optional, Union

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops
from mindspore.experimental.optim import Optimizer as NewOptimizer

from accumulator.core.accumulator import Accumulator
from accumulator._internal.files import unfinished_writes, write_atomically

__all__ = ["CheckpointMismatchError", "group_learning_rates", "load_checkpoint", "save_checkpoint", "training_state",
           "unfinished_writes", "write_atomically"]


class CheckpointMismatchError(ValueError):
    """A checkpoint does not fit the objects it is being loaded into."""


def training_state(network: nn.Cell, optimizer: Union[nn.Optimizer, NewOptimizer],
                   accumulator: Optional[Accumulator] = None, loss_scaler: Optional[Any] = None,
                   lr_scheduler: Optional[Any] = None) -> Dict[str, Parameter]:
    """Every Parameter a run needs to continue exactly, by checkpoint name.

    Holds the network's parameters (trainable or not), the optimizer's state
    (moments, ``global_step`` or ``state_step``, learning rates: an
    ``experimental.optim``/``mint.optim`` optimizer's group learning rates
    too), the accumulator's buffers and counters, the loss scaler's scale
    and an ``experimental.optim.lr_scheduler``'s position (``last_epoch``).

    Example:
        >>> from mindspore import nn
        >>> from accumulator import Accumulator
        >>> net = nn.Dense(3, 1)
        >>> optimizer = nn.SGD(net.trainable_params(), 0.1)
        >>> sorted(training_state(net, optimizer, Accumulator(optimizer, 4)))
        ['accum.bias', 'accum.weight', 'accumulator.accumulate_step', 'accumulator.micro_step',
         'accumulator.skipped_windows', 'accumulator.update_count', 'accumulator.weight..bias',
         'accumulator.weight_total', 'bias', 'global_step', 'learning_rate', 'momentum', 'stat.bias',
         'stat.weight', 'weight']
    """
    state = {}
    for param in network.get_parameters():
        state[param.name] = param
    for param in list(optimizer.get_parameters()) + group_learning_rates(optimizer):
        state.setdefault(param.name, param)
    if accumulator is not None:
        for param in accumulator.state_parameters():
            state[param.name] = param
    if loss_scaler is not None:
        # The scalers name their Parameters "scale_value" and "counter": prefix
        # them so they cannot collide with a network's names.
        for attribute in ("scale_value", "counter"):
            if hasattr(loss_scaler, attribute):
                state[f"loss_scaler.{attribute}"] = getattr(loss_scaler, attribute)
    if lr_scheduler is not None:
        # The scheduler's own name is its class's ("last_epoch_StepLR"): name it by role.
        state["lr_scheduler.last_epoch"] = lr_scheduler.last_epoch
    return state


def group_learning_rates(optimizer):
    """The group learning rates an ``experimental.optim``/``mint.optim`` optimizer keeps outside its Parameters.

    Empty for an ``nn.Optimizer``, whose ``learning_rate`` is one of its Parameters.

    Example:
        >>> from mindspore import nn
        >>> from mindspore.experimental import optim
        >>> [p.name for p in group_learning_rates(optim.SGD(nn.Dense(3, 1).trainable_params(), lr=0.1))]
        ['learning_rate_group_0']
    """
    if not isinstance(optimizer, NewOptimizer):
        return []
    return [lr for lr in optimizer.lrs if isinstance(lr, Parameter)]


def save_checkpoint(path: str, network: nn.Cell, optimizer: Union[nn.Optimizer, NewOptimizer],
                    accumulator: Optional[Accumulator] = None, loss_scaler: Optional[Any] = None,
                    extra: Optional[Mapping[str, Union[int, float, str]]] = None,
                    lr_scheduler: Optional[Any] = None) -> None:
    """Writes the run's state to ``path`` atomically.

    The file is written beside ``path`` under a temporary name and renamed
    over it, so a crash mid-write leaves the previous checkpoint intact.
    ``extra`` is a dict of ints, floats or strings stored alongside (an
    epoch number, say) and returned by ``load_checkpoint``. Pass the
    ``lr_scheduler`` you step per update, if any, to save and load its position.

    Example:
        >>> import os, tempfile
        >>> from mindspore import nn
        >>> net = nn.Dense(3, 1)
        >>> folder = os.path.join(tempfile.mkdtemp(), "run")  # created if missing
        >>> save_checkpoint(os.path.join(folder, "last.ckpt"), net, nn.SGD(net.trainable_params(), 0.1))
        >>> os.listdir(folder)
        ['last.ckpt']
    """
    state = training_state(network, optimizer, accumulator, loss_scaler, lr_scheduler)
    clash = sorted(set(extra or {}) & set(state))
    if clash:
        raise ValueError(f"extra keys {clash} clash with parameter names")
    entries = [{"name": name, "data": param} for name, param in state.items()]
    write_atomically(path, lambda temporary: ms.save_checkpoint(entries, temporary, append_dict=dict(extra or {})))


def load_checkpoint(path: str, network: nn.Cell, optimizer: Union[nn.Optimizer, NewOptimizer],
                    accumulator: Optional[Accumulator] = None, loss_scaler: Optional[Any] = None,
                    lr_scheduler: Optional[Any] = None) -> Dict[str, Any]:
    """Restores a run saved by ``save_checkpoint`` in place; returns ``extra``.

    A checkpoint written before the accumulator packed its window into
    buckets (one buffer per parameter) loads too. Every value is checked
    against its Parameter (presence, shape, dtype,
    and the accumulator's window size against its schedule) before any is
    written, so a mismatch raises ``CheckpointMismatchError`` and changes
    nothing. Values are assigned in place, so a step that has already been
    compiled keeps training the restored Parameters.

    Example:
        >>> import os, tempfile
        >>> from mindspore import nn
        >>> from accumulator import Accumulator
        >>> net = nn.Dense(3, 1)
        >>> optimizer = nn.SGD(net.trainable_params(), 0.1)
        >>> path = os.path.join(tempfile.mkdtemp(), "last.ckpt")
        >>> save_checkpoint(path, net, optimizer, Accumulator(optimizer, 4), extra={"epoch": 3})
        >>> load_checkpoint(path, net, optimizer, Accumulator(optimizer, 4))
        {'epoch': 3}
        >>> load_checkpoint(path, net, optimizer, Accumulator(optimizer, 2))
        Traceback (most recent call last):
        ...
        accumulator.core.checkpoints.CheckpointMismatchError: checkpoint ... does not fit: accumulator.accumulate_step is 4, but this accumulator's accumulate_step gives 2 after 0 updates
    """
    state = training_state(network, optimizer, accumulator, loss_scaler, lr_scheduler)
    saved = ms.load_checkpoint(path)
    if accumulator is not None:
        saved = _packed_into_buckets(accumulator, saved)
    problems = []
    for name, param in state.items():
        if name not in saved:
            problems.append(f"{name} is missing")
        elif tuple(saved[name].shape) != tuple(param.shape):
            problems.append(f"{name} has shape {tuple(saved[name].shape)}, expected {tuple(param.shape)}")
        elif saved[name].dtype != param.dtype:
            problems.append(f"{name} has dtype {saved[name].dtype}, expected {param.dtype}")
    if accumulator is not None and not problems:
        problems += _window_problems(accumulator, saved)
    if problems:
        raise CheckpointMismatchError(f"checkpoint {path} does not fit: " + "; ".join(problems))
    for name, param in state.items():
        # ops.assign writes into the Parameter's own memory; set_data would
        # swap the memory and detach it from graphs compiled before the load.
        ops.assign(param, Tensor(saved[name].asnumpy()))
    if accumulator is not None:
        accumulator.host.sync_position()
    return {name: _plain(value) for name, value in saved.items() if name not in state}


def _packed_into_buckets(accumulator, saved):
    """``saved`` with a checkpoint from before the buckets read into them.

    Until 2026-11-25 the window's sum was one buffer per parameter, saved as
    ``accumulator.<parameter name>``; a bucket holding several parameters is
    saved as one flat entry now (``accumulator.<first>..<last>``). Where a bucket's
    entry is missing and every one of its parameters' old entries is there,
    of its parameter's shape, they are joined into it, in the bucket's order.
    """
    parameters, saved = accumulator.optimizer.parameters, dict(saved)
    for buffer, group in zip(accumulator.buffers, accumulator.buckets.groups):
        old = [f"accumulator.{parameters[index].name}" for index in group]
        if buffer.name in saved or old == [buffer.name]:
            continue
        if all(name in saved and tuple(saved[name].shape) == tuple(parameters[index].shape)
               for name, index in zip(old, group)):
            saved[buffer.name] = Tensor(np.concatenate([saved.pop(name).asnumpy().reshape(-1) for name in old]))
    return saved


def _window_problems(accumulator, saved):
    if accumulator.schedule.reads_state:
        return []  # its N follows state this very load restores
    update_count = Tensor(saved["accumulator.update_count"].asnumpy())
    expected = int(accumulator.schedule(update_count).asnumpy())
    accumulate_step = int(saved["accumulator.accumulate_step"].asnumpy())
    if accumulate_step != expected:
        return [f"accumulator.accumulate_step is {accumulate_step}, but this accumulator's accumulate_step "
                f"gives {expected} after {int(update_count.asnumpy())} updates"]
    return []


def _plain(value):
    array = value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)
    return array.item() if array.ndim == 0 else array
