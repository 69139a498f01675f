"""scripts/train_mnist.py's data: MNIST downloaded from a loopback server or refused, and the synthetic look-alike
kept apart from real MNIST files.

By hand: with the address refused at once (port 9), ``--data-dir new/dir`` exits 1 with one line, ``error: Could not
download MNIST from http://127.0.0.1:9/MNIST_Data.zip``, naming --synthetic, and leaves no folder behind.
"""
import contextlib
import http.server
import os
import shutil
import signal
import zipfile

import pytest

from data.idx import SPLIT_FILES
from data.mnist import DEFAULT_DATA_DIR
from scripts import train_mnist  # scripts/ has no __init__.py: a namespace package on pytest's path
from training.mnist import SYNTHETIC_MARKER, mnist_task, prepare_mnist
from tests.tools.helpers import UNREACHABLE_URL, refused, serving


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
    with serving(served) as base_url, pytest.raises(SystemExit) as caught:
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
