"""scripts/train_mnist.py as its user meets it: flags, exit codes, printed lines, logs, and what it refuses before any
work (its downloads, signals and msrun ranks: the test_train_mnist_*.py beside it).

What the run computes is tested per module of ``training`` (tests/training/); one whole run, its lines
(the learning rate a --scale-rule sets among them), JSON log and plot, is ``main``'s doctest.

By hand: ``--batch-size 0`` exits 2 with ``argument --batch-size: must be a positive integer, got 0``; ``--batch-size 256
--drop-last`` on 200 training samples exits 1 with one line: it leaves nothing to train.
"""
import json
import os
import shutil
import sys

import mindspore as ms
import pytest

from data.idx import SPLIT_FILES, read_idx, write_idx_labels
from data.mnist import MnistUnavailableError
from scripts import train_mnist  # scripts/ has no __init__.py: a namespace package on pytest's path
from training.checkpoints import save_epoch_checkpoint
from training.config import TrainConfig
from training.errors import TrainingError
from training.loop import build_run
from training.task import toy_task
from tests.tools.helpers import UNREACHABLE_URL, refused


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
    assert "; driver window (a fixed N: the fastest; --driver host holds less memory)\n" in out  # --driver auto's pick, said once

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
