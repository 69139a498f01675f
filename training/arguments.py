"""argparse types for the training tools: text in, a checked value out, errors in argparse's words.

Each raises ``argparse.ArgumentTypeError``, which argparse turns into a usage
line and exit status 2; ``training.config.TrainConfig`` checks the values again.
``flag`` and ``in_flags`` write a config field as the flag that sets it, so
that messages name what the user typed.
"""
import argparse
import math
import re

from accumulator.memory import parse_size
from training.config import DEVICES


def int_at_least(minimum, description):
    """argparse type factory: an int >= ``minimum``, described in errors as ``description``.

    Example:
        >>> int_at_least(1, "a positive integer")("32")
        32
        >>> int_at_least(1, "a positive integer")("0")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a positive integer, got 0
    """
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {description}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {description}, got {value}")
        return value
    return parse


positive_int = int_at_least(1, "a positive integer")
non_negative_int = int_at_least(0, "a non-negative integer")


def positive_float(text):
    """argparse type: a finite float > 0.

    Example:
        >>> positive_float("1e-2")
        0.01
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def fraction(text):
    """argparse type: a number strictly between 0 and 1 (``--ema``'s decay).

    Example:
        >>> fraction("0.999")
        0.999
        >>> fraction("1")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a number in (0, 1), got 1
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1), got {text}")
    return value


def memory_size(text):
    """argparse type: a memory size such as 512MiB, 6GiB or 6G, in bytes (``accumulator.memory.parse_size``).

    Example:
        >>> memory_size("6G")
        6442450944
        >>> memory_size("six")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: expected a size such as 512MiB, 6GiB or 6G, got 'six'
    """
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def device_target(text):
    """argparse type: CPU, GPU or Ascend, any case, returned as MindSpore spells it.

    Example:
        >>> device_target("ascend")
        'Ascend'
    """
    for device in DEVICES:
        if text.lower() == device.lower():
            return device
    raise argparse.ArgumentTypeError(f"unknown device {text!r}: choose {', '.join(DEVICES[:-1])} or {DEVICES[-1]}")


def one_of(*names):
    """argparse type factory: one of ``names``, any case, returned in lower case.

    Example:
        >>> one_of("sgd", "adam")("Adam")
        'adam'
    """
    def parse(text):
        if text.lower() not in names:
            raise argparse.ArgumentTypeError(f"unknown value {text!r}: choose {', '.join(names)}")
        return text.lower()
    return parse


def flag(name):
    """The command-line flag that sets the config field ``name``.

    Example:
        >>> flag("accumulate_step")
        '--accumulate-step'
    """
    return "--" + name.replace("_", "-")


# A field as messages write it: ``name=value`` (a repr, or a word), or a bare snake_case name.
_FIELD = re.compile(r"\b([a-z][a-z0-9_]*)(?:=('[^']*'|[^\s,;:]+))?")


def in_flags(message, fields):
    """``message`` (a config's ``ValueError``) with each of ``fields`` written as the flag that sets it.

    ``check=True`` becomes ``--check``, ``accumulate_step='auto'``
    becomes ``--accumulate-step auto``, a bare ``ckpt_dir`` ``--ckpt-dir``;
    other words, and one-word field names without a value, stay as they are.

    Example:
        >>> in_flags("accumulate_step='auto' changes N; driver='window' needs a fixed N; track_noise=True",
        ...          ("accumulate_step", "driver", "track_noise"))
        '--accumulate-step auto changes N; --driver window needs a fixed N; --track-noise'
    """
    def spell(match):
        name, value = match.groups()
        if name not in fields or (value is None and "_" not in name):
            return match.group(0)
        return flag(name) if value in (None, "True") else f"{flag(name)} {value.strip(chr(39))}"
    return _FIELD.sub(spell, message)
