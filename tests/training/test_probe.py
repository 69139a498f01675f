"""training.probe: ``--accumulate-step auto`` in the tools. A probe that keeps N trains the epoch exactly as N = 1
does, its branch's work kept; probes are logged and drawn; a run interrupted mid-probe resumes to the same end.

By hand: a probe reads at most PROBE_HELD_OUT test samples: asked for 1000 it reads PROBE_HELD_OUT, asked for 8
it reads 8.
"""
import dataclasses
import json
import shutil

import mindspore as ms
import numpy as np
import pytest

from accumulator.batch_size import CriticalBatchSchedule
from training.checkpoints import checkpoint_path
from training.config import PROBE_HELD_OUT, TrainConfig
from training.context import configure_context
from training.loop import build_run, train, train_epoch
from training.probe import held_out_loss
from training.records import probe_points, write_plot
from training.task import toy_task


def trained_epoch(**settings):
    config = TrainConfig(mode="pynative", batch_size=2, **settings)
    run = build_run(config, toy_task(64))
    stats = train_epoch(run, toy_task(64), config, epoch=1, progress=False)
    state = {param.name: param.asnumpy() for param in run.optimizer.parameters}
    return stats, state


def test_an_epoch_whose_probe_keeps_n_trains_as_n_1_does_and_logs_the_probe(tmp_path):
    probed, probed_state = trained_epoch(accumulate_step="auto", probe_interval=64)
    plain, plain_state = trained_epoch(accumulate_step=1, track_noise=True)
    [probe] = probed["probes"]
    assert probe["seen"] == 0 and probe["accumulate_step"] == 1 and sorted(probe["losses"]) == ["1", "2"]
    assert probe["critical_batch"] == 2.0  # N x 2 samples a micro-batch
    assert (probed["train_loss"], probed["samples"]) == (plain["train_loss"], plain["samples"])
    for name, value in plain_state.items():
        np.testing.assert_array_equal(probed_state[name], value, err_msg=name)
    history = [{"epoch": 1, "train_loss": 1.0, "test_loss": 1.0, "test_accuracy": 0.5, **probed}]
    assert json.loads(json.dumps(history))[0]["probes"] == [probe]  # as the JSON log and the checkpoint keep it
    assert [point["epoch"] for point in probe_points(history)] == [0.0]
    write_plot(str(tmp_path / "run.png"), history)
    assert (tmp_path / "run.png").read_bytes()[:4] == b"\x89PNG"


def test_the_probes_read_at_most_probe_held_out_test_samples():
    task, sizes = toy_task(), []
    counted = dataclasses.replace(task, test_batches=lambda size: sizes.append(size) or task.test_batches(size))
    held_out_loss(build_run(TrainConfig(mode="pynative"), task), counted, 1000)
    held_out_loss(build_run(TrainConfig(mode="pynative"), task), counted, 8)
    assert sizes == [PROBE_HELD_OUT, 8]


@pytest.mark.slow  # three runs of the loop
def test_a_run_interrupted_mid_probe_resumes_to_the_uninterrupted_end(tmp_path, monkeypatch):
    config = TrainConfig(mode="pynative", batch_size=2, accumulate_step="auto", probe_interval=16, scale_rule="linear",
                         lr=0.05, epochs=2)

    def trained(folder, resume=False):
        _, run = train(dataclasses.replace(config, ckpt_dir=str(folder), resume=resume), toy_task(64), progress=False)
        return {name: param.asnumpy() for name, param in run.optimizer.parameters_and_names()}

    uninterrupted = trained(tmp_path / "whole")
    # From its epoch 1, a run interrupted at epoch 2's first probe, the probe's branches trained, resumes.
    (tmp_path / "cut").mkdir()
    shutil.copy(checkpoint_path(str(tmp_path / "whole"), 1), tmp_path / "cut")

    def interrupted(self, losses_by_step, start_loss):  # as Ctrl-C would, once the probe's branches are trained
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(CriticalBatchSchedule, "choose", interrupted)
        with pytest.raises(KeyboardInterrupt):
            trained(tmp_path / "cut", resume=True)
    resumed = trained(tmp_path / "cut", resume=True)
    for name, value in uninterrupted.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    whole, cut = (json.loads(ms.load_checkpoint(checkpoint_path(str(tmp_path / run), 2))["history"])
                  for run in ("whole", "cut"))
    assert all(record["probes"] for record in whole)  # a probe in each epoch, the interrupted one included
    untimed = [[{key: value for key, value in probe.items() if "seconds" not in key} for probe in record["probes"]]
               for record in whole + cut]
    assert untimed[:len(whole)] == untimed[len(whole):]


