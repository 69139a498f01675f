"""Before any work: can the run write every file and folder it was asked for?

A run writes its checkpoints, JSON log and plot only after its first
epoch, so a path that cannot be written must be found before training
starts, and without creating anything: a run that then stops early (bad
data, Ctrl-C) leaves no empty folder behind.
"""
import os
import tempfile

from data.download import write_text
from training.arguments import flag
from training.checkpoints import check_ckpt_dir
from training.errors import TrainingError

# The TrainConfig fields that name outputs, and whether each is a folder.
OUTPUTS = {"ckpt_dir": True, "log_json": False, "plot": False}


def check_writable(flag, path, folder=False):
    """Raises ``TrainingError`` naming ``flag`` and ``path`` unless ``path`` can be written; creates nothing.

    ``path`` is a file (replaced if it exists), or with ``folder`` a folder
    to write files in. What does not exist yet must be creatable: the
    nearest folder that exists on the way is tried with a temporary file,
    which is removed again (a permission check would pass anything for root).

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> check_writable("--log-json", os.path.join(folder, "logs", "run.json"))
        >>> check_writable("--log-json", folder)
        Traceback (most recent call last):
        ...
        training.errors.TrainingError: --log-json /...: is a folder; name a file
        >>> os.listdir(folder)
        []
    """
    if os.path.exists(path) and os.path.isdir(path) != folder:
        raise TrainingError(f"{flag} {path}: is a file; name a folder" if folder
                            else f"{flag} {path}: is a folder; name a file")
    nearest = os.path.abspath(path if folder else os.path.dirname(os.path.abspath(path)))
    while not os.path.exists(nearest):
        nearest = os.path.dirname(nearest)
    if not os.path.isdir(nearest):
        raise TrainingError(f"{flag} {path}: {nearest} is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=nearest):
            pass
    except OSError as error:
        raise TrainingError(f"{flag} {path}: cannot create a file in {nearest} ({error.strerror})") from None


def is_synthetic(data_dir, marker):
    """True if ``data_dir`` holds what ``--synthetic`` wrote: ``claim_for_synthetic`` left ``marker`` there.

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> is_synthetic(folder, "SYNTHETIC.txt")
        False
        >>> claim_for_synthetic(folder, "MNIST_Data", "real MNIST", None, "SYNTHETIC.txt", "not MNIST")
        >>> is_synthetic(folder, "SYNTHETIC.txt")
        True
    """
    return os.path.isfile(os.path.join(data_dir, marker))


def claim_for_synthetic(folder, real_folder, real_name, held, marker, note):
    """Lets ``--synthetic`` write into ``--data-dir`` ``folder``: checks it, then marks it with ``marker``.

    Raises ``TrainingError`` naming the flag and the folder for the folder
    the real data (``real_name``) is downloaded to, and for an unmarked
    folder that holds real data files (``held`` says which; None when it
    holds none). An unmarked folder gets the file ``marker`` holding
    ``note``, so runs without ``--synthetic`` can refuse it later.

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> claim_for_synthetic(folder, "MNIST_Data", "real MNIST", None, "SYNTHETIC.txt", "not MNIST")
        >>> os.listdir(folder)
        ['SYNTHETIC.txt']
        >>> claim_for_synthetic(tempfile.mkdtemp(), "MNIST_Data", "real MNIST", "train-images-idx3-ubyte",
        ...                     "SYNTHETIC.txt", "not MNIST")
        Traceback (most recent call last):
        ...
        training.errors.TrainingError: --synthetic will not write into --data-dir /...: it holds train-images-idx3-ubyte; choose another folder
    """
    check_writable("--data-dir", folder, folder=True)
    refusal = f"--synthetic will not write into --data-dir {folder}"
    if os.path.realpath(folder) == os.path.realpath(real_folder):
        raise TrainingError(f"{refusal}: {real_name} is downloaded there; choose another folder, or leave out "
                            "--data-dir for a temporary one")
    if is_synthetic(folder, marker):
        return
    if held:
        raise TrainingError(f"{refusal}: it holds {held}; choose another folder")
    write_text(os.path.join(folder, marker), note)


def check_outputs(config):
    """Checks every output of ``config`` before any work: paths writable, ``ckpt_dir`` fit to use.

    Raises ``TrainingError`` naming the flag and the path (see
    ``check_writable`` and ``training.checkpoints.check_ckpt_dir``);
    creates and changes nothing.

    Example:
        >>> import tempfile
        >>> from training.config import TrainConfig
        >>> check_outputs(TrainConfig(ckpt_dir=os.path.join(tempfile.mkdtemp(), "runs", "a")))
        >>> check_outputs(TrainConfig(plot="/proc/run.png"))
        Traceback (most recent call last):
        ...
        training.errors.TrainingError: --plot /proc/run.png: cannot create a file in /proc (...)
    """
    for name, folder in OUTPUTS.items():
        path = getattr(config, name)
        if path:
            check_writable(flag(name), path, folder)
    check_ckpt_dir(config)
