"""The drivers besides the in-graph call: a whole window per compiled call, losses over the whole window, and
``mindspore.train.Model`` (docs/window-step.md, docs/whole-batch.md, docs/model-train.md)."""
from accumulator.drivers.model import AccumulationTrainCell, FlushAtEpochEnd, StepSchedulerPerUpdate
from accumulator.drivers.whole_batch import AllGatherRepresentations, make_whole_batch_step
from accumulator.drivers.window import make_window_step

__all__ = ["AccumulationTrainCell", "AllGatherRepresentations", "FlushAtEpochEnd", "StepSchedulerPerUpdate",
           "make_whole_batch_step", "make_window_step"]
