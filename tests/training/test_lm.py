"""training.lm: token-weighted windows equal the large batch, the naive mean does not; one shape per epoch; packed
epochs (seeded, dealt to ranks in equal rows, accepted by check_equivalence); sampling.

By hand: four micro-batches of eight sequences weighted by their token counts update as one batch of 32; the mean
of their four mean losses does not.
"""
import functools
import itertools
import os
import subprocess
import sys

import mindspore as ms
import numpy as np
import pytest
from mindspore.experimental import optim

from data.text import encode, split_samples, synthetic_text
from training.config import TrainConfig
from training.lm import MAX_LENGTH, WARMUP_UPDATES, WarmupInverseSqrt, count_tokens, generate, lm_task, lm_windows
from training.loop import build_run, check, train_on_windows

TINY = dict(width=32, depth=1, heads=4, max_length=64)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "input.txt"
    path.write_text(synthetic_text(4000, seed=5))
    return str(path)


@functools.lru_cache(maxsize=None)  # the tests below share the large batch's window and the start: nothing mutates them
def one_window(corpus, loss, batch_size, accumulate_step, packing=False):
    """The weights after the first window of ``batch_size x accumulate_step`` rows, op by op, plain SGD."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    task = lm_task(corpus, loss, packing=packing, **TINY)
    config = TrainConfig(mode="pynative", batch_size=batch_size, accumulate_step=accumulate_step, lr=0.5,
                         shuffle=False)
    run = build_run(config, task)
    windows = task.train_windows(batch_size, accumulate_step, shuffle=False, seed=0, drop_remainder=False,
                                 num_shards=None, shard_id=None)
    window = next(iter(windows))
    (_, counted, samples), = train_on_windows(run, [window], {batch_size}, accumulate_step, task.count)
    assert (samples > 32 if packing else samples == 32) and int(run.accumulator.update_count) == 1
    return {p.name: p.asnumpy().copy() for p in run.net.trainable_params()}, counted


def update_difference(weights, reference, start):
    """The largest difference between two updates from ``start``, relative to the reference update's largest element."""
    return max(np.abs(weights[name] - reference[name]).max() / np.abs(reference[name] - start[name]).max()
               for name in reference)


@functools.lru_cache(maxsize=None)
def start_weights(corpus):
    return {p.name: p.asnumpy() for p in build_run(TrainConfig(mode="pynative"), lm_task(corpus, **TINY))
            .net.trainable_params()}


def test_four_micro_batches_of_eight_update_like_one_batch_of_thirty_two_and_the_naive_mean_does_not(corpus):
    large, tokens = one_window(corpus, "token-sum", 32, 1)
    accumulated, counted = one_window(corpus, "token-sum", 8, 4)
    naive, micro_batches = one_window(corpus, "micro-batch-mean", 8, 4)
    assert counted == tokens > 32 * 20 and micro_batches == 4
    start = start_weights(corpus)
    exact, wrong = update_difference(accumulated, large, start), update_difference(naive, large, start)
    assert exact < 1e-4, exact   # float32 rounding of a sum taken in another order
    assert wrong > 1e-2 and wrong > 100 * exact, (wrong, exact)


def test_packed_windows_of_four_micro_batches_of_eight_rows_update_like_one_batch_of_thirty_two_rows(corpus):
    large, tokens = one_window(corpus, "token-sum", 32, 1, packing=True)
    accumulated, counted = one_window(corpus, "token-sum", 8, 4, packing=True)
    _, padded_tokens = one_window(corpus, "token-sum", 32, 1)
    assert counted == tokens > 32 * 50 > padded_tokens   # the same rows hold more tokens packed
    exact = update_difference(accumulated, large, start_weights(corpus))
    assert exact < 1e-4, exact


def test_adamw_is_mindspores_experimental_one_and_its_learning_rate_follows_the_schedule_per_update(corpus):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    task = lm_task(corpus, **TINY)
    run = build_run(TrainConfig(mode="pynative", batch_size=4, accumulate_step=2, optimizer="adamw", lr=0.5), task)
    windows = task.train_windows(4, 2, shuffle=False, seed=0, drop_remainder=False, num_shards=None, shard_id=None)
    list(train_on_windows(run, itertools.islice(windows, 3), {4}, 2, task.count))  # 6 micro-batches, 3 updates
    schedule = WarmupInverseSqrt(0.5, WARMUP_UPDATES)
    assert isinstance(run.optimizer, optim.AdamW) and int(run.accumulator.update_count) == 3
    assert float(run.optimizer.lrs[0]) == float(schedule(ms.Tensor(3, ms.int32)))  # the 4th update's rate


def test_an_epoch_of_varied_lengths_takes_one_shape_so_the_step_compiles_once():
    # Lengths 2..128 in a shuffled order: a shape per length would be 127 compiled graphs.
    rng = np.random.default_rng(0)
    samples = [encode("a" * (length - 1) + "\n") for length in rng.integers(2, MAX_LENGTH + 1, size=300)]
    shapes = set()
    for window in lm_windows(samples, 4, 2, shuffle=True, seed=1, drop_remainder=False, num_shards=None,
                             shard_id=None, length=MAX_LENGTH):
        shapes.update(tuple(inputs.shape) for inputs, _ in window)
        shapes.add(tuple(window.stacked[0].shape[1:]))
    assert len({len(s) for s in samples}) > 100
    assert shapes == {(4, MAX_LENGTH)}


