"""MindSpore's global settings for runs and for this suite: what MindSpore writes lands outside the checkout.

By hand: the suite's working directory lies outside the checkout, and a graph that fails to compile writes its
report (rank_0/om/analyze_fail.ir) under MS_OM_PATH, not into the working directory.
"""
import os

import mindspore as ms
import numpy as np
import pytest
from tests import REPO_ROOT



def test_the_suite_runs_outside_the_checkout():
    # conftest.py: MindSpore writes rank_0/ and rewritten_network/ into the working directory.
    assert os.path.commonpath([os.getcwd(), REPO_ROOT]) != REPO_ROOT


def test_a_failed_compile_writes_its_report_outside_the_working_directory(tmp_path, monkeypatch):
    # MindSpore writes rank_0/om/analyze_fail.ir into the working directory; conftest.py sets MS_OM_PATH.
    monkeypatch.chdir(tmp_path)

    @ms.jit
    def fails(x):
        raise ValueError("fails to compile")

    with pytest.raises(ValueError, match="fails to compile"):
        fails(ms.Tensor(np.ones(2, np.float32)))
    assert os.listdir(tmp_path) == []
    assert os.path.isfile(os.path.join(os.environ["MS_OM_PATH"], "rank_0", "om", "analyze_fail.ir"))
