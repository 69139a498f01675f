"""benchmarks/runner.py: each configuration in its own `python -m benchmarks.worker`."""
import io
import os

from benchmarks.configs import BLOCKING_ENV
from benchmarks.runner import REPO_ROOT, run_configs, run_module, worker_env

CONFIG = dict(kind="speed", net="mnist", hidden=8, contender="no_such_row", mode="graph", blocking="1",
              batch=4, accumulate=2)


def test_environment_sets_the_blocking_variable_on_or_off_and_finds_the_packages(monkeypatch):
    monkeypatch.setenv(BLOCKING_ENV, "1")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    # Off is "0", not unset: importing accumulator turns an unset variable on.
    assert worker_env("")[BLOCKING_ENV] == "0"
    env = worker_env("1")
    assert env[BLOCKING_ENV] == "1"
    assert env["PYTHONPATH"].split(os.pathsep) == [REPO_ROOT, "/elsewhere"]


def test_memory_rows_run_once_and_a_failed_worker_is_a_logged_error_row():
    # An unknown contender fails at once, before MindSpore is imported.
    log = io.StringIO()
    runs = run_configs([CONFIG, dict(CONFIG, kind="memory")], repeats=2, seconds=0.01, blocks=2, log=log)
    assert [(run["kind"], run["repeat"]) for run in runs] == [("speed", 0), ("memory", 0), ("speed", 1)]
    assert all(run["error"].splitlines()[-1] == "KeyError: 'no_such_row'" for run in runs)
    assert log.getvalue().splitlines()[0].endswith("KeyError: 'no_such_row'")


def test_a_worker_past_its_timeout_is_a_failed_row_not_a_crash():
    result = run_module("benchmarks.worker", {"contender": "plain_micro"}, blocking="1", timeout=0.01)
    assert result["error"] == "timed out after 0.01 s (--timeout)"
