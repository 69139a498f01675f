"""The suite writes nothing into the checkout or wherever pytest was started, and doctests run in empty folders.

MindSpore writes into the working directory: ``rank_0/om/analyze_fail.ir`` when a graph fails to
compile (tests make some fail on purpose; ``MS_OM_PATH`` moves it, for the tests' subprocesses too),
``rewritten_network/`` when ``amp.auto_mixed_precision`` rewrites a network. So the session runs
in a temporary folder, and each doctest in an empty one of its own, where its examples can write
files by short relative names. Every test starts in the execution mode the session started in:
training sets MindSpore's global mode, and a test left in GRAPH_MODE changed what later tests ran.
The doctests that start probe children or run a tool end to end are marked slow: tests/accumulator/memory/test_plan.py's fast test takes that path.
"""
import os

import mindspore as ms
import pytest
from _pytest.doctest import DoctestItem


# Multi-process or end-to-end examples (a probe child each, docs/memory-plan.md#planning-cost; a tool's or a
# benchmark worker's whole run): the full suite runs them.
SLOW_DOCTESTS = {"accumulator.memory.plan.measure_in_child",
                 "accumulator.memory.plan.plan_micro_batch",
                 "train_mnist.main",
                 "benchmarks.runner.run_worker"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Marks ``SLOW_DOCTESTS`` slow before ``-m`` selects (a doctest cannot carry a mark of its own)."""
    for item in items:
        if isinstance(item, DoctestItem) and item.name in SLOW_DOCTESTS:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True, scope="session")
def outside_the_checkout(tmp_path_factory):
    os.environ.setdefault("MS_OM_PATH", str(tmp_path_factory.mktemp("mindspore_om")))
    started_in = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("working_directory"))
    yield
    os.chdir(started_in)


@pytest.fixture(autouse=True)
def doctest_folder(request, monkeypatch):
    if isinstance(request.node, DoctestItem):
        monkeypatch.chdir(request.getfixturevalue("tmp_path"))


@pytest.fixture(autouse=True)
def same_execution_mode():
    mode = ms.get_context("mode")
    yield
    ms.set_context(mode=mode)
