"""MNIST download and the MindSpore pipelines built on it.

By hand: the 100 synthetic test samples in windows of 4 micro-batches of 16, dropping the remainder: one full
window of 4 x 16, then 2 x 16 (the last 4 samples dropped).
"""
import os
import shutil
import zipfile

import numpy as np
import pytest

from data.idx import SPLIT_FILES, MnistFormatError, read_idx, validate_mnist_dir
from data.mnist import MnistUnavailableError, ensure_mnist, mnist_dataset, mnist_windows
from tests.tools.helpers import serving

# Port 9 (discard) on loopback: nothing listens, so the connection is refused at once.
UNREACHABLE_URL = "http://127.0.0.1:9/MNIST_Data.zip"


def _raw_split(folder, split):
    images_name, labels_name = SPLIT_FILES[split]
    return read_idx(os.path.join(folder, split, images_name)), read_idx(os.path.join(folder, split, labels_name))


def _batches(dataset):
    return [(images, labels) for images, labels in dataset.create_tuple_iterator(output_numpy=True, num_epochs=1)]


def _labels_of(dataset):
    return np.concatenate([labels for _, labels in _batches(dataset)])


def _sample_ids(images):
    """Raw bytes of each normalised image: the noisy synthetic samples are all distinct."""
    raw = np.rint((np.asarray(images, np.float64) * 0.3081 + 0.1307) * 255).astype(np.uint8)
    return [sample.tobytes() for sample in raw.reshape(len(raw), 28, 28)]


# ---------------------------------------------------------------- ensure_mnist

def _parent_listing(data_dir):
    return sorted(os.listdir(os.path.dirname(data_dir)))


def test_offline_download_raises_helpful_error_and_leaves_nothing(tmp_path):
    data_dir = str(tmp_path / "MNIST_Data")
    with pytest.raises(MnistUnavailableError) as caught:
        ensure_mnist(data_dir, url=UNREACHABLE_URL)

    message = str(caught.value)
    assert isinstance(caught.value, RuntimeError)
    assert len(message.splitlines()) == 2
    assert UNREACHABLE_URL in message and "Connection refused" in message
    assert os.path.join(data_dir, "train") in message and os.path.join(data_dir, "test") in message
    for names in SPLIT_FILES.values():
        for name in names:
            assert name in message
    assert "unzip" in message and "--synthetic" in message
    assert os.listdir(tmp_path) == []


def test_a_failed_download_removes_the_folders_it_made_on_the_way(tmp_path):
    # As `--data-dir /nonexistent/dir` offline: /nonexistent must not stay behind.
    with pytest.raises(MnistUnavailableError, match="Connection refused"):
        ensure_mnist(str(tmp_path / "not" / "yet" / "MNIST_Data"), url=UNREACHABLE_URL)
    assert os.listdir(tmp_path) == []
    (tmp_path / "a_file").write_text("")
    with pytest.raises(MnistUnavailableError, match=r"cannot write in .*a_file/sub: Not a directory"):
        ensure_mnist(str(tmp_path / "a_file" / "sub" / "MNIST_Data"), url=UNREACHABLE_URL)
    assert os.listdir(tmp_path) == ["a_file"]


def test_valid_files_skip_the_download(synthetic_mnist_dir, tmp_path):
    data_dir = shutil.copytree(synthetic_mnist_dir, tmp_path / "MNIST_Data")
    before = {name: os.stat(os.path.join(data_dir, "train", name)).st_mtime_ns for name in SPLIT_FILES["train"]}
    assert ensure_mnist(data_dir, url=UNREACHABLE_URL) == data_dir
    assert {name: os.stat(os.path.join(data_dir, "train", name)).st_mtime_ns
            for name in SPLIT_FILES["train"]} == before
    assert _parent_listing(str(data_dir)) == ["MNIST_Data"]


def test_invalid_files_trigger_a_download(synthetic_mnist_dir, tmp_path):
    data_dir = shutil.copytree(synthetic_mnist_dir, tmp_path / "MNIST_Data")
    os.truncate(os.path.join(data_dir, "test", SPLIT_FILES["test"][1]), 10)
    with pytest.raises(MnistUnavailableError):
        ensure_mnist(data_dir, url=UNREACHABLE_URL)
    assert _parent_listing(str(data_dir)) == ["MNIST_Data"]


def _zip_like_tutorial(source_dir, zip_path, damage=None):
    """Zip ``source_dir`` as MNIST_Data/{train,test}/..., optionally truncating one file."""
    with zipfile.ZipFile(zip_path, "w") as archive:
        for split, names in SPLIT_FILES.items():
            for name in names:
                data = open(os.path.join(source_dir, split, name), "rb").read()
                if name == damage:
                    data = data[:-5]
                archive.writestr(f"MNIST_Data/{split}/{name}", data)


