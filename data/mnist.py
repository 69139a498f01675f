"""Fetch MNIST and feed it to a network, whole batches or accumulation windows."""
import numbers
import os

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore.dataset import transforms, vision

from common.checks import boolean, positive_int
from .download import staged_download
from .idx import SPLIT_FILES, MnistFormatError, read_idx, validate_mnist_dir, validate_split
from .windows import window_slices

MNIST_URL = "https://mindspore-website.obs.cn-north-4.myhuaweicloud.com/notebook/datasets/MNIST_Data.zip"
DEFAULT_DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "MNIST_Data")
MNIST_MEAN = 0.1307
MNIST_STD = 0.3081


class MnistUnavailableError(RuntimeError):
    """MNIST is not on disk and could not be downloaded."""


def _unavailable_message(url, data_dir, reason):
    (train_images, train_labels), (test_images, test_labels) = SPLIT_FILES["train"], SPLIT_FILES["test"]
    return (
        f"Could not download MNIST from {url} ({reason}).\n"
        f"Download that zip by hand and unzip it so that {os.path.join(data_dir, 'train')} holds "
        f"{train_images}, {train_labels} and {os.path.join(data_dir, 'test')} holds "
        f"{test_images}, {test_labels}; or use --synthetic."
    )


def _extracted_root(folder):
    # The tutorial's zip wraps everything in a top-level MNIST_Data/ folder;
    # accept a zip without it too.
    nested = os.path.join(folder, "MNIST_Data")
    return nested if os.path.isdir(nested) else folder


def ensure_mnist(data_dir=DEFAULT_DATA_DIR, url=MNIST_URL):
    """Return ``data_dir`` once it holds valid MNIST, downloading it if needed.

    Valid files already in ``data_dir/train`` and ``data_dir/test`` are used
    as they are, without touching the network. Otherwise the zip at ``url``
    is unpacked into a temporary folder beside ``data_dir``, checked, and
    only then moved into place, so a failure leaves nothing half-written;
    folders it had to create on the way are removed again.

    Raises:
        MnistUnavailableError: the download failed (offline, bad address,
            not a zip, no folder can be made there); the message says how
            to supply the files by hand.
        MnistFormatError: the download worked but a file in it is bad.

    Example:
        >>> from data.idx import write_synthetic_mnist
        >>> write_synthetic_mnist("MNIST_Data", n_train=64, n_test=32)
        {'train': 64, 'test': 32}
        >>> ensure_mnist("MNIST_Data")  # valid files there: nothing to download
        'MNIST_Data'
    """
    try:
        validate_mnist_dir(data_dir)
        return data_dir
    except MnistFormatError:
        pass

    def unavailable(reason):
        return MnistUnavailableError(_unavailable_message(url, data_dir, reason))

    with staged_download(url, data_dir, unavailable, kind="zip") as staging:
        root = _extracted_root(staging)
        try:
            validate_mnist_dir(root)
        except MnistFormatError as error:
            # Name the file as it sits in the zip: the staging folder is about to go.
            inside_zip = str(error).replace(root + os.sep, "")
            raise MnistFormatError(f"Bad MNIST zip from {url}, nothing installed: {inside_zip}") from None
        # One rename per file: each lands complete, and anything else the
        # user keeps in data_dir is left alone.
        for split, names in SPLIT_FILES.items():
            os.makedirs(os.path.join(data_dir, split), exist_ok=True)
            for name in names:
                os.replace(os.path.join(root, split, name), os.path.join(data_dir, split, name))
    return data_dir


def _split_size(split_dir):
    """Number of samples MnistDataset will read from ``split_dir``."""
    if not os.path.isdir(split_dir):
        raise ValueError(f"split_dir must be an existing folder, got {split_dir!r}")
    present = [split for split, (images, _) in SPLIT_FILES.items()
               if os.path.exists(os.path.join(split_dir, images))]
    if not present:
        expected = " or ".join(", ".join(names) for names in SPLIT_FILES.values())
        raise ValueError(f"split_dir {split_dir!r} holds no MNIST files: expected {expected}")
    return sum(validate_split(split_dir, split) for split in present)


