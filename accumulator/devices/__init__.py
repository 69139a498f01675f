"""Many devices: the window's sums reduced once per window (docs/devices.md)."""
from accumulator.devices.all_reduce import WindowAllReduce

__all__ = ["WindowAllReduce"]
