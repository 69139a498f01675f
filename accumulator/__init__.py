"""Gradient accumulation for MindSpore: a large effective batch on a small device.

Read in this order: ``accumulator`` (the core: the buffers, the add and the
window's close in stages), ``policy`` (what a policy is) and the policies,
one module each: ``nonfinite``, ``loss_scaling``, ``clipping``, ``spikes``,
``noise`` (the gradient noise scale), ``batchnorm`` (moving statistics from
the whole window), mapped from the keywords in ``options``; ``schedule``
(how N may change: the noise-scale window), ``critical`` (N measured by
short branched runs), ``plan`` (the micro-batch that fits, measured),
``scaling`` (the optimizer's
learning rate and betas following N); the drivers besides the in-graph
call: ``host_step`` (``step()``), ``window`` (a whole window per compiled
call), ``whole_batch`` (losses over the whole window, such as contrastive
ones, made exact), ``cell`` (``mindspore.train.Model``); ``state``
(checkpoints), ``distributed`` (one AllReduce per window), ``selfcheck``
(does accumulation equal the large batch on your net?). ``buckets``,
``buffers`` and ``sums`` lay out, update and sum the window's buffers;
``checks``, ``files``, ``constants`` and ``layers`` are the argument checks,
the atomic file write, the graphs' constants and the dropout/BatchNorm scan
the rest shares (not exported: the tools take the checks and the write from
``common``); ``runtime`` sets MindSpore's blocking launch on CPU at the
first ``Accumulator``; ``deprecation`` warns once for a renamed name.
Importing the package sets nothing in MindSpore.
"""
__version__ = "0.2.0"  # the one source: setup.py reads it from here

from accumulator.accumulator import Accumulator
from accumulator.batchnorm import convert_batchnorm
from accumulator.cell import AccumulationTrainCell, FlushAtEpochEnd, StepSchedulerPerUpdate
from accumulator.clipping import ClipNorm
from accumulator.critical import CriticalBatchSchedule, restore_state, snapshot_state
from accumulator.distributed import WindowAllReduce
from accumulator.loss_scaling import LossScaling
from accumulator.noise import NoiseFromEveryMicroBatch, NoiseFromLastMicroBatch
from accumulator.nonfinite import SkipNonFiniteMicroBatches, SkipNonFiniteWindows
from accumulator.plan import BUDGET_FRACTION, MemoryPlan, PlanError, Probe, format_size, parse_size, plan_micro_batch
from accumulator.policy import Policy
from accumulator.scaling import ScaleRule
from accumulator.schedule import NoiseScaleSchedule, as_schedule
from accumulator.selfcheck import EquivalenceReport, check_equivalence
from accumulator.spikes import SkipSpikes
from accumulator.state import CheckpointMismatchError, load_checkpoint, save_checkpoint, training_state
from accumulator.whole_batch import AllGatherRepresentations, make_whole_batch_step
from accumulator.window import make_window_step

__all__ = ["AccumulationTrainCell", "Accumulator", "AllGatherRepresentations", "BUDGET_FRACTION",
           "CheckpointMismatchError", "ClipNorm", "CriticalBatchSchedule", "EquivalenceReport", "FlushAtEpochEnd",
           "LossScaling", "MemoryPlan", "NoiseFromEveryMicroBatch", "NoiseFromLastMicroBatch", "NoiseScaleSchedule",
           "PlanError", "Policy", "Probe", "ScaleRule", "SkipNonFiniteMicroBatches", "SkipNonFiniteWindows",
           "SkipSpikes", "StepSchedulerPerUpdate", "WindowAllReduce", "as_schedule", "check_equivalence",
           "convert_batchnorm", "format_size", "load_checkpoint", "make_whole_batch_step", "make_window_step",
           "parse_size", "plan_micro_batch", "restore_state", "save_checkpoint", "snapshot_state", "training_state"]
