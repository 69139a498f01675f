"""scripts/train_lm.py as its user meets it: flags, one-line errors, offline data, exact resume, signals, logs.

What the run computes is tested in tests/training/test_lm.py; the machinery shared with the MNIST tool
(checkpoints, interrupts, outputs) in tests/training/.

By hand: ``--width 30`` with 4 heads exits 2 with ``--width 30 must be a multiple of --heads 4``; a run stopped
after epoch 1 and resumed ends bit for bit as the uninterrupted one.
"""
import json
import os
import shutil
import signal
import subprocess
import sys

import mindspore as ms
import numpy as np
import pytest

import data.packing
from tests.tools import lm_tool_worker
import training.lm
from scripts import train_lm  # scripts/ has no __init__.py: a namespace package on pytest's path
from training.checkpoints import checkpoint_path, save_epoch_checkpoint
from data.text import synthetic_text
from training.lm import SYNTHETIC_MARKER, lm_task
from training.lm_command import build_parser
from training.loop import build_run, epoch_windows
from training.task import toy_task
from tests import REPO_ROOT

SCRIPT = os.path.join(REPO_ROOT, "scripts", "train_lm.py")
UNREACHABLE_URL = "http://127.0.0.1:9/input.txt"
TINY = ["--width", "32", "--depth", "1", "--max-length", "64", "--batch-size", "4", "--accumulate-step", "2",
        "--sample-tokens", "0"]


@pytest.fixture
def small_synthetic():
    """--synthetic writes 3,000 bytes (75 samples of up to 64 tokens) instead of the tool's default."""
    with lm_tool_worker.small_synthetic_text():
        yield


def refused(capsys, argv, message, status=1):
    """main(argv) ends with ``status`` and prints nothing but the one line ``message`` (a prefix, for status 2)."""
    with pytest.raises(SystemExit) as caught:
        train_lm.main(argv)
    out, err = capsys.readouterr()
    assert (caught.value.code, out) == (status, "")
    if status == 1:
        assert err == f"error: {message}\n"
    else:
        assert err.startswith("usage: train_lm.py") and f"train_lm.py: error: {message}" in err
        assert "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["--loss", "mean"], "argument --loss: unknown value 'mean': choose token-sum, micro-batch-mean"),
    (["--optimizer", "lamb"], "argument --optimizer: unknown value 'lamb': choose adamw, adam, sgd, momentum"),
    (["--max-length", "1"], "argument --max-length: must be an integer of at least 2, got 1"),
    (["--width", "30"], "--width 30 must be a multiple of --heads 4"),
    (["--no-packing", "--pack-within-windows"],
     "--pack-within-windows bounds how packing moves samples, got --no-packing"),
    (["--scale-rule", "sqrt", "--optimizer", "adam"],
     "--scale-rule sqrt sets Adam's betas, which only --optimizer adamw keeps where it can (docs/scale-rules.md), "
     "got --optimizer adam"),
])
def test_bad_flags_are_one_usage_error_naming_the_flag(capsys, argv, message):
    refused(capsys, argv, message, status=2)


def test_offline_is_one_line_naming_the_address_and_the_file_and_leaves_nothing(tmp_path, capsys):
    data_dir = tmp_path / "new" / "text"
    with pytest.raises(SystemExit) as caught:
        train_lm.main(["--data-dir", str(data_dir), "--text-url", UNREACHABLE_URL])
    out, err = capsys.readouterr()
    assert (caught.value.code, out) == (1, "")
    assert err.startswith(f"error: Could not download Tiny Shakespeare from {UNREACHABLE_URL} (")
    assert err.endswith(f"Save that file by hand as {data_dir / 'input.txt'}, or use --synthetic.\n")
    assert err.count("\n") == 1 and os.listdir(tmp_path) == []


def checkpoint(path):
    """Every Tensor a checkpoint holds (network, optimizer, accumulator), as numpy; not its text (the history's timings)."""
    return {name: value.asnumpy() for name, value in ms.load_checkpoint(str(path)).items() if not isinstance(value, str)}


def stopped_after_epoch_1(whole, cut):
    """``cut`` holds ``whole``'s epoch-1 checkpoint alone: a run of ``whole``'s flags stopped after its first epoch."""
    cut.mkdir()
    shutil.copy(whole / "epoch_001.ckpt", cut)


