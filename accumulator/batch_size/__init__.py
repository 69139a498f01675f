"""Choosing N, and the optimizer following it: schedules, the measured window, scale rules (docs/batch-size.md)."""
from accumulator.batch_size.critical import CriticalBatchSchedule, restore_state, snapshot_state
from accumulator.batch_size.rules import ScaleRule
from accumulator.batch_size.schedule import NoiseScaleSchedule, as_schedule

__all__ = ["CriticalBatchSchedule", "NoiseScaleSchedule", "ScaleRule", "as_schedule", "restore_state",
           "snapshot_state"]
