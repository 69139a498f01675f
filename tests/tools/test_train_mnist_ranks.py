"""One MNIST run moved from two ranks to four, across two launches standing in for two hosts, equals one process
(docs/devices.md).

By hand: --batch-size 9 --micro-batch 4 is the run's window of 9 samples, whatever the ranks: in one process 4 + 4 + 1,
on two ranks 4 and 4 + 1, on four 2, 2, 2 and 3 (one micro-batch each). The 200 synthetic samples make 23 windows an
epoch (22 of 9, one of 2), so every checkpoint holds 23 updates an epoch, and its tensors equal one process's to float
tolerance.
"""
import contextlib
import json
import os
import re
import shutil
import signal

import mindspore as ms
import numpy as np
import pytest

from tests.msrun import TIMEOUT, free_port, start
from tests.tools.train_mnist_worker import SHARED_BATCH, prepare

TWO_RANKS = "tests.tools.train_mnist_worker:two_ranks"
FOUR_RANKS = "tests.tools.train_mnist_worker:four_ranks"
DIES = "tests.tools.train_mnist_worker:dies"
# The scheduler's wait for a silent rank, in seconds (MindSpore's default about 30): the dying rank's launch ends sooner.
NODE_TIMEOUT = "10"


def saved_state(path):
    """A checkpoint's tensors by name, its extras (epoch, settings, history) and the rank's N left out."""
    return {name: value.asnumpy() for name, value in ms.load_checkpoint(str(path)).items()
            if isinstance(value, ms.Tensor) and name not in ("epoch", "accumulator.accumulate_step")}


def two_hosts(root):
    """Two msrun launches of two ranks each standing in for two machines: one 4-rank run of ``four_ranks``, then
    ``dies``, where rank 3 leaves.

    One launch's scheduler cannot take the master port; its workers join the other's (docs/devices.md).
    """
    port = free_port()
    return [start(root, [FOUR_RANKS, DIES], 4, node=(node, 2, port), logs=f"logs_{node}") for node in (0, 1)]


def ended(launches, root):
    """Waits for ``launches``, ending their process groups whatever happens; fails with the ranks' errors if any."""
    try:
        for launch in launches:
            launch.wait(timeout=TIMEOUT)
    finally:
        for launch in launches:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(launch.pid, signal.SIGKILL)
    folder = root / FOUR_RANKS
    errors = "".join(path.read_text() for path in sorted(folder.glob("rank_*.error")))
    logs = "".join(log.read_text()[-2000:] for log in sorted(root.glob("logs_*/*")))
    assert not errors and len(list(folder.glob("rank_*.done"))) == 4, errors or logs
    return folder


@pytest.mark.slow
@pytest.mark.msrun(TWO_RANKS, first=True)  # its own launch follows: the shared one runs its case first
def test_the_runs_batch_on_4_ranks_equals_one_process_as_the_run_moves_there_from_two(
        msrun_folder, synthetic_mnist_dir, tmp_path, monkeypatch):
    # The shared launch's two ranks trained epoch 1 (train_mnist_worker.two_ranks). Two launches of two ranks, as two
    # hosts, resume it for epoch 2 on four ranks: 2 -> 4 (2 -> 1 and 1 -> 2: test_train_lm, the same resume). Then
    # rank 3 dies and the launches end, never hang: the scheduler names a silent rank of its launch timed out, msrun
    # ends the others and fails.
    from scripts import train_mnist
    hosts = tmp_path / "hosts"
    prepare(hosts / FOUR_RANKS)
    prepare(hosts / DIES)
    monkeypatch.setenv("MS_NODE_TIMEOUT", NODE_TIMEOUT)
    (hosts / FOUR_RANKS / "from_two").mkdir()
    shutil.copy(msrun_folder / "ckpt" / "epoch_001.ckpt", hosts / FOUR_RANKS / "from_two")
    launches = two_hosts(hosts)
    # Meanwhile the uninterrupted run, in this process, in PyNative, which compiles nothing.
    train_mnist.main(["--data-dir", synthetic_mnist_dir, "--no-shuffle", *SHARED_BATCH, "--epochs", "2",
                      "--mode", "pynative", "--ckpt-dir", str(tmp_path / "single")])
    four = ended(launches, hosts)
    assert all(launch.returncode != 0 for launch in launches) and not list((hosts / DIES).glob("rank_*.done"))
    # The scheduler that took the port names the first silent rank: 3, or 2, which 3's msrun ends within a second
    # of 3's exit (docs/devices.md#a-rank-that-dies), never one of the other launch.
    scheduler = "".join(log.read_text() for log in hosts.glob("logs_*/scheduler.log"))
    named = set(re.findall(r"The node: (\d+) is timed out", scheduler))
    assert named and named <= {"2", "3"}, scheduler[-2000:]
    assert "its run had 2 ranks, this one 4" in (four / "rank_0.log").read_text()
    assert "epoch 2/2: train loss" not in (four / "rank_1.log").read_text()  # only rank 0 prints
    for epoch, moved in ((1, msrun_folder / "ckpt"), (2, four / "from_two")):
        moved, alone = (saved_state(path / f"epoch_{epoch:03d}.ckpt") for path in (moved, tmp_path / "single"))
        assert moved.keys() == alone.keys() and int(moved["accumulator.update_count"]) == 23 * epoch
        for name, value in alone.items():
            np.testing.assert_allclose(moved[name], value, rtol=1e-5, atol=1e-6, err_msg=f"epoch {epoch}: {name}")
    history = json.loads((four / "log.json").read_text())["epochs"]
    assert [record["ranks"] for record in history] == [2, 4]
    assert [record["samples"] for record in history] == [200, 200]  # the ranks' parts added
