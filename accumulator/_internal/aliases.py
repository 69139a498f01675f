"""The import paths of 0.2.0, before the sub-packages: each still works and warns once (docs/layout.md#from-020).

``accumulator.plan`` and the other flat modules import as the module that now holds them (the same object, so
what is patched through one name is patched through both); the names the top level exported then and no longer
does resolve through the package's ``__getattr__`` (``accumulator.ClipNorm``, say).
"""
import importlib
import importlib.abc
import importlib.util
import sys

from accumulator._internal.deprecation import deprecated

# The flat modules of 0.2.0 and where each one went.
MODULES = {
    "accumulator": "core.accumulator", "host_step": "core._host_step", "options": "core._options",
    "state": "core.checkpoints", "selfcheck": "core.selfcheck",
    "policy": "policies.base", "clipping": "policies.clipping", "loss_scaling": "policies.loss_scale",
    "nonfinite": "policies.nonfinite", "spikes": "policies.spikes", "noise": "policies.noise",
    "batchnorm": "policies.batchnorm",
    "schedule": "batch_size.schedule", "critical": "batch_size.critical", "scaling": "batch_size.rules",
    "window": "drivers.window", "whole_batch": "drivers.whole_batch", "cell": "drivers.model",
    "distributed": "devices.all_reduce", "plan": "memory.plan",
    "buckets": "_internal.buckets", "buffers": "_internal.buffers", "sums": "_internal.sums",
    "constants": "_internal.constants", "checks": "_internal.checks", "files": "_internal.files",
    "layers": "_internal.layers", "runtime": "_internal.runtime", "capabilities": "_internal.capabilities",
    "deprecation": "_internal.deprecation",
}
# The top-level names of 0.2.0 that live in a sub-package only now.
NAMES = {
    "AllGatherRepresentations": "drivers", "StepSchedulerPerUpdate": "drivers",
    "ClipNorm": "policies", "LossScaling": "policies", "NoiseFromEveryMicroBatch": "policies",
    "NoiseFromLastMicroBatch": "policies", "SkipNonFiniteMicroBatches": "policies",
    "SkipNonFiniteWindows": "policies", "SkipSpikes": "policies",
    "CriticalBatchSchedule": "batch_size", "NoiseScaleSchedule": "batch_size", "ScaleRule": "batch_size",
    "as_schedule": "batch_size", "restore_state": "batch_size", "snapshot_state": "batch_size",
    "EquivalenceReport": "core",
    "BUDGET_FRACTION": "memory", "MemoryPlan": "memory", "PlanError": "memory", "Probe": "memory",
    "format_size": "memory", "parse_size": "memory", "plan_micro_batch": "memory",
}

# The names of NAMES renamed since: the new name, in the same sub-package (its old name there warns too).
RENAMED = {"Probe": "Measurement"}


def old_name(name):
    """What ``accumulator.<name>`` was in 0.2.0, with a warning; AttributeError for anything else.

    Example:
        >>> old_name("ClipNorm").__name__, old_name("plan").__name__
        ('ClipNorm', 'accumulator.memory.plan')
    """
    if name in NAMES:
        new = RENAMED.get(name, name)
        deprecated(f"accumulator.{name}", f"accumulator.{NAMES[name]}.{new}")
        return getattr(importlib.import_module(f"accumulator.{NAMES[name]}"), new)
    if name in MODULES:
        return importlib.import_module(f"accumulator.{name}")
    raise AttributeError(f"module 'accumulator' has no attribute {name!r}")


class _OldPath(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``accumulator.<old module>`` and hands over the module that holds it now."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.partition(".")
        if package != "accumulator" or name not in MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = f"accumulator.{MODULES[spec.name.partition('.')[2]]}"
        deprecated(spec.name, new)
        module = importlib.import_module(new)
        self.own_spec = module.__spec__  # the import machinery sets the alias's spec on it: put back below
        return module

    def exec_module(self, module):
        module.__spec__ = self.own_spec


def install():
    """Lets the 0.2.0 module paths import (once per process; the package does it at import).

    Example:
        >>> install(); import accumulator.clipping, accumulator.policies.clipping
        >>> accumulator.clipping is accumulator.policies.clipping
        True
    """
    if not any(isinstance(finder, _OldPath) for finder in sys.meta_path):
        sys.meta_path.append(_OldPath())
