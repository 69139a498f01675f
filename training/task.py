"""What a run trains, and on which data: the seam between the training loop and a data set.

The loop in ``training.loop`` knows accumulation, evaluation, checkpoints
and logs; a ``Task`` brings everything particular to one problem (the
network, its loss, how one epoch is read). ``training.mnist.mnist_task``
is the MNIST one; any classifier with integer labels fits.
"""
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from data.windows import window_slices
from training.records import epoch_line, summary_line


def count_rows(labels):
    """The default ``Task.count``: a micro-batch weighs as many samples as it has rows.

    Example:
        >>> count_rows(ms.Tensor(np.zeros(5, np.int32)))
        5
    """
    return labels.shape[0]


def count_correct(logits, labels):
    """The default ``Task.correct``: how many rows' largest logit is at their label (an int32 Tensor).

    Example:
        >>> int(count_correct(ms.Tensor([[0.0, 1.0], [1.0, 0.0]]), ms.Tensor([1, 1], ms.int32)))
        1
    """
    return (ops.argmax(logits, -1) == labels).astype(ms.int32).sum()


@dataclass(frozen=True)
class Task:
    """A classification problem for ``training.loop``.

    Attributes:
        description: names the data, e.g. ``"MNIST from MNIST_Data: 60000
            train / 10000 test samples"``; the first line a run prints.
        train_samples: samples in the training split (before sharding),
            for the progress bar.
        make_net: ``() -> nn.Cell`` mapping a batch of inputs to logits;
            called after the run's seed is set, so its weights are seeded.
        make_loss: ``() -> nn.Cell``, ``loss(logits, labels)`` *summed* over
            the batch: the accumulator divides by the samples a window held.
        train_windows: ``(batch_size, accumulate_step, *, shuffle, seed,
            drop_remainder, num_shards, shard_id)`` -> one epoch as windows,
            each a list of up to ``accumulate_step`` ``(inputs, labels)``
            Tensor pairs (``num_shards`` None: no sharding; else the windows
            are the run's and shard ``shard_id`` gets its part of each,
            ``data.windows.window_slices``, maybe none). An uneven run
            (``TrainConfig.last_micro_batch``) also passes
            ``last_micro_batch``, the size of each whole window's last
            micro-batch (``data.windows.window_slices``). A window may
            also carry ``stacked``, the same micro-batches as one ``(inputs
            [k, b, ...], labels [k, b])`` pair, which the window step then
            takes as it is (``data.mnist.Window``).
        test_batches: ``(batch_size)`` -> one pass over the test split as
            ``(inputs, labels)`` Tensor pairs.
        count: ``(labels) -> number``, on the host: what a micro-batch's
            summed loss is divided by: its weight in the window, and the
            unit of the reported loss and of ``"counted"`` in the records;
            ``count_rows`` by default, a language model's non-PAD targets.
        correct: ``(logits, labels) -> int Tensor``, compiled into the
            evaluation step: the correct predictions among what ``count``
            counts (``count_correct`` by default).
        learning_rate: ``(config) -> lr`` for the optimizer, a number or an
            ``mindspore.nn.learning_rate_schedule.LearningRateSchedule`` (it advances once per update: the
            accumulator calls the optimizer once a window); ``config.lr`` by default.
        measure: ``(record, history) -> dict`` of values derived from an
            epoch's record (``history`` holds the epochs before it), added
            to the record; None adds nothing.
        epoch_line, summary_line: the lines a run prints after an epoch and
            at its end (``training.records``' by default).

    Example:
        >>> x = ms.Tensor(np.eye(2, 3, dtype=np.float32))
        >>> y = ms.Tensor(np.array([0, 1], np.int32))
        >>> task = Task(description="two points", train_samples=2,
        ...             make_net=lambda: nn.Dense(3, 2),
        ...             make_loss=lambda: nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="sum"),
        ...             train_windows=lambda batch_size, accumulate_step, **order: [[(x, y)]],
        ...             test_batches=lambda batch_size: [(x, y)])
        >>> task.make_net()(x).shape
        (2, 2)
    """
    # The problem: every task names these.
    description: str
    train_samples: int
    make_net: Callable
    make_loss: Callable
    train_windows: Callable[..., Iterable[list]]
    test_batches: Callable[[int], Iterable[tuple]]
    # How it is counted, scored and reported: a classifier's defaults.
    count: Callable = count_rows
    correct: Callable = count_correct
    learning_rate: Optional[Callable] = None
    measure: Optional[Callable] = None
    epoch_line: Callable = epoch_line
    summary_line: Callable = summary_line


def toy_task(samples=8):
    """A task with no files: ``samples`` seeded random points in 4-D, labelled by the sign of the first.

    The same points serve as test split. For examples and quick checks of the
    loop: it shuffles by ``seed``, shards each window by position, drops a
    short last batch on request, cuts uneven windows when given
    ``last_micro_batch``, and trains ``nn.Dense(4, 2)``.

    Example:
        >>> task = toy_task()
        >>> windows = task.train_windows(3, 2, shuffle=False, seed=0, drop_remainder=False,
        ...                              num_shards=None, shard_id=None)
        >>> [[labels.shape[0] for _, labels in window] for window in windows]
        [[3, 3], [2]]
        >>> windows = task.train_windows(3, 2, shuffle=False, seed=0, drop_remainder=False,
        ...                              num_shards=None, shard_id=None, last_micro_batch=1)
        >>> [[labels.shape[0] for _, labels in window] for window in windows]
        [[3, 1], [3, 1]]
    """
    points = np.random.default_rng(0).normal(size=(samples, 4)).astype(np.float32)
    classes = (points[:, 0] > 0).astype(np.int32)

    def batch(chunk):
        return ms.Tensor(points[chunk]), ms.Tensor(classes[chunk])

    def train_windows(batch_size, accumulate_step, *, shuffle, seed, drop_remainder, num_shards, shard_id,
                      last_micro_batch=None):
        order = np.random.default_rng(seed).permutation(samples) if shuffle else np.arange(samples)
        if drop_remainder:
            order = order[:len(order) - len(order) % batch_size]
        return [[batch(order[start:stop]) for start, stop in window]
                for window in window_slices(len(order), batch_size, accumulate_step, last_micro_batch, drop_remainder,
                                            num_shards=num_shards, shard_id=shard_id)]

    def test_batches(batch_size):
        return [batch(np.arange(start, min(start + batch_size, samples))) for start in range(0, samples, batch_size)]

    return Task(description=f"toy: {samples} train / {samples} test samples", train_samples=samples,
                make_net=lambda: nn.Dense(4, 2),
                make_loss=lambda: nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="sum"),
                train_windows=train_windows, test_batches=test_batches)
