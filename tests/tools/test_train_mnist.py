"""scripts/train_mnist.py as its user meets it: flags, exit codes, printed lines, files, downloads, signals, msrun.

What the run computes is tested per module of ``training`` (tests/training/); one whole run, its lines
(the learning rate a --scale-rule sets among them), JSON log and plot, is ``main``'s doctest.
"""
import contextlib
import functools
import http.server
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile

import mindspore as ms
import numpy as np
import pytest

from data.idx import SPLIT_FILES, read_idx, write_idx_labels
from data.mnist import DEFAULT_DATA_DIR, MnistUnavailableError
from scripts import train_mnist  # scripts/ has no __init__.py: a namespace package on pytest's path
from training.checkpoints import save_epoch_checkpoint
from training.config import TrainConfig
from training.errors import TrainingError
from training.loop import build_run
from training.mnist import SYNTHETIC_MARKER, mnist_task, prepare_mnist
from training.task import toy_task
from tests import REPO_ROOT

SCRIPT = os.path.join(REPO_ROOT, "scripts", "train_mnist.py")
# Port 9 (discard) on loopback: nothing listens, so the connection is refused at once.
UNREACHABLE_URL = "http://127.0.0.1:9/MNIST_Data.zip"


def refused(capsys, message, *argv):
    """``main(argv)`` ended with status 1 and ``error: <message>`` as its only output: nothing was trained."""
    with pytest.raises(SystemExit) as caught:
        train_mnist.main(list(argv))
    assert (caught.value.code, *capsys.readouterr()) == (1, "", f"error: {message}\n")


# ---------------------------------------------------------------- the command line

