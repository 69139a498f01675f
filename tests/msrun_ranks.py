"""What each msrun rank runs (tests/msrun.py launches it): ``msrun_ranks.py ROOT NAME=MODULE:FUNCTION...``.

Each case runs in turn in the mode a new process has, with no parallel context, its printed lines in
``ROOT/NAME/rank_<r>.log``; ``rank_<r>.done`` when it returned, else its traceback in ``rank_<r>.error`` and the
next case runs (a rank failing alone may leave the other waiting in a collective: the launch's timeout ends it).
"""
import contextlib
import importlib
import sys
import traceback
from pathlib import Path

import mindspore as ms
from mindspore.communication import get_rank, init

from accumulator._internal.runtime import block_on_cpu


def run(root, cases):
    mode = ms.get_context("mode")
    block_on_cpu()  # before any kernel runs, as tests/conftest.py does
    init()
    for name, target in (case.split("=") for case in cases):
        ms.set_context(mode=mode)
        ms.reset_auto_parallel_context()
        rank = Path(root, name, f"rank_{get_rank()}")
        with open(f"{rank}.log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                module, function = target.split(":")
                getattr(importlib.import_module(module), function)(rank.parent)
            except (Exception, SystemExit):  # the tools exit with a status on errors
                Path(f"{rank}.error").write_text(f"msrun case {name!r} on rank {get_rank()}:\n{traceback.format_exc()}")
                continue
        Path(f"{rank}.done").touch()


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2:])
