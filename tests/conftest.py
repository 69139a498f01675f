"""Shared fixtures. pytest.ini puts the repository root on sys.path, so tests import its packages.

The MNIST fixtures import the tools when a test asks for them: the library's
tests, which never do, import no tool.
"""

import mindspore as ms
import pytest

from accumulator._internal.runtime import block_on_cpu
from tests.msrun import msrun_folder, msrun_launch  # noqa: F401 (fixtures)

# The library sets the CPU's blocking launch at its first Accumulator; a test's eager operation before that
# would keep the asynchronous launch for the whole process, so the suite sets it first
# (docs/how-it-works.md#the-cpu-launch-setting).
block_on_cpu()

SYNTHETIC_TRAIN = 200
SYNTHETIC_TEST = 100


def synthetic_folder(tmp_path_factory, name, n_train):
    from data.idx import write_synthetic_mnist
    folder = str(tmp_path_factory.mktemp(name))
    write_synthetic_mnist(folder, n_train=n_train, n_test=SYNTHETIC_TEST, seed=0)
    return folder


@pytest.fixture(scope="session")
def synthetic_mnist_dir(tmp_path_factory):
    """A folder with ``train/`` (200 samples) and ``test/`` (100) synthetic MNIST idx files.

    Session-wide and shared: copy it before changing anything in it.
    """
    return synthetic_folder(tmp_path_factory, "synthetic_mnist", SYNTHETIC_TRAIN)


# The PyNative run compiles the same jitted steps again: the full suite runs it, the fast path (-m "not slow") not.
@pytest.fixture(params=["graph", pytest.param("pynative", marks=pytest.mark.slow)])
def mode(request):
    """Runs the test in GRAPH_MODE and, marked slow, in PYNATIVE_MODE (the root conftest.py restores the mode)."""
    ms.set_context(mode=ms.GRAPH_MODE if request.param == "graph" else ms.PYNATIVE_MODE)
    return request.param


@pytest.fixture
def graph_mode():
    """Runs the test in GRAPH_MODE only: for a test whose PyNative run would repeat another's (a driver's PyNative
    test takes ``mode``). The session's default mode is PyNative; the root conftest.py restores the mode."""
    ms.set_context(mode=ms.GRAPH_MODE)


@pytest.fixture
def train_mnist_run():
    """Trains on MNIST idx files in this process, as the tool does: ``(data_dir, **settings) -> (summary, state)``.

    ``settings`` are ``TrainConfig`` fields; ``state`` holds every parameter
    of network and optimizer as numpy, by name.
    """
    from training.config import TrainConfig
    from training.context import configure_context
    from training.loop import train
    from training.mnist import mnist_task
    from training.outputs import check_outputs

    def run(data_dir, **settings):
        config = configure_context(TrainConfig(**settings))
        check_outputs(config)
        summary, trained = train(config, mnist_task(data_dir), progress=False)
        state = {param.name: param.asnumpy().copy() for param in trained.net.get_parameters()}
        state.update({name: param.asnumpy().copy() for name, param in trained.optimizer.parameters_and_names()})
        return summary, state

    return run


def pytest_collection_modifyitems(items):
    """The tests that read the msrun launch run last, the launch running in the background meanwhile (tests/msrun.py);
    first among them one marked ``first=True``, whose case the launch runs first."""
    def order(item):
        mark = item.get_closest_marker("msrun")
        return mark is not None, not (mark and mark.kwargs.get("first"))
    items.sort(key=order)
