"""The CPU launch setting is made by the first Accumulator, never by the import, and never over the user's choice.

By hand: in a fresh process on a CPU, `import accumulator` leaves MS_DEV_HOST_BLOCKING_RUN unset; making an
Accumulator sets it to "1" and logs one line; a second Accumulator says nothing more. A value the user set ("0") is
kept and nothing is said.
"""
import logging
import os
import subprocess
import sys

from mindspore import nn

from accumulator import Accumulator
from accumulator._internal.runtime import BLOCKING_RUN
from tests import REPO_ROOT

SCRIPT = ("import logging, os; logging.basicConfig(level=logging.INFO, format='%(message)s'); "
          "import accumulator; from mindspore import nn; print(os.environ.get('MS_DEV_HOST_BLOCKING_RUN')); "
          "net = nn.Dense(2, 1); accumulator.Accumulator(nn.SGD(net.trainable_params(), 0.1)); "
          "accumulator.Accumulator(nn.SGD(net.trainable_params(), 0.1)); "
          "print(os.environ.get('MS_DEV_HOST_BLOCKING_RUN'))")


def _fresh_process():
    """``(the variable after the import, after two Accumulators, the lines that name it)`` in a new process."""
    env = {k: v for k, v in os.environ.items() if k != BLOCKING_RUN}
    env["PYTHONPATH"] = REPO_ROOT
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if BLOCKING_RUN in line]
    after_import, after_accumulators = done.stdout.split()[-2:]
    return after_import, after_accumulators, said


def test_the_import_sets_nothing_and_the_first_accumulator_sets_the_blocking_launch_saying_so_once():
    after_import, after_accumulators, said = _fresh_process()
    assert (after_import, after_accumulators) == ("None", "1")
    assert len(said) == 1 and said[0].startswith(f"accumulator: set {BLOCKING_RUN}=1")


def test_a_value_the_user_set_is_kept_and_nothing_is_said(monkeypatch, caplog):
    # "0", as it differs from what the library would set; a "1" kept would look the same as one set. In this
    # process: MindSpore read the variable at its first operation, so changing it now changes nothing of its launch.
    monkeypatch.setenv(BLOCKING_RUN, "0")
    with caplog.at_level(logging.INFO, logger="accumulator"):
        Accumulator(nn.SGD(nn.Dense(2, 1).trainable_params(), 0.1))
    assert os.environ[BLOCKING_RUN] == "0"
    assert not [record for record in caplog.records if BLOCKING_RUN in record.getMessage()]
