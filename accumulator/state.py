"""Save and restore a training run, accumulator included, mid-window and exactly."""
import os

import numpy as np
import mindspore as ms
from mindspore import Tensor, ops


class CheckpointMismatchError(ValueError):
    """A checkpoint does not fit the objects it is being loaded into."""


def training_state(network, optimizer, accumulator=None, loss_scaler=None):
    """Every Parameter a run needs to continue exactly, by checkpoint name.

    Holds the network's parameters (trainable or not), the optimizer's state
    (moments, ``global_step``, learning rate), the accumulator's buffers and
    counters and the loss scaler's scale.

    Example:
        >>> state = training_state(net, optimizer, accumulator)
        >>> sorted(state)[:2]
        ['accumulator.micro_step', 'accumulator.update_count']
    """
    state = {}
    for param in network.get_parameters():
        state[param.name] = param
    for param in optimizer.get_parameters():
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
    return state


def save_checkpoint(path, network, optimizer, accumulator=None, loss_scaler=None, extra=None):
    """Writes the run's state to ``path`` atomically.

    The file is written beside ``path`` under a temporary name and renamed
    over it, so a crash mid-write leaves the previous checkpoint intact.
    ``extra`` is a dict of ints, floats or strings stored alongside (an
    epoch number, say) and returned by ``load_checkpoint``.

    Example:
        >>> save_checkpoint("run/last.ckpt", net, optimizer, accumulator, extra={"epoch": 3})
    """
    state = training_state(network, optimizer, accumulator, loss_scaler)
    clash = sorted(set(extra or {}) & set(state))
    if clash:
        raise ValueError(f"extra keys {clash} clash with parameter names")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp.ckpt")
    try:
        ms.save_checkpoint([{"name": name, "data": param} for name, param in state.items()], temporary,
                           append_dict=dict(extra or {}))
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def load_checkpoint(path, network, optimizer, accumulator=None, loss_scaler=None):
    """Restores a run saved by ``save_checkpoint`` in place; returns ``extra``.

    Every value is checked against its Parameter (presence, shape, dtype,
    and the accumulator's window size against its schedule) before any is
    written, so a mismatch raises ``CheckpointMismatchError`` and changes
    nothing. Values are assigned in place, so a step that has already been
    compiled keeps training the restored Parameters.

    Example:
        >>> extra = load_checkpoint("run/last.ckpt", net, optimizer, accumulator)
        >>> start_epoch = extra["epoch"] + 1
    """
    state = training_state(network, optimizer, accumulator, loss_scaler)
    saved = ms.load_checkpoint(path)
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
    return {name: _plain(value) for name, value in saved.items() if name not in state}


def _window_problems(accumulator, saved):
    update_count = Tensor(saved["accumulator.update_count"].asnumpy())
    expected = int(accumulator.schedule(update_count).asnumpy())
    window_size = int(saved["accumulator.window_size"].asnumpy())
    if window_size != expected:
        return [f"accumulator.window_size is {window_size}, but this accumulator's accumulate_step "
                f"gives {expected} after {int(update_count.asnumpy())} updates"]
    return []


def _plain(value):
    array = value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)
    return array.item() if array.ndim == 0 else array
