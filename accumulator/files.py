"""Writing a file so that a crash mid-write never leaves it half-written (the checkpoints of ``state``).

The tools take these from ``common.files``.
"""
import os
import re
import tempfile
from typing import Any, Callable, List


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


def unfinished_writes(path: str) -> List[str]:
    """The temporary files that ``write_atomically(path, ...)`` calls killed mid-write left beside ``path``.

    A process killed with SIGKILL cannot remove its temporary file; it
    holds a partial copy and is never read. Remove them once no other
    process may be writing ``path``.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "epoch_001.ckpt")
        >>> for name in (".epoch_001.ckpt.k3x9q_1a.tmp.ckpt", ".epoch_001.ckpt.z8_w2m0c.tmp.tmp", ".epoch_001.ckpt.keep"):
        ...     open(os.path.join(os.path.dirname(path), name), "w").close()
        >>> [os.path.basename(name) for name in unfinished_writes(path)]
        ['.epoch_001.ckpt.k3x9q_1a.tmp.ckpt', '.epoch_001.ckpt.z8_w2m0c.tmp.tmp']
        >>> write_atomically(path, lambda temporary: open(temporary, "w").close())
        >>> len(unfinished_writes(path))  # a finished write leaves none of its own
        2
    """
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return []
    prefix, _ = _temporary_name(path)
    # mkstemp's random part, then ".tmp" and whatever followed: ours ends as
    # ``path`` does, and mindspore.save_checkpoint writes its own ``.tmp``
    # file named after ours before renaming it (a kill mostly lands there).
    left = re.compile(re.escape(prefix) + r"[A-Za-z0-9_]+\.tmp(\..*)?$")
    return sorted(os.path.join(folder, name) for name in os.listdir(folder) if left.match(name))
