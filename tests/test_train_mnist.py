"""scripts/train_mnist.py end to end: equivalence, learning, downloads, resume, CLI and logs."""
import contextlib
import functools
import http.server
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile

import numpy as np
import pytest
import mindspore as ms

from data.idx import SPLIT_FILES
from helpers import run_msrun

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO_ROOT, "scripts", "train_mnist.py")
# Port 9 (discard) on loopback: nothing listens, so the connection is refused at once.
UNREACHABLE_URL = "http://127.0.0.1:9/MNIST_Data.zip"

# scripts/ is not a package: load the script as a module. It must sit in sys.modules,
# because ms.jit's parser re-imports a function's module by name to resolve globals.
_spec = importlib.util.spec_from_file_location("train_mnist", SCRIPT)
train_mnist = sys.modules.setdefault("train_mnist", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(train_mnist)


@pytest.fixture(autouse=True)
def restore_mode():
    # The script sets MindSpore's global execution mode; other test files expect theirs.
    previous = ms.get_context("mode")
    yield
    ms.set_context(mode=previous)


def run_script(*argv):
    """The script as a user runs it, in a fresh interpreter."""
    return subprocess.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True, timeout=120,
                          cwd=REPO_ROOT)


def train(data_dir, *argv):
    """Trains in this process; returns the summary and every parameter of network and optimizer."""
    summary, run = train_mnist.train(train_mnist.parse_args(["--data-dir", data_dir, *argv]), data_dir,
                                     progress=False)
    state = {param.name: param.asnumpy().copy() for param in run.net.get_parameters()}
    state.update({name: param.asnumpy().copy() for name, param in run.optimizer.parameters_and_names()})
    return summary, state


def initial_weights(data_dir):
    return {param.name: param.asnumpy().copy()
            for param in train_mnist.build(train_mnist.parse_args(["--data-dir", data_dir])).net.get_parameters()}


# ---------------------------------------------------------------- the command line

def test_help_explains_every_flag():
    result = run_script("--help")
    assert result.returncode == 0, result.stderr
    for flag in ("--device-target", "--mode", "--batch-size", "--accumulate-step", "--epochs", "--lr",
                 "--optimizer", "--data-dir", "--synthetic", "--seed", "--shuffle", "--no-shuffle",
                 "--drop-last", "--ckpt-dir", "--resume", "--log-json", "--plot"):
        assert flag in result.stdout
    assert "{CPU,GPU,Ascend}" in result.stdout and "{sgd,momentum,adam}" in result.stdout
    assert "--mnist-url" not in result.stdout  # hidden: tests and mirrors only


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "0"], "argument --batch-size: must be a positive integer, got 0"),
    (["--accumulate-step", "-1"], "argument --accumulate-step: must be a positive integer, got -1"),
    (["--device-target", "TPU"], "argument --device-target: unknown device 'TPU': choose CPU, GPU or Ascend"),
])
def test_bad_values_are_argparse_errors(argv, message):
    result = run_script(*argv)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: train_mnist.py")
    assert f"train_mnist.py: error: {message}" in result.stderr
    assert "Traceback" not in result.stderr


def test_flag_combinations_are_checked_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as caught:
        train_mnist.parse_args(["--resume"])
    assert caught.value.code == 2
    assert "--resume needs --ckpt-dir" in capsys.readouterr().err
    args = train_mnist.parse_args(["--device-target", "cpu", "--mode", "PyNative", "--no-shuffle", "--drop-last"])
    assert (args.device_target, args.mode, args.shuffle, args.drop_last) == ("CPU", "pynative", False, True)


# ---------------------------------------------------------------- arithmetic

