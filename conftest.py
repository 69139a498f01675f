"""Doctests run in an empty folder of their own, so their examples can write files by short relative names.

MindSpore writes ``rank_0/om/analyze_fail.ir`` into the working directory when a graph fails to
compile (tests make some fail on purpose); ``MS_OM_PATH`` sends it to pytest's temporary folder.
"""
import os

import pytest
from _pytest.doctest import DoctestItem


@pytest.fixture(autouse=True, scope="session")
def compile_failures_outside_the_checkout(tmp_path_factory):
    # Read when a compile fails, and inherited by the tests' subprocesses.
    os.environ.setdefault("MS_OM_PATH", str(tmp_path_factory.mktemp("mindspore_om")))


@pytest.fixture(autouse=True)
def doctest_folder(request, monkeypatch):
    if isinstance(request.node, DoctestItem):
        monkeypatch.chdir(request.getfixturevalue("tmp_path"))
