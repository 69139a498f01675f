"""Uneven windows (``TrainConfig.last_micro_batch``): each window ends in a smaller micro-batch, still the large batch.

By hand: a batch of 20 as micro-batches of 8, 8 and 4 (``last_micro_batch=4``) updates as a batch of 20; the
window driver, which stacks one shape, refuses it in one line.
"""
import mindspore as ms
import numpy as np
import pytest

from tests.accumulator.helpers import sweep
from training.config import TrainConfig
from training.context import configure_context
from training.lm import count_tokens, lm_windows
from training.loop import build_run, compile_train_step, train_epoch
from training.mnist import mnist_task
from training.task import toy_task


def trained(config, task, eager=None):
    """One epoch of ``task`` as ``train`` runs it (compiled first); ``eager`` collects what ran op by op."""
    config = configure_context(config)
    run = build_run(config, task)
    compile_train_step(run, task, config, epoch=1)
    if eager is not None:
        step = run.eager_step
        run.eager_step = lambda inputs, labels, count: eager.append(labels.shape[0]) or step(inputs, labels, count)
    train_epoch(run, task, config, epoch=1, progress=False)
    return run


def assert_same_weights(run, expected):
    assert int(run.accumulator.update_count) == int(expected.accumulator.update_count)
    for mine, theirs in zip(run.optimizer.parameters, expected.optimizer.parameters):
        np.testing.assert_allclose(mine.asnumpy(), theirs.asnumpy(), rtol=1e-5, atol=1e-6, err_msg=mine.name)


# Every whole window's 4 runs compiled; the epoch's partial window op by op: its 2, and with the window step its 8.
# The window step, --driver auto's pick, on the fast path; CI runs every driver (on MNIST, through the tool:
# test_the_mnist_tool_trains_windows_of_8_8_4_like_batches_of_20, below).
@pytest.mark.parametrize("driver, eager_rows", sweep([("window", [8, 2]), ("host", [2]), ("in-graph", [2])]))
def test_windows_of_8_8_4_train_like_batches_of_20_on_every_driver(driver, eager_rows):
    # 50 samples: windows 8+8+4, 8+8+4 and a partial 8+2, against batches of 20, 20 and 10.
    eager = []
    uneven = trained(TrainConfig(batch_size=8, accumulate_step=3, last_micro_batch=4, driver=driver, lr=0.5,
                                 optimizer="momentum"), toy_task(50), eager)
    assert uneven.driver == driver and eager == eager_rows
    assert ms.get_context("mode") == ms.GRAPH_MODE  # put back after the epoch's op-by-op tail
    large = trained(TrainConfig(batch_size=20, accumulate_step=1, lr=0.5, optimizer="momentum", mode="pynative"),
                    toy_task(50))
    assert int(large.accumulator.update_count) == 3
    assert_same_weights(uneven, large)


def rows_of(windows):
    return [[labels.shape[0] for _, labels in window] for window in windows]


def joined(windows):
    """Every micro-batch's ``(inputs, labels)`` of ``windows``, concatenated in order, as numpy."""
    pairs = [(inputs.asnumpy(), labels.asnumpy()) for window in windows for inputs, labels in window]
    return np.concatenate([x for x, _ in pairs]), np.concatenate([y for _, y in pairs])


ORDER = dict(shuffle=True, seed=3, drop_remainder=False, num_shards=None, shard_id=None)


@pytest.mark.parametrize("task, rows", [
    (lambda folder: toy_task(26), [[8, 8, 4], [6]]),
    (mnist_task, [[8, 8, 4]] * 10),  # 200 samples
])
def test_the_pipelines_cut_uneven_windows_from_the_same_samples_in_the_same_order(synthetic_mnist_dir, task, rows):
    task = task(synthetic_mnist_dir)
    uneven = list(task.train_windows(8, 3, **ORDER, last_micro_batch=4))
    assert rows_of(uneven) == rows
    assert all(getattr(window, "stacked", None) is None for window in uneven)  # two sizes stack into no one tensor
    for mine, theirs in zip(joined(uneven), joined(task.train_windows(200, 1, **ORDER))):
        np.testing.assert_array_equal(mine, theirs)


@pytest.mark.parametrize("packing", [False, True])
def test_the_language_model_fills_only_the_epochs_last_micro_batch_to_its_place_in_the_window(packing):
    samples = [np.arange(1, 3 + i % 7, dtype=np.int32) for i in range(23)]
    settings = dict(**ORDER, length=8, packing=packing)
    uneven = list(lm_windows(samples, 4, 3, **settings, last_micro_batch=2))
    even = list(lm_windows(samples, 10, 1, **settings))
    sizes = rows_of(uneven)
    assert all(window == [4, 4, 2] for window in sizes[:-1]) and sizes[-1] == [4, 4, 2][:len(sizes[-1])]
    assert sum(count_tokens(targets) for window in uneven for _, targets in window) == \
        sum(count_tokens(targets) for window in even for _, targets in window) == sum(len(s) - 1 for s in samples)
    assert sum(window.samples for window in uneven) == sum(window.samples for window in even)