def test_an_epoch_counts_its_samples_not_the_padding_rows_of_its_last_micro_batch(corpus):
    samples = [encode("to be or not\n")] * 11       # 11 = 2 windows of 4 x 2 rows, less 5
    windows = list(lm_windows(samples, 2, 2, shuffle=False, seed=0, drop_remainder=False, num_shards=None,
                              shard_id=None, length=16))
    assert [len(window) * 2 for window in windows] == [4, 4, 4] and sum(w.samples for w in windows) == 11
    ms.set_context(mode=ms.PYNATIVE_MODE)
    task = lm_task(corpus, **TINY)
    run = build_run(TrainConfig(mode="pynative", batch_size=2, accumulate_step=2), task)
    assert sum(samples for _, _, samples in train_on_windows(run, windows, {2}, 2, task.count)) == 11


def test_a_sample_is_seeded_and_starts_with_the_prompt(corpus):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net = build_run(TrainConfig(mode="pynative"), lm_task(corpus, **TINY)).net
    first, again = generate(net, "KING", tokens=12, seed=3), generate(net, "KING", tokens=12, seed=3)
    greedy = generate(net, "KING", tokens=12, temperature=0)
    assert first == again and first.startswith("KING") and greedy.startswith("KING")
    assert generate(net, "KING", tokens=12, temperature=0) == greedy


COMPILE_CACHED = """
import os, sys
import mindspore as ms
ms.set_context(mode=ms.GRAPH_MODE, enable_compile_cache=True, compile_cache_path=sys.argv[1])
FACTOR = float(os.environ["FACTOR"])

@ms.jit
def scaled(x):
    return x * FACTOR

print(float(scaled(ms.Tensor(1.0))))
"""


@pytest.mark.slow
def test_mindspores_compile_cache_reuses_a_graph_whose_constant_changed(tmp_path):
    # Why the tools compile afresh every run (docs/mindspore-behaviours.md): a flag is a constant in the graph.
    script = tmp_path / "scaled.py"
    script.write_text(COMPILE_CACHED)
    outputs = []
    for factor in ("2", "3"):
        env = dict(os.environ, FACTOR=factor)
        result = subprocess.run([sys.executable, str(script), str(tmp_path / "cache")], env=env, cwd=tmp_path,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        outputs.append(float(result.stdout.split()[-1]))
    assert outputs == [2.0, 2.0]   # the second run, FACTOR=3, ran the first run's graph


def packed_epoch(samples, batch_size=4, accumulate_step=2, **order):
    order = {"shuffle": True, "seed": 1, "drop_remainder": False, "num_shards": None, "shard_id": None, **order}
    layout = {}
    windows = list(lm_windows(samples, batch_size, accumulate_step, length=MAX_LENGTH, packing=True, layout=layout,
                              **order))
    return windows, layout


def rows_of(windows):
    return [row for window in windows for inputs, _ in window for row in inputs.asnumpy()]


def test_a_packed_epoch_takes_one_shape_holds_every_token_once_and_little_padding():
    rng = np.random.default_rng(0)
    samples = [encode("a" * (length - 1) + "\n") for length in rng.integers(2, MAX_LENGTH + 1, size=300)]
    windows, layout = packed_epoch(samples)
    shapes = {tuple(inputs.shape) for window in windows for inputs, _ in window}
    assert shapes == {(4, 2, MAX_LENGTH)} and {tuple(w.stacked[0].shape[1:]) for w in windows} == {(4, 2, MAX_LENGTH)}
    tokens = sum(count_tokens(targets) for window in windows for _, targets in window)
    assert tokens == layout["tokens"] == sum(len(s) - 1 for s in samples)
    assert sum(w.samples for w in windows) == 300
    padded = list(lm_windows(samples, 4, 2, shuffle=True, seed=1, drop_remainder=False, num_shards=None,
                             shard_id=None, length=MAX_LENGTH))
    assert layout["slots"] == len(rows_of(windows)) * MAX_LENGTH < 0.6 * len(rows_of(padded)) * MAX_LENGTH


def test_packed_epochs_follow_the_seed():
    samples = split_samples(encode(synthetic_text(6000, seed=2)), 64)
    first, again, other = (rows_of(packed_epoch(samples, seed=seed)[0]) for seed in (1, 1, 2))
    np.testing.assert_array_equal(np.stack(first), np.stack(again))
    assert len(first) != len(other) or not np.array_equal(np.stack(first), np.stack(other))


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_ranks_share_each_packed_window_by_position(drop_remainder):
    samples = split_samples(encode(synthetic_text(6000, seed=2)), 64)
    whole = packed_epoch(samples, drop_remainder=drop_remainder)[0]
    shards = [packed_epoch(samples, drop_remainder=drop_remainder, num_shards=3, shard_id=rank)[0] for rank in range(3)]
    assert all(len(shard) == len(whole) for shard in shards)  # every rank takes part in every window
    for index, window in enumerate(whole):
        shared = [row for shard in shards for row in rows_of([shard[index]]) if row[0].any()]
        np.testing.assert_array_equal(np.stack(shared), np.stack([row for row in rows_of([window]) if row[0].any()]))


def test_check_equivalence_accepts_a_packed_window_of_the_tool(corpus):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    task = lm_task(corpus, **TINY)
    config = TrainConfig(mode="pynative", batch_size=4, accumulate_step=3, shuffle=True)
    report = check(build_run(config, task), task, config)
    assert report.equivalent, report.summary()
    window = next(iter(task.train_windows(4, 3, shuffle=True, seed=1, drop_remainder=False, num_shards=None,
                                          shard_id=None)))
    assert len(window) == 3 and tuple(window[0][0].shape) == (4, 2, TINY["max_length"])
    assert len({count_tokens(targets) for _, targets in window}) > 1     # counts differ: they matter
