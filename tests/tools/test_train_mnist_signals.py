"""scripts/train_mnist.py in a fresh interpreter, stopped by SIGINT or SIGTERM: one line, the exit status, the
checkpoint kept and the command that resumes it.

By hand: SIGINT after epoch 1 of 2 was saved exits 130 with ``interrupted by SIGINT; epoch 1 is saved in my
ckpt/epoch_001.ckpt; resume with: ... --resume``; that command resumes from epoch 1, and SIGTERM while it compiles
exits 143 with that line alone (SIGTERM for SIGINT, the same command).
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


def _interrupt_lines(err):
    # The progress bar shares stderr (its lines start with the epoch; it redraws them with carriage returns), and so
    # do MindSpore's one-line warnings that every run prints (the CPU's CommManager): neither is the interrupt's.
    return [line for line in err.replace("\r", "\n").splitlines()
            if line.strip() and not line.startswith(("epoch", "[WARNING]"))]


# Two runs: the first stopped by SIGINT mid-epoch, the command it printed by SIGTERM in its first compile. Both
# signals reach the tool alike (training/interrupts.py); MindSpore's own SIGINT handling once a graph ran differs.
@pytest.mark.slow
def test_a_signal_ends_the_run_cleanly_and_the_printed_command_resumes_it(tmp_path):
    # TMPDIR shows what is left of the temporary --synthetic folder.
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary)}
    argv = [sys.executable, SCRIPT, "--synthetic", "--epochs", "2", "--ckpt-dir", "my ckpt"]
    resume_command = shlex.join([*argv, "--resume"])  # 'my ckpt' quoted
    saved = "interrupted by {}; epoch 1 is saved in my ckpt/epoch_001.ckpt; resume with: " + resume_command

    def start(command):
        return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def stopped(process, signum):
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 128 + signum, err
        assert "Traceback" not in err and "Failed to save" not in err
        assert os.listdir(temporary) == [] and os.listdir(tmp_path / "my ckpt") == ["epoch_001.ckpt"]
        assert int(ms.load_checkpoint(str(tmp_path / "my ckpt" / "epoch_001.ckpt"))["epoch"].asnumpy()) == 1
        return out, err

    # Ctrl-C once graphs have run: MindSpore turned it into SIGTERM, and the run ended with 143, no message, and
    # its temporary folder left behind.
    process = start(argv)
    _wait_for(tmp_path / "my ckpt" / "epoch_001.ckpt", process)
    out, err = stopped(process, signal.SIGINT)  # epoch 2 takes over a second: it lands mid-run
    assert out.startswith(f"synthetic MNIST look-alike from {temporary}{os.sep}mnist_synthetic_")
    assert _interrupt_lines(err) == [saved.format("SIGINT")]

    # The printed command resumes, then compiles its train step for seconds. An interrupt raised inside the compile
    # was logged by MindSpore as a long "[ERROR] ANALYZER" block.
    process = start(shlex.split(resume_command))
    process.stdout.readline()  # the data is ready
    assert process.stdout.readline().startswith("resumed from my ckpt/epoch_001.ckpt (epoch 1)")
    time.sleep(0.3)
    out, err = stopped(process, signal.SIGTERM)
    assert "compiled the train step" not in out and _interrupt_lines(err) == [saved.format("SIGTERM")]
    assert sorted(os.listdir(tmp_path)) == ["my ckpt", "tmp"]  # no rank_0/om/analyze_fail.ir
