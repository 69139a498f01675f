"""benchmarks/ema.py: the average's horizon from a tool's JSON log, and the table's rows; no tool runs here.

By hand, at decay 0.9 and a first window of 32 samples: windows of 32, 64, 512 and 16 samples have kappa 1, 2, 16
and 0.5, rho 0.9, 0.81, 0.9 ** 16 and 0.9 ** 0.5; the horizon 320, 336.8, 628.5 and 311.8 samples; a fixed
decay's 320, 640, 5120 and 160.
"""
import pytest

from benchmarks import ema

LOG = {"config": {"ema": 0.9},
       "epochs": [{"test_loss": 0.5, "trained_test_loss": 0.4, "accumulate_step": 2, "ema_windows": [32, 64],
                   "ema_reference": 32.0},
                  {"test_loss": 0.2, "trained_test_loss": 0.25, "accumulate_step": 16, "ema_windows": [512, 16],
                   "ema_reference": 32.0}]}


def test_each_windows_horizon_follows_its_rho_and_a_fixed_decays_grows_with_the_window():
    windows = ema.horizons(LOG)
    assert [w["seen"] for w in windows] == [32, 96, 608, 624]
    assert [w["kappa"] for w in windows] == [1, 2, 16, 0.5]
    assert [w["rho"] for w in windows] == pytest.approx([0.9, 0.81, 0.9 ** 16, 0.9 ** 0.5])
    assert [w["horizon"] for w in windows] == pytest.approx([320, 336.84, 628.45, 311.79], abs=0.01)
    assert [w["fixed_horizon"] for w in windows] == pytest.approx([320, 640, 5120, 160])


def test_a_row_per_run_the_last_epochs_losses_with_and_without_and_a_failed_run_keeps_its_error():
    rows = ema.loss_rows([dict(tool="mnist", seed=0, log=LOG), dict(tool="lm", seed=1, log={"error": "boom\nbad"})])
    assert {k: rows[0][k] for k in ("with", "without", "n", "kappas")} == \
        {"with": 0.2, "without": 0.25, "n": 16, "kappas": (0.5, 16)}
    assert rows[0]["horizon"] + rows[0]["fixed"] == pytest.approx((311.79, 628.45, 160, 5120), abs=0.01)
    assert rows[1] == dict(tool="lm", seed=1, error="boom\nbad")
    table = ema.format_rows(rows).splitlines()
    assert table[2] == "| MNIST (samples) | 0 | 0.2000 | 0.2500 | -0.0500 | 16 | 0.5-16 | 312-628 | 160-5,120 |"
    assert table[3] == "| LM (tokens) | 1 | ERROR bad |"


def test_a_run_is_the_tools_command_with_auto_its_regime_and_the_average():
    line = ema.command("lm", 0, 0.99, "run.json", "data")
    assert line[1] == "scripts/train_lm.py" and line[-4:] == ["--ema", "0.99", "--log-json", "run.json"]
    assert line[line.index("--accumulate-step") + 1] == "auto" and line[line.index("--scale-rule") + 1] == "sqrt"
