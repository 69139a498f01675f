"""Importing accumulator sets MindSpore's blocking launch on CPU, before anything runs, unless the user chose."""
import os
import subprocess
import sys

import pytest

from accumulator.runtime import BLOCKING_RUN

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMPORT = ("import logging, os; logging.basicConfig(level=logging.INFO, format='%(message)s'); "
          "import accumulator; print(os.environ.get('MS_DEV_HOST_BLOCKING_RUN'))")


def _fresh_import(value):
    env = {k: v for k, v in os.environ.items() if k != BLOCKING_RUN}
    if value is not None:
        env[BLOCKING_RUN] = value
    env["PYTHONPATH"] = REPO
    done = subprocess.run([sys.executable, "-c", IMPORT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if BLOCKING_RUN in line]
    return done.stdout.split()[-1], said


def test_import_sets_the_blocking_launch_on_cpu_and_says_so_in_one_line():
    value, said = _fresh_import(None)
    assert value == "1"
    assert len(said) == 1 and said[0].startswith(f"accumulator: set {BLOCKING_RUN}=1")


@pytest.mark.parametrize("chosen", ["0", "1"])
def test_a_value_the_user_set_is_kept_and_nothing_is_said(chosen):
    assert _fresh_import(chosen) == (chosen, [])
