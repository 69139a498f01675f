"""Gradient accumulation for MindSpore: a large effective batch on a small device.

Read in this order: ``accumulator`` (the Accumulator), ``schedule`` (how N
may change), ``state`` (checkpoints), ``cell`` (``mindspore.train.Model``),
``distributed`` (one AllReduce per window), ``window`` (a whole window per
compiled call).
"""
from accumulator.accumulator import Accumulator
from accumulator.cell import AccumulationTrainCell, FlushAtEpochEnd
from accumulator.distributed import WindowAllReduce
from accumulator.schedule import as_schedule
from accumulator.state import CheckpointMismatchError, load_checkpoint, save_checkpoint, training_state
from accumulator.window import make_window_step

__all__ = ["Accumulator", "AccumulationTrainCell", "FlushAtEpochEnd", "WindowAllReduce", "as_schedule",
           "CheckpointMismatchError", "load_checkpoint", "make_window_step", "save_checkpoint", "training_state"]
