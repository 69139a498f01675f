"""The memory plan: the micro-batch that fits a budget, measured in child processes (docs/memory-plan.md)."""
from accumulator.memory.plan import (BUDGET_FRACTION, MemoryPlan, PlanError, Probe, format_size, parse_size,
                                     plan_micro_batch)

__all__ = ["BUDGET_FRACTION", "MemoryPlan", "PlanError", "Probe", "format_size", "parse_size", "plan_micro_batch"]