@pytest.mark.parametrize("changed, message", [
    (["--loss", "micro-batch-mean"], "--loss was token-sum, now micro-batch-mean"),
    (["--width", "64"], "--width was 32, now 64"),
    (["--no-packing"], "--packing was True, now False"),
    (["--pack-within-windows"], "--pack-within-windows was False, now True"),
])
def test_resume_with_other_model_or_loss_flags_names_the_flag_and_both_values(tmp_path, capsys, changed, message):
    # The checkpoint records the settings the tool parsed; the network saved does not matter, as in the MNIST tool's
    # test: the settings are compared before any weights are read, and before the data is written.
    ckpt_dir, data_dir = tmp_path / "ckpt", tmp_path / "text"
    config, _ = train_lm.parse_args(["--mode", "pynative", "--ckpt-dir", str(ckpt_dir), *TINY])
    path = save_epoch_checkpoint(build_run(config, toy_task()), config, 1, [])
    refused(capsys, ["--synthetic", "--data-dir", str(data_dir), "--mode", "pynative", "--ckpt-dir", str(ckpt_dir),
                     "--resume", *TINY, *changed],
            f"cannot resume exactly from {path}: {message}. Pass the same flags, or another --ckpt-dir.")
    assert os.listdir(ckpt_dir) == ["epoch_001.ckpt"] and not data_dir.exists()


def test_sgd_follows_the_window_by_the_linear_rule_under_the_warm_up_schedule(tmp_path, capsys, small_synthetic):
    # The schedule makes the tool's SGD an experimental.optim one, stepped per update: the rule can scale it.
    train_lm.main(["--synthetic", "--data-dir", str(tmp_path / "text"), "--mode", "pynative", *TINY, "--epochs", "1",
                   "--optimizer", "sgd", "--scale-rule", "linear", "--ckpt-dir", str(tmp_path / "ckpt")])
    out = capsys.readouterr().out
    assert "sgd lr 0.01 for one micro-batch, following N by the linear rule" in out
    updates = int(out.rsplit(" updates", 1)[0].rsplit(" ", 1)[1])
    saved = checkpoint(tmp_path / "ckpt" / "epoch_001.ckpt")
    scale, progress = saved["accumulator.scale_rule.lr_scale"], saved["accumulator.scale_rule.progress"]
    # κ = 2 per full window; the epoch's last window holds 1 micro-batch here, scaled for what it holds.
    assert (scale, progress) == (1, 2 * updates - 1) and saved["lr_scheduler.last_epoch"] == progress
    expected = float(scale) * float(training.lm.WarmupInverseSqrt(0.01, training.lm.WARMUP_UPDATES)(ms.Tensor(int(progress))))
    np.testing.assert_allclose(saved["learning_rate_group_0"], expected, rtol=1e-6)


@pytest.mark.slow  # end to end: two runs of the tool
def test_the_sqrt_rule_sets_adamws_betas_and_resumes_bit_identical(tmp_path, capsys, small_synthetic):
    # The LM tool's resume, the sqrt rule's state with it (--accumulate-step auto's: tests/training/test_probe.py).
    common = ["--synthetic", "--data-dir", str(tmp_path / "text"), "--mode", "pynative", "--epochs", "2",
              "--scale-rule", "sqrt", *TINY, "--accumulate-step", "4"]
    train_lm.main([*common, "--ckpt-dir", str(tmp_path / "whole")])
    stopped_after_epoch_1(tmp_path / "whole", tmp_path / "cut")
    train_lm.main([*common, "--ckpt-dir", str(tmp_path / "cut"), "--resume"])
    out = capsys.readouterr().out
    assert "lr 0.01 for one micro-batch, following N by the sqrt rule" in out
    assert f"resumed from {tmp_path / 'cut' / 'epoch_001.ckpt'} (epoch 1)" in out
    whole, resumed = checkpoint(tmp_path / "whole" / "epoch_002.ckpt"), checkpoint(tmp_path / "cut" / "epoch_002.ckpt")
    assert sorted(whole) == sorted(resumed) and {"accumulator.update_count", "lr_scheduler.last_epoch"} <= set(whole)
    # The last window's κ (the epoch's last window may hold fewer than 4): both betas from the same κ > 1.
    beta1, beta2 = whole["accumulator.scale_rule.group0.beta1"], whole["accumulator.scale_rule.group0.beta2"]
    kappa = (1 - beta2) / 0.001
    assert 1.5 < kappa < 4.5 and 1 - beta1 == pytest.approx(0.1 * kappa, rel=1e-4)
    for name, value in whole.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)