def test_download_from_a_server_puts_valid_files_in_place(synthetic_mnist_dir, tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    _zip_like_tutorial(synthetic_mnist_dir, served / "MNIST_Data.zip")
    data_dir = str(tmp_path / "out" / "MNIST_Data")
    with serving(served) as base_url:
        assert ensure_mnist(data_dir, url=f"{base_url}/MNIST_Data.zip") == data_dir
    assert validate_mnist_dir(data_dir) == {"train": 200, "test": 100}
    np.testing.assert_array_equal(_raw_split(data_dir, "test")[0], _raw_split(synthetic_mnist_dir, "test")[0])
    assert _parent_listing(data_dir) == ["MNIST_Data"]


def test_corrupt_download_names_the_file_and_leaves_nothing(synthetic_mnist_dir, tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    _zip_like_tutorial(synthetic_mnist_dir, served / "MNIST_Data.zip", damage="train-labels-idx1-ubyte")
    (served / "not_a.zip").write_text("<html>moved</html>")
    data_dir = str(tmp_path / "out" / "MNIST_Data")
    with serving(served) as base_url:
        with pytest.raises(MnistFormatError, match=r"zip from .*, nothing installed: train/train-labels-idx1-ubyte: file is 203 bytes, .* needs 208$"):
            ensure_mnist(data_dir, url=f"{base_url}/MNIST_Data.zip")
        with pytest.raises(MnistUnavailableError, match="not_a.zip.*File is not a zip file"):
            ensure_mnist(data_dir, url=f"{base_url}/not_a.zip")
    assert sorted(os.listdir(tmp_path)) == ["served"]  # not even the folder "out" it made to stage in


# ---------------------------------------------------------------- mnist_dataset

def test_pipeline_values_match_numpy_from_raw_bytes(synthetic_mnist_dir):
    raw_images, raw_labels = _raw_split(synthetic_mnist_dir, "train")
    batches = _batches(mnist_dataset(os.path.join(synthetic_mnist_dir, "train"), batch_size=64))
    assert [len(labels) for _, labels in batches] == [64, 64, 64, 8]
    images = np.concatenate([images for images, _ in batches])
    labels = np.concatenate([labels for _, labels in batches])
    assert images.shape == (200, 1, 28, 28) and images.dtype == np.float32
    assert labels.shape == (200,) and labels.dtype == np.int32
    expected = (raw_images[:, None].astype(np.float64) / 255.0 - 0.1307) / 0.3081
    np.testing.assert_allclose(images, expected, atol=1e-5)
    np.testing.assert_array_equal(labels, raw_labels)


def test_drop_remainder(synthetic_mnist_dir):
    test_dir = os.path.join(synthetic_mnist_dir, "test")
    assert [len(b[1]) for b in _batches(mnist_dataset(test_dir, 32))] == [32, 32, 32, 4]
    assert [len(b[1]) for b in _batches(mnist_dataset(test_dir, 32, drop_remainder=True))] == [32, 32, 32]


def test_seeded_shuffle_is_reproducible_and_a_permutation(synthetic_mnist_dir):
    train_dir = os.path.join(synthetic_mnist_dir, "train")
    plain = _sample_ids(np.concatenate([b[0] for b in _batches(mnist_dataset(train_dir, 50))]))
    first = _sample_ids(np.concatenate([b[0] for b in _batches(mnist_dataset(train_dir, 50, shuffle=True, seed=7))]))
    again = _sample_ids(np.concatenate([b[0] for b in _batches(mnist_dataset(train_dir, 50, shuffle=True, seed=7))]))
    other = _sample_ids(np.concatenate([b[0] for b in _batches(mnist_dataset(train_dir, 50, shuffle=True, seed=8))]))
    assert first == again
    assert first != plain and first != other
    assert sorted(first) == sorted(plain)


def test_seeded_shuffle_ignores_mindspore_global_seed(synthetic_mnist_dir):
    import mindspore.dataset as ds
    train_dir = os.path.join(synthetic_mnist_dir, "train")
    dataset = mnist_dataset(train_dir, 200, shuffle=True, seed=7)
    old_seed = ds.config.get_seed()
    try:
        ds.config.set_seed(old_seed + 1)
        labels = _labels_of(dataset)
    finally:
        ds.config.set_seed(old_seed)
    np.testing.assert_array_equal(labels, _labels_of(mnist_dataset(train_dir, 200, shuffle=True, seed=7)))


@pytest.mark.parametrize("shuffle", [False, True])
def test_shards_are_disjoint_and_cover_the_split(synthetic_mnist_dir, shuffle):
    train_dir = os.path.join(synthetic_mnist_dir, "train")
    everything = _sample_ids(np.concatenate([b[0] for b in _batches(mnist_dataset(train_dir, 64))]))
    shards = [_sample_ids(np.concatenate([b[0] for b in _batches(
        mnist_dataset(train_dir, 16, shuffle=shuffle, seed=3, num_shards=4, shard_id=k))])) for k in range(4)]
    assert [len(shard) for shard in shards] == [50] * 4
    assert sorted(sum(shards, [])) == sorted(everything)


def test_uneven_shards_are_padded_like_mindspore(synthetic_mnist_dir):
    import mindspore.dataset as ds
    test_dir = os.path.join(synthetic_mnist_dir, "test")  # 100 samples over 3 shards
    for k in range(3):
        ours = _labels_of(mnist_dataset(test_dir, 100, num_shards=3, shard_id=k))
        theirs = [int(label) for _, label in ds.MnistDataset(test_dir, shuffle=False, num_shards=3, shard_id=k)
                  .create_tuple_iterator(output_numpy=True, num_epochs=1)]
        assert len(ours) == 34
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "batch_size must be a positive int, got 0"),
    ({"batch_size": 8.0}, "batch_size must be a positive int, got 8.0"),
    ({"shuffle": "yes"}, "shuffle must be True or False, got 'yes'"),
    ({"drop_remainder": 1}, "drop_remainder must be True or False, got 1"),
    ({"seed": -1}, "seed must be None or a non-negative int, got -1"),
    ({"num_shards": 2}, "num_shards and shard_id go together"),
    ({"num_shards": 0, "shard_id": 0}, "num_shards must be a positive int, got 0"),
    ({"num_shards": 2, "shard_id": 2}, r"shard_id must be an int in \[0, 2\), got 2"),
])
def test_dataset_rejects_bad_arguments(synthetic_mnist_dir, kwargs, message):
    arguments = {"batch_size": 8, **kwargs}
    with pytest.raises(ValueError, match=message):
        mnist_dataset(os.path.join(synthetic_mnist_dir, "train"), **arguments)


