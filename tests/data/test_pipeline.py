"""MNIST decoded once into memory: the same batches as the mindspore.dataset pipeline, bit for bit.

By hand: a batch of 16 decoded from memory holds the same bytes, in the same order, as the mindspore.dataset
pipeline's; a folder without MNIST files is refused (``holds no MNIST files``).
"""
import os
import shutil

import mindspore.dataset as ds
import numpy as np
import pytest

from data.idx import SPLIT_FILES
from data.mnist import load_mnist_split, mnist_batches, mnist_dataset, mnist_windows


def _engine_batches(split_dir, batch_size, **reading):
    return list(mnist_dataset(split_dir, batch_size, **reading).create_tuple_iterator(output_numpy=True,
                                                                                     num_epochs=1))


def _memory_batches(arrays, batch_size, **reading):
    return [(images.asnumpy(), labels.asnumpy()) for images, labels in mnist_batches(arrays, batch_size, **reading)]


@pytest.mark.parametrize("batch_size, reading", [
    (32, {}),
    (32, {"shuffle": True, "seed": 5}),
    (48, {"shuffle": True, "seed": 6, "drop_remainder": True}),
    (16, {"shuffle": True, "seed": 7, "num_shards": 3, "shard_id": 2}),  # 200 over 3: padded shards
    (25, {"num_shards": 4, "shard_id": 1}),
])
def test_memory_batches_are_the_dataset_engines_bit_for_bit(synthetic_mnist_dir, batch_size, reading):
    train_dir = os.path.join(synthetic_mnist_dir, "train")
    expected = _engine_batches(train_dir, batch_size, **reading)
    actual = _memory_batches(load_mnist_split(train_dir), batch_size, **reading)
    assert [labels.shape for _, labels in actual] == [labels.shape for _, labels in expected]
    for (images, labels), (want_images, want_labels) in zip(actual, expected):
        assert images.dtype == want_images.dtype == np.float32 and labels.dtype == want_labels.dtype == np.int32
        np.testing.assert_array_equal(images, want_images)  # exact: same float32 arithmetic, same order
        np.testing.assert_array_equal(labels, want_labels)


def test_one_worker_per_operation_reads_the_same_batches(synthetic_mnist_dir):
    test_dir = os.path.join(synthetic_mnist_dir, "test")
    reading = dict(shuffle=True, seed=2, num_shards=2, shard_id=0)
    for (images, labels), (want_images, want_labels) in zip(
            _engine_batches(test_dir, 16, num_parallel_workers=1, **reading),
            _engine_batches(test_dir, 16, **reading), strict=True):
        np.testing.assert_array_equal(images, want_images)
        np.testing.assert_array_equal(labels, want_labels)
    with pytest.raises(ValueError, match="num_parallel_workers must be a positive int, got 0"):
        mnist_dataset(test_dir, 16, num_parallel_workers=0)


def test_each_seed_gives_its_own_order_again(synthetic_mnist_dir):
    train = load_mnist_split(os.path.join(synthetic_mnist_dir, "train"))

    def labels(seed):
        return np.concatenate([labels for _, labels in _memory_batches(train, 64, shuffle=True, seed=seed)])

    np.testing.assert_array_equal(labels(1), labels(1))
    assert not np.array_equal(labels(1), labels(2))
    np.testing.assert_array_equal(np.sort(labels(1)), np.sort(train[1]))


def test_a_folder_with_both_pairs_reads_in_the_engines_order(synthetic_mnist_dir, tmp_path):
    for split, names in SPLIT_FILES.items():
        for name in names:
            shutil.copy(os.path.join(synthetic_mnist_dir, split, name), tmp_path)
    images, labels = load_mnist_split(str(tmp_path))
    engine = [(image, label) for image, label in ds.MnistDataset(str(tmp_path), shuffle=False)
              .create_tuple_iterator(output_numpy=True, num_epochs=1)]
    assert len(labels) == len(engine) == 300
    np.testing.assert_array_equal(labels, [label for _, label in engine])
    np.testing.assert_array_equal(images[:, 0] * 0.3081 + 0.1307 > 0.5,
                                  np.stack([image[:, :, 0] for image, _ in engine]) > 127)


def test_memory_is_read_only_and_batches_are_copies(synthetic_mnist_dir):
    images, labels = load_mnist_split(os.path.join(synthetic_mnist_dir, "test"))
    assert not images.flags.writeable and not labels.flags.writeable
    before = images.copy()
    batch, _ = next(mnist_batches((images, labels), 10))
    batch.asnumpy()[:] = 0  # a batch shares nothing with the split it came from
    np.testing.assert_array_equal(images, before)


def test_windows_from_memory_equal_windows_from_the_folder(synthetic_mnist_dir):
    test_dir = os.path.join(synthetic_mnist_dir, "test")
    reading = dict(shuffle=True, seed=4)  # shards are cut from these windows (tests/test_ranks.py)
    from_folder = list(mnist_windows(test_dir, 16, 2, **reading))
    from_memory = list(mnist_windows(load_mnist_split(test_dir), 16, 2, **reading))
    assert [[labels.shape[0] for _, labels in window] for window in from_memory] == [[16, 16]] * 3 + [[4]]
    engine = _engine_batches(test_dir, 16, **reading)
    for windows in (from_folder, from_memory):
        flat = [pair for window in windows for pair in window]
        for (images, labels), (want_images, want_labels) in zip(flat, engine, strict=True):
            np.testing.assert_array_equal(images.asnumpy(), want_images)
            np.testing.assert_array_equal(labels.asnumpy(), want_labels)


def test_whole_windows_carry_their_micro_batches_stacked(synthetic_mnist_dir):
    train = load_mnist_split(os.path.join(synthetic_mnist_dir, "train"))
    windows = list(mnist_windows(train, 32, 3, shuffle=True, seed=9))  # 200 = 2 x (32, 32, 32) + 8
    assert [[labels.shape[0] for _, labels in window] for window in windows] == [[32] * 3, [32] * 3, [8]]
    for window in windows[:2]:
        images, labels = (tensor.asnumpy() for tensor in window.stacked)
        assert images.shape == (3, 32, 1, 28, 28) and labels.shape == (3, 32)
        for i, (micro_images, micro_labels) in enumerate(window):
            np.testing.assert_array_equal(images[i], micro_images.asnumpy())
            np.testing.assert_array_equal(labels[i], micro_labels.asnumpy())
    assert windows[2].stacked[0].shape == (1, 8, 1, 28, 28)  # one micro-batch is always of one size
    ragged = list(mnist_windows(train, 32, 4))[-1]  # (32, 32, 8): no stacked form
    assert [labels.shape[0] for _, labels in ragged] == [32, 32, 8] and ragged.stacked is None


@pytest.mark.parametrize("reading, message", [
    ({"batch_size": 0}, "batch_size must be a positive int, got 0"),
    ({"seed": 1.5}, "seed must be None or a non-negative int, got 1.5"),
    ({"num_shards": 2, "shard_id": -1}, r"shard_id must be an int in \[0, 2\), got -1"),
])
def test_memory_batches_check_their_arguments_at_the_call(synthetic_mnist_dir, reading, message):
    arrays = load_mnist_split(os.path.join(synthetic_mnist_dir, "test"))
    with pytest.raises(ValueError, match=message):
        mnist_batches(arrays, **{"batch_size": 8, **reading})


def test_loading_refuses_a_folder_without_mnist(tmp_path):
    with pytest.raises(ValueError, match="holds no MNIST files"):
        load_mnist_split(str(tmp_path))
