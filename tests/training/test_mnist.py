"""training.mnist: MNIST as a task, and the folder it is read from (found, downloaded or written).

By hand: an empty folder is refused (``file is missing``) before any training; synthetic data is written once and
read again the next time.
"""
import contextlib
import os

import pytest

from data.idx import MnistFormatError
from training.mnist import mnist_task, prepare_mnist


def test_task_reads_the_splits_the_folder_holds(synthetic_mnist_dir):
    task = mnist_task(synthetic_mnist_dir)
    assert task.train_samples == 200 and "200 train / 100 test samples" in task.description
    windows = list(task.train_windows(64, 2, shuffle=False, seed=1, drop_remainder=False, num_shards=None,
                                      shard_id=None))
    assert [[labels.shape[0] for _, labels in window] for window in windows] == [[64, 64], [64, 8]]
    assert sum(labels.shape[0] for _, labels in task.test_batches(1000)) == 100


def test_a_bad_folder_is_refused_before_any_training(tmp_path):
    with pytest.raises(MnistFormatError, match="file is missing"):
        mnist_task(str(tmp_path))


def test_synthetic_data_is_written_once_and_reused(tmp_path):
    folder = str(tmp_path / "synthetic")
    with contextlib.ExitStack() as stack:
        assert prepare_mnist(folder, synthetic=True, url=None, stack=stack) == folder
        written = os.path.getmtime(os.path.join(folder, "train", "train-images-idx3-ubyte"))
        assert prepare_mnist(folder, synthetic=True, url=None, stack=stack) == folder
    assert os.path.getmtime(os.path.join(folder, "train", "train-images-idx3-ubyte")) == written
