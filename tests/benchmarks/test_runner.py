"""benchmarks/runner.py: each configuration in its own `python -m benchmarks.worker`.

That memory rows run once and a failed worker is a logged error row: ``run_configs``'s doctest.

By hand: a worker given 0.01 s is a row whose error is ``timed out after 0.01 s (--timeout)``, not a crash.
"""
import os

from benchmarks.configs import BLOCKING_ENV
from benchmarks.runner import REPO_ROOT, run_module, worker_env


def test_environment_sets_the_blocking_variable_on_or_off_and_finds_the_packages(monkeypatch):
    monkeypatch.setenv(BLOCKING_ENV, "1")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    # Off is "0", not unset: importing accumulator turns an unset variable on.
    assert worker_env("")[BLOCKING_ENV] == "0"
    env = worker_env("1")
    assert env[BLOCKING_ENV] == "1"
    assert env["PYTHONPATH"].split(os.pathsep) == [REPO_ROOT, "/elsewhere"]


def test_a_worker_past_its_timeout_is_a_failed_row_not_a_crash():
    result = run_module("benchmarks.worker", {"contender": "plain_micro"}, blocking="1", timeout=0.01)
    assert result["error"] == "timed out after 0.01 s (--timeout)"
