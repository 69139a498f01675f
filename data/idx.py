"""Read, write and check MNIST's idx files in the layout MindSpore reads.

An idx file is a big-endian header, ``magic`` then one uint32 per
dimension, followed by the raw uint8 values. MNIST uses magic 2051 for
images ``[n, 28, 28]`` and 2049 for labels ``[n]``.

``mindspore.dataset.MnistDataset(split_dir)`` reads whichever of the
train (``train-*``) or test (``t10k-*``) pairs sit directly in
``split_dir``; the tutorial's ``MNIST_Data.zip`` unpacks to
``MNIST_Data/train/`` and ``MNIST_Data/test/``, one pair in each.
"""
import os
import struct

import numpy as np

from accumulator.core.checkpoints import write_atomically
from common.checks import positive_int

IMAGE_MAGIC = 2051
LABEL_MAGIC = 2049
IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10

# split folder -> (images file, labels file)
SPLIT_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


class MnistFormatError(ValueError):
    """An MNIST idx file is missing, truncated or not what its name says."""


def _write_bytes(path, data):
    # A crash mid-write must never leave a file that looks complete.
    def write(temporary):
        with open(temporary, "wb") as f:
            f.write(data)

    write_atomically(path, write)


def _checked_uint8(name, array, ndim):
    array = np.asarray(array)
    if array.dtype != np.uint8 or array.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D uint8 array, got {array.ndim}-D {array.dtype}")
    return np.ascontiguousarray(array)


def write_idx_images(path, images):
    """Write a ``[n, rows, cols]`` uint8 array as an idx3 image file.

    Example:
        >>> write_idx_images("train-images-idx3-ubyte", np.zeros((5, 28, 28), np.uint8))
    """
    images = _checked_uint8("images", images, 3)
    _write_bytes(path, struct.pack(">4I", IMAGE_MAGIC, *images.shape) + images.tobytes())


def write_idx_labels(path, labels):
    """Write a ``[n]`` uint8 array as an idx1 label file.

    Example:
        >>> write_idx_labels("train-labels-idx1-ubyte", np.arange(5, dtype=np.uint8))
    """
    labels = _checked_uint8("labels", labels, 1)
    _write_bytes(path, struct.pack(">2I", LABEL_MAGIC, *labels.shape) + labels.tobytes())


def read_idx_header(path):
    """Return ``(magic, dims)`` of an idx file, ``dims`` a tuple of ints.

    The low byte of the magic number is the number of dimensions.

    Example:
        >>> write_idx_images("images", np.zeros((5, 28, 28), np.uint8))
        >>> read_idx_header("images")
        (2051, (5, 28, 28))
    """
    with open(path, "rb") as f:
        head = f.read(4)
        if len(head) < 4:
            raise MnistFormatError(f"{path}: file too short for an idx header ({len(head)} bytes)")
        (magic,) = struct.unpack(">I", head)
        ndim = magic & 0xFF
        raw_dims = f.read(4 * ndim)
    if len(raw_dims) < 4 * ndim:
        raise MnistFormatError(f"{path}: header promises {ndim} dimensions but the file ends first")
    return magic, struct.unpack(f">{ndim}I", raw_dims)


def read_idx(path):
    """Read a whole uint8 idx file into an array shaped as its header says.

    Example:
        >>> write_idx_labels("labels", np.array([5, 0, 4], np.uint8))
        >>> read_idx("labels")
        array([5, 0, 4], dtype=uint8)
    """
    _, dims = read_idx_header(path)
    with open(path, "rb") as f:
        f.seek(4 + 4 * len(dims))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def _check_file(path, magic, trailing_dims):
    """Check one idx file's magic, shape and size; return its sample count."""
    if not os.path.isfile(path):
        raise MnistFormatError(f"{path}: file is missing")
    found_magic, dims = read_idx_header(path)
    if found_magic != magic:
        raise MnistFormatError(f"{path}: magic number is {found_magic}, expected {magic}")
    if tuple(dims[1:]) != trailing_dims:
        expected_dims = ", ".join(["n", *map(str, trailing_dims)])
        raise MnistFormatError(f"{path}: dimensions are {dims}, expected ({expected_dims})")
    expected = 4 + 4 * len(dims) + int(np.prod(dims))
    size = os.path.getsize(path)
    if size != expected:
        raise MnistFormatError(f"{path}: file is {size} bytes, its header {dims} needs {expected}")
    return dims[0]


