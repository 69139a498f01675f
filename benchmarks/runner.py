"""Runs the configurations, each in a fresh ``python -m benchmarks.worker``.

A fresh interpreter per configuration keeps compile caches, memory pools and
peak RSS from leaking between contenders. Configurations alternate A B C A B C
over the repeats, so slow drift of the machine hits every contender alike.
Workers start with the repository root on ``PYTHONPATH`` and a scratch
folder as their working directory (MindSpore writes ``rank_0/`` and
``*.ir`` files into it).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.configs import BLOCKING_ENV
from benchmarks.worker import RESULT_PREFIX

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker_env(blocking):
    """The worker's environment: this one, with ``MS_DEV_HOST_BLOCKING_RUN`` as ``blocking`` says.

    ``"1"`` sets the variable; anything else sets it to ``0``, so that
    importing ``accumulator`` (which sets it on CPU when unset) keeps the
    asynchronous launch.

    Example:
        >>> env = worker_env("")
        >>> env[BLOCKING_ENV], env["PYTHONPATH"].split(os.pathsep)[0] == REPO_ROOT
        ('0', True)
    """
    env = dict(os.environ)
    env[BLOCKING_ENV] = "1" if blocking == "1" else "0"
    env.setdefault("GLOG_v", "3")  # MindSpore's C++ warnings would drown the table
    env["PYTHONPATH"] = os.pathsep.join([REPO_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def run_worker(config, seconds, blocks, device_target="CPU", timeout=300):
    """Runs one configuration in a fresh interpreter and returns it with its results.

    Speed rows time ``blocks`` blocks over about ``seconds``; memory rows
    time one block of one window (the peak comes in the first). The 1-minute
    load before the start goes in ``load_before``; a failed worker gives
    ``error``, the tail of its output.

    Example:
        >>> config = dict(kind="speed", net="mnist", hidden=8, contender="plain_micro", mode="graph",
        ...               blocking="1", batch=4, accumulate=2)
        >>> result = run_worker(config, seconds=0.01, blocks=1)
        >>> "error" in result, len(result["block_ms"]), result["contender"]
        (False, 1, 'plain_micro')
    """
    timing = dict(seconds=seconds, blocks=blocks) if config["kind"] == "speed" else dict(seconds=0, blocks=1)
    spec = dict(config, device_target=device_target, **timing)
    return dict(config, **run_module("benchmarks.worker", spec, config["blocking"], timeout))


def run_module(module, spec, blocking, timeout=300):
    """Runs ``python -m module SPEC`` in a fresh interpreter and a scratch folder; returns what it measured.

    ``spec`` goes to the module as JSON; its last ``RESULT`` line comes
    back as a dict, with ``load_before``, the 1-minute load before the
    start. A failure gives ``error``, the tail of its output, instead.

    Example:
        >>> result = run_module("benchmarks.worker", {"contender": "nope"}, blocking="1")
        >>> result["error"].splitlines()[-1], "load_before" in result
        ("KeyError: 'nope'", True)
    """
    command = [sys.executable, "-m", module, json.dumps(spec)]
    # Other processes on the machine skew timings: record the load to judge them by.
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as scratch:
        try:
            done = subprocess.run(command, env=worker_env(blocking), capture_output=True, text=True,
                                  timeout=timeout, cwd=scratch)
        except subprocess.TimeoutExpired:
            # One slow worker is a failed row, not the end of the whole run.
            return dict(load_before=load, error=f"timed out after {timeout} s (--timeout)")
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        return dict(load_before=load, error="\n".join(tail) or f"exit code {done.returncode}")
    return dict(json.loads(lines[-1][len(RESULT_PREFIX):]), load_before=load)


def run_configs(configs, repeats, seconds, blocks, device_target="CPU", timeout=300, log=None):
    """Runs every configuration ``repeats`` times, alternating; memory rows run once.

    Writes one progress line per worker to ``log`` (default stderr) and
    returns every run, each with its ``repeat``.

    Example: a speed row and a memory row over two repeats; an unknown contender fails at once (before
    MindSpore is imported), and each of its runs is a row with the error, logged:
        >>> import io
        >>> config = dict(kind="speed", net="mnist", hidden=8, contender="nope", mode="graph",
        ...               blocking="1", batch=4, accumulate=2)
        >>> log = io.StringIO()
        >>> runs = run_configs([config, dict(config, kind="memory")], repeats=2, seconds=0.01, blocks=1, log=log)
        >>> [(run["kind"], run["repeat"], run["error"].splitlines()[-1]) for run in runs]
        [('speed', 0, "KeyError: 'nope'"), ('memory', 0, "KeyError: 'nope'"), ('speed', 1, "KeyError: 'nope'")]
        >>> print(log.getvalue().splitlines()[0])
        [...] 1/2 1/2 mnist graph nope N=2 block=1: KeyError: 'nope'
    """
    log = log or sys.stderr
    runs = []
    started = time.time()
    for repeat in range(repeats):
        for index, config in enumerate(configs):
            if config["kind"] == "memory" and repeat:
                continue  # peak memory does not drift with load: one round is enough
            result = run_worker(config, seconds, blocks, device_target, timeout)
            runs.append(dict(result, repeat=repeat))
            status = result.get("error", "").splitlines()[-1:] or [f"{statistics.median(result['block_ms']):.3f} ms"]
            print(f"[{time.time() - started:6.0f}s] {repeat + 1}/{repeats} {index + 1}/{len(configs)} "
                  f"{config['net']} {config['mode']} {config['contender']} N={config['accumulate']} "
                  f"block={config['blocking'] or 'off'}: {status[0]}", file=log, flush=True)
    return runs
