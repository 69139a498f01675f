"""benchmarks/runner.py: each configuration in its own `python -m benchmarks.worker`."""
import io
import os

from benchmarks.configs import BLOCKING_ENV
from benchmarks.runner import REPO_ROOT, run_configs, run_worker, worker_env

CONFIG = dict(kind="speed", net="mnist", hidden=8, contender="plain_micro", mode="graph", blocking="1",
              batch=4, accumulate=2)


def test_environment_sets_the_blocking_variable_on_or_off_and_finds_the_packages(monkeypatch):
    monkeypatch.setenv(BLOCKING_ENV, "1")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    # Off is "0", not unset: importing accumulator turns an unset variable on.
    assert worker_env("")[BLOCKING_ENV] == "0"
    env = worker_env("1")
    assert env[BLOCKING_ENV] == "1"
    assert env["PYTHONPATH"].split(os.pathsep) == [REPO_ROOT, "/elsewhere"]


def test_a_worker_that_fails_gives_an_error_row_with_its_last_lines():
    # An unknown contender fails at once, before MindSpore is imported.
    result = run_worker(dict(CONFIG, contender="no_such_row"), seconds=0.01, blocks=1)
    assert result["error"].splitlines()[-1] == "KeyError: 'no_such_row'"
    assert result["contender"] == "no_such_row" and "load_before" in result


def test_a_worker_times_its_configuration_and_memory_rows_run_once():
    log = io.StringIO()
    runs = run_configs([CONFIG, dict(CONFIG, kind="memory", contender="no_such_row")], repeats=2,
                       seconds=0.01, blocks=2, log=log)
    assert [(run["kind"], run["repeat"]) for run in runs] == [("speed", 0), ("memory", 0), ("speed", 1)]
    assert len(runs[0]["block_ms"]) == 2 and runs[0]["param_bytes"] > 0 and "error" not in runs[0]
    lines = log.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].endswith(" ms") and "1/2 1/2 mnist graph plain_micro N=2 block=1" in lines[0]
    assert lines[1].endswith("KeyError: 'no_such_row'")


def test_a_worker_past_its_timeout_is_a_failed_row_not_a_crash():
    from benchmarks.runner import run_module
    result = run_module("benchmarks.worker", {"contender": "plain_micro"}, blocking="1", timeout=0.01)
    assert result["error"] == "timed out after 0.01 s (--timeout)"
