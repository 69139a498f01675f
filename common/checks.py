"""Argument checks for the data, the models and the training tools: each returns the value or raises ``ValueError``.

Example:
    >>> positive_int(4, "batch_size"), non_negative_int(0, "seed"), boolean(True, "shuffle")
    (4, 0, True)
"""
from accumulator.checks import boolean, non_negative_int, positive_int

__all__ = ["boolean", "non_negative_int", "positive_int"]
