"""The suite's one msrun launch (msrun's start costs more than any case): the session's first process starts every
case its tests name, ``@pytest.mark.msrun("MODULE:FUNCTION")`` (a function of its folder, after the module's
``prepare(folder)`` if any), on two ranks in turn, in the background; those tests run last and wait for it. As a
script: what each rank runs."""
import contextlib
import importlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import pytest

RANKS, TIMEOUT = 2, 900  # seconds for every case together


def start(root, cases, workers=RANKS, node=None, logs="logs"):
    """msrun running ``cases`` on ``workers`` ranks, in a session; ``node``: ``(node_rank, local ranks, port)`` as hosts."""
    node_rank, local, port = node or (0, workers, free_port())
    # msrun starts the `python` on PATH; the ranks import tests.* from the checkout, never from tests/ itself.
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
           "PYTHONSAFEPATH": "1"}
    return subprocess.Popen(["msrun", f"--worker_num={workers}", f"--local_worker_num={local}", "--join=True",
                             "--master_addr=127.0.0.1", f"--master_port={port}", f"--node_rank={node_rank}",
                             f"--log_dir={root / logs}", __file__, str(root), *cases], env=env, cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def free_port():
    with socket.socket() as probe:  # a free port for msrun's scheduler
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session", autouse=True)
def msrun_launch(request, tmp_path_factory):
    """The launch's folder, shared by the session's processes (their base folders' parent, under pytest-xdist); the
    one that starts the launch waits for it before it ends, and writes ``ended`` when msrun has."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "msrun"
    # in the order of their tests (tests/conftest.py: one marked ``first=True`` first)
    cases = list(dict.fromkeys(mark.args[0] for item in request.session.items for mark in item.iter_markers("msrun")))
    try:
        root.mkdir()  # atomic: the first process here starts the launch, the others go on
    except FileExistsError:
        cases = []
    waiting = threading.Thread(target=wait_then_end, args=(root, cases)) if cases else None
    if waiting:
        for case in cases:
            (root / case).mkdir()
            getattr(importlib.import_module(case.split(":")[0]), "prepare", lambda folder: None)(root / case)
        waiting.start()
    yield root
    if waiting:
        waiting.join()


def wait_then_end(root, cases):
    process = start(root, cases)
    with contextlib.suppress(subprocess.TimeoutExpired):  # the cases without a .done file fail
        process.wait(timeout=TIMEOUT)
    with contextlib.suppress(ProcessLookupError):  # no rank left behind
        os.killpg(process.pid, signal.SIGKILL)
    (root / "ended").touch()


@pytest.fixture
def msrun_folder(request, msrun_launch):
    """This test's case folder once every rank has ended it (or the launch has); fails with the case's tracebacks, or
    msrun's logs."""
    folder = msrun_launch / request.node.get_closest_marker("msrun").args[0]
    give_up = time.monotonic() + TIMEOUT + 60  # the launching process may die before it writes ``ended``
    while (len(list(folder.glob("rank_*.done"))) < RANKS and not list(folder.glob("rank_*.error"))
           and not (msrun_launch / "ended").exists() and time.monotonic() < give_up):
        time.sleep(0.5)
    errors = "".join(error.read_text() for error in sorted(folder.glob("rank_*.error")))
    if errors or len(list(folder.glob("rank_*.done"))) < RANKS:
        pytest.fail(errors or "".join(log.read_text()[-3000:] for log in sorted(msrun_launch.glob("logs/*"))),
                    pytrace=False)
    return folder


if __name__ == "__main__":  # each rank: each case in turn in a new process's mode, its output, .done or .error
    import mindspore as ms
    from mindspore.communication import get_rank, init
    from accumulator._internal.runtime import block_on_cpu
    mode = ms.get_context("mode")
    block_on_cpu()  # before any kernel runs, as tests/conftest.py does
    init()
    for case in sys.argv[2:]:
        ms.set_context(mode=mode)
        ms.reset_auto_parallel_context()
        rank = Path(sys.argv[1], case, f"rank_{get_rank()}")
        with open(f"{rank}.log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                getattr(importlib.import_module(case.split(":")[0]), case.split(":")[1])(rank.parent)
                Path(f"{rank}.done").touch()
            except (Exception, SystemExit):  # the tools exit with a status on errors
                Path(f"{rank}.error").write_text(f"msrun case {case} on rank {get_rank()}:\n{traceback.format_exc()}")
