"""Argument checks for the data, the models and the training tools: each returns the value or raises ``ValueError``.

The library has its own (``accumulator._internal.checks``): it is installed alone, so neither imports the other.

Example:
    >>> positive_int(4, "batch_size"), non_negative_int(0, "seed"), boolean(True, "shuffle")
    (4, 0, True)
    >>> positive_int(True, "epochs")
    Traceback (most recent call last):
    ...
    ValueError: epochs must be a positive int, got True
"""
import numbers


def _int_from(value, name, least, kind):
    # bool is an int to Python, never a count to a user.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return int(value)


def positive_int(value, name):
    """``value`` as an int >= 1, or a ValueError naming ``name``.

    Example:
        >>> positive_int(2.0, "batch_size")
        Traceback (most recent call last):
        ...
        ValueError: batch_size must be a positive int, got 2.0
    """
    return _int_from(value, name, 1, "a positive int")


def non_negative_int(value, name):
    """``value`` as an int >= 0, or a ValueError naming ``name``.

    Example:
        >>> non_negative_int(-1, "seed")
        Traceback (most recent call last):
        ...
        ValueError: seed must be a non-negative int, got -1
    """
    return _int_from(value, name, 0, "a non-negative int")


def boolean(value, name):
    """``value`` if it is True or False, else a ValueError naming ``name``.

    Example:
        >>> boolean(1, "shuffle")
        Traceback (most recent call last):
        ...
        ValueError: shuffle must be True or False, got 1
    """
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value