@pytest.mark.slow  # two runs of the loop, a window step compiled at each N
def test_the_window_step_at_every_n_trains_as_the_in_graph_call_does():
    # The window step takes the epoch's micro-batches joined into windows of the N the probes chose; the in-graph
    # call runs op by op in PyNative, which compiles nothing (the modes train alike: test_uneven_windows.py).
    config = TrainConfig(batch_size=2, accumulate_step="auto", probe_interval=8, probe_tolerance=0.9,
                         scale_rule="linear", lr=0.05)
    runs = {driver: train(configure_context(dataclasses.replace(config, driver=driver, mode=mode)), toy_task(64),
                          progress=False)[1]
            for driver, mode in (("window", "graph"), ("in-graph", "pynative"))}
    assert int(runs["window"].accumulator.accumulate_step) >= 4  # N grew twice: windows of several micro-batches
    for name, value in runs["in-graph"].optimizer.parameters_and_names():
        np.testing.assert_allclose(runs["window"].optimizer.parameters_dict()[name].asnumpy(), value.asnumpy(),
                                   rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow  # msrun: two ranks, and one process to compare with
@pytest.mark.msrun("tests.tools.train_mnist_worker:probe")
def test_every_rank_takes_the_decision_one_process_takes_on_the_whole_batch(msrun_folder, tmp_path, train_mnist_run):
    # The ranks ran the tool as tests/tools/train_mnist_worker.probe does: --batch-size 4 --accumulate-step auto
    # --probe-interval 32 --scale-rule linear --lr 0.05. Rank r trains its half of each window of 8 by position:
    # micro-batches of 2 x 4 are one process's of 8, the probes' branches too. Of the last window's 7 samples rank 0
    # holds 3, rank 1 4: each applies it where the other does.
    saved = ms.load_checkpoint(checkpoint_path(str(msrun_folder / "ckpt"), 1))
    # The one process runs in PyNative, which compiles nothing: the modes train alike (test_uneven_windows.py).
    _, expected = train_mnist_run(str(msrun_folder / "odd"), epochs=1, lr=0.05, shuffle=False, batch_size=8,
                                  accumulate_step="auto", probe_interval=32, scale_rule="linear", mode="pynative",
                                  ckpt_dir=str(tmp_path / "single"))
    single = ms.load_checkpoint(checkpoint_path(str(tmp_path / "single"), 1))
    chosen = [[probe["accumulate_step"] for probe in json.loads(checkpoint["history"])[0]["probes"]]
              for checkpoint in (saved, single)]
    assert chosen[0] == chosen[1] and len(chosen[0]) >= 1
    for name, value in expected.items():
        np.testing.assert_allclose(saved[name].asnumpy(), value, rtol=1e-5, atol=1e-6, err_msg=name)
    # N following the noise scale (--accumulate-step noise --batch-size 3): the last window's 7 samples are one
    # micro-batch on rank 0, two on rank 1 (training.loop's last window: every rank applies where the others do).
    noise = ms.load_checkpoint(checkpoint_path(str(msrun_folder / "noise"), 1))
    _, expected = train_mnist_run(str(msrun_folder / "odd"), epochs=1, lr=0.05, shuffle=False, batch_size=6,
                                  accumulate_step="noise", mode="pynative", ckpt_dir=str(tmp_path / "noise"))
    assert json.loads(noise["history"])[0]["samples"] == 199
    for name, value in expected.items():
        np.testing.assert_allclose(noise[name].asnumpy(), value, rtol=1e-5, atol=1e-6, err_msg=name)