@pytest.mark.slow  # three runs of the tool; the packing itself is tests/data/test_packing.py's
def test_packing_on_by_default_or_within_windows_or_off_and_the_synthetic_text_kept_apart(tmp_path, capsys,
                                                                                            small_synthetic,
                                                                                            monkeypatch):
    # One tool run per packing setting: the default's also writes the synthetic text the refusals below read.
    calls = {}

    def first_fit(sizes, capacity, window=None):  # the tool's own, recorded
        calls[window] = data.packing.first_fit(sizes, capacity, window)
        return calls[window]

    monkeypatch.setattr(training.lm, "first_fit", first_fit)
    defaults = train_lm.parse_args([])[1]
    assert defaults["packing"] is True and defaults["pack_within_windows"] is False
    assert train_lm.parse_args(["--no-packing"])[1]["packing"] is False
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    (corpus_dir / "input.txt").write_text("First Citizen:\n")
    refused(capsys, ["--synthetic", "--data-dir", str(corpus_dir)],
            f"--synthetic will not write into --data-dir {corpus_dir}: it holds {corpus_dir / 'input.txt'}, which "
            "--synthetic did not write; choose another folder")
    synthetic_dir = tmp_path / "synthetic"
    lines = {}
    for flag in ("--packing", "--pack-within-windows", "--no-packing"):
        train_lm.main(["--synthetic", "--data-dir", str(synthetic_dir), "--epochs", "1", "--mode", "pynative",
                       *TINY, flag])
        lines[flag] = capsys.readouterr().out
    assert ", packed into rows of 64)" in lines["--packing"] and "packed" not in lines["--no-packing"]
    padding = {flag: float(out.split("% padding")[0].rsplit(" ", 1)[1]) for flag, out in lines.items()}
    assert 0 < padding["--packing"] < 25 < padding["--no-packing"] < 75, padding
    assert sorted(calls, key=str) == [8, None]  # --batch-size 4 x --accumulate-step 2 rows a window, or no bound
    for window, rows in calls.items():
        samples = [i for start in range(0, len(rows), 8) for i in sorted(sum(rows[start:start + 8], []))]
        # Within windows each window holds a run of the shuffled order; unbounded, some samples move forward.
        assert (samples == sorted(samples)) == (window == 8)

    assert sorted(os.listdir(synthetic_dir)) == [SYNTHETIC_MARKER, "input.txt"]
    refused(capsys, ["--data-dir", str(synthetic_dir)],
            f"{synthetic_dir} holds the synthetic text that --synthetic wrote, not Tiny Shakespeare "
            f"({SYNTHETIC_MARKER}): add --synthetic to train on it, or choose another --data-dir")


def test_the_default_window_holds_about_the_tokens_of_the_padded_one(tmp_path):
    # The tool's text, windows only (nothing compiles): --batch-size defaults to fewer packed rows than padded ones.
    path = tmp_path / "input.txt"
    path.write_text(synthetic_text(training.lm.SYNTHETIC_BYTES, training.lm.SYNTHETIC_DATA_SEED))
    windows = {}
    for flags in ([], ["--no-packing"]):
        config, tool = train_lm.parse_args(["--synthetic", *flags])
        windows[tool["packing"]] = len(list(epoch_windows(config, lm_task(str(path), packing=tool["packing"]), 1)))
    assert windows[True] == windows[False]  # as many updates an epoch over the same tokens
    assert train_lm.parse_args(["--no-packing", "--batch-size", "3"])[0].batch_size == 3


def test_resume_help_names_every_flag_a_resume_refuses_to_change(monkeypatch):
    monkeypatch.setenv("COLUMNS", "10000")  # argparse wraps at a flag's hyphens too: one line each
    help_text = " ".join(build_parser().format_help().split())
    resume_help = help_text[help_text.index("--resume continue"):help_text.index("--overwrite start")]
    for name in ("batch-size", "accumulate-step", "lr", "optimizer", "seed", "shuffle", "drop-last",
                 "scale-rule", "update-cost", "loss", "max-length", "packing", "pack-within-windows", "width",
                 "depth", "heads"):
        assert f"--{name}," in resume_help, name


@pytest.mark.slow  # end to end: the tool's check and logs (the drivers' equality: tests/training/test_loop.py)
def test_check_and_logs_work_through_the_shared_machinery(tmp_path, capsys, small_synthetic):
    # PyNative, as the other runs here: the tool's graph mode runs under msrun.
    summary = train_lm.main(["--synthetic", "--epochs", "2", "--check", "--track-noise", "--mode", "pynative",
                             "--log-json", str(tmp_path / "run.json"), "--plot", str(tmp_path / "run.png"),
                             *TINY[:-2], "--sample-tokens", "20"])
    out = capsys.readouterr().out
    assert "equivalence check: equivalent" in out
    assert out.count("validation loss") == 3 and "tokens/s" in out and "noise scale" in out
    assert "sample from 'KING', at temperature 0.8:\nKING" in out
    log = json.load(open(tmp_path / "run.json"))
    first, last = log["epochs"]
    assert last["test_loss"] < first["test_loss"]  # it learns
    assert last["perplexity"] == pytest.approx(np.exp(last["test_loss"]))
    assert last["tokens_per_second"] > 0 and last["tokens_per_update"] > 8 * 10
    assert log["summary"]["updates"] == summary["updates"] > 0
    assert open(tmp_path / "run.png", "rb").read(4) == b"\x89PNG"


