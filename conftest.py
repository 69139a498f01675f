"""Doctests run in an empty folder of their own, so their examples can write files by short relative names."""
import pytest
from _pytest.doctest import DoctestItem


@pytest.fixture(autouse=True)
def doctest_folder(request, monkeypatch):
    if isinstance(request.node, DoctestItem):
        monkeypatch.chdir(request.getfixturevalue("tmp_path"))
