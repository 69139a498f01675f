"""Every msrun scenario of the suite, in one launch: each rank runs the scenarios named on its command line in turn.

    msrun_worker.py ROOT MNIST_DIR SCENARIO...

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
import sys
import traceback

import mindspore as ms
from mindspore.communication import get_rank, init

from accumulator._internal.runtime import block_on_cpu

PROBE_FLAGS = ["--epochs", "1", "--lr", "0.05", "--no-shuffle", "--accumulate-step", "auto", "--probe-interval", "32",
               "--scale-rule", "linear", "--batch-size", "4"]
MEMORY_FLAGS = ["--epochs", "1", "--lr", "0.1", "--no-shuffle", "--batch-size", "4", "--micro-batch", "auto"]
# The run's batch of 9 over two ranks: 4 and 5 samples, one micro-batch and two (tests/test_distributed.py).
SHARED_BATCH_FLAGS = ["--epochs", "1", "--lr", "0.1", "--no-shuffle", "--batch-size", "9", "--micro-batch", "4"]


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


def shared_batch(mnist_dir, folder):
    """The run of SHARED_BATCH_FLAGS: epoch 1 on both ranks (``ckpt/``); then one process's epoch 1 on each rank alone
    (``alone_<rank>/``, a single process's checkpoint) resumed by both ranks for epoch 2: 1 -> 2 ranks."""
    from scripts import train_mnist
    train_mnist_ranks(mnist_dir, folder, SHARED_BATCH_FLAGS)
    ms.reset_auto_parallel_context()  # one process's run: no data parallel
    alone = os.path.join(folder, f"alone_{get_rank()}")
    flags = ["--data-dir", mnist_dir, *SHARED_BATCH_FLAGS[2:], "--ckpt-dir", alone]
    train_mnist.main([*flags, "--epochs", "1"])
    train_mnist.main([*flags, "--epochs", "2", "--resume", "--distributed"])


def four_ranks(mnist_dir, folder):
    """On four ranks (tests/test_distributed.py starts two launches of two): epoch 1 of SHARED_BATCH_FLAGS' run
    (``ckpt/``), and epoch 2 of the two ranks' run, copied into ``from_two/``: 2 -> 4 ranks."""
    from scripts import train_mnist
    train_mnist_ranks(mnist_dir, folder, SHARED_BATCH_FLAGS)
    train_mnist.main(["--data-dir", mnist_dir, *SHARED_BATCH_FLAGS[2:], "--epochs", "2", "--resume", "--distributed",
                      "--ckpt-dir", os.path.join(folder, "from_two")])


def scenarios(mnist_dir):
    """Every scenario by name: a function of its folder."""
    import batchnorm_worker
    import distributed_worker
    import ema_worker
    import lm_distributed_worker
    import lm_tool_worker
    import whole_batch_worker
    return {"distributed": in_data_parallel_graph(distributed_worker.main),
            "batchnorm": in_data_parallel_graph(batchnorm_worker.main),
            "whole_batch": whole_batch_worker.main,
            "language_model": in_data_parallel_graph(lm_distributed_worker.main),
            "probe": functools.partial(train_mnist_ranks, mnist_dir, flags=PROBE_FLAGS),
            "memory": functools.partial(train_mnist_ranks, mnist_dir, flags=MEMORY_FLAGS),
            "shared_batch": functools.partial(shared_batch, mnist_dir),
            "four_ranks": functools.partial(four_ranks, mnist_dir),
            "train_lm": lm_tool_worker.main,
            "ema": in_data_parallel_graph(ema_worker.main)}


def prepare(root, names):
    """Writes, before the launch, the inputs of the scenarios ``names`` that need them, each in its folder."""
    import lm_tool_worker
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
