"""Shared fixtures; puts the repository root on sys.path so tests import its packages."""
import os
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from data.idx import write_synthetic_mnist  # noqa: E402  (needs the path above)

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
