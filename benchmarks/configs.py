"""What one benchmark run measures: the nets, the runtime settings, the configurations.

A configuration is a plain dict (JSON goes to the worker as it is): ``kind``
(``"speed"`` or ``"memory"``), ``net`` and its sizes (``benchmarks.nets``),
``contender``, ``mode``, ``blocking`` (the runtime setting), ``optimizer``,
``batch`` B and ``accumulate`` N. The value parsers below check the command line's values
before any worker starts.
"""
import argparse
import math

from benchmarks.contenders import CONTENDERS
from benchmarks.nets import NETS
MODES = ("graph", "pynative")
BLOCKING_ENV = "MS_DEV_HOST_BLOCKING_RUN"
# "1": variable set, "": removed from the worker's environment.
BLOCKING_SETTINGS = ("1", "")
# The plain step takes the whole batch at once; the other two take N micro-steps of B.
SWEPT = ("plain_full", "accumulator", "window")


def make_configs(nets, modes, contenders, batch, accumulate, sweep=(), sweep_net="wide", optimizer="sgd"):
    """The measured configurations, in the order one repeat runs them.

    ``contenders`` are names in ``CONTENDERS``, ``optimizer`` one of
    ``contenders.OPTIMIZERS``. Each row runs with the blocking runtime on
    and off. ``sweep`` adds one memory row per N for each of ``SWEPT``.

    Example:
        >>> configs = make_configs(["mnist"], ["graph"], ["plain_micro"], batch=32, accumulate=4, sweep=[8])
        >>> [(c["kind"], c["contender"], c["blocking"], c["accumulate"]) for c in configs]  # doctest: +NORMALIZE_WHITESPACE
        [('speed', 'plain_micro', '1', 4), ('speed', 'plain_micro', '', 4),
         ('memory', 'plain_full', '1', 8), ('memory', 'accumulator', '1', 8), ('memory', 'window', '1', 8)]
    """
    configs = []
    for net in nets:
        for mode in modes:
            for name in contenders:
                if mode not in CONTENDERS[name].modes:
                    continue
                for blocking in BLOCKING_SETTINGS:
                    configs.append(dict(kind="speed", net=net, **NETS[net], contender=name, mode=mode,
                                        blocking=blocking, optimizer=optimizer, batch=batch, accumulate=accumulate))
    # Peak memory against effective batch N x B: the plain step takes the
    # whole batch at once, the accumulator keeps B and takes N micro-steps.
    for n in sweep:
        for name in SWEPT:
            configs.append(dict(kind="memory", net=sweep_net, **NETS[sweep_net], contender=name, mode="graph",
                                blocking="1", optimizer=optimizer, batch=batch, accumulate=n))
    return configs


def config_key(config):
    """What tells configurations apart; the repeats of one share it.

    Example:
        >>> config_key(dict(kind="speed", net="mnist", contender="window", mode="graph", blocking="1",
        ...                 accumulate=8, batch=32))
        ('speed', 'mnist', 'window', 'graph', '1', 8)
    """
    return tuple(config[k] for k in ("kind", "net", "contender", "mode", "blocking", "accumulate"))


def _invalid(value, choices):
    return argparse.ArgumentTypeError(
        f"invalid choice: {value!r} (choose from {', '.join(repr(c) for c in choices)})")


def name_list(choices, allow_empty=False):
    """An argparse ``type``: a comma list whose every name is one of ``choices``.

    Returns the names as a list. With ``allow_empty``, ``''`` gives ``[]``.

    Example:
        >>> name_list(["mnist", "wide"])("wide,mnist")
        ['wide', 'mnist']
        >>> name_list(["mnist", "wide"])("mnist,foo")
        Traceback (most recent call last):
        argparse.ArgumentTypeError: invalid choice: 'foo' (choose from 'mnist', 'wide')
    """
    choices = list(choices)

    def parse(text):
        if allow_empty and text.strip() == "":
            return []
        names = [name.strip() for name in text.split(",")]
        for name in names:
            if name not in choices:
                raise _invalid(name, choices)
        return names
    parse.__name__ = "name list"
    return parse


def positive(convert):
    """An argparse ``type``: a finite number above zero, read by ``convert`` (``int`` or ``float``).

    Example:
        >>> positive(int)("8")
        8
        >>> positive(float)("0")
        Traceback (most recent call last):
        argparse.ArgumentTypeError: invalid value: '0' (must be a number above 0)
    """
    def parse(text):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or value <= 0:
            kind = "a whole number" if convert is int else "a number"
            raise argparse.ArgumentTypeError(f"invalid value: {text!r} (must be {kind} above 0)")
        return value
    parse.__name__ = f"positive {convert.__name__}"
    return parse


def positive_int_list(text):
    """An argparse ``type``: a comma list of whole numbers above zero; ``''`` gives ``[]``.

    Example:
        >>> positive_int_list("1,4,16")
        [1, 4, 16]
        >>> positive_int_list("")
        []
        >>> positive_int_list("4,-1")
        Traceback (most recent call last):
        argparse.ArgumentTypeError: invalid value: '-1' (must be a whole number above 0)
    """
    if text.strip() == "":
        return []
    return [positive(int)(value.strip()) for value in text.split(",")]
