"""Shared fixtures. pytest.ini puts the repository root on sys.path, so tests import its packages."""
import mindspore as ms
import pytest

from data.idx import write_synthetic_mnist

SYNTHETIC_TRAIN = 200
SYNTHETIC_TEST = 100


@pytest.fixture(scope="session")
def synthetic_mnist_dir(tmp_path_factory):
    """A folder with ``train/`` (200 samples) and ``test/`` (100) synthetic MNIST idx files.

    Session-wide and shared: copy it before changing anything in it.
    """
    folder = str(tmp_path_factory.mktemp("synthetic_mnist"))
    write_synthetic_mnist(folder, n_train=SYNTHETIC_TRAIN, n_test=SYNTHETIC_TEST, seed=0)
    return folder


SYNTHETIC_EVEN_TRAIN = 192


@pytest.fixture(scope="session")
def synthetic_mnist_even_dir(tmp_path_factory):
    """Like ``synthetic_mnist_dir`` but with 192 train samples: whole batches of 32, 64 and 96.

    Session-wide and shared: copy it before changing anything in it.
    """
    folder = str(tmp_path_factory.mktemp("synthetic_mnist_even"))
    write_synthetic_mnist(folder, n_train=SYNTHETIC_EVEN_TRAIN, n_test=SYNTHETIC_TEST, seed=0)
    return folder


@pytest.fixture(params=["graph", "pynative"])
def mode(request):
    """Runs the test once in GRAPH_MODE and once in PYNATIVE_MODE, then restores the mode."""
    previous = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE if request.param == "graph" else ms.PYNATIVE_MODE)
    yield request.param
    ms.set_context(mode=previous)