def _check_labels(path):
    # MindSpore's sparse cross-entropy takes a label outside the classes
    # without an error, so a run would train on it: caught here, by position.
    labels = read_idx(path)
    bad = np.flatnonzero(labels >= NUM_CLASSES)
    if bad.size:
        others = f" (and {bad.size - 1} more)" if bad.size > 1 else ""
        raise MnistFormatError(f"{path}: label {labels[bad[0]]} at index {bad[0]} is not a class in "
                               f"[0, {NUM_CLASSES}){others}")


def validate_split(folder, split):
    """Check the image and label files of ``split`` ("train" or "test") in ``folder``.

    Returns the number of samples; raises :class:`MnistFormatError` naming
    the file and the fault (a bad label: its value and index).

    Example:
        >>> write_synthetic_mnist("MNIST_Data", n_train=300, n_test=100)
        {'train': 300, 'test': 100}
        >>> validate_split("MNIST_Data/train", "train")
        300
        >>> write_idx_labels("MNIST_Data/train/train-labels-idx1-ubyte", np.full(300, 12, np.uint8))
        >>> validate_split("MNIST_Data/train", "train")
        Traceback (most recent call last):
        data.idx.MnistFormatError: MNIST_Data/train/train-labels-idx1-ubyte: label 12 at index 0 is not a class in [0, 10) (and 299 more)
    """
    images_name, labels_name = SPLIT_FILES[split]
    images_path = os.path.join(folder, images_name)
    labels_path = os.path.join(folder, labels_name)
    n_images = _check_file(images_path, IMAGE_MAGIC, IMAGE_SHAPE)
    n_labels = _check_file(labels_path, LABEL_MAGIC, ())
    if n_images != n_labels:
        raise MnistFormatError(f"{images_path} holds {n_images} images but {labels_path} holds {n_labels} labels")
    _check_labels(labels_path)
    return n_images


def validate_mnist_dir(folder):
    """Check ``folder/train`` and ``folder/test`` hold valid MNIST idx files.

    Returns ``{"train": n_train, "test": n_test}``; raises
    :class:`MnistFormatError` naming the first bad file.

    Example:
        >>> write_synthetic_mnist("MNIST_Data", n_train=300, n_test=100)
        {'train': 300, 'test': 100}
        >>> validate_mnist_dir("MNIST_Data")
        {'train': 300, 'test': 100}
    """
    return {split: validate_split(os.path.join(folder, split), split) for split in SPLIT_FILES}


def _synthetic_prototypes(rng):
    # Each class is a few Gaussian blobs at fixed random places: distinct
    # enough for a dense net to learn quickly, yet not a single lit pixel.
    rows, cols = np.mgrid[0:IMAGE_SHAPE[0], 0:IMAGE_SHAPE[1]]
    prototypes = np.zeros((NUM_CLASSES,) + IMAGE_SHAPE)
    for prototype in prototypes:
        for row, col, sigma in zip(rng.uniform(5, 23, 3), rng.uniform(5, 23, 3), rng.uniform(2, 4, 3)):
            prototype += np.exp(-((rows - row) ** 2 + (cols - col) ** 2) / (2 * sigma**2))
    return 255 * prototypes / prototypes.max(axis=(1, 2), keepdims=True)


def _synthetic_samples(rng, prototypes, n):
    labels = rng.integers(0, NUM_CLASSES, n).astype(np.uint8)
    noise = rng.normal(0, 50, (n,) + IMAGE_SHAPE)
    images = np.clip(prototypes[labels] + noise, 0, 255).astype(np.uint8)
    return images, labels


def write_synthetic_mnist(folder, n_train=1000, n_test=200, seed=0):
    """Write a learnable MNIST look-alike to ``folder/train`` and ``folder/test``.

    Every class is a fixed random pattern plus pixel noise, shared by both
    splits, so a dense net trained on ``train`` scores well on ``test``.
    The same ``seed`` writes the same bytes. Returns the sample counts.

    Example:
        >>> write_synthetic_mnist("fake_mnist", n_train=200, n_test=100, seed=1)
        {'train': 200, 'test': 100}
    """
    n_train, n_test = positive_int(n_train, "n_train"), positive_int(n_test, "n_test")
    rng = np.random.default_rng(seed)
    prototypes = _synthetic_prototypes(rng)
    for split, n in (("train", n_train), ("test", n_test)):
        images, labels = _synthetic_samples(rng, prototypes, n)
        images_name, labels_name = SPLIT_FILES[split]
        write_idx_images(os.path.join(folder, split, images_name), images)
        write_idx_labels(os.path.join(folder, split, labels_name), labels)
    return validate_mnist_dir(folder)
