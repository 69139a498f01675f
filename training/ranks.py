"""How a run's windows are shared among its ranks: the batch per update is the run's, each rank's N follows from it.

A window of the run holds the same samples whatever the number of ranks R:
a single process's window. Rank r trains its part of each by position
(``data.windows.window_slices``), in micro-batches of ``batch_size``, the
last smaller where they do not divide; ``WindowAllReduce`` sums every rank's
gradients and counts once per window, so uneven parts stay exact
(docs/devices.md#the-batch-is-the-runs).
"""
from data.windows import window_slices
from training.config import ADAPTIVE


def run_steps(config):
    """Micro-batches in one window of the run, over all ranks: what the data pipelines cut the epoch by.

    A fixed ``accumulate_step`` is the run's already; an adaptive one starts
    at ``first_step`` on each rank.

    Example:
        >>> from training.config import TrainConfig
        >>> run_steps(TrainConfig(accumulate_step=6, distributed=True, ranks=2))
        6
        >>> run_steps(TrainConfig(accumulate_step="noise", distributed=True, ranks=2))
        4
    """
    return config.first_step * config.ranks if config.accumulate_step in ADAPTIVE else config.accumulate_step


def rank_sizes(config, rank=None):
    """The micro-batch sizes rank ``rank`` (None: ``config.rank``) trains in one whole window of the run.

    Example: 20 samples per update in micro-batches of 8 (8 + 8 + 4 in one process) over 3 ranks.
        >>> from training.config import TrainConfig
        >>> config = TrainConfig(batch_size=8, accumulate_step=3, last_micro_batch=4, distributed=True, ranks=3)
        >>> [rank_sizes(config, rank) for rank in range(3)]
        [[6], [7], [7]]
    """
    rows = config.batch_size * (run_steps(config) - 1) + (config.last_micro_batch or config.batch_size)
    window, = window_slices(rows, config.batch_size, run_steps(config), config.last_micro_batch,
                            num_shards=config.ranks, shard_id=config.rank if rank is None else rank)
    return [stop - start for start, stop in window]


def rank_steps(config):
    """N of this rank's accumulator: the most micro-batches any rank trains in a whole window.

    Every rank applies its window at once: those with fewer micro-batches
    apply theirs by a flush (``training.loop.train_on_windows``).

    Example:
        >>> from training.config import TrainConfig
        >>> rank_steps(TrainConfig(batch_size=8, accumulate_step=3, last_micro_batch=4, distributed=True, ranks=2))
        2
        >>> rank_steps(TrainConfig(batch_size=8, accumulate_step="auto"))
        1
    """
    if config.accumulate_step in ADAPTIVE:
        return config.first_step
    return max(len(rank_sizes(config, rank)) for rank in range(config.ranks))


def whole_on_every_rank(config):
    """True when every rank's part of a window is ``rank_steps`` micro-batches of ``batch_size``: one shape.

    Example:
        >>> from training.config import TrainConfig
        >>> [whole_on_every_rank(TrainConfig(batch_size=4, accumulate_step=steps, distributed=True, ranks=2))
        ...  for steps in (4, 3)]
        [True, False]
    """
    return all(rank_sizes(config, rank) == [config.batch_size] * rank_steps(config) for rank in range(config.ranks))