@pytest.mark.slow  # SIGTERM here; both signals in tests/tools/test_train_mnist.py (the same run_tool)
@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143)])
def test_a_signal_ends_the_run_with_its_status_a_line_and_no_temporary_text(signum, status):
    process = subprocess.Popen([sys.executable, SCRIPT, "--synthetic", "--epochs", "50"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    first = process.stdout.readline()  # printed once the data is there, before training
    os.kill(process.pid, signum)
    out, err = process.communicate(timeout=120)
    folder = os.path.dirname(first.split(" from ", 1)[1].split(":", 1)[0])
    assert process.returncode == status, first + out + err
    assert err.splitlines()[-1] == f"interrupted by {signal.Signals(signum).name}; nothing was saved (no --ckpt-dir)"
    assert not os.path.exists(folder)


@pytest.mark.parametrize("synthetic", [[], ["--synthetic"]])
def test_a_data_dir_that_is_a_file_is_refused_before_any_work(tmp_path, capsys, synthetic):
    path = tmp_path / "text.txt"
    path.write_text("")
    refused(capsys, [*synthetic, "--data-dir", str(path)], f"--data-dir {path}: is a file; name a folder")


@pytest.mark.slow
@pytest.mark.msrun("tests.tools.lm_tool_worker:main")
@pytest.mark.parametrize("packing, epoch", [(lm_tool_worker.TWO_RANKS, 1), (lm_tool_worker.ONE_TO_TWO, 2)])
def test_two_ranks_train_like_one_process_on_the_whole_batch(msrun_folder, packing, epoch):
    # Each window is one process's 4 x 4 samples (packed: rows); rank r trains its half by position, 2 x 4, and the
    # token counts of both ranks are summed, so the updates agree. Packed within windows, a window is the 16 rows of
    # both ranks, as one process's. Padded rows: the ranks' epoch 2, after one process's epoch 1 (1 -> 2 ranks).
    single = checkpoint(checkpoint_path(msrun_folder / lm_tool_worker.ONE_PROCESS / packing, epoch))
    ranks = checkpoint(checkpoint_path(msrun_folder / packing, epoch))
    assert int(ranks["accumulator.update_count"]) == int(single["accumulator.update_count"]) == 4 * epoch
    # N is a rank's: 2 micro-batches of the window's 4.
    assert (int(ranks.pop("accumulator.accumulate_step")), int(single.pop("accumulator.accumulate_step"))) == (2, 4)
    assert_like_one_process(ranks, single)


def assert_like_one_process(ranks, single):
    """The ranks' checkpoint tensors equal one process's to float tolerance, the key bias's but."""
    for name, value in single.items():
        if name.endswith("attention.qkv.bias"):
            # The key bias's gradient is 0 (softmax ignores a shift shared by a query's scores): AdamW (eps 1e-8)
            # turns its rounding noise, summed in another order over ranks, into steps of 2e-5. Not compared.
            width = lm_tool_worker.WIDTH
            value, ranks[name] = (np.delete(array, np.s_[width:2 * width]) for array in (value, ranks[name]))
        np.testing.assert_allclose(ranks[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
@pytest.mark.msrun("tests.tools.lm_tool_worker:main")
def test_the_run_moves_between_one_process_and_two_ranks(tmp_path, capsys, msrun_folder):
    # 1 -> 2: the launch resumed one process's epoch 1 on two ranks, which test_two_ranks_train_like_one_process_...
    # compares. 2 -> 1: here one process (N 4) resumes the two ranks' epoch 1 (N 2 each) and ends as one process's
    # two epochs do. The JSON log gives each epoch's ranks.
    moved = lm_tool_worker.TWO_RANKS
    shutil.copytree(msrun_folder / moved, tmp_path / "resumed")
    with lm_tool_worker.small_synthetic_text():
        train_lm.main([*lm_tool_worker.one_process_flags(msrun_folder / lm_tool_worker.TEXT, moved),
                       "--ckpt-dir", str(tmp_path / "resumed"), "--resume", "--log-json", str(tmp_path / "log")])
    assert "its run had 2 ranks, this one 1" in capsys.readouterr().out
    assert "its run had 1 ranks, this one 2" in (msrun_folder / "rank_0.log").read_text()
    assert [record["ranks"] for record in json.loads((tmp_path / "log").read_text())["epochs"]] == [2, 1]
    single = checkpoint(msrun_folder / lm_tool_worker.ONE_PROCESS / moved / "epoch_002.ckpt")
    resumed = checkpoint(tmp_path / "resumed" / "epoch_002.ckpt")
    assert int(resumed["accumulator.update_count"]) == int(single["accumulator.update_count"]) == 8
    assert int(resumed["accumulator.accumulate_step"]) == int(single["accumulator.accumulate_step"]) == 4
    assert_like_one_process(resumed, single)
