"""training.checkpoints: per-epoch saves, exact resume, and the faults that must not lose a run.

By hand: a folder holding epochs 2, 10 and 1 and a temporary ``epoch_7.ckpt.tmp`` left by a crash: the checkpoints
are epoch_010, epoch_002, epoch_001, newest first; the temporary is none.
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import mindspore as ms
import numpy as np
import pytest

from tests.training import checkpoint_worker
from training.checkpoints import CHECKPOINT_NAME, checkpoint_path, find_checkpoints
from training.errors import TrainingError
from training.interrupts import Interrupted, signals_raise_interrupted

WORKER = checkpoint_worker.__file__


def test_checkpoints_are_found_newest_epoch_first(tmp_path):
    for epoch in (2, 10, 1):
        open(checkpoint_path(str(tmp_path), epoch), "w").close()
    (tmp_path / "epoch_7.ckpt.tmp").write_text("")  # a temporary left by a crash is no checkpoint
    assert [os.path.basename(path) for path in find_checkpoints(str(tmp_path))] == \
        ["epoch_010.ckpt", "epoch_002.ckpt", "epoch_001.ckpt"]
    assert find_checkpoints(str(tmp_path / "missing")) == []


def test_a_stopped_or_failed_run_resumes_to_the_end_of_the_uninterrupted_one(synthetic_mnist_dir, tmp_path,
                                                                             train_mnist_run, monkeypatch, capsys):
    # Adam, so its moments and step count must come back too; shuffled, so the
    # resumed epoch must reproduce the order of epoch 2. PyNative, which compiles nothing: the files, the data order
    # and the state saved are the same in either mode (tests/accumulator/core/test_checkpoints.py resumes compiled steps bit for bit).
    flags = dict(optimizer="adam", lr=1e-3, batch_size=32, accumulate_step=3, mode="pynative")
    straight = str(tmp_path / "straight")
    _, uninterrupted = train_mnist_run(synthetic_mnist_dir, epochs=2, ckpt_dir=straight, **flags)

    # SIGTERM during epoch 1's write takes effect once the file is whole.
    stopped = str(tmp_path / "stopped")
    real_save = ms.save_checkpoint

    def save_while_a_signal_comes(save_obj, ckpt_file_name, **kwargs):
        signal.raise_signal(signal.SIGTERM)  # the handler runs here, before the file is written
        real_save(save_obj, ckpt_file_name, **kwargs)

    with monkeypatch.context() as patch, pytest.raises(Interrupted) as caught, signals_raise_interrupted():
        patch.setattr(ms, "save_checkpoint", save_while_a_signal_comes)
        train_mnist_run(synthetic_mnist_dir, epochs=1, ckpt_dir=stopped, **flags)
    assert caught.value.name == "SIGTERM"
    assert os.listdir(stopped) == ["epoch_001.ckpt"]  # written whole, then the run stopped
    assert int(ms.load_checkpoint(os.path.join(stopped, "epoch_001.ckpt"))["epoch"].asnumpy()) == 1

    # Resumed with --epochs 2, the run trains epoch 2, then its checkpoint write dies half-way (disk full).
    def crash(save_obj, ckpt_file_name, **kwargs):
        with open(ckpt_file_name, "wb") as half_written:
            half_written.write(b"partial")
        raise OSError("No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(ms, "save_checkpoint", crash)
        with pytest.raises(TrainingError) as caught:
            train_mnist_run(synthetic_mnist_dir, epochs=2, ckpt_dir=stopped, resume=True, **flags)
    assert "could not write checkpoint" in str(caught.value) and "epoch_001.ckpt is intact" in str(caught.value)
    assert os.listdir(stopped) == ["epoch_001.ckpt"]
    capsys.readouterr()

    # Resumed from the straight run's epoch 1, as if it had stopped there, it ends where the straight run did.
    ckpt_dir = str(tmp_path / "ckpt")
    os.mkdir(ckpt_dir)
    shutil.copy(checkpoint_path(straight, 1), ckpt_dir)
    summary, resumed = train_mnist_run(synthetic_mnist_dir, epochs=2, ckpt_dir=ckpt_dir, resume=True,
                                       keep_checkpoints=1, **flags)
    assert "resumed from" in capsys.readouterr().out
    assert uninterrupted.keys() == resumed.keys()
    for name, value in uninterrupted.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    assert summary["epochs"] == 2 and summary["best_epoch"] in (1, 2)
    assert os.listdir(ckpt_dir) == ["epoch_002.ckpt"]  # --keep-checkpoints 1 removed epoch 1's

    # Resuming with settings that change the data order would not be exact: refused.
    with pytest.raises(TrainingError, match="--seed was 0, now 1"):
        train_mnist_run(synthetic_mnist_dir, epochs=3, ckpt_dir=ckpt_dir, resume=True, seed=1, **flags)


@pytest.mark.slow
def test_a_kill_mid_checkpoint_keeps_the_last_one_and_the_resumed_run_ends_as_the_uninterrupted_one(
        synthetic_mnist_dir, tmp_path, train_mnist_run):
    epochs = 6  # beyond what two attempts reach even if every kill came after its save

    def worker(ckpt_dir):
        return subprocess.Popen([sys.executable, WORKER, synthetic_mnist_dir, str(ckpt_dir), str(epochs)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    # The uninterrupted run in this process, as the worker trains (the kills are the point, not its interpreter).
    straight = tmp_path / "straight"
    train_mnist_run(synthetic_mnist_dir, epochs=epochs, ckpt_dir=str(straight), **checkpoint_worker.SETTINGS)

    killed = tmp_path / "killed"
    killed.mkdir()

    def temporaries():
        return {name for name in os.listdir(killed) if not CHECKPOINT_NAME.match(name)}

    delays = random.Random(0)
    mid_write = 0
    for attempt in range(1, 3):
        stale = temporaries()  # left by earlier kills: the runs must ignore them
        process = worker(killed)
        saves = 0
        while saves < 2:  # one save completes, so each attempt gets further; the second is killed
            line = process.stdout.readline()
            assert line, "the worker ended before its second save"
            saves += line.startswith("saving")
        # Kill at a random moment once the write has begun (a fixed delay after "saving" missed the
        # write under some loads).
        while not temporaries() - stale:
            assert process.poll() is None, "the worker ended during its save"
            time.sleep(0.001)
        time.sleep(delays.uniform(0, 0.01))
        process.kill()
        process.wait()
        mid_write += bool(temporaries() - stale)
        # This run's first save was of the epoch the last kill cut short: it removed what that kill left.
        assert not stale & temporaries()
        newest = find_checkpoints(str(killed))[0]  # the one before the killed write, whole
        assert int(ms.load_checkpoint(newest)["epoch"].asnumpy()) == int(CHECKPOINT_NAME.match(
            os.path.basename(newest)).group(1)) >= attempt
    assert mid_write, "no kill landed while a checkpoint was being written"  # nearly every kill does here

    process = worker(killed)
    assert process.wait(timeout=300) == 0
    assert not temporaries()  # the resumed run's saves removed what the kills left
    expected = ms.load_checkpoint(checkpoint_path(str(straight), epochs))
    resumed = ms.load_checkpoint(checkpoint_path(str(killed), epochs))
    assert expected.keys() == resumed.keys()
    for name in expected.keys() - {"history"}:  # the history's timings differ
        as_array = (lambda value: value) if isinstance(expected[name], str) else ms.Tensor.asnumpy
        np.testing.assert_array_equal(as_array(resumed[name]), as_array(expected[name]), err_msg=name)


@pytest.mark.slow  # two runs of the tool
def test_a_run_whose_optimizer_follows_n_resumes_exactly(synthetic_mnist_dir, tmp_path, train_mnist_run, capsys):
    # AdaScale: the gain's state (the schedule position, the factor the lr holds) must come back with the noise's.
    # Whole windows of 2: κ = 2 at the end. PyNative: the graph-mode resume is the test above.
    flags = dict(batch_size=20, accumulate_step="noise", scale_rule="adascale", mode="pynative")
    straight = str(tmp_path / "straight")
    _, uninterrupted = train_mnist_run(synthetic_mnist_dir, epochs=2, ckpt_dir=straight, **flags)
    ckpt_dir = str(tmp_path / "ckpt")
    os.mkdir(ckpt_dir)  # as if stopped after epoch 1
    shutil.copy(checkpoint_path(straight, 1), ckpt_dir)
    _, resumed = train_mnist_run(synthetic_mnist_dir, epochs=2, ckpt_dir=ckpt_dir, resume=True, **flags)
    assert "resumed from" in capsys.readouterr().out
    assert float(uninterrupted["learning_rate"]) != pytest.approx(0.01)  # the rule moved it
    for name, value in uninterrupted.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    saved = ms.load_checkpoint(checkpoint_path(ckpt_dir, 2))
    assert {"accumulator.scale_rule.lr_scale", "accumulator.scale_rule.progress"} <= set(saved)
    with pytest.raises(TrainingError, match="--scale-rule was adascale, now linear"):
        train_mnist_run(synthetic_mnist_dir, epochs=3, ckpt_dir=ckpt_dir, resume=True,
                        **{**flags, "scale_rule": "linear"})


def test_a_checkpoint_from_before_a_setting_existed_resumes_as_that_setting_was(tmp_path):
    # train_lm.py's checkpoints from before --packing hold no "packing": those runs padded every sample.
    from training.checkpoints import check_settings
    from training.config import TrainConfig
    settings = TrainConfig(tool_settings={"packing": False}).resume_settings()
    path = str(tmp_path / "old.ckpt")
    ms.save_checkpoint([], path, append_dict={"config": json.dumps(
        {name: value for name, value in settings.items() if name not in ("packing", "update_cost")})})
    check_settings(path, TrainConfig(tool_settings={"packing": False}))
    with pytest.raises(TrainingError, match="--packing was False, now True"):
        check_settings(path, TrainConfig(tool_settings={"packing": True}))
    # Nor "scale_rule", from before --scale-rule: the learning rate stayed as set.
    with pytest.raises(TrainingError, match="--scale-rule was none, now linear"):
        check_settings(path, TrainConfig(tool_settings={"packing": False}, scale_rule="linear"))
    # Nor "update_cost", from before --update-cost: an adaptive window aimed at the noise scale.
    with pytest.raises(TrainingError, match="--update-cost was None, now 1.5"):
        check_settings(path, TrainConfig(tool_settings={"packing": False}, accumulate_step="noise", update_cost=1.5))
    # Nor the probe's settings, from before the measured window: "auto" was the noise-scale window, "noise" now.
    ms.save_checkpoint([], path, append_dict={"config": json.dumps(
        {**{name: value for name, value in settings.items() if not name.startswith("probe_")},
         "accumulate_step": "auto"})})
    check_settings(path, TrainConfig(tool_settings={"packing": False}, accumulate_step="noise"))
    with pytest.raises(TrainingError, match="--accumulate-step was noise, now auto"):
        check_settings(path, TrainConfig(tool_settings={"packing": False}, accumulate_step="auto"))
