"""Every msrun scenario of the suite, in one launch: each rank runs the scenarios named on its command line in turn.

    msrun.py ROOT MNIST_DIR SCENARIO...

tests/conftest.py's ``msrun_launch`` starts it once per test session: starting msrun and its ranks costs more than
any scenario, so two ranks run them all, one after the other, each in one process. ``MNIST_DIR`` holds the synthetic
MNIST of conftest's ``synthetic_mnist_dir``. Scenario ``name`` writes its files under ``ROOT/name/``, each rank's
printed lines to ``rank_<r>.log`` and, when it returns, ``rank_<r>.done``; one that raises leaves its traceback in
``rank_<r>.error`` instead and the next scenario runs (a rank that fails alone may leave the other waiting in a
collective: the launch's timeout ends it). Each scenario starts in the mode a new process has, with no parallel
context; communication is initialised once, first.

To add a scenario: a function ``(folder)`` in ``scenarios``, its inputs written before the launch by ``prepare`` if
the ranks must not write them, and on its test ``@pytest.mark.msrun("name")`` and the ``msrun_folder``
fixture (the scenario's folder).
"""
import contextlib
import functools
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
import traceback

import mindspore as ms
import pytest
from mindspore.communication import get_rank, init

from accumulator._internal.runtime import block_on_cpu

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TRAIN_MNIST_FLAGS = ["--epochs", "1", "--lr", "0.1", "--no-shuffle", "--batch-size", "16", "--accumulate-step", "2"]
PROBE_FLAGS = ["--epochs", "1", "--lr", "0.05", "--no-shuffle", "--accumulate-step", "auto", "--probe-interval", "32",
               "--scale-rule", "linear", "--batch-size", "4"]
MEMORY_FLAGS = ["--epochs", "1", "--lr", "0.1", "--no-shuffle", "--batch-size", "4", "--micro-batch", "auto"]


