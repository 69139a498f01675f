"""Gradient accumulation for MindSpore: a large effective batch on a small device, equal to the large batch.

The top level holds what nearly every user needs; the rest is in one layer of sub-packages, each importing
only those before it: ``policies`` (optional behaviours of a window), ``batch_size`` (choosing N),
``core`` (the Accumulator, checkpoints, the self-check), ``drivers`` (other ways to run a window),
``devices`` (many devices) and ``memory`` (the micro-batch that fits). ``_internal`` is private.
Importing the package sets nothing in MindSpore. docs/layout.md maps the 0.2.0 paths.
"""
__version__ = "0.2.0"  # the one source: setup.py reads it from here

from accumulator._internal import aliases
from accumulator.core import (Accumulator, CheckpointMismatchError, check_equivalence, load_checkpoint,
                              save_checkpoint, training_state)
from accumulator.devices import WindowAllReduce
from accumulator.drivers import AccumulationTrainCell, FlushAtEpochEnd, make_whole_batch_step, make_window_step
from accumulator.policies import Policy, convert_batchnorm

__all__ = ["AccumulationTrainCell", "Accumulator", "CheckpointMismatchError", "FlushAtEpochEnd", "Policy",
           "WindowAllReduce", "check_equivalence", "convert_batchnorm", "load_checkpoint", "make_whole_batch_step",
           "make_window_step", "save_checkpoint", "training_state"]

aliases.install()
__getattr__ = aliases.old_name
