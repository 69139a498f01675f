"""The memory plan: the micro-batch that fits a budget, measured in child processes (docs/memory-plan.md)."""
from accumulator._internal.deprecation import deprecated
from accumulator.memory.plan import (BUDGET_FRACTION, Measurement, MemoryPlan, PlanError, format_size, parse_size,
                                     plan_micro_batch)

__all__ = ["BUDGET_FRACTION", "Measurement", "MemoryPlan", "PlanError", "format_size", "parse_size", "plan_micro_batch"]


def __getattr__(name):
    """``Probe``, the 0.2.0 name of ``Measurement``: warns once."""
    if name == "Probe":
        deprecated("accumulator.memory.Probe", "accumulator.memory.Measurement")
        return Measurement
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
