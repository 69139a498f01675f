"""Gradient accumulation for MindSpore: a large effective batch on a small device.

Read in this order: ``accumulator`` (the core: the buffers, the add and the
window's close in stages), ``policy`` (what a policy is) and the policies,
one module each: ``nonfinite``, ``loss_scaling``, ``clipping``, ``spikes``,
``noise`` (the gradient noise scale), ``batchnorm`` (moving statistics from
the whole window), mapped from the keywords in ``options``; ``schedule``
(how N may change, the adaptive window), ``scaling`` (the optimizer's
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
``common``); ``runtime`` sets MindSpore's blocking launch on CPU when
imported.
"""
__version__ = "0.1.0"  # the one source: setup.py reads it from here

from accumulator.runtime import block_on_cpu

block_on_cpu()  # before the first graph runs: MindSpore reads it then

from accumulator.accumulator import Accumulator
from accumulator.batchnorm import convert_batchnorm
from accumulator.cell import AccumulationTrainCell, FlushAtEpochEnd, StepSchedulerPerUpdate
from accumulator.clipping import ClipNorm
from accumulator.distributed import WindowAllReduce
from accumulator.loss_scaling import LossScaling
from accumulator.noise import NoiseFromEveryMicroBatch, NoiseFromLastMicroBatch
from accumulator.nonfinite import SkipNonFiniteMicroBatches, SkipNonFiniteWindows
from accumulator.plan import MemoryPlan, PlanError, Probe, parse_size, plan_micro_batch
from accumulator.policy import Policy
from accumulator.scaling import ScaleRule
from accumulator.schedule import NoiseScaleSchedule, as_schedule
from accumulator.selfcheck import EquivalenceReport, check_equivalence
from accumulator.spikes import SkipSpikes
from accumulator.state import CheckpointMismatchError, load_checkpoint, save_checkpoint, training_state
from accumulator.whole_batch import AllGatherRepresentations, make_whole_batch_step
from accumulator.window import make_window_step

__all__ = ["AccumulationTrainCell", "Accumulator", "AllGatherRepresentations", "CheckpointMismatchError", "ClipNorm",
           "EquivalenceReport", "FlushAtEpochEnd", "LossScaling", "NoiseFromEveryMicroBatch",
           "NoiseFromLastMicroBatch", "NoiseScaleSchedule", "Policy", "ScaleRule", "SkipNonFiniteMicroBatches",
           "SkipNonFiniteWindows", "SkipSpikes", "StepSchedulerPerUpdate", "WindowAllReduce", "as_schedule",
           "check_equivalence", "convert_batchnorm", "load_checkpoint", "make_whole_batch_step", "make_window_step",
           "save_checkpoint", "training_state"]
__all__ += ["MemoryPlan", "PlanError", "Probe", "parse_size", "plan_micro_batch"]  # docs/memory-plan.md
