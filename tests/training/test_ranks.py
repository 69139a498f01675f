"""The run's windows shared among ranks, on one process: the arithmetic msrun's tests rely on (tests/tools/test_train_mnist_ranks.py).

By hand: a window of 9 samples in micro-batches of 4 on two ranks is 4 and 5 samples by position (rank 0 one
micro-batch of 4, rank 1 micro-batches of 4 and 1); on four ranks 2, 2, 2 and 3.
"""
import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn

from accumulator import Accumulator
from data.windows import window_slices
from training.config import TrainConfig
from training.ranks import rank_sizes, rank_steps


@pytest.mark.parametrize("n, batch_size, steps, last", [(26, 8, 3, 4), (23, 4, 2, None), (9, 1, 5, None)])
def test_every_number_of_ranks_trains_the_windows_of_one_process(n, batch_size, steps, last):
    single = window_slices(n, batch_size, steps, last)
    for ranks in (1, 2, 3, 4):
        shards = [window_slices(n, batch_size, steps, last, num_shards=ranks, shard_id=rank) for rank in range(ranks)]
        for index, window in enumerate(single):
            rows = [row for shard in shards for start, stop in shard[index] for row in range(start, stop)]
            assert rows == list(range(window[0][0], min(window[-1][1], n)))  # each row once, in the window's order
            held = [sum(stop - start for start, stop in shard[index]) for shard in shards]
            assert max(held) - min(held) <= 1
            assert all(stop - start <= batch_size for shard in shards for start, stop in shard[index])


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_each_rank_applies_after_the_most_micro_batches_any_rank_holds(ranks):
    config = TrainConfig(batch_size=4, accumulate_step=5, last_micro_batch=3, distributed=ranks > 1, ranks=ranks)
    parts = [rank_sizes(config, rank) for rank in range(ranks)]
    assert sum(map(sum, parts)) == config.effective_batch_size == 19
    assert rank_steps(config) == max(map(len, parts)) == -(-(-(-19 // ranks)) // 4)


def checkpoint_of(tmp_path, **settings):
    from training.checkpoints import save_epoch_checkpoint
    from training.loop import build_run
    from training.task import toy_task
    config = TrainConfig(mode="pynative", ckpt_dir=str(tmp_path), **settings)
    return save_epoch_checkpoint(build_run(config, toy_task()), config, 1, [])


def test_a_fixed_window_resumes_on_another_number_of_ranks(tmp_path):
    from training.checkpoints import check_settings
    path = checkpoint_of(tmp_path, batch_size=2, accumulate_step=4)
    check_settings(path, TrainConfig(batch_size=2, accumulate_step=4, distributed=True, ranks=2))  # the same run


def test_a_per_rank_window_that_changes_the_batch_is_refused_with_the_flags_that_keep_it(tmp_path):
    from training.checkpoints import check_settings
    from training.errors import TrainingError
    path = checkpoint_of(tmp_path, batch_size=2, accumulate_step=3)
    # --accumulate-step 3 typed on 2 ranks: 6 micro-batches per update, where the checkpoint's run took 3.
    with pytest.raises(TrainingError, match=r"--accumulate-step was 3, now 6\. Under --distributed, --accumulate-step "
                                            r"counts one rank's micro-batches: the checkpoint's run took 3 per update "
                                            r"over 1 ranks; on 2 ranks pass --batch-size 6 --micro-batch 2\. "):
        check_settings(path, TrainConfig(batch_size=2, accumulate_step=6, distributed=True, ranks=2))


def test_an_adaptive_window_is_refused_on_another_number_of_ranks(tmp_path):
    from training.checkpoints import check_settings
    from training.errors import TrainingError
    path = checkpoint_of(tmp_path, batch_size=2, accumulate_step="noise")
    with pytest.raises(TrainingError, match="the number of ranks was 1, now 2. Pass the same flags"):
        check_settings(path, TrainConfig(batch_size=2, accumulate_step="noise", distributed=True, ranks=2))


class OtherRanks:
    """Acts as the AllReduce of this rank with others whose window summed ``others`` (the weight last)."""

    def __init__(self, others):
        self.others = [Tensor(np.asarray(value, np.float32)) for value in others]

    def __call__(self, tensors):
        return tuple(mine + theirs for mine, theirs in zip(tensors, self.others))


def test_a_rank_with_an_empty_window_applies_the_other_ranks_window_when_it_flushes():
    w = Parameter(Tensor([0.0]), name="w")
    accumulator = Accumulator(nn.SGD([w], 1.0), accumulate_step=2, grad_reducer=OtherRanks([[6.0], 3.0]))
    assert bool(accumulator.flush())  # nothing here; the others summed 6 over 3 samples
    np.testing.assert_allclose(w.asnumpy(), [-2.0])
    assert int(accumulator.update_count) == 1 and int(accumulator.skipped_windows) == 0


def test_a_checkpoint_from_before_the_runs_windows_counts_its_n_per_rank(tmp_path):
    import json
    import mindspore as ms
    from training.checkpoints import RUN_WINDOWS, recorded_settings
    path = checkpoint_of(tmp_path, batch_size=2, accumulate_step=2)
    saved = ms.load_checkpoint(path)
    settings = json.loads(saved["config"])
    del settings[RUN_WINDOWS]
    saved["config"] = json.dumps({**settings, "ranks": 3})  # as a 3-rank run wrote it: N 2 on each rank
    ms.save_checkpoint(saved, path)
    assert recorded_settings(path)["accumulate_step"] == 6
