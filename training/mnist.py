"""MNIST as a ``training.task.Task``, and where its files come from.

Everything MNIST-specific that the training loop needs is wired here from
``data.mnist`` (the files and pipelines) and ``models.mnist`` (the network
and its loss); the loop itself knows none of it.
"""
import functools
import os
import tempfile

import data.mnist  # read MNIST_URL at call time, so tests can patch it
from data.idx import SPLIT_FILES, MnistFormatError, validate_mnist_dir, write_synthetic_mnist
from data.mnist import (DEFAULT_DATA_DIR, MnistUnavailableError, ensure_mnist, load_mnist_split,
                        mnist_batches, mnist_windows)
from models.mnist import MnistDenseNet, mnist_loss
from training.errors import TrainingError
from training.outputs import check_writable, claim_for_synthetic, is_synthetic
from training.task import Task

# A tenth of MNIST: enough updates at the default settings to pass 95% in two epochs.
SYNTHETIC_SIZES = {"train": 6000, "test": 1000}
SYNTHETIC_DATA_SEED = 0
# Written into a folder before --synthetic fills it, so that every later run can tell the
# look-alike from MNIST, even in a folder whose writing was cut short.
SYNTHETIC_MARKER = "SYNTHETIC_NOT_MNIST.txt"


def mnist_task(data_dir):
    """MNIST in ``data_dir`` (``train/`` and ``test/``) for the dense network of the quick-start.

    The files are checked now (``MnistFormatError`` names a bad one), not
    at the first batch, and decoded into memory once (``data.mnist.load_mnist_split``):
    every epoch then reads numpy arrays, leaving both cores to the training step.

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> write_synthetic_mnist(folder, n_train=64, n_test=32)
        {'train': 64, 'test': 32}
        >>> mnist_task(folder).description == f"MNIST from {folder}: 64 train / 32 test samples"
        True
    """
    sizes = validate_mnist_dir(data_dir)
    train = load_mnist_split(os.path.join(data_dir, "train"))
    test = load_mnist_split(os.path.join(data_dir, "test"))
    name = "synthetic MNIST look-alike" if is_synthetic(data_dir, SYNTHETIC_MARKER) else "MNIST"
    return Task(
        description=f"{name} from {data_dir}: "
                    f"{sizes['train']} train / {sizes['test']} test samples",
        train_samples=sizes["train"],
        make_net=MnistDenseNet,
        make_loss=functools.partial(mnist_loss, "sum"),
        train_windows=functools.partial(mnist_windows, train),
        test_batches=functools.partial(mnist_batches, test),
    )


def _local_problem(data_dir):
    if not os.path.isdir(data_dir):
        return None
    try:
        validate_mnist_dir(data_dir)
    except MnistFormatError as error:
        return str(error)
    return None


def _downloaded(data_dir, url):
    if is_synthetic(data_dir, SYNTHETIC_MARKER):
        raise TrainingError(f"{data_dir} holds the synthetic look-alike that --synthetic wrote, not MNIST "
                            f"({SYNTHETIC_MARKER}): add --synthetic to train on it, or choose another --data-dir")
    local_problem = _local_problem(data_dir)
    if local_problem or not os.path.isdir(data_dir):  # to be downloaded into
        check_writable("--data-dir", data_dir, folder=True)
    try:
        return ensure_mnist(data_dir, url=url or data.mnist.MNIST_URL)
    except MnistUnavailableError as error:
        # The download message alone would hide why the files already there were not used.
        if local_problem:
            raise MnistUnavailableError(f"The MNIST files in {data_dir} are not usable: {local_problem}\n"
                                        f"{error}") from None
        raise


def _mnist_files(folder):
    """The MNIST-named files in ``folder``, in its split folders or loose."""
    places = [os.path.join(folder, split, name) for split, names in SPLIT_FILES.items() for name in names]
    places += [os.path.join(folder, name) for names in SPLIT_FILES.values() for name in names]
    return [path for path in places if os.path.exists(path)]


def _synthetic(folder):
    found = _mnist_files(folder)
    held = f"MNIST files that --synthetic did not write ({found[0]})" if found else None
    claim_for_synthetic(folder, DEFAULT_DATA_DIR, "real MNIST", held, SYNTHETIC_MARKER,
                        "This folder holds a synthetic MNIST look-alike written by scripts/train_mnist.py --synthetic "
                        f"(seed {SYNTHETIC_DATA_SEED}); it is not MNIST. Runs without --synthetic refuse it.\n")
    try:
        if validate_mnist_dir(folder) == SYNTHETIC_SIZES:
            return folder  # written by an earlier synthetic run: the same seed wrote the same bytes
    except MnistFormatError:
        pass  # cut short or damaged, and marked: ours to write again
    write_synthetic_mnist(folder, n_train=SYNTHETIC_SIZES["train"], n_test=SYNTHETIC_SIZES["test"],
                          seed=SYNTHETIC_DATA_SEED)
    return folder


def prepare_mnist(data_dir, synthetic, url, stack):
    """The folder holding ``train/`` and ``test/``: found, downloaded, or written.

    Real MNIST (``synthetic`` False) is used from ``data_dir`` (default
    ``DEFAULT_DATA_DIR``) or downloaded from ``url`` (default
    ``data.mnist.MNIST_URL``), unless ``data_dir`` holds the synthetic
    look-alike. A synthetic set (``SYNTHETIC_SIZES``) is written into
    ``data_dir``, marked with ``SYNTHETIC_MARKER``, or into a temporary
    folder that ``stack`` (a ``contextlib.ExitStack``) removes; never into
    ``DEFAULT_DATA_DIR`` nor beside MNIST files it did not write. A
    folder to be written must be writable (``training.outputs.check_writable``).
    Raises ``MnistUnavailableError``, ``MnistFormatError`` or
    ``TrainingError`` with a message meant for the user.

    Example:
        >>> import contextlib
        >>> with contextlib.ExitStack() as stack:
        ...     folder = prepare_mnist(None, synthetic=True, url=None, stack=stack)
        ...     sorted(os.listdir(folder))
        ['SYNTHETIC_NOT_MNIST.txt', 'test', 'train']
        >>> os.path.exists(folder)
        False
    """
    if not synthetic:
        return _downloaded(data_dir or DEFAULT_DATA_DIR, url)
    return _synthetic(data_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix="mnist_synthetic_")))
