"""Writing a file so that a crash mid-write never leaves it half-written."""
import os
import tempfile


def write_atomically(path, write):
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
    # Hidden, marked .tmp, and ending as ``path`` does: writers such as
    # mindspore.save_checkpoint append their own extension to a name without it.
    suffix = ".tmp" + os.path.splitext(path)[1]
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=suffix)
    os.close(fd)
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