# Both runs of a case see the same samples in the same windows, so with the
# count-weighted mean they take identical updates (to float32 rounding):
#  - even: 192 = 3 windows of 64 samples, as 32+32 or as 64.
#  - uneven_tail: 200 samples: 32-batches leave 8, which form the last window
#    alone (32,32 | 32,32 | 32,32 | 8); 64-batches leave the same 8 (64 | 64 | 64 | 8).
#  - uneven_window: 200 samples in windows of 128: (32,32,32,32 | 32,32,8) against
#    (128 | 72). The second window mixes a full and a short micro-batch, so only
#    weighting by sample count (not a mean of micro-batch means) matches the
#    72-sample batch. Shuffled: the seeded order is per sample, not per batch, so
#    both runs still see the same data.
@pytest.mark.parametrize("case, fixture, small, large, extra", [
    ("even", "synthetic_mnist_even_dir", ("32", "2"), ("64", "1"), ["--no-shuffle"]),
    ("uneven_tail", "synthetic_mnist_dir", ("32", "2"), ("64", "1"), ["--no-shuffle"]),
    ("uneven_window", "synthetic_mnist_dir", ("32", "4"), ("128", "1"), ["--optimizer", "momentum"]),
])
def test_accumulated_micro_batches_equal_one_large_batch(request, case, fixture, small, large, extra):
    data_dir = request.getfixturevalue(fixture)
    # lr 0.1 so the weights move far beyond the tolerance in two epochs.
    common = ["--epochs", "2", "--lr", "0.1", *extra]
    accumulated, accumulated_state = train(data_dir, "--batch-size", small[0], "--accumulate-step", small[1], *common)
    large_batch, large_state = train(data_dir, "--batch-size", large[0], "--accumulate-step", large[1], *common)

    assert accumulated["effective_batch_size"] == large_batch["effective_batch_size"]
    assert accumulated["updates"] == large_batch["updates"]
    for name, value in large_state.items():
        np.testing.assert_allclose(accumulated_state[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    moved = max(np.abs(large_state[name] - start).max() for name, start in initial_weights(data_dir).items())
    assert moved > 1e-3


@pytest.mark.parametrize("accumulate_step", ["2", "4"])
def test_window_step_trains_like_the_per_micro_step_loop(synthetic_mnist_dir, accumulate_step):
    # 200 samples in 32-batches: the last window is short and its last batch holds 8.
    common = ["--epochs", "2", "--lr", "0.1", "--batch-size", "32", "--accumulate-step", accumulate_step]
    per_micro_step, expected = train(synthetic_mnist_dir, *common)
    window, actual = train(synthetic_mnist_dir, *common, "--window-step")
    assert window["updates"] == per_micro_step["updates"]
    assert window["final_train_loss"] == pytest.approx(per_micro_step["final_train_loss"], rel=1e-5)
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_distributed_ranks_train_like_one_process_on_the_whole_batch(synthetic_mnist_dir, tmp_path):
    # Rank r reads samples r, r+2, ...: a window of 2 x 16 per rank covers the
    # same 64 samples as one 64-batch, and the short last windows (4 + 4 and 8) too.
    common = ["--data-dir", synthetic_mnist_dir, "--epochs", "1", "--lr", "0.1", "--no-shuffle"]
    returncode, logs = run_msrun([SCRIPT, *common, "--distributed", "--batch-size", "16", "--accumulate-step", "2",
                                  "--ckpt-dir", str(tmp_path / "ckpt")], tmp_path / "logs", tmp_path)
    assert returncode == 0, "".join(log[-3000:] for log in logs.values())
    rank0, rank1 = (log for name, log in logs.items() if name.startswith("worker_"))
    assert "effective 64" in rank0 and "epoch 1/1: train loss" in rank0
    assert "epoch 1/1: train loss" not in rank1   # only rank 0 prints
    assert os.listdir(tmp_path / "ckpt") == ["epoch_001.ckpt"]

    single, expected = train(synthetic_mnist_dir, *common[2:], "--batch-size", "64", "--accumulate-step", "1")
    saved = ms.load_checkpoint(str(tmp_path / "ckpt" / "epoch_001.ckpt"))
    assert int(saved["accumulator.update_count"].asnumpy()) == single["updates"] == 4
    for name, value in expected.items():
        np.testing.assert_allclose(saved[name].asnumpy(), value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_pynative_mode_trains_like_graph_mode(synthetic_mnist_dir):
    _, graph = train(synthetic_mnist_dir, "--epochs", "1", "--lr", "0.1")
    _, pynative = train(synthetic_mnist_dir, "--epochs", "1", "--lr", "0.1", "--mode", "pynative")
    for name, value in graph.items():
        np.testing.assert_allclose(pynative[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


# ---------------------------------------------------------------- learning and logs

def test_learns_synthetic_data_and_logs_json(tmp_path, capsys):
    log = tmp_path / "logs" / "run.json"
    summary = train_mnist.main(["--synthetic", "--epochs", "2", "--log-json", str(log)])
    out = capsys.readouterr().out

    assert summary["final_accuracy"] > 0.9
    assert summary["effective_batch_size"] == 64
    assert summary["updates"] == 2 * -(-6000 // 64)
    assert "epoch 2/2: train loss" in out and "best test accuracy" in out and "effective batch 64 (32 x 2)" in out

    logged = json.loads(log.read_text())
    assert logged["summary"] == pytest.approx(summary)
    assert logged["config"]["batch_size"] == 32 and logged["config"]["accumulate_step"] == 2
    assert [record["epoch"] for record in logged["epochs"]] == [1, 2]
    for record in logged["epochs"]:
        assert {"train_loss", "test_accuracy", "test_loss", "samples_per_second", "seconds"} <= set(record)
        assert record["samples"] == 6000 and record["seconds"] > 0
        assert record["samples_per_second"] == pytest.approx(6000 / record["seconds"])
    assert logged["epochs"][1]["train_loss"] < logged["epochs"][0]["train_loss"]
    assert logged["epochs"][-1]["test_accuracy"] == summary["final_accuracy"]
    assert not [name for name in os.listdir(log.parent) if name != "run.json"]  # no temporary left


def test_plot_writes_a_png(synthetic_mnist_dir, tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "run.png"
    train_mnist.main(["--data-dir", synthetic_mnist_dir, "--mnist-url", UNREACHABLE_URL, "--epochs", "1",
                      "--plot", str(plot)])
    assert plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_plot_without_matplotlib_stops_before_training(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    monkeypatch.setattr(train_mnist, "train", lambda *args, **kwargs: pytest.fail("training started"))
    with pytest.raises(SystemExit) as caught:
        train_mnist.main(["--synthetic", "--plot", str(tmp_path / "run.png")])
    assert caught.value.code == 2
    assert "--plot needs matplotlib: pip install matplotlib" in capsys.readouterr().err


# ---------------------------------------------------------------- downloads

def test_offline_download_exits_with_the_message_and_no_traceback(tmp_path):
    data_dir = str(tmp_path / "MNIST_Data")
    result = run_script("--data-dir", data_dir, "--mnist-url", UNREACHABLE_URL)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"error: Could not download MNIST from {UNREACHABLE_URL}" in result.stderr
    assert "Connection refused" in result.stderr and "--synthetic" in result.stderr
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


def test_synthetic_never_overwrites_another_data_set(synthetic_mnist_dir, capsys):
    with pytest.raises(SystemExit) as caught:
        train_mnist.main(["--synthetic", "--data-dir", synthetic_mnist_dir])
    assert caught.value.code == 1
    assert "--synthetic will not overwrite it" in capsys.readouterr().err


# ---------------------------------------------------------------- checkpoints

def test_resume_equals_an_uninterrupted_run_and_a_failed_save_keeps_the_last(synthetic_mnist_dir, tmp_path,
                                                                            monkeypatch, capsys):
    # Adam, so its moments and step count must come back too; shuffled, so the
    # resumed epoch must reproduce the order of epoch 2.
    flags = ["--optimizer", "adam", "--lr", "1e-3", "--batch-size", "32", "--accumulate-step", "3"]
    _, uninterrupted = train(synthetic_mnist_dir, "--epochs", "2", *flags)

    ckpt_dir = str(tmp_path / "ckpt")
    train(synthetic_mnist_dir, "--epochs", "1", "--ckpt-dir", ckpt_dir, *flags)
    assert os.listdir(ckpt_dir) == ["epoch_001.ckpt"]

    # Epoch 2 trains, then its checkpoint write dies half-way (disk full).
    def crash(save_obj, ckpt_file_name, **kwargs):
        with open(ckpt_file_name, "wb") as half_written:
            half_written.write(b"partial")
        raise OSError("No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(ms, "save_checkpoint", crash)
        with pytest.raises(SystemExit) as caught:
            train_mnist.main(["--data-dir", synthetic_mnist_dir, "--epochs", "2", "--ckpt-dir", ckpt_dir,
                              "--resume", *flags])
    assert caught.value.code == 1
    err = capsys.readouterr().err
    assert "could not write checkpoint" in err and "epoch_001.ckpt is intact" in err
    assert os.listdir(ckpt_dir) == ["epoch_001.ckpt"]

    summary, resumed = train(synthetic_mnist_dir, "--epochs", "2", "--ckpt-dir", ckpt_dir, "--resume", *flags)
    assert "resumed from" in capsys.readouterr().out
    assert uninterrupted.keys() == resumed.keys()
    for name, value in uninterrupted.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    assert summary["epochs"] == 2 and summary["best_epoch"] in (1, 2)
    assert sorted(os.listdir(ckpt_dir)) == ["epoch_001.ckpt", "epoch_002.ckpt"]

    # Resuming with flags that change the data order would not be exact: refused.
    with pytest.raises(SystemExit) as caught:
        train_mnist.main(["--data-dir", synthetic_mnist_dir, "--epochs", "3", "--ckpt-dir", ckpt_dir,
                          "--resume", "--seed", "1", *flags])
    assert caught.value.code == 1
    assert "--seed was 0, now 1" in capsys.readouterr().err
