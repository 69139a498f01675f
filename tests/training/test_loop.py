"""training.loop: accumulated micro-batches train exactly like one large batch, in every way of running.

By hand: 10 training samples in batches of 16 with --drop-last leave nothing to train, and the run says so in
one line before anything is built; 21 samples in windows of 4 x 2 ((2, 2, 2, 2 | 2, 2, 2, 2 | 2, 2, 1)) train as
batches of 8 ((8 | 8 | 5)), the last window weighted by its samples, not by its micro-batches.
"""
import re
from dataclasses import replace

import mindspore as ms
import numpy as np
import pytest

from training.config import TrainConfig
from training.context import configure_context
from training.errors import TrainingError
from training.loop import build_run, check_trainable, compile_train_step, train, train_epoch
from training.task import toy_task


def trained_toy(samples=20, **settings):
    """``train`` on ``toy_task(samples)``, two epochs of 2-batches at lr 0.1: ``(summary, run)``.

    ``settings`` are ``TrainConfig`` fields (``mode`` too: the context follows it).
    """
    config = configure_context(TrainConfig(**{"epochs": 2, "batch_size": 2, "lr": 0.1, **settings}))
    return train(config, toy_task(samples), progress=False)


def trained_state(run):
    """Every parameter of the run's network and optimizer as numpy, by name."""
    state = {param.name: param.asnumpy().copy() for param in run.net.get_parameters()}
    state.update({name: param.asnumpy().copy() for name, param in run.optimizer.parameters_and_names()})
    return state


