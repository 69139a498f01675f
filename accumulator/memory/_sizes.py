"""Sizes as text: a memory size read from what a user typed, and bytes written as people read them.

Private to ``accumulator.memory``, which exports both: the tools' ``--memory-budget`` parses with it, the plan's
table and errors write with it, and the measuring child writes where it stopped a size.
"""
import re
from fractions import Fraction

_UNITS = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(?:([KMGT])i?)?B?\s*$", re.IGNORECASE)
# Past this a size is a typo, not memory: an exbibyte.
_LARGEST = 2 ** 60


def parse_size(text):
    """Bytes from ``text``: a number and an optional binary unit K, M, G or T (``6G``, ``6Gi``, ``6GiB``: 6 x 2**30).

    Example:
        >>> parse_size("512MiB"), parse_size("6Gi"), parse_size("1.5 GiB"), parse_size("4096")
        (536870912, 6442450944, 1610612736, 4096)
        >>> parse_size("lots")
        Traceback (most recent call last):
        ...
        ValueError: expected a size such as 512MiB, 6GiB or 6G, got 'lots'
        >>> parse_size("0.5")
        Traceback (most recent call last):
        ...
        ValueError: a size must be at least 1 byte, got '0.5' (0 bytes)
    """
    match = _SIZE.match(str(text))
    shown = repr(text) if len(str(text)) <= 24 else repr(str(text)[:20] + "...")
    if not match:
        raise ValueError(f"expected a size such as 512MiB, 6GiB or 6G, got {shown}")
    size = int(Fraction(match.group(1)) * _UNITS[(match.group(2) or "").upper()])
    if size < 1:
        raise ValueError(f"a size must be at least 1 byte, got {shown} ({size} bytes)")
    if size > _LARGEST:
        raise ValueError(f"a size must be at most 1 EiB, got {shown}")
    return size


def format_size(size):
    """``size`` bytes as people read them, in MiB below a GiB and in GiB above.

    Example:
        >>> format_size(536870912), format_size(6442450944)
        ('512.0 MiB', '6.00 GiB')
    """
    return f"{size / 2 ** 30:.2f} GiB" if size >= 2 ** 30 else f"{size / 2 ** 20:.1f} MiB"
