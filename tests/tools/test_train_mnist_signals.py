"""scripts/train_mnist.py in a fresh interpreter, stopped by SIGINT or SIGTERM: one line, the exit status, the
checkpoint kept and the command that resumes it.

By hand: SIGTERM after epoch 1 of 3 was saved exits 143 with ``interrupted by SIGTERM; epoch 1 is saved in my
ckpt/epoch_001.ckpt; resume with: ... --resume``; that command resumes from epoch 1 and trains epoch 2, and SIGINT
once epoch 2 is saved exits 130 with the same line for epoch 2 and the same command.
"""
import os
import shlex
import signal
import subprocess
import sys
import time

import mindspore as ms
import pytest

from tests import REPO_ROOT

SCRIPT = os.path.join(REPO_ROOT, "scripts", "train_mnist.py")


def _wait_for(path, process, timeout=120):
    started = time.monotonic()
    while not os.path.exists(path):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() - started < timeout, f"no {path} after {timeout} s"
        time.sleep(0.05)


def _last_line(text):
    # The progress bar shares stderr and redraws its line with carriage returns.
    return text.replace("\r", "\n").strip().splitlines()[-1]


def _interrupted(argv, signum, epoch, cwd, env):
    """Runs ``argv`` until epoch ``epoch``'s checkpoint is written, then sends ``signum``: its stdout and stderr."""
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(cwd / "my ckpt" / f"epoch_{epoch:03d}.ckpt", process)
    process.send_signal(signum)  # an epoch takes over a second: it lands mid-run, in the next one
    out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signum, err
    assert out.startswith(f"synthetic MNIST look-alike from {env['TMPDIR']}{os.sep}mnist_synthetic_")
    assert "Traceback" not in err and "Failed to save" not in err
    assert os.listdir(env["TMPDIR"]) == []
    return out, err


# One run stopped by each signal: the printed command, run, is the second, which the other signal stops.
@pytest.mark.slow
def test_a_signal_ends_the_run_cleanly_and_the_printed_command_resumes_it(tmp_path):
    # MindSpore turns Ctrl-C into SIGTERM once a graph has run: the run ended with 143, no
    # message, and its temporary --synthetic folder left behind. TMPDIR shows what is left.
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary)}
    argv = [sys.executable, SCRIPT, "--synthetic", "--epochs", "3", "--ckpt-dir", "my ckpt"]
    resume_command = shlex.join([*argv, "--resume"])  # 'my ckpt' quoted
    for signum, epoch, command in ((signal.SIGTERM, 1, argv), (signal.SIGINT, 2, shlex.split(resume_command))):
        out, err = _interrupted(command, signum, epoch, tmp_path, env)
        saved = f"epoch_{epoch:03d}.ckpt"
        assert _last_line(err) == (f"interrupted by {signal.Signals(signum).name}; epoch {epoch} is saved in "
                                   f"my ckpt/{saved}; resume with: {resume_command}")
        assert sorted(os.listdir(tmp_path / "my ckpt")) == [f"epoch_{e:03d}.ckpt" for e in range(1, epoch + 1)]
        assert int(ms.load_checkpoint(str(tmp_path / "my ckpt" / saved))["epoch"].asnumpy()) == epoch
    assert "resumed from my ckpt/epoch_001.ckpt (epoch 1)" in out and "epoch 2/3: train loss" in out


@pytest.mark.slow
def test_ctrl_c_during_the_first_compile_prints_one_line(tmp_path):
    # Raised inside the compile, the interrupt was logged by MindSpore as a long "[ERROR] ANALYZER" block.
    process = subprocess.Popen([sys.executable, SCRIPT, "--synthetic", "--epochs", "1"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.readline()  # the data is ready; the network is built, then its train step compiles for seconds
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    # The progress bar shares stderr (its lines start with the epoch), and so do MindSpore's one-line warnings that
    # every run prints (the CPU's CommManager): neither is the interrupt's.
    lines = [line for line in err.replace("\r", "\n").splitlines()
             if line.strip() and not line.startswith(("epoch", "[WARNING]"))]
    assert lines == ["interrupted by SIGINT; nothing was saved (no --ckpt-dir)"]
    assert os.listdir(tmp_path) == []  # no rank_0/om/analyze_fail.ir