def test_help_explains_every_flag():
    help_text = train_mnist.build_parser().format_help()
    for flag in ("--device-target", "--mode", "--batch-size", "--accumulate-step", "--epochs", "--lr",
                 "--optimizer", "--data-dir", "--synthetic", "--seed", "--shuffle", "--no-shuffle",
                 "--drop-last", "--ckpt-dir", "--keep-checkpoints", "--resume", "--overwrite", "--log-json", "--plot",
                 "--driver", "--window-step"):
        assert flag in help_text
    assert "{CPU,GPU,Ascend}" in help_text and "{sgd,momentum,adam}" in help_text
    assert "--mnist-url" not in help_text  # hidden: tests and mirrors only


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "0"], "argument --batch-size: must be a positive integer, got 0"),
    (["--accumulate-step", "-1"], "argument --accumulate-step: must be a positive integer, got -1"),
    (["--device-target", "TPU"], "argument --device-target: unknown device 'TPU': choose CPU, GPU or Ascend"),
    (["--accumulate-step", "many"], "argument --accumulate-step: expected a positive integer, got 'many'"),
    (["--accumulate-step", "noise", "--window-step"],
     "--accumulate-step noise changes N in the graph; --driver window needs N on the host"),
    (["--update-cost", "1.5"], "--update-cost sets how the noise-scale window chooses N, got --accumulate-step 2: "
                               "pass --accumulate-step noise"),
    (["--probe-interval", "512"], "--probe-interval sets how the measured window probes, got --accumulate-step 2: "
                                  "pass --accumulate-step auto"),
    (["--accumulate-step", "auto", "--probe-tolerance", "2"], "--probe-tolerance must be a number in (0, 1), got 2.0"),
    (["--accumulate-step", "noise", "--update-cost", "-1"], "argument --update-cost: must be a positive finite number, "
                                                           "got -1"),
    (["--keep-checkpoints", "3"], "--keep-checkpoints 3 needs a --ckpt-dir"),
    (["--driver", "fastest"], "argument --driver: unknown value 'fastest': choose auto, in-graph, host, window"),
    (["--scale-rule", "cubic"], "argument --scale-rule: unknown value 'cubic': choose none, linear, sqrt, adascale"),
    (["--scale-rule", "sqrt"], "--scale-rule sqrt sets Adam's betas, which only --optimizer adamw keeps where it can "
                               "(docs/scale-rules.md), got --optimizer sgd"),
])
def test_bad_values_are_argparse_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as caught:
        train_mnist.parse_args(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: train_mnist.py") and err.endswith(f"train_mnist.py: error: {message}\n")


def test_flag_combinations_are_checked_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as caught:
        train_mnist.parse_args(["--resume"])
    assert caught.value.code == 2
    assert "--resume needs a --ckpt-dir" in capsys.readouterr().err
    for argv, message in ((["--overwrite"], "--overwrite needs a --ckpt-dir"),
                          (["--ckpt-dir", "c", "--resume", "--overwrite"],
                           "--resume continues the run in --ckpt-dir, --overwrite replaces it: pass one"),
                          (["--ckpt-dir", "c", "--over"], "unrecognized arguments: --over")):  # exact flags only
        with pytest.raises(SystemExit) as caught:
            train_mnist.parse_args(argv)
        assert caught.value.code == 2 and message in capsys.readouterr().err
    config, data_flags = train_mnist.parse_args(["--device-target", "cpu", "--mode", "PyNative", "--no-shuffle",
                                                 "--drop-last", "--data-dir", "here"])
    assert (config.device_target, config.mode, config.shuffle, config.drop_last) == ("CPU", "pynative", False, True)
    assert data_flags == {"data_dir": "here", "synthetic": False, "mnist_url": None}


# ---------------------------------------------------------------- msrun

@pytest.mark.slow
@pytest.mark.msrun("train_mnist")
def test_distributed_ranks_train_like_one_process_on_the_whole_batch(synthetic_mnist_dir, msrun_folder,
                                                                     train_mnist_run):
    # The ranks ran the tool with msrun_worker.TRAIN_MNIST_FLAGS: --batch-size 16 --accumulate-step 2, --lr 0.1.
    # Rank r reads samples r, r+2, ...: a window of 2 x 16 per rank covers the
    # same 64 samples as one 64-batch, and the short last windows (4 + 4 and 8) too.
    rank0, rank1 = ((msrun_folder / f"rank_{rank}.log").read_text() for rank in (0, 1))
    assert "effective 64" in rank0 and "epoch 1/1: train loss" in rank0
    assert "epoch 1/1: train loss" not in rank1   # only rank 0 prints
    assert os.listdir(msrun_folder / "ckpt") == ["epoch_001.ckpt"]

    single, expected = train_mnist_run(synthetic_mnist_dir, epochs=1, lr=0.1, shuffle=False, batch_size=64,
                                       accumulate_step=1)
    saved = ms.load_checkpoint(str(msrun_folder / "ckpt" / "epoch_001.ckpt"))
    assert int(saved["accumulator.update_count"].asnumpy()) == single["updates"] == 4
    for name, value in expected.items():
        np.testing.assert_allclose(saved[name].asnumpy(), value, rtol=1e-5, atol=1e-6, err_msg=name)


# ---------------------------------------------------------------- learning and logs

@pytest.mark.slow  # end to end: trains the whole look-alike, or in a fresh interpreter
def test_learns_synthetic_data_logs_json_and_refuses_an_inexact_resume(tmp_path, capsys):
    log = tmp_path / "logs" / "run.json"
    ckpt_dir = str(tmp_path / "ckpt")
    summary = train_mnist.main(["--synthetic", "--epochs", "2", "--log-json", str(log), "--ckpt-dir", ckpt_dir])
    out = capsys.readouterr().out

    assert summary["final_accuracy"] > 0.9
    assert summary["effective_batch_size"] == 64
    assert summary["updates"] == 2 * -(-6000 // 64)
    assert "epoch 2/2: train loss" in out and "best test accuracy" in out and "effective batch 64 (32 x 2)" in out
    assert "; driver window (a fixed N)\n" in out  # --driver auto's pick, said once

    logged = json.loads(log.read_text())
    assert logged["summary"] == pytest.approx(summary)
    assert logged["config"]["batch_size"] == 32 and logged["config"]["accumulate_step"] == 2
    assert logged["config"]["driver"] == "window"
    assert logged["data"].startswith("synthetic MNIST look-alike from ")
    assert [record["epoch"] for record in logged["epochs"]] == [1, 2]
    for record in logged["epochs"]:
        assert {"train_loss", "test_accuracy", "test_loss", "samples_per_second", "seconds"} <= set(record)
        assert record["samples"] == 6000 and record["seconds"] > 0
        assert record["samples_per_second"] == pytest.approx(6000 / record["seconds"])
    assert logged["epochs"][1]["train_loss"] < logged["epochs"][0]["train_loss"]
    assert logged["epochs"][-1]["test_accuracy"] == summary["final_accuracy"]
    assert not [name for name in os.listdir(log.parent) if name != "run.json"]  # no temporary left

    # Resuming with flags that change the data order would not be exact: refused, exit 1.
    with pytest.raises(SystemExit) as caught:
        train_mnist.main(["--synthetic", "--epochs", "3", "--ckpt-dir", ckpt_dir, "--resume", "--seed", "1"])
    assert caught.value.code == 1
    assert "--seed was 0, now 1" in capsys.readouterr().err


def test_plot_without_matplotlib_stops_before_training(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    monkeypatch.setattr(train_mnist, "train", lambda *args, **kwargs: pytest.fail("training started"))
    with pytest.raises(SystemExit) as caught:
        train_mnist.main(["--synthetic", "--plot", str(tmp_path / "run.png")])
    assert caught.value.code == 2
    assert "--plot needs matplotlib: pip install matplotlib" in capsys.readouterr().err


# ---------------------------------------------------------------- downloads

def test_offline_download_exits_with_the_message_and_no_traceback(tmp_path, capsys):
    # In this process: the exit status and stderr are main's (the signal tests run the script in a fresh interpreter).
    data_dir = str(tmp_path / "nonexistent" / "dir")  # the folders it makes on the way go again
    with pytest.raises(SystemExit) as caught:
        train_mnist.main(["--data-dir", data_dir, "--mnist-url", UNREACHABLE_URL])
    err = capsys.readouterr().err
    assert caught.value.code == 1
    assert "Traceback" not in err and err.startswith(f"error: Could not download MNIST from {UNREACHABLE_URL}")
    assert "Connection refused" in err and "--synthetic" in err
    assert os.listdir(tmp_path) == []


@contextlib.contextmanager
def serve(folder):
    """Serves ``folder`` over HTTP on a free loopback port for the duration of the block."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_corrupt_files_give_a_clear_error(synthetic_mnist_dir, tmp_path, monkeypatch, capsys):
    # A local file cut short, and offline: both reasons are named.
    data_dir = shutil.copytree(synthetic_mnist_dir, tmp_path / "MNIST_Data")
    labels = os.path.join(data_dir, "test", SPLIT_FILES["test"][1])
    os.truncate(labels, 10)
    monkeypatch.setattr("data.mnist.MNIST_URL", UNREACHABLE_URL)
    with pytest.raises(SystemExit) as caught:
        train_mnist.main(["--data-dir", str(data_dir)])
    assert caught.value.code == 1
    err = capsys.readouterr().err
    assert f"not usable: {labels}: file is 10 bytes" in err and "Could not download MNIST" in err

    # A download whose zip holds a truncated file: nothing is installed.
    served = tmp_path / "served"
    served.mkdir()
    with zipfile.ZipFile(served / "MNIST_Data.zip", "w") as archive:
        for split, names in SPLIT_FILES.items():
            for name in names:
                content = open(os.path.join(synthetic_mnist_dir, split, name), "rb").read()
                archive.writestr(f"MNIST_Data/{split}/{name}", content[:-5] if split == "train" else content)
    fresh_dir = str(tmp_path / "fresh")
    with serve(served) as base_url, pytest.raises(SystemExit) as caught:
        train_mnist.main(["--data-dir", fresh_dir, "--mnist-url", f"{base_url}/MNIST_Data.zip"])
    assert caught.value.code == 1
    assert "nothing installed: train/train-images-idx3-ubyte: file is" in capsys.readouterr().err
    assert not os.path.exists(fresh_dir)


def test_synthetic_data_never_lands_among_real_mnist_files(synthetic_mnist_dir, tmp_path, capsys):
    # A folder holding MNIST files that are invalid or partial: they were replaced, silently.
    partial = shutil.copytree(synthetic_mnist_dir, tmp_path / "partial")
    truncated = os.path.join(partial, "test", SPLIT_FILES["test"][0])
    os.truncate(truncated, 100)
    os.remove(os.path.join(partial, "test", SPLIT_FILES["test"][1]))
    train_images = os.path.join(partial, "train", SPLIT_FILES["train"][0])
    before = {path: open(path, "rb").read() for path in (truncated, train_images)}
    refused(capsys, f"--synthetic will not write into --data-dir {partial}: it holds MNIST files that --synthetic "
                    f"did not write ({train_images}); choose another folder", "--synthetic", "--data-dir", str(partial))
    assert {path: open(path, "rb").read() for path in before} == before
    assert not os.path.exists(os.path.join(partial, SYNTHETIC_MARKER))

    # The folder real MNIST is downloaded to, even empty.
    refused(capsys, f"--synthetic will not write into --data-dir {DEFAULT_DATA_DIR}: real MNIST is downloaded there; "
                    "choose another folder, or leave out --data-dir for a temporary one",
            "--synthetic", "--data-dir", DEFAULT_DATA_DIR)

    # A folder --synthetic filled is marked: a run without --synthetic refuses it; the first line says which data.
    marked = str(tmp_path / "marked")
    with contextlib.ExitStack() as stack:
        prepare_mnist(marked, synthetic=True, url=None, stack=stack)
    assert mnist_task(marked).description.startswith(f"synthetic MNIST look-alike from {marked}: 6000 train")
    assert mnist_task(synthetic_mnist_dir).description.startswith(f"MNIST from {synthetic_mnist_dir}: 200 train")
    refused(capsys, f"{marked} holds the synthetic look-alike that --synthetic wrote, not MNIST ({SYNTHETIC_MARKER}): "
                    "add --synthetic to train on it, or choose another --data-dir",
            "--data-dir", marked, "--mnist-url", UNREACHABLE_URL)


# ---------------------------------------------------------------- checked before any work

def _outputs_case(tmp_path, case):
    """``(argv, message)`` of an output path the run cannot write; ``tmp_path`` holds one file, ``a_file``."""
    a_file = str(tmp_path / "a_file")
    return {
        "ckpt-dir is a file": (["--ckpt-dir", a_file], f"--ckpt-dir {a_file}: is a file; name a folder"),
        "log-json is a folder": (["--log-json", str(tmp_path)], f"--log-json {tmp_path}: is a folder; name a file"),
        "log-json under a file": (["--log-json", f"{a_file}/logs/run.json"],
                                  f"--log-json {a_file}/logs/run.json: {a_file} is a file, not a folder"),
        "log-json in /proc": (["--log-json", "/proc/run.json"],
                              "--log-json /proc/run.json: cannot create a file in /proc (No such file or directory)"),
        "plot under a file": (["--plot", f"{a_file}/run.png"],
                              f"--plot {a_file}/run.png: {a_file} is a file, not a folder"),
    }[case]


@pytest.mark.parametrize("case", ["ckpt-dir is a file", "log-json is a folder", "log-json under a file",
                                  "log-json in /proc", "plot under a file"])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(synthetic_mnist_dir, tmp_path, capsys, case):
    # Tests run as root here, for whom no permission bit refuses a write: a file in the way does, and /proc.
    if case.startswith("plot"):
        pytest.importorskip("matplotlib")
    (tmp_path / "a_file").write_text("")
    argv, message = _outputs_case(tmp_path, case)
    # --ckpt-dir a valid one, so that each case is refused for its own flag and nothing else.
    refused(capsys, message, "--data-dir", synthetic_mnist_dir, "--ckpt-dir", str(tmp_path / "ckpt"), *argv)
    assert os.listdir(tmp_path) == ["a_file"]  # nothing created, not even the valid --ckpt-dir


@pytest.mark.parametrize("synthetic", [["--synthetic"], []], ids=["synthetic", "MNIST"])
def test_a_data_dir_that_cannot_be_written_is_refused_in_one_line(tmp_path, monkeypatch, capsys, synthetic):
    (tmp_path / "a_file").write_text("")
    for data_dir, problem in ((str(tmp_path / "a_file"), "is a file; name a folder"),
                              ("/proc/nope", "cannot create a file in /proc (No such file or directory)")):
        refused(capsys, f"--data-dir {data_dir}: {problem}", *synthetic, "--data-dir", data_dir,
                "--mnist-url", UNREACHABLE_URL)


def test_resume_with_other_run_defining_flags_names_each_flag_and_both_values(synthetic_mnist_dir, tmp_path,
                                                                               monkeypatch, capsys):
    # Another network's checkpoint: the settings are compared first, so they are what the message names.
    ckpt_dir = str(tmp_path / "ckpt")
    config = TrainConfig(mode="pynative", ckpt_dir=ckpt_dir)
    path = save_epoch_checkpoint(build_run(config, toy_task()), config, 1, [])
    refused(capsys, f"cannot resume exactly from {path}: --accumulate-step was 2, now 4; --optimizer was sgd, now "
                    "adam. Pass the same flags, or another --ckpt-dir.",
            "--data-dir", synthetic_mnist_dir, "--ckpt-dir", ckpt_dir, "--resume", "--optimizer", "adam",
            "--accumulate-step", "4")


def test_resume_without_a_checkpoint_is_an_error(synthetic_mnist_dir, tmp_path, capsys):
    typo = str(tmp_path / "rnus" / "a")
    refused(capsys, f"--resume: no checkpoint (epoch_NNN.ckpt) in --ckpt-dir {typo}; check the folder, or leave out "
                    "--resume to start afresh", "--data-dir", synthetic_mnist_dir, "--ckpt-dir", typo, "--resume")
    assert os.listdir(tmp_path) == []


def test_a_used_ckpt_dir_needs_resume_or_overwrite(synthetic_mnist_dir, tmp_path, capsys):
    ckpt_dir = tmp_path / "ckpt"
    ckpt_dir.mkdir()
    for old in ("epoch_001.ckpt", "epoch_005.ckpt"):  # another run's: what they hold does not matter here
        (ckpt_dir / old).write_text("another run")
    (ckpt_dir / "notes.txt").write_text("mine")
    common = ["--data-dir", synthetic_mnist_dir, "--ckpt-dir", str(ckpt_dir), "--epochs", "1"]
    refused(capsys, f"--ckpt-dir {ckpt_dir} holds another run's checkpoints (newest epoch_005.ckpt): add --resume to "
                    "continue that run, --overwrite to replace it, or choose another --ckpt-dir", *common)
    assert sorted(os.listdir(ckpt_dir)) == ["epoch_001.ckpt", "epoch_005.ckpt", "notes.txt"]

    assert train_mnist.main([*common, "--overwrite", "--mode", "pynative"])["epochs"] == 1  # PyNative: no compile
    assert sorted(os.listdir(ckpt_dir)) == ["epoch_001.ckpt", "notes.txt"]
    assert int(ms.load_checkpoint(str(ckpt_dir / "epoch_001.ckpt"))["epoch"].asnumpy()) == 1


def test_bad_labels_are_refused_before_training(synthetic_mnist_dir, tmp_path, capsys):
    data_dir = shutil.copytree(synthetic_mnist_dir, tmp_path / "mnist")
    labels_path = os.path.join(data_dir, "train", SPLIT_FILES["train"][1])
    labels = read_idx(labels_path).copy()
    labels[3] = 42
    write_idx_labels(labels_path, labels)
    # Invalid local files are downloaded afresh (offline here), and the message says what was wrong with them.
    with pytest.raises(SystemExit) as caught:
        train_mnist.main(["--data-dir", str(data_dir), "--mnist-url", UNREACHABLE_URL])
    out, err = capsys.readouterr()
    assert (caught.value.code, out) == (1, "")
    assert err.startswith(f"error: The MNIST files in {data_dir} are not usable: {labels_path}: label 42 at index 3 "
                          "is not a class in [0, 10)\nCould not download MNIST")


def test_a_run_that_would_train_nothing_is_refused(synthetic_mnist_dir, capsys):
    refused(capsys, "--batch-size 256 with --drop-last leaves nothing to train: the training split has 200 samples",
            "--data-dir", synthetic_mnist_dir, "--batch-size", "256", "--drop-last")


# ---------------------------------------------------------------- Ctrl-C and SIGTERM

def _wait_for(path, process, timeout=120):
    started = time.monotonic()
    while not os.path.exists(path):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() - started < timeout, f"no {path} after {timeout} s"
        time.sleep(0.05)


def _last_line(text):
    # The progress bar shares stderr and redraws its line with carriage returns.
    return text.replace("\r", "\n").strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_ends_the_run_cleanly_and_the_printed_command_resumes_it(tmp_path, signum, status):
    # MindSpore turns Ctrl-C into SIGTERM once a graph has run: the run ended with 143, no
    # message, and its temporary --synthetic folder left behind. TMPDIR shows what is left.
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary)}
    argv = [sys.executable, SCRIPT, "--synthetic", "--epochs", "3", "--ckpt-dir", "my ckpt"]
    process = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(tmp_path / "my ckpt" / "epoch_001.ckpt", process)
    process.send_signal(signum)  # epochs 2 and 3 take over a second each: it lands mid-run
    out, err = process.communicate(timeout=60)

    assert process.returncode == status, err
    assert out.startswith(f"synthetic MNIST look-alike from {temporary}{os.sep}mnist_synthetic_")
    resume_command = shlex.join([*argv, "--resume"])  # 'my ckpt' quoted
    assert _last_line(err) == (f"interrupted by {signal.Signals(signum).name}; epoch 1 is saved in "
                               f"my ckpt/epoch_001.ckpt; resume with: {resume_command}")
    assert "Traceback" not in err and "Failed to save" not in err
    assert os.listdir(temporary) == []
    assert os.listdir(tmp_path / "my ckpt") == ["epoch_001.ckpt"]
    assert int(ms.load_checkpoint(str(tmp_path / "my ckpt" / "epoch_001.ckpt"))["epoch"].asnumpy()) == 1

    # Either signal leaves the same: the command printed and epoch 1's checkpoint, alone (asserted above). Resuming
    # from them is one behaviour, run once, in the SIGINT case (a resumed run trains two epochs).
    if signum != signal.SIGINT:
        return
    resumed = subprocess.run(shlex.split(resume_command), cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from my ckpt/epoch_001.ckpt (epoch 1)" in resumed.stdout
    assert "epoch 3/3: train loss" in resumed.stdout
    assert sorted(os.listdir(tmp_path / "my ckpt")) == ["epoch_001.ckpt", "epoch_002.ckpt", "epoch_003.ckpt"]
    assert os.listdir(temporary) == []


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


# ---------------------------------------------------------------- failures

@pytest.mark.parametrize("error, code, message", [
    (TrainingError("could not write checkpoint c/epoch_002.ckpt: No space left on device; epoch_001.ckpt is intact"),
     1, "error: could not write checkpoint c/epoch_002.ckpt: No space left on device; epoch_001.ckpt is intact"),
    (MnistUnavailableError("Could not download MNIST"), 1, "error: Could not download MNIST"),
    (KeyboardInterrupt(), 130, "interrupted by SIGINT; no checkpoint was written yet: nothing to resume"),
])
def test_failures_the_user_can_fix_exit_with_a_message_and_no_traceback(synthetic_mnist_dir, monkeypatch, capsys,
                                                                        error, code, message):
    def fail(*args, **kwargs):
        raise error
    monkeypatch.setattr(train_mnist, "train", fail)
    with pytest.raises(SystemExit) as caught:
        train_mnist.main(["--data-dir", synthetic_mnist_dir, "--ckpt-dir", "c"])
    assert caught.value.code == code
    assert capsys.readouterr().err == message + "\n"