def start_msrun(script_and_args, log_dir, cwd, workers=2):
    """Starts ``script_and_args`` on ``workers`` local CPU ranks under msrun, each rank's log in ``log_dir``."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ)
    # msrun starts the `python` found on PATH: make it this interpreter. The ranks import tests.* from the repository
    # root, never from the script's folder, whose tests/accumulator would hide the package (PYTHONSAFEPATH).
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join([REPO_ROOT, env.get("PYTHONPATH", "")])
    env["PYTHONSAFEPATH"] = "1"
    command = ["msrun", f"--worker_num={workers}", f"--local_worker_num={workers}", "--master_addr=127.0.0.1",
               f"--master_port={port}", "--join=True", f"--log_dir={log_dir}", *script_and_args]
    return subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def msrun_logs(log_dir):
    """Every log file msrun wrote in ``log_dir``, by name."""
    return {name: open(os.path.join(log_dir, name)).read() for name in sorted(os.listdir(log_dir))}


class MsrunLaunch:
    """The test session's one msrun launch of tests/msrun.py, shared by pytest-xdist's workers.

    Its files live in ``root``: the first process to ``claim`` it ``start``s
    it in the background; ``folder(name)`` waits until the launch has ended
    and returns scenario ``name``'s folder, or fails the test with that
    scenario's traceback (or msrun's logs if the scenario never ended).
    """
    WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "msrun.py")
    RANKS = 2
    TIMEOUT = 900  # seconds for every scenario together

    def __init__(self, root):
        self.root = pathlib.Path(root)
        self.ended = self.root / "returncode"
        self.waiter = None

    def claim(self):
        """True for the first process of the session to call it, which then starts the launch."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(self.root / "claimed", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return False
        return True

    def start(self, args):
        """Starts msrun.py ROOT ``args`` on two ranks; a thread records msrun's exit status when it ends."""
        process = start_msrun([self.WORKER, str(self.root), *args], self.root / "logs", self.root, self.RANKS)
        self.waiter = threading.Thread(target=lambda: self.end(self.wait(process)), daemon=True)
        self.waiter.start()

    def wait(self, process):
        """msrun's exit status, or why it has none."""
        try:
            return process.wait(timeout=self.TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            return f"killed after {self.TIMEOUT} s"

    def end(self, status):
        """Records that the launch has ended, with ``status``, for every process waiting in ``folder``."""
        unfinished = self.ended.with_suffix(".partial")
        unfinished.write_text(str(status))
        os.replace(unfinished, self.ended)  # whole or not at all

    def join(self):
        """Waits for the launch this process started, if any."""
        if self.waiter is not None:
            self.waiter.join()

    def folder(self, name):
        """Scenario ``name``'s folder once the launch has ended; fails the test if the scenario did not end well."""
        waited = 0
        while not self.ended.exists():
            if waited > self.TIMEOUT + 60:
                pytest.fail(f"the msrun launch in {self.root} did not end")
            time.sleep(1)
            waited += 1
        folder = self.root / name
        errors = sorted(folder.glob("rank_*.error"))
        if errors:
            pytest.fail("".join(error.read_text() for error in errors), pytrace=False)
        if len(list(folder.glob("rank_*.done"))) < self.RANKS:
            logs = msrun_logs(self.root / "logs") if (self.root / "logs").exists() else {}  # none if not started
            pytest.fail(f"msrun ended ({self.ended.read_text()}) before scenario {name!r} did:\n"
                        + "".join(log[-3000:] for log in logs.values()), pytrace=False)
        return folder


def in_data_parallel_graph(scenario):
    """``scenario`` in GRAPH_MODE with data parallel's gradient mean, as the library's msrun scripts set them."""
    @functools.wraps(scenario)
    def run(folder):
        ms.set_context(mode=ms.GRAPH_MODE)
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
        return scenario(folder)
    return run


def train_mnist_ranks(mnist_dir, folder, flags):
    """scripts/train_mnist.py with ``flags`` on ``mnist_dir``, --distributed, its checkpoints in ``folder/ckpt``."""
    from scripts import train_mnist
    train_mnist.main(["--data-dir", mnist_dir, *flags, "--distributed", "--ckpt-dir", os.path.join(folder, "ckpt")])


def scenarios(mnist_dir):
    """Every scenario by name: a function of its folder."""
    from tests.accumulator.devices import all_reduce_worker
    from tests.accumulator.drivers import whole_batch_worker
    from tests.accumulator.policies import batchnorm_worker
    from tests.models import lm_distributed_worker
    from tests.tools import lm_tool_worker
    return {"distributed": in_data_parallel_graph(all_reduce_worker.main),
            "batchnorm": in_data_parallel_graph(batchnorm_worker.main),
            "whole_batch": whole_batch_worker.main,
            "language_model": in_data_parallel_graph(lm_distributed_worker.main),
            "train_mnist": functools.partial(train_mnist_ranks, mnist_dir, flags=TRAIN_MNIST_FLAGS),
            "probe": functools.partial(train_mnist_ranks, mnist_dir, flags=PROBE_FLAGS),
            "memory": functools.partial(train_mnist_ranks, mnist_dir, flags=MEMORY_FLAGS),
            "train_lm": lm_tool_worker.main}


def prepare(root, names):
    """Writes, before the launch, the inputs of the scenarios ``names`` that need them, each in its folder."""
    from tests.tools import lm_tool_worker
    for name, write in {"train_lm": lm_tool_worker.prepare}.items():
        if name in names:
            write(os.path.join(root, name))


def run_scenario(name, scenario, folder, start_mode):
    """Runs ``scenario`` in ``folder``: its printed lines to this rank's log, its traceback, if any, to a file."""
    os.makedirs(folder, exist_ok=True)
    rank_file = os.path.join(folder, f"rank_{get_rank()}")
    ms.set_context(mode=start_mode)
    ms.reset_auto_parallel_context()
    with open(rank_file + ".log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            scenario(folder)
        except (Exception, SystemExit):  # the tools exit with a status on errors
            with open(rank_file + ".error", "w") as error:
                error.write(f"msrun scenario {name!r} on rank {get_rank()} failed:\n{traceback.format_exc()}")
            return
    open(rank_file + ".done", "w").close()


def main(root, mnist_dir, names):
    start_mode = ms.get_context("mode")
    block_on_cpu()  # before any kernel runs, as tests/conftest.py does
    init()
    every = scenarios(mnist_dir)
    for name in names:
        run_scenario(name, every[name], os.path.join(root, name), start_mode)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
