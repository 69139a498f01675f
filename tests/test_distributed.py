"""Two CPU workers under msrun equal one process training on their union, and a run moves between numbers of ranks."""
import contextlib
import json
import os
import shutil
import signal

import mindspore as ms
import numpy as np
import pytest

from distributed_worker import ACCUMULATE_STEP, WINDOWS
from msrun_worker import SHARED_BATCH_FLAGS
from helpers import MsrunLaunch, assert_states_close, free_port, make_data, msrun_logs, reference_state, start_msrun


@pytest.fixture
def rank_results(msrun_folder):
    """Each weighting's final state on rank 0 and rank 1, from the session's msrun launch (distributed_worker.py)."""
    return {weighting: [dict(np.load(msrun_folder / f"{weighting}_{rank}.npz")) for rank in (0, 1)]
            for weighting in ("mean", "count")}


def single_process_reference(samples_per_window):
    x, y = make_data(samples_per_window * WINDOWS)
    bounds = range(0, samples_per_window * (WINDOWS + 1), samples_per_window)
    return reference_state("adam", [(x[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])


@pytest.mark.slow
@pytest.mark.msrun("distributed")
@pytest.mark.parametrize("weighting, sizes", [("mean", (4, 4)), ("count", (5, 3))])
def test_two_workers_equal_one_process_on_their_union(rank_results, weighting, sizes):
    ranks = rank_results[weighting]
    for rank in ranks:
        # One AllReduce per window, not one per micro-step.
        assert int(rank.pop("allreduce_calls")) == WINDOWS
    for name in ranks[0]:
        np.testing.assert_array_equal(ranks[0][name], ranks[1][name], err_msg=name)
    expected = single_process_reference(sum(sizes) * ACCUMULATE_STEP)
    assert_states_close(ranks[0], expected)


def saved_state(path):
    """A checkpoint's tensors by name, its extras (epoch, settings, history) and the rank's N left out."""
    return {name: value.asnumpy() for name, value in ms.load_checkpoint(str(path)).items()
            if isinstance(value, ms.Tensor) and name not in ("epoch", "accumulator.accumulate_step")}


def start_two_hosts(root, mnist_dir):
    """Two msrun launches of two ranks each standing in for two machines, one 4-rank run of scenario four_ranks.

    The second launch's scheduler cannot take the master port; its workers join the first's (docs/devices.md).
    """
    port = free_port()
    return [start_msrun([MsrunLaunch.WORKER, str(root), mnist_dir, "four_ranks"], root / f"logs_{node}", root, 4,
                        node=(node, 2, port)) for node in (0, 1)]


def ended(launches, root):
    """Waits for ``launches``, ending their process groups whatever happens; fails with the ranks' errors if any."""
    try:
        for launch in launches:
            launch.wait(timeout=MsrunLaunch.TIMEOUT)
    finally:
        for launch in launches:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(launch.pid, signal.SIGKILL)
    folder = root / "four_ranks"
    errors = "".join(path.read_text() for path in sorted(folder.glob("rank_*.error")))
    logs = "".join(log[-2000:] for node in (0, 1) if (root / f"logs_{node}").exists()
                   for log in msrun_logs(root / f"logs_{node}").values())
    assert not errors and len(list(folder.glob("rank_*.done"))) == 4, errors or logs
    return folder


@pytest.mark.slow
@pytest.mark.msrun("shared_batch")
def test_the_runs_batch_on_1_2_and_4_ranks_equals_one_process_as_the_run_moves_between_them(
        synthetic_mnist_dir, msrun_folder, tmp_path):
    # --batch-size 9 --micro-batch 4: on two ranks 4 and 5 samples a window (rank 0 applies by a flush), on four
    # 2, 2, 2 and 3. The shared launch trained epoch 1 on two ranks, and resumed one process's epoch 1 for epoch 2
    # (msrun_worker.shared_batch): 1 -> 2. Two launches of two ranks, as two hosts, train epoch 1 on four ranks and
    # resume the two ranks' checkpoint for epoch 2: 2 -> 4. One process resumes it too: 2 -> 1.
    from scripts import train_mnist
    hosts = tmp_path / "hosts"
    shutil.copytree(msrun_folder / "ckpt", hosts / "four_ranks" / "from_two")
    launches = start_two_hosts(hosts, synthetic_mnist_dir)  # its ranks run beside the single process below
    flags = ["--data-dir", synthetic_mnist_dir, *SHARED_BATCH_FLAGS[2:]]
    train_mnist.main([*flags, "--epochs", "2", "--ckpt-dir", str(tmp_path / "single")])
    shutil.copytree(msrun_folder / "ckpt", tmp_path / "resumed")
    train_mnist.main([*flags, "--epochs", "2", "--ckpt-dir", str(tmp_path / "resumed"), "--resume",
                      "--log-json", str(tmp_path / "log.json")])
    four = ended(launches, hosts)
    assert "its run had 1 ranks, this one 2" in (msrun_folder / "rank_0.log").read_text()
    assert "epoch 2/2: train loss" not in (msrun_folder / "rank_1.log").read_text()  # only rank 0 prints
    assert "its run had 2 ranks, this one 4" in (four / "rank_0.log").read_text()
    runs = {(1, "2 ranks"): msrun_folder / "ckpt", (1, "4 ranks"): four / "ckpt",
            (2, "1 -> 2"): msrun_folder / "alone_0",
            (2, "2 -> 1"): tmp_path / "resumed", (2, "2 -> 4"): four / "from_two"}
    for (epoch, run), folder in runs.items():
        moved, alone = (saved_state(path / f"epoch_{epoch:03d}.ckpt") for path in (folder, tmp_path / "single"))
        assert moved.keys() == alone.keys() and int(moved["accumulator.update_count"]) == 23 * epoch, run
        for name, value in alone.items():
            np.testing.assert_allclose(moved[name], value, rtol=1e-5, atol=1e-6, err_msg=f"{run}: {name}")
    history = json.loads((tmp_path / "log.json").read_text())["epochs"]
    assert [record["ranks"] for record in history] == [2, 1]
    assert [record["samples"] for record in history] == [200, 200]  # the two ranks' 89 and 111 added
