"""The suite's one msrun launch (starting msrun costs more than any case): two ranks run, in turn, every multi-rank
case the session's tests name. A case is a function of its folder, run in both ranks by tests/msrun_ranks.py after
its module's ``prepare(folder)``, if any, here. To add one: name it in CASES, mark its test
``@pytest.mark.msrun("name")`` and take the fixture ``msrun_folder``.
"""
import contextlib
import importlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

CASES = {"distributed": "tests.accumulator.devices.all_reduce_worker:main",
         "batchnorm": "tests.accumulator.policies.batchnorm_worker:main",
         "whole_batch": "tests.accumulator.drivers.whole_batch_worker:main",
         "language_model": "tests.models.lm_distributed_worker:main", "train_lm": "tests.tools.lm_tool_worker:main",
         "ema": "tests.accumulator.policies.ema_worker:main",
         **{name: f"tests.tools.train_mnist_worker:{name}" for name in ("shared_batch", "probe", "memory")}}
RANKS, TIMEOUT = 2, 900  # seconds for every case together


def start(root, cases, workers=RANKS, node=None, logs="logs"):
    """msrun running ``cases`` (``NAME=MODULE:FUNCTION``) on ``workers`` ranks, its logs in ``root/logs``; ``node``:
    ``(node_rank, local ranks, master port)`` for one of several launches that share them, as hosts do. Its own
    session: ``os.killpg(process.pid, ...)`` ends it and its ranks."""
    node_rank, local, port = node or (0, workers, free_port())
    # msrun starts the `python` on PATH; the ranks import tests.* from the checkout, never from tests/ itself.
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
           "PYTHONSAFEPATH": "1"}
    return subprocess.Popen(["msrun", f"--worker_num={workers}", f"--local_worker_num={local}", "--join=True",
                             "--master_addr=127.0.0.1", f"--master_port={port}", f"--node_rank={node_rank}",
                             f"--log_dir={root / logs}", str(Path(__file__).with_name("msrun_ranks.py")),
                             str(root), *cases], env=env, cwd=root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def free_port():
    with socket.socket() as probe:  # a free port for msrun's scheduler
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(root, names):
    """Prepares and runs the cases ``names`` under msrun; writes its status, or why it has none, to ``root/ended``."""
    try:
        for name in names:
            (root / name).mkdir(parents=True)
            module = importlib.import_module(CASES[name].split(":")[0])
            getattr(module, "prepare", lambda folder: None)(root / name)
        process = start(root, [f"{name}={CASES[name]}" for name in names])
        try:
            status = process.wait(timeout=TIMEOUT)
        finally:
            with contextlib.suppress(ProcessLookupError):  # no rank left behind
                os.killpg(process.pid, signal.SIGKILL)
    except BaseException as error:  # the other processes stop waiting, and say why
        status = repr(error)
    (root / "ended.partial").write_text(str(status))
    os.replace(root / "ended.partial", root / "ended")  # whole or not at all


@pytest.fixture(scope="session", autouse=True)
def msrun_root(request, tmp_path_factory):
    """The launch's folder; the first process to claim it launches the session's cases in the background."""
    names = sorted({mark.args[0] for item in request.session.items for mark in item.iter_markers("msrun")})
    base = tmp_path_factory.getbasetemp()  # under pytest-xdist, each process's: their parent is shared
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "msrun"
    thread = threading.Thread(target=launch, args=(root, names))
    with contextlib.suppress(FileExistsError):
        os.close(os.open(f"{root}.claimed", os.O_CREAT | os.O_EXCL))
        if names:
            thread.start()
    yield root
    if thread.is_alive():
        thread.join()


@pytest.fixture
def msrun_folder(request, msrun_root):
    """This test's case folder once the launch has ended; fails with the case's traceback, or msrun's logs."""
    name, ended = request.node.get_closest_marker("msrun").args[0], msrun_root / "ended"
    deadline = time.monotonic() + TIMEOUT + 60
    while not ended.exists() and time.monotonic() < deadline:
        time.sleep(1)
    folder = msrun_root / name
    errors = "".join(error.read_text() for error in sorted(folder.glob("rank_*.error")))
    if errors or len(list(folder.glob("rank_*.done"))) < RANKS:
        logs = "".join(log.read_text()[-3000:] for log in sorted(msrun_root.glob("logs/*")))
        pytest.fail(errors or f"msrun ended ({ended.exists() and ended.read_text()}) before {name!r} did:\n{logs}",
                    pytrace=False)
    return folder