# 21 samples in 2-batches: the windows are (2,2,2,2 | 2,2,2,2 | 2,2,1), a short last one whose last batch holds 1.
# Only weighting by sample count (not a mean of micro-batch means) matches the last 5-batch. In PyNative, which
# compiles nothing; every driver in graph mode, a short last window (8 + 2) among them, against the large batch in
# PyNative: test_uneven_windows.py's every-driver test, whose window step the fast path runs.
@pytest.mark.slow
def test_pynative_mode_trains_like_batches_of_8_the_last_window_weighted_by_its_samples():
    common = dict(samples=21, optimizer="momentum", mode="pynative")
    accumulated, run = trained_toy(**common, accumulate_step=4)
    large_batch, large_run = trained_toy(**common, batch_size=8, accumulate_step=1)
    assert accumulated["updates"] == large_batch["updates"] == 6
    expected = trained_state(large_run)
    for name, value in trained_state(run).items():
        np.testing.assert_allclose(value, expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # lr 0.1: the weights moved far beyond the tolerance.
    start = build_run(TrainConfig(), toy_task(21)).net.get_parameters()
    assert max(np.abs(expected[param.name] - param.asnumpy()).max() for param in start) > 1e-3


@pytest.mark.parametrize("drop_last, samples, updates", [(False, 10, 2), (True, 8, 1)])
def test_an_epoch_counts_its_samples_and_applies_the_short_last_window(drop_last, samples, updates):
    # A task that is not MNIST: 10 samples in batches of 4 and windows of 2 leave a window of one 2-batch.
    config = TrainConfig(mode="pynative", batch_size=4, accumulate_step=2, drop_last=drop_last)
    run = build_run(config, toy_task(10))
    stats = train_epoch(run, toy_task(10), config, epoch=1, progress=False)
    assert stats["samples"] == samples and stats["seconds"] > 0
    assert (int(run.accumulator.update_count), int(run.accumulator.micro_step)) == (updates, 0)


@pytest.mark.parametrize("settings, message", [
    (dict(batch_size=16, drop_last=True), "--batch-size 16 with --drop-last leaves nothing to train: the training split "
                                          "has 10 samples"),
])
def test_a_run_that_would_train_nothing_is_refused_before_anything_is_built(settings, message):
    with pytest.raises(TrainingError, match=re.escape(message)):
        train(TrainConfig(mode="pynative", **settings), toy_task(10), progress=False)
    # The ranks share the run's windows: 6 of the 10 samples, 3 on each rank.
    check_trainable(TrainConfig(batch_size=6, drop_last=True, distributed=True, ranks=2), toy_task(10))


def test_a_run_that_tracks_noise_records_it_every_epoch_and_noise_moves_n_within_bounds(capsys):
    config = TrainConfig(mode="pynative", epochs=2, batch_size=2, accumulate_step="noise", check=True, update_cost=2.0)
    summary, run = train(config, toy_task(16), progress=False)
    printed = capsys.readouterr().out
    assert "batch 2 x noise (N from 2 to 64, following sqrt(2 x the gradient noise scale))" in printed
    assert run.accumulator.schedule.update_cost == 2.0
    assert re.search(r"equivalence check: equivalent: .*accumulator state [0-9.]+x the parameters' bytes", printed)
    history = [line for line in printed.splitlines() if line.startswith("epoch ")]
    assert len(history) == 2 and all("; noise scale " in line for line in history)
    assert summary["effective_batch_size"] is None and summary["updates"] >= 2
    assert 2 <= int(run.accumulator.accumulate_step) <= 64
    assert run.accumulator.noise.record()["windows"] >= 1


def test_a_signal_while_the_progress_bar_draws_itself_waits_until_the_bar_can_be_cleared(monkeypatch):
    import signal

    import tqdm as tqdm_module

    from training import loop
    from training.interrupts import Interrupted, signals_raise_interrupted
    closed = []

    class SignalledBar(tqdm_module.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            signal.raise_signal(signal.SIGTERM)   # as if it came while the bar was first drawn

        def close(self):
            closed.append(True)
            super().close()

    monkeypatch.setattr(loop, "tqdm", SignalledBar)
    config = TrainConfig(mode="pynative", batch_size=4, accumulate_step=1, epochs=1)
    run = build_run(config, toy_task())
    with pytest.raises(Interrupted), signals_raise_interrupted():
        try:
            train_epoch(run, toy_task(), config, epoch=1)
        finally:
            assert closed   # closed before the interrupt's message is printed, which clears its line


# "noise" tracks noise as track_noise=True does, and moves N as well.
def test_the_compiled_step_applied_from_the_host_trains_like_the_step_run_op_by_op():
    settings = dict(accumulate_step="noise")
    # 20 samples in 2-batches: 10 micro-batches an epoch, a partial last window; the micro-step's `last`
    # (track_noise=True samples the window's last micro-batch) is read on the host, noise moves N.
    graph_summary, graph = trained_toy(mode="graph", **settings)
    eager_summary, eager = trained_toy(mode="pynative", **settings)
    assert graph_summary["updates"] == eager_summary["updates"] >= 4
    assert int(graph.accumulator.accumulate_step) == int(eager.accumulator.accumulate_step)
    for key, value in eager.accumulator.noise.record().items():
        assert graph.accumulator.noise.record()[key] == pytest.approx(value, rel=1e-5), key
    assert eager.accumulator.noise.record()["windows"] >= 4
    for mine, theirs in zip(graph.optimizer.parameters, eager.optimizer.parameters):
        np.testing.assert_allclose(mine.asnumpy(), theirs.asnumpy(), rtol=1e-5, atol=1e-6, err_msg=mine.name)


@pytest.mark.slow  # long: the host step's and the window step's graphs compiled ahead, the state checked each time
def test_the_train_step_compiles_before_the_first_epoch_without_touching_the_state_and_never_applies_itself():
    config = configure_context(TrainConfig(batch_size=2, accumulate_step=2, track_noise=True, driver="host"))
    run = build_run(config, toy_task())
    state = [p.asnumpy().copy() for p in list(run.net.get_parameters()) + run.accumulator.state_parameters()]
    assert compile_train_step(run, toy_task(), config, epoch=1) > 0
    for before, parameter in zip(state, list(run.net.get_parameters()) + run.accumulator.state_parameters()):
        np.testing.assert_array_equal(parameter.asnumpy(), before, err_msg=parameter.name)
    inputs, labels = next(iter(toy_task().test_batches(2)))
    for last in (False, True, False):   # past N: the micro-step adds, only Accumulator.step() applies
        run.compiled_step(inputs, labels, ms.Tensor(2.0), ms.Tensor(last))
    assert (int(run.accumulator.micro_step), int(run.accumulator.update_count)) == (3, 0)
    # The window step, a jitted function, compiles by training the first window: the state is put back exactly.
    whole_windows = replace(config, driver="window", optimizer="momentum", track_noise=False)
    run = build_run(whole_windows, toy_task())
    state = [p.asnumpy().copy() for p in list(run.net.get_parameters()) + list(run.optimizer.parameters)
             + list(run.optimizer.moments) + run.accumulator.state_parameters()]
    assert compile_train_step(run, toy_task(), whole_windows, epoch=1) > 0
    after = list(run.net.get_parameters()) + list(run.optimizer.parameters) + list(run.optimizer.moments) \
        + run.accumulator.state_parameters()
    for before, parameter in zip(state, after):
        np.testing.assert_array_equal(parameter.asnumpy(), before, err_msg=parameter.name)
    pynative = replace(config, mode="pynative")
    assert compile_train_step(build_run(pynative, toy_task()), toy_task(), pynative, epoch=1) is None


def test_clip_norm_clips_the_window_update_to_that_norm():
    # SGD at lr 0.1: the one window's update is lr x the clipped gradient, whose global norm is clip_norm.
    config = TrainConfig(mode="pynative", batch_size=4, accumulate_step=2, lr=0.1, clip_norm=1e-3, shuffle=False)
    run = build_run(config, toy_task(8))
    before = {param.name: param.asnumpy().copy() for param in run.net.trainable_params()}
    train_epoch(run, toy_task(8), config, epoch=1, progress=False)
    moved = np.sqrt(sum(((param.asnumpy() - before[param.name]) ** 2).sum() for param in run.net.trainable_params()))
    assert int(run.accumulator.update_count) == 1 and moved == pytest.approx(0.1 * 1e-3, rel=1e-3)  # float32 weights
