"""Writing a file so that a crash mid-write never leaves it half-written, and finding what a killed write left.

Public as ``accumulator.core.checkpoints.write_atomically`` and ``unfinished_writes``: the checkpoints write
through it, and so do the tools' logs, plots and data files.
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
    removed and ``path`` is left as it was. The temporary ends as ``path``
    does, extension included, so a writer that appends its own extension to
    a name without it (``mindspore.save_checkpoint``, ``numpy.save``) writes
    the temporary itself.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "logs", "run.txt")
        >>> def write(temporary):
        ...     with open(temporary, "w") as f:
        ...         f.write("epoch 1")
        >>> write_atomically(path, write)
        >>> open(path).read(), os.listdir(os.path.dirname(path))
        ('epoch 1', ['run.txt'])
    """
    folder, name = os.path.split(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp" + os.path.splitext(name)[1])
    os.close(fd)
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def unfinished_writes(path: str) -> List[str]:
    """The temporary files that ``write_atomically(path, ...)`` calls killed mid-write left beside ``path``.

    A process killed with SIGKILL cannot remove its temporary file; it holds
    a partial copy and is never read. Remove them once no other process may
    be writing ``path``.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "epoch_001.ckpt")
        >>> for name in (".epoch_001.ckpt.k3x9q_1a.tmp.ckpt", ".epoch_001.ckpt.z8_w2m0c.tmp.tmp",
        ...              ".epoch_001.ckpt.keep"):
        ...     open(os.path.join(os.path.dirname(path), name), "w").close()
        >>> [os.path.basename(name) for name in unfinished_writes(path)]
        ['.epoch_001.ckpt.k3x9q_1a.tmp.ckpt', '.epoch_001.ckpt.z8_w2m0c.tmp.tmp']
    """
    folder, name = os.path.split(os.path.abspath(path))
    if not os.path.isdir(folder):
        return []
    # write_atomically's temporary: "." + name + ".", mkstemp's random part, ".tmp", then path's extension;
    # mindspore.save_checkpoint writes its own ".tmp" file named after ours before renaming it (a kill mostly
    # lands there).
    left = re.compile(re.escape(f".{name}.") + r"[A-Za-z0-9_]+\.tmp(\..*)?$")
    return sorted(os.path.join(folder, entry) for entry in os.listdir(folder) if left.match(entry))
