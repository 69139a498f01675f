"""training.checkpoints: per-epoch saves, exact resume, and the faults that must not lose a run."""
import os

import mindspore as ms
import numpy as np
import pytest

from training.checkpoints import checkpoint_path, find_checkpoints
from training.errors import TrainingError


def test_checkpoints_are_found_newest_epoch_first(tmp_path):
    for epoch in (2, 10, 1):
        open(checkpoint_path(str(tmp_path), epoch), "w").close()
    (tmp_path / "epoch_7.ckpt.tmp").write_text("")  # a temporary left by a crash is no checkpoint
    assert [os.path.basename(path) for path in find_checkpoints(str(tmp_path))] == \
        ["epoch_010.ckpt", "epoch_002.ckpt", "epoch_001.ckpt"]
    assert find_checkpoints(str(tmp_path / "missing")) == []


def test_resume_equals_an_uninterrupted_run_and_a_failed_save_keeps_the_last(synthetic_mnist_dir, tmp_path,
                                                                            train_mnist_run, monkeypatch, capsys):
    # Adam, so its moments and step count must come back too; shuffled, so the
    # resumed epoch must reproduce the order of epoch 2.
    flags = dict(optimizer="adam", lr=1e-3, batch_size=32, accumulate_step=3)
    _, uninterrupted = train_mnist_run(synthetic_mnist_dir, epochs=2, **flags)

    ckpt_dir = str(tmp_path / "ckpt")
    train_mnist_run(synthetic_mnist_dir, epochs=1, ckpt_dir=ckpt_dir, **flags)
    assert os.listdir(ckpt_dir) == ["epoch_001.ckpt"]

    # Epoch 2 trains, then its checkpoint write dies half-way (disk full).
    def crash(save_obj, ckpt_file_name, **kwargs):
        with open(ckpt_file_name, "wb") as half_written:
            half_written.write(b"partial")
        raise OSError("No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(ms, "save_checkpoint", crash)
        with pytest.raises(TrainingError) as caught:
            train_mnist_run(synthetic_mnist_dir, epochs=2, ckpt_dir=ckpt_dir, resume=True, **flags)
    assert "could not write checkpoint" in str(caught.value) and "epoch_001.ckpt is intact" in str(caught.value)
    assert os.listdir(ckpt_dir) == ["epoch_001.ckpt"]
    capsys.readouterr()

    summary, resumed = train_mnist_run(synthetic_mnist_dir, epochs=2, ckpt_dir=ckpt_dir, resume=True, **flags)
    assert "resumed from" in capsys.readouterr().out
    assert uninterrupted.keys() == resumed.keys()
    for name, value in uninterrupted.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    assert summary["epochs"] == 2 and summary["best_epoch"] in (1, 2)
    assert sorted(os.listdir(ckpt_dir)) == ["epoch_001.ckpt", "epoch_002.ckpt"]

    # Resuming with settings that change the data order would not be exact: refused.
    with pytest.raises(TrainingError, match="--seed was 0, now 1"):
        train_mnist_run(synthetic_mnist_dir, epochs=3, ckpt_dir=ckpt_dir, resume=True, seed=1, **flags)
