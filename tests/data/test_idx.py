"""MNIST idx files: round trip, header checks, synthetic data layout.

By hand: labels 3, 1, 4 written as an idx file read back as 3, 1, 4; ``n_test=0`` is refused with ``n_test must be
a positive int, got 0``.
"""
import os
import re
import shutil
import struct

import numpy as np
import pytest

from data.idx import (
    IMAGE_MAGIC,
    LABEL_MAGIC,
    SPLIT_FILES,
    MnistFormatError,
    read_idx,
    read_idx_header,
    validate_mnist_dir,
    write_idx_images,
    write_idx_labels,
    write_synthetic_mnist,
)


@pytest.fixture
def mnist_copy(synthetic_mnist_dir, tmp_path):
    """A private copy of the synthetic data set that a test may damage."""
    return shutil.copytree(synthetic_mnist_dir, tmp_path / "mnist")


def test_round_trip_keeps_bytes_and_header(tmp_path):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (7, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 7, dtype=np.uint8)
    write_idx_images(tmp_path / "images", images)
    write_idx_labels(tmp_path / "labels", labels)

    assert read_idx_header(tmp_path / "images") == (IMAGE_MAGIC, (7, 28, 28))
    assert read_idx_header(tmp_path / "labels") == (LABEL_MAGIC, (7,))
    np.testing.assert_array_equal(read_idx(tmp_path / "images"), images)
    np.testing.assert_array_equal(read_idx(tmp_path / "labels"), labels)
    # The exact layout MNIST uses: big-endian header, then raw bytes.
    raw = (tmp_path / "labels").read_bytes()
    assert raw[:8] == struct.pack(">II", 2049, 7) and raw[8:] == labels.tobytes()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


@pytest.mark.parametrize("bad", [np.zeros((3, 28, 28), np.float32), np.zeros((3, 784), np.uint8)])
def test_write_images_rejects_wrong_dtype_or_rank(tmp_path, bad):
    with pytest.raises(ValueError, match="3-D uint8"):
        write_idx_images(tmp_path / "images", bad)
    assert not os.listdir(tmp_path)


def test_failed_write_keeps_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "labels"
    write_idx_labels(path, np.arange(3, dtype=np.uint8))
    before = path.read_bytes()

    def fail(*_):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_idx_labels(path, np.arange(5, dtype=np.uint8))
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["labels"]


def test_synthetic_dir_has_mindspore_layout(synthetic_mnist_dir):
    assert validate_mnist_dir(synthetic_mnist_dir) == {"train": 200, "test": 100}
    for split, names in SPLIT_FILES.items():
        assert sorted(os.listdir(os.path.join(synthetic_mnist_dir, split))) == sorted(names)
    labels = read_idx(os.path.join(synthetic_mnist_dir, "train", "train-labels-idx1-ubyte"))
    assert set(labels.tolist()) == set(range(10))


def test_synthetic_is_reproducible_and_class_dependent(tmp_path):
    write_synthetic_mnist(tmp_path / "a", n_train=300, n_test=10, seed=3)
    write_synthetic_mnist(tmp_path / "b", n_train=300, n_test=10, seed=3)
    name = SPLIT_FILES["train"][0]
    assert (tmp_path / "a" / "train" / name).read_bytes() == (tmp_path / "b" / "train" / name).read_bytes()

    images = read_idx(tmp_path / "a" / "train" / name).astype(np.float64)
    labels = read_idx(tmp_path / "a" / "train" / SPLIT_FILES["train"][1])
    means = np.stack([images[labels == c].mean(axis=0) for c in range(10)])
    # Nearest class mean classifies almost every sample: the classes differ.
    distances = ((images[:, None] - means[None]) ** 2).sum(axis=(2, 3))
    assert (distances.argmin(axis=1) == labels).mean() > 0.95


def test_synthetic_rejects_empty_split(tmp_path):
    with pytest.raises(ValueError, match="n_test must be a positive int, got 0"):
        write_synthetic_mnist(tmp_path, n_train=10, n_test=0)


def _train_images(folder):
    return os.path.join(folder, "train", SPLIT_FILES["train"][0])


def test_validate_catches_bad_magic(mnist_copy):
    path = _train_images(mnist_copy)
    with open(path, "r+b") as f:
        f.write(struct.pack(">I", 0x0903))  # still 3-D, but the type byte says int8, not uint8
    with pytest.raises(MnistFormatError, match=r"train-images-idx3-ubyte: magic number is 2307, expected 2051"):
        validate_mnist_dir(mnist_copy)


def test_validate_catches_truncated_file(mnist_copy):
    path = _train_images(mnist_copy)
    os.truncate(path, os.path.getsize(path) - 1)
    with pytest.raises(MnistFormatError, match=r"train-images-idx3-ubyte: file is 156815 bytes, .* needs 156816"):
        validate_mnist_dir(mnist_copy)


def test_validate_catches_header_only_stub(mnist_copy):
    path = _train_images(mnist_copy)
    os.truncate(path, 6)
    with pytest.raises(MnistFormatError, match="header promises 3 dimensions but the file ends first"):
        validate_mnist_dir(mnist_copy)


def test_validate_catches_wrong_image_size(mnist_copy):
    write_idx_images(_train_images(mnist_copy), np.zeros((200, 32, 32), np.uint8))
    with pytest.raises(MnistFormatError, match=r"dimensions are \(200, 32, 32\), expected \(n, 28, 28\)"):
        validate_mnist_dir(mnist_copy)


def test_validate_catches_count_mismatch(mnist_copy):
    write_idx_labels(os.path.join(mnist_copy, "test", "t10k-labels-idx1-ubyte"), np.zeros(99, np.uint8))
    with pytest.raises(MnistFormatError, match="holds 100 images but .*t10k-labels-idx1-ubyte holds 99 labels"):
        validate_mnist_dir(mnist_copy)


def test_validate_names_missing_file(mnist_copy):
    os.remove(os.path.join(mnist_copy, "test", "t10k-images-idx3-ubyte"))
    with pytest.raises(MnistFormatError, match=r"test.t10k-images-idx3-ubyte: file is missing"):
        validate_mnist_dir(mnist_copy)


def test_validate_names_a_label_outside_the_classes(mnist_copy):
    path = os.path.join(mnist_copy, "train", SPLIT_FILES["train"][1])
    labels = read_idx(path).copy()
    labels[[7, 9]] = [42, 10]
    write_idx_labels(path, labels)
    with pytest.raises(MnistFormatError, match=re.escape(f"{path}: label 42 at index 7 is not a class in [0, 10) "
                                                         "(and 1 more)")):
        validate_mnist_dir(mnist_copy)
