"""Downloads that leave nothing behind: fetched into a hidden staging folder, installed only once checked."""
import contextlib
import os
import shutil
import tempfile

from download import download

from accumulator.core.checkpoints import write_atomically


def missing_folders(folder):
    """The folders on the way to ``folder`` that do not exist yet, outermost first.

    Example:
        >>> import tempfile
        >>> root = tempfile.mkdtemp()
        >>> [os.path.relpath(f, root) for f in missing_folders(os.path.join(root, "a", "b"))]
        ['a', 'a/b']
    """
    missing = []
    folder = os.path.abspath(folder)
    while not os.path.exists(folder):
        missing.insert(0, folder)
        folder = os.path.dirname(folder)
    return missing


def remove_empty(folders):
    """Removes ``folders`` innermost first while they are empty; stops at the first that is not.

    Example:
        >>> import tempfile
        >>> root = tempfile.mkdtemp()
        >>> folders = missing_folders(os.path.join(root, "a", "b"))
        >>> os.makedirs(folders[-1])
        >>> remove_empty(folders)
        >>> os.listdir(root)
        []
    """
    for folder in reversed(folders):
        try:
            os.rmdir(folder)
        except FileNotFoundError:
            continue
        except OSError:
            return  # someone else put something there: leave it and its parents


@contextlib.contextmanager
def staged_download(url, data_dir, unavailable, kind="file"):
    """Fetches ``url`` into a hidden folder beside ``data_dir`` and yields that folder, for the caller to install from.

    ``kind="zip"`` unpacks the archive there; ``"file"`` saves it under the
    last part of ``url``'s path. The folder is removed afterwards, whatever
    happens; folders created on the way to ``data_dir`` are removed again
    unless the body finished (and so installed something). A failed fetch,
    or no folder to write in, raises ``unavailable(reason)``, ``reason``
    being one line (the last of what the ``download`` package says).

    Example:
        >>> import tempfile
        >>> where = os.path.join(tempfile.mkdtemp(), "new", "data")
        >>> with staged_download("http://127.0.0.1:9/input.txt", where, RuntimeError) as staging:
        ...     pass
        Traceback (most recent call last):
        ...
        RuntimeError: ...
        >>> os.path.exists(os.path.dirname(where))
        False
    """
    parent = os.path.dirname(os.path.abspath(data_dir))
    created = missing_folders(parent)
    try:
        os.makedirs(parent, exist_ok=True)
        # The .tmp suffix keeps a folder left by a killed process out of git.
        staging = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(data_dir))}.", suffix=".tmp",
                                   dir=parent)
    except OSError as error:
        remove_empty(created)
        raise unavailable(f"cannot write in {parent}: {error.strerror}") from error
    try:
        target = staging if kind == "zip" else os.path.join(staging, url.rstrip("/").rsplit("/", 1)[-1])
        try:
            download(url, target, kind=kind, replace=True, progressbar=False)
        except Exception as error:
            # download() wraps the cause in several lines; its last one says what went wrong.
            raise unavailable((str(error).strip().splitlines() or [type(error).__name__])[-1]) from error
        yield staging
        created = []  # installed: the folders on the way now lead to data_dir
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        remove_empty(created)


def write_text(path, text):
    """Writes ``text`` (UTF-8) to ``path`` atomically: a generated file, or the marker a tool leaves beside it.

    Example:
        >>> import tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "SYNTHETIC.txt")
        >>> write_text(path, "generated, not downloaded\\n")
        >>> open(path).read()
        'generated, not downloaded\\n'
    """
    def write(temporary):
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(text)

    write_atomically(path, write)