def test_dataset_rejects_folder_without_mnist(synthetic_mnist_dir, tmp_path):
    with pytest.raises(ValueError, match="split_dir must be an existing folder"):
        mnist_dataset(str(tmp_path / "nowhere"), 8)
    with pytest.raises(ValueError, match="holds no MNIST files: expected train-images-idx3-ubyte"):
        mnist_dataset(synthetic_mnist_dir, 8)  # the parent, not a split folder


# ---------------------------------------------------------------- mnist_windows

@pytest.mark.parametrize("batch_size, accumulate_step, expected_windows", [
    (16, 4, [[16] * 4, [16] * 2 + [4]]),  # 100 = 6 * 16 + 4: last window short and ragged
    (25, 2, [[25, 25], [25, 25]]),
    (100, 3, [[100]]),
])
def test_windows_cover_every_sample_once(synthetic_mnist_dir, batch_size, accumulate_step, expected_windows):
    test_dir = os.path.join(synthetic_mnist_dir, "test")
    windows = list(mnist_windows(test_dir, batch_size, accumulate_step, shuffle=True, seed=1))
    assert [[len(labels) for _, labels in window] for window in windows] == expected_windows
    images = np.concatenate([images.asnumpy() for window in windows for images, _ in window])
    labels = np.concatenate([labels.asnumpy() for window in windows for _, labels in window])
    assert images.shape == (100, 1, 28, 28) and labels.dtype == np.int32
    raw_images, raw_labels = _raw_split(synthetic_mnist_dir, "test")
    index_of = {sample.tobytes(): i for i, sample in enumerate(raw_images)}
    assert len(index_of) == 100
    seen = [index_of[key] for key in _sample_ids(images)]
    assert seen != list(range(100))  # shuffled...
    assert sorted(seen) == list(range(100))  # ...yet every sample exactly once
    np.testing.assert_array_equal(labels, raw_labels[seen])


def test_windows_with_drop_remainder_are_all_full(synthetic_mnist_dir):
    windows = list(mnist_windows(os.path.join(synthetic_mnist_dir, "test"), 16, 4, drop_remainder=True))
    assert [[len(labels) for _, labels in window] for window in windows] == [[16] * 4, [16] * 2]


def test_windows_check_arguments_at_the_call(synthetic_mnist_dir):
    train_dir = os.path.join(synthetic_mnist_dir, "train")
    with pytest.raises(ValueError, match="accumulate_step must be a positive int, got 0"):
        mnist_windows(train_dir, 8, 0)
    with pytest.raises(ValueError, match="batch_size must be a positive int, got -8"):
        mnist_windows(train_dir, -8, 2)
