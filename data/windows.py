"""How an epoch's rows are cut into accumulation windows of micro-batches, even or uneven.

Every pipeline (``training.task.toy_task``, ``data.mnist.mnist_windows``,
``training.lm.lm_windows``) cuts its epoch here, so all of them cut alike.
"""
from common.checks import positive_int


def window_slices(n, batch_size, accumulate_step, last_micro_batch=None, drop_short=False, *, num_shards=None,
                  shard_id=None):
    """``n`` rows in windows, each a list of ``(start, stop)`` row bounds, one per micro-batch.

    A whole window holds ``accumulate_step`` micro-batches of ``batch_size``
    rows, the last of them ``last_micro_batch`` rows when given (an uneven
    window, which still holds the batch per update exactly:
    docs/mnist-tool.md#uneven-windows). The epoch's last window holds
    what is left, in the same micro-batches; its last ``stop`` may pass
    ``n``: slicing cuts it short, and a pipeline that fills its last
    micro-batch (the language model's all-PAD rows) fills it up to there.
    With ``drop_short`` (``--drop-last``) that short micro-batch is left out.

    With ``num_shards`` R, the windows are the run's, over all ranks, and
    shard ``shard_id`` r gets its part of each: the rows at positions
    ``[W r / R, W (r + 1) / R)`` of a window of W rows (rounded down), cut
    into micro-batches of ``batch_size``, the last smaller where they do not
    divide. Shards differ by at most one row per window, and a window of
    fewer rows than shards leaves some empty (``[]``); which rank takes a
    row depends on its place in the window alone, so every number of ranks
    trains the same windows (docs/devices.md#the-batch-is-the-runs).

    Example:
        >>> window_slices(26, 8, 3, last_micro_batch=4)
        [[(0, 8), (8, 16), (16, 20)], [(20, 28)]]
        >>> window_slices(26, 8, 3, last_micro_batch=4, drop_short=True)
        [[(0, 8), (8, 16), (16, 20)]]
        >>> window_slices(10, 3, 2)
        [[(0, 3), (3, 6)], [(6, 9), (9, 12)]]
        >>> window_slices(10, 3, 3, last_micro_batch=1, num_shards=2, shard_id=1)  # rows 3 to 6, then 8 and 9
        [[(3, 6), (6, 7)], [(8, 10)]]
        >>> window_slices(8, 4, 1, num_shards=3, shard_id=0)  # windows of 4 over 3 ranks: 1, 1 and 2 rows
        [[(0, 1)], [(4, 5)]]
    """
    sizes = [positive_int(batch_size, "batch_size")] * (positive_int(accumulate_step, "accumulate_step") - 1)
    sizes.append(batch_size if last_micro_batch is None else positive_int(last_micro_batch, "last_micro_batch"))
    windows = []
    for start in range(0, n, sum(sizes)):
        bounds = [start]
        for size in sizes:
            if bounds[-1] >= n or drop_short and bounds[-1] + size > n:
                break
            bounds.append(bounds[-1] + size)
        if len(bounds) > 1:
            windows.append(list(zip(bounds, bounds[1:])))
    if num_shards is None:
        return windows
    return [_shard(window[0][0], min(window[-1][1], n), batch_size, num_shards, shard_id) for window in windows]


def _shard(start, stop, batch_size, num_shards, shard_id):
    """Shard ``shard_id``'s rows of the window ``[start, stop)``, in micro-batches of ``batch_size``."""
    rows = stop - start
    low, high = start + rows * shard_id // num_shards, start + rows * (shard_id + 1) // num_shards
    return [(a, min(a + batch_size, high)) for a in range(low, high, batch_size)]