@pytest.mark.parametrize("settings, message", [
    (dict(scale_rule="linear"), "scale_rule='linear' follows N micro-batches of batch_size; last_micro_batch=4 makes "
                                "the last smaller"),
    (dict(accumulate_step=1), "last_micro_batch=4 ends each window in a smaller micro-batch: it needs a fixed "
                              "accumulate_step of at least 2 and a smaller size than batch_size, got batch_size=8, "
                              "accumulate_step=1"),
])
def test_what_needs_whole_windows_refuses_an_uneven_one_in_one_line(settings, message):
    with pytest.raises(ValueError) as caught:
        TrainConfig(**{"batch_size": 8, "accumulate_step": 3, "last_micro_batch": 4, **settings})
    assert str(caught.value) == message


def test_a_resumed_uneven_plan_keeps_its_windows_and_refuses_another_batch(tmp_path, capsys):
    import training.memory
    from training.errors import TrainingError
    from training.loop import train
    folder = str(tmp_path)
    config = TrainConfig(mode="pynative", epochs=1, batch_size=8, accumulate_step=3, last_micro_batch=4,
                         ckpt_dir=folder)
    train(config, toy_task(20), progress=False)
    asked = TrainConfig(mode="pynative", epochs=2, batch_size=20, accumulate_step=1, micro_batch="auto",
                        ckpt_dir=folder, resume=True)
    kept = training.memory.plan_run(asked, toy_task, (20,))
    assert (kept.batch_size, kept.accumulate_step, kept.last_micro_batch) == (8, 3, 4)
    assert f"micro-batch kept from {folder}/epoch_001.ckpt: 8 + 8 + 4 = 20 per update" in capsys.readouterr().out
    summary, _ = train(kept, toy_task(20), progress=False)
    assert summary["updates"] == 2 and summary["effective_batch_size"] == 20
    with pytest.raises(TrainingError, match=f"cannot resume with --batch-size 24 --micro-batch auto: {folder}/"
                                            "epoch_002.ckpt was trained with 8 \\+ 8 \\+ 4 per update"):
        training.memory.plan_run(TrainConfig(batch_size=24, accumulate_step=1, micro_batch="auto", ckpt_dir=folder,
                                             resume=True), toy_task, (20,))


@pytest.mark.parametrize("flags, message", [
    (["--scale-rule", "linear"], "--scale-rule linear follows N micro-batches of batch_size; --micro-batch 8 does "
                                 "not divide the batch per update of 20: pass one that does"),
])
def test_a_tool_that_needs_whole_windows_refuses_a_micro_batch_that_does_not_divide_in_one_line(flags, message):
    import training.memory
    from scripts import train_mnist
    from training.errors import TrainingError
    config, _ = train_mnist.parse_args(["--batch-size", "20", "--micro-batch", "8", *flags])
    with pytest.raises(TrainingError) as caught:
        training.memory.plan_run(config, toy_task, ())
    assert str(caught.value) == message


@pytest.mark.slow  # two runs of the tool
def test_the_mnist_tool_trains_windows_of_8_8_4_like_batches_of_20(synthetic_mnist_dir, capsys):
    from scripts import train_mnist
    common = ["--data-dir", synthetic_mnist_dir, "--epochs", "1", "--lr", "0.1", "--batch-size", "20"]
    uneven = train_mnist.main([*common, "--micro-batch", "8"])
    first = capsys.readouterr().out.splitlines()[0]
    assert "batch 8 + 8 + 4 = effective 20" in first
    assert ("driver window (a fixed N, a smaller last micro-batch in the same call: the fastest; "
            "--driver host holds less memory)") in first
    large = train_mnist.main([*common, "--accumulate-step", "1", "--mode", "pynative"])  # the oracle compiles nothing
    assert (uneven["effective_batch_size"], uneven["updates"]) == (large["effective_batch_size"], large["updates"])
    assert uneven["final_test_loss"] == pytest.approx(large["final_test_loss"], rel=1e-5)


def test_a_language_model_window_of_8_8_4_rows_updates_like_one_of_20(tmp_path):
    from data.text import synthetic_text
    from training.lm import lm_task
    from training.loop import train_on_windows
    corpus = tmp_path / "input.txt"
    corpus.write_text(synthetic_text(4000, seed=5))
    ms.set_context(mode=ms.PYNATIVE_MODE)
    task = lm_task(str(corpus), width=32, depth=1, heads=4, max_length=64)

    def first_window(batch_size, accumulate_step, **uneven):
        config = TrainConfig(mode="pynative", batch_size=batch_size, accumulate_step=accumulate_step, lr=0.5,
                             shuffle=False, **uneven)
        run = build_run(config, task)
        window = next(iter(task.train_windows(batch_size, accumulate_step, **{**ORDER, "shuffle": False}, **uneven)))
        sizes = {batch_size, uneven.get("last_micro_batch", batch_size)}
        (_, counted, _), = train_on_windows(run, [window], sizes, accumulate_step, task.count)
        return {p.name: p.asnumpy() for p in run.net.trainable_params()}, counted, rows_of([window])

    large, tokens, _ = first_window(20, 1)
    uneven, counted, rows = first_window(8, 3, last_micro_batch=4)
    assert rows == [[8, 8, 4]] and counted == tokens
    for name, value in large.items():
        np.testing.assert_allclose(uneven[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
