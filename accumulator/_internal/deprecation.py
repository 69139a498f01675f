"""Renamed public names: the old one keeps working for one minor version and warns once."""
import warnings

warned = set()  # the old names warned about in this process


def deprecated(old, new):
    """Warns once per process (``DeprecationWarning``) that ``old`` is now ``new``.

    Example:
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     deprecated("example.old", "example.new"); deprecated("example.old", "example.new")
        >>> [str(w.message) for w in caught]
        ['example.old is deprecated and will be removed in the next minor version: use example.new']
    """
    if old in warned:
        return
    warned.add(old)
    warnings.warn(f"{old} is deprecated and will be removed in the next minor version: use {new}",
                  DeprecationWarning, stacklevel=3)