def _checked_reading(batch_size, shuffle, seed, drop_remainder, num_shards, shard_id):
    """Checks how a split is to be read; returns ``batch_size`` and ``num_shards`` as ints."""
    batch_size = positive_int(batch_size, "batch_size")
    boolean(shuffle, "shuffle")
    boolean(drop_remainder, "drop_remainder")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0):
        raise ValueError(f"seed must be None or a non-negative int, got {seed!r}")
    if (num_shards is None) != (shard_id is None):
        raise ValueError(f"num_shards and shard_id go together, got num_shards={num_shards!r}, shard_id={shard_id!r}")
    if num_shards is not None:
        num_shards = positive_int(num_shards, "num_shards")
        if isinstance(shard_id, bool) or not isinstance(shard_id, numbers.Integral) \
                or not 0 <= shard_id < num_shards:
            raise ValueError(f"shard_id must be an int in [0, {num_shards}), got {shard_id!r}")
    return batch_size, num_shards


def _sample_order(n, shuffle, seed, num_shards, shard_id):
    order = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
    if num_shards is None:
        return order
    # As MindSpore's own sharding does: wrap around so every shard gets the
    # same number of samples (ranks must run equally many steps), then deal
    # the samples out in turn.
    padded = np.resize(order, -(-n // num_shards) * num_shards)
    return padded[shard_id::num_shards]


def mnist_dataset(split_dir, batch_size, shuffle=False, seed=None, drop_remainder=False,
                  num_shards=None, shard_id=None, num_parallel_workers=None):
    """Batched, normalised MNIST from one split folder (e.g. ``MNIST_Data/train``).

    Columns: ``image`` float32 ``[B, 1, 28, 28]``, scaled to [0, 1] then
    normalised with MNIST's mean 0.1307 and std 0.3081; ``label`` int32 ``[B]``.

    Args:
        split_dir: folder holding one split's idx files.
        batch_size: samples per batch.
        shuffle: visit samples in a random order.
        seed: makes the shuffled order reproducible (``None``: a fresh
            order per call). Pass a different seed each epoch for a new order.
        drop_remainder: drop the last batch if it is smaller than ``batch_size``.
        num_shards, shard_id: read only shard ``shard_id`` of ``num_shards``;
            all shards have ``ceil(n / num_shards)`` samples, and are disjoint
            when ``num_shards`` divides ``n`` (else some samples repeat).
        num_parallel_workers: threads of each of the pipeline's operations
            (``None``: MindSpore's default, ``ds.config.get_num_parallel_workers()``).

    Example:
        >>> from data.idx import write_synthetic_mnist
        >>> write_synthetic_mnist("MNIST_Data", n_train=80, n_test=32)
        {'train': 80, 'test': 32}
        >>> train = mnist_dataset("MNIST_Data/train", 32, shuffle=True, seed=0)
        >>> [(images.shape, labels.shape) for images, labels in train.create_tuple_iterator()]
        [((32, 1, 28, 28), (32,)), ((32, 1, 28, 28), (32,)), ((16, 1, 28, 28), (16,))]
    """
    batch_size, num_shards = _checked_reading(batch_size, shuffle, seed, drop_remainder, num_shards, shard_id)
    n = _split_size(split_dir)

    # Our own sampler instead of MnistDataset's shuffle/num_shards: MindSpore
    # reads its global seed when iteration starts, not when the dataset is
    # built, and ds.config.set_seed also reseeds `random` and `numpy.random`.
    order = _sample_order(n, shuffle, seed, num_shards, shard_id)
    workers = {} if num_parallel_workers is None else \
        {"num_parallel_workers": positive_int(num_parallel_workers, "num_parallel_workers")}
    dataset = ds.MnistDataset(split_dir, sampler=ds.SubsetSampler(order.tolist()), **workers)
    dataset = dataset.map([vision.Rescale(1.0 / 255.0, 0.0),
                           vision.Normalize(mean=(MNIST_MEAN,), std=(MNIST_STD,)),
                           vision.HWC2CHW()], input_columns="image", **workers)
    dataset = dataset.map(transforms.TypeCast(ms.int32), input_columns="label", **workers)
    return dataset.batch(batch_size, drop_remainder=drop_remainder, **workers)


def load_mnist_split(split_dir):
    """One split folder decoded and normalised once, into memory: ``(images, labels)`` numpy arrays.

    ``images`` float32 ``[n, 1, 28, 28]``, equal bit for bit to what
    :func:`mnist_dataset` yields (``x * (1/255)``, then ``(x - 0.1307) /
    0.3081`` in float32, as its ``Rescale`` and ``Normalize`` compute);
    ``labels`` int32 ``[n]``. Samples come in the order ``MnistDataset``
    reads them (the ``t10k`` pair before the ``train`` pair when a folder
    holds both). Both arrays are read-only. Both splits as float32 stay in
    memory: the price of an epoch that reads memory instead of running
    MindSpore's dataset engine against the training step for the same two
    cores (``scripts/benchmark.py --end-to-end``).

    Example:
        >>> from data.idx import write_synthetic_mnist
        >>> write_synthetic_mnist("MNIST_Data", n_train=64, n_test=32)
        {'train': 64, 'test': 32}
        >>> images, labels = load_mnist_split("MNIST_Data/test")
        >>> images.shape, images.dtype, labels.shape, labels.dtype
        ((32, 1, 28, 28), dtype('float32'), (32,), dtype('int32'))
    """
    _split_size(split_dir)  # checks every file before reading any
    present = [SPLIT_FILES[split] for split in ("test", "train")
               if os.path.exists(os.path.join(split_dir, SPLIT_FILES[split][0]))]
    raw = np.concatenate([read_idx(os.path.join(split_dir, images)) for images, _ in present])
    labels = np.concatenate([read_idx(os.path.join(split_dir, labels)) for _, labels in present]).astype(np.int32)
    images = raw.reshape(len(raw), 1, *raw.shape[1:]).astype(np.float32)
    # In place, in the order and precision of vision.Rescale then vision.Normalize.
    images *= np.float32(1.0 / 255.0)
    images -= np.float32(MNIST_MEAN)
    images /= np.float32(MNIST_STD)
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


def _tensor_batches(images, labels, order, batch_size):
    for start in range(0, len(order), batch_size):
        chosen = order[start:start + batch_size]
        # from_numpy shares the fresh gathered copy instead of copying it again.
        yield ms.Tensor.from_numpy(images[chosen]), ms.Tensor.from_numpy(labels[chosen])


def mnist_batches(arrays, batch_size, shuffle=False, seed=None, drop_remainder=False, num_shards=None,
                  shard_id=None):
    """One pass over MNIST held in memory, as ``(images, labels)`` Tensor pairs.

    ``arrays`` comes from :func:`load_mnist_split`. The batches are those
    of :func:`mnist_dataset` over the same folder with the same arguments,
    value for value and in the same order (the same seeded sample order,
    the same shards, the same short last batch), without its dataset
    engine: a batch is one numpy gather. Arguments are checked at the
    call, not at the first batch.

    Example:
        >>> arrays = np.zeros((40, 1, 28, 28), np.float32), np.arange(40, dtype=np.int32) % 10  # 40 samples
        >>> [labels.shape[0] for _, labels in mnist_batches(arrays, 16, shuffle=True, seed=3)]
        [16, 16, 8]
    """
    images, labels = arrays
    order = reading_order(len(labels), batch_size, shuffle, seed, drop_remainder, num_shards, shard_id)
    return _tensor_batches(images, labels, order, batch_size)


def reading_order(n, batch_size, shuffle=False, seed=None, drop_remainder=False, num_shards=None, shard_id=None):
    """The indices of the samples one pass over ``n`` samples reads, in order (numpy int array).

    The order :func:`mnist_dataset` and :func:`mnist_batches` read with
    the same arguments, checked as they check them: seeded by ``seed``
    alone, shards dealt in turn after wrapping around to equal sizes,
    without a short last batch when ``drop_remainder``. For other pipelines
    over the same samples (``ds.SubsetSampler(order.tolist())``).

    Example:
        >>> reading_order(10, 4, num_shards=2, shard_id=1)
        array([1, 3, 5, 7, 9])
        >>> reading_order(10, 4, num_shards=2, shard_id=1, drop_remainder=True)
        array([1, 3, 5, 7])
    """
    batch_size, num_shards = _checked_reading(batch_size, shuffle, seed, drop_remainder, num_shards, shard_id)
    order = _sample_order(n, shuffle, seed, num_shards, shard_id)
    return order[:len(order) - len(order) % batch_size] if drop_remainder else order


class Window(list):
    """One accumulation window: a list of ``(images, labels)`` Tensor pairs, one per micro-batch.

    ``stacked`` holds the same micro-batches as one ``(images [k, b, 1,
    28, 28], labels [k, b])`` pair of Tensors sharing their memory, when
    all ``k`` hold the same ``b`` samples, else None: what a window step takes as
    it is (``window_step(*window.stacked)``), instead of stacking the
    list again with a MindSpore op per column. ``samples``: how many of
    its rows hold a sample, all of them unless given (padding rows hold none).

    Example:
        >>> import numpy as np
        >>> x, y = ms.Tensor(np.zeros((2, 3), np.float32)), ms.Tensor(np.zeros(2, np.int32))
        >>> window = Window([(x, y)])
        >>> len(window), window.stacked is None, window.samples
        (1, True, 2)
    """

    def __init__(self, micro_batches, stacked=None, samples=None):
        super().__init__(micro_batches)
        self.stacked = stacked
        self.samples = sum(labels.shape[0] for _, labels in micro_batches) if samples is None else samples


def _tensor_windows(images, labels, order, windows):
    for window in windows:
        if not window:  # a shard with no rows in this window
            yield Window([])
            continue
        start = window[0][0]
        # One gather per window; its micro-batches and the stacked pair are views of it.
        x, y = images[order[start:window[-1][1]]], labels[order[start:window[-1][1]]]
        micro_batches = [(ms.Tensor.from_numpy(x[a - start:b - start]), ms.Tensor.from_numpy(y[a - start:b - start]))
                         for a, b in window]
        stacked = None
        if len({labels.shape[0] for _, labels in micro_batches}) == 1:  # micro-batches all of one size
            k = len(micro_batches)
            stacked = (ms.Tensor.from_numpy(x.reshape(k, len(y) // k, *x.shape[1:])),
                       ms.Tensor.from_numpy(y.reshape(k, len(y) // k)))
        yield Window(micro_batches, stacked)


def mnist_windows(source, batch_size, accumulate_step, shuffle=False, seed=None, drop_remainder=False,
                  num_shards=None, shard_id=None, last_micro_batch=None):
    """One epoch of MNIST as accumulation windows.

    ``source`` is a split folder (read now) or the ``(images, labels)`` of
    :func:`load_mnist_split` (read once, reused every epoch). Each window
    is a :class:`Window`, a list of ``(images, labels)`` Tensor pairs, one
    per micro-batch, ``accumulate_step`` long except possibly the last one
    of the epoch, which is yielded, not dropped. A list rather than a
    stacked array, because the epoch's last micro-batch may be smaller
    than ``batch_size``; a window of whole micro-batches carries them
    stacked too, in ``window.stacked``. The micro-batches are those of
    :func:`mnist_batches` (and of :func:`mnist_dataset`) with the same
    arguments; they are checked at the call, not at the first window.
    With ``last_micro_batch`` each whole window ends in a micro-batch of
    that many samples (``data.windows.window_slices``): windows of
    ``batch_size * (accumulate_step - 1) + last_micro_batch`` samples, the
    same samples in the same order, cut otherwise. With ``num_shards``
    the windows are the run's over all shards (the samples of a
    single-process run's windows) and shard ``shard_id`` gets its part of
    each by position (``window_slices``); unlike :func:`mnist_batches`,
    nothing wraps around: a window may leave a shard fewer samples, or none.

    Example:
        >>> train = np.zeros((100, 1, 28, 28), np.float32), np.arange(100, dtype=np.int32) % 10
        >>> for epoch in (1, 2):
        ...     windows = mnist_windows(train, 16, accumulate_step=4, shuffle=True, seed=epoch)
        ...     print([[labels.shape[0] for _, labels in window] for window in windows])
        [[16, 16, 16, 16], [16, 16, 4]]
        [[16, 16, 16, 16], [16, 16, 4]]
        >>> first = next(mnist_windows(train, 16, accumulate_step=4))
        >>> first.stacked[0].shape, first.stacked[1].shape
        ((4, 16, 1, 28, 28), (4, 16))
        >>> [[labels.shape[0] for _, labels in window] for window in mnist_windows(train, 16, 3, last_micro_batch=8)]
        [[16, 16, 8], [16, 16, 8], [16, 4]]
        >>> [[labels.shape[0] for _, labels in window] for window in mnist_windows(train, 16, 4, num_shards=3,
        ...                                                                        shard_id=2)]
        [[16, 6], [12]]
    """
    accumulate_step = positive_int(accumulate_step, "accumulate_step")
    _checked_reading(batch_size, shuffle, seed, drop_remainder, num_shards, shard_id)
    images, labels = load_mnist_split(source) if isinstance(source, (str, os.PathLike)) else source
    order = reading_order(len(labels), batch_size, shuffle, seed, drop_remainder)
    windows = window_slices(len(order), batch_size, accumulate_step, last_micro_batch, drop_remainder,
                            num_shards=num_shards, shard_id=shard_id)
    return _tensor_windows(images, labels, order, windows)
