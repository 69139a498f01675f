"""Files written whole, for the data, the models and the training tools: a crash mid-write never leaves half a file.

The library writes its checkpoints with its own atomic replace (``accumulator._internal.files``): it is installed
alone, so neither imports the other. ``unfinished_writes`` finds what a killed checkpoint write left.

Example:
    >>> write_atomically("run.txt", lambda temporary: open(temporary, "w").close())
    >>> unfinished_writes("run.txt")
    []
"""
import os
import re
import tempfile
from typing import Any, Callable, List


def write_atomically(path: str, write: Callable[[str], Any]) -> None:
    """Calls ``write(temporary)``, a path in a scratch folder beside ``path``, then renames it over ``path``.

    The rename is atomic on one file system, so a reader (or a run resumed
    after a crash) sees either the old file whole or the new one whole. The
    parent folder is created if needed; on any failure the scratch folder,
    with whatever the writer put there, is removed and ``path`` is left as it was.

    Example:
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
    # The temporary keeps path's own name, extension included: some writers append theirs to a name without it.
    with tempfile.TemporaryDirectory(dir=folder, prefix=f".{name}.", suffix=".partial") as scratch:
        write(os.path.join(scratch, name))
        os.replace(os.path.join(scratch, name), path)


def unfinished_writes(path: str) -> List[str]:
    """The temporary files that ``accumulator.save_checkpoint(path, ...)`` calls killed mid-write left beside ``path``.

    A process killed with SIGKILL cannot remove its temporary file; it
    holds a partial copy and is never read. Remove them once no other
    process may be writing ``path``.

    Example:
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
    # The library's temporary (accumulator/_internal/files.py): "." + name + ".", mkstemp's random part, ".tmp", then
    # path's extension; mindspore.save_checkpoint writes its own ".tmp" file named after ours before renaming
    # it (a kill mostly lands there).
    left = re.compile(re.escape(f".{name}.") + r"[A-Za-z0-9_]+\.tmp(\..*)?$")
    return sorted(os.path.join(folder, entry) for entry in os.listdir(folder) if left.match(entry))
