"""The core: the Accumulator, its checkpoints and the self-check against the large batch (docs/how-it-works.md)."""
from accumulator.core.accumulator import Accumulator
from accumulator.core.checkpoints import CheckpointMismatchError, load_checkpoint, save_checkpoint, training_state
from accumulator.core.selfcheck import EquivalenceReport, check_equivalence

__all__ = ["Accumulator", "CheckpointMismatchError", "EquivalenceReport", "check_equivalence", "load_checkpoint",
           "save_checkpoint", "training_state"]
