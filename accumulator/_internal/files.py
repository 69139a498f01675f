"""Writing a file so that a crash mid-write never leaves it half-written (the checkpoints of ``state``).

A write killed outright leaves its temporary beside the file: ``.NAME.<random>.tmp<NAME's extension>``,
or the ``.tmp`` file mindspore.save_checkpoint names after it; the tools' ``common.files.unfinished_writes``
finds both by these names.
"""
import os
import tempfile
from typing import Any, Callable


def write_atomically(path: str, write: Callable[[str], Any]) -> None:
    """Calls ``write(temporary)`` on a file beside ``path``, then renames it over ``path``.

    The rename is atomic on one file system, so a reader (or a run resumed
    after a crash) sees either the old file whole or the new one whole. The
    parent folder is created if needed; on any failure the temporary file is
    removed and ``path`` is left as it was.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "logs", "run.txt")
        >>> def write(temporary):
        ...     with open(temporary, "w") as f:
        ...         f.write("epoch 1")
        >>> write_atomically(path, write)
        >>> open(path).read()
        'epoch 1'
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    prefix, suffix = _temporary_name(path)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
    os.close(fd)
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def _temporary_name(path):
    # Hidden, marked .tmp, and ending as ``path`` does: writers such as
    # mindspore.save_checkpoint append their own extension to a name without it.
    return f".{os.path.basename(path)}.", ".tmp" + os.path.splitext(path)[1]
