"""MindSpore's global settings for a run: device, execution mode and, under ``distributed``, the ranks."""
import dataclasses
import os

import mindspore as ms
from mindspore import communication

from training.config import ADAPTIVE
from training.errors import TrainingError


def configure_context(config):
    """Sets the device and mode ``config`` asks for; returns it with the real rank and ranks.

    A fixed ``accumulate_step`` given with ``distributed`` counts one rank's
    micro-batches: the config returned counts the run's, over all ranks
    (times the ranks), so that its window is the batch per update whatever
    the number of ranks (docs/devices.md#the-batch-is-the-runs).

    Call it once, before any data is fetched or any kernel runs: a missing
    device should not wait for a download. Raises ``TrainingError`` if the
    device is not there or ``distributed`` was started without a launcher.

    Example:
        >>> from training.config import TrainConfig
        >>> previous = ms.get_context("mode")
        >>> configure_context(TrainConfig(mode="pynative")).ranks
        1
        >>> ms.set_context(mode=previous)
    """
    if not ms.hal.is_available(config.device_target):
        raise TrainingError(f"MindSpore {ms.__version__} cannot run on {config.device_target} here (not built "
                            f"for it, or its driver is missing); try --device-target CPU")
    if config.device_target == "CPU":
        # Before anything runs, as the first Accumulator would be too late for: a value the user set is kept
        # (docs/mindspore-behaviours.md#asynchronous-launch-slows-small-graphs-on-cpu).
        os.environ.setdefault("MS_DEV_HOST_BLOCKING_RUN", "1")
    # set_device (set_context(device_target=...) is deprecated in 2.10) refuses to run
    # once any kernel has run, even to repeat the current device: call it only to change.
    if ms.get_context("device_target") != config.device_target:
        ms.set_device(config.device_target)
    ms.set_context(mode=ms.GRAPH_MODE if config.mode == "graph" else ms.PYNATIVE_MODE)
    if not config.distributed:
        return config
    if not communication.GlobalComm.INITED:
        try:
            communication.init()
        except RuntimeError as error:
            raise TrainingError(f"--distributed needs a launcher such as msrun ({error})") from None
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    ranks = communication.get_group_size()
    per_rank = config.accumulate_step not in ADAPTIVE and config.micro_batch is None
    return dataclasses.replace(config, rank=communication.get_rank(), ranks=ranks,
                               accumulate_step=config.accumulate_step * ranks if per_rank else config.accumulate_step)
