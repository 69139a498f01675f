"""Two CPU workers under msrun equal one process training on their union."""
import os

import numpy as np
import pytest

from distributed_worker import ACCUMULATE_STEP, WINDOWS
from helpers import assert_states_close, make_data, reference_state, run_msrun

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def rank_results(tmp_path_factory):
    """Each weighting's final state on rank 0 and rank 1, from one msrun launch."""
    tmp_path = tmp_path_factory.mktemp("msrun")
    returncode, logs = run_msrun([os.path.join(TESTS_DIR, "distributed_worker.py"), str(tmp_path / "rank_")],
                                 tmp_path / "logs", tmp_path)
    assert returncode == 0, "".join(log[-2000:] for log in logs.values())
    return {weighting: [dict(np.load(tmp_path / f"rank_{weighting}{rank}.npz")) for rank in (0, 1)]
            for weighting in ("mean", "count")}


def single_process_reference(samples_per_window):
    x, y = make_data(samples_per_window * WINDOWS)
    bounds = range(0, samples_per_window * (WINDOWS + 1), samples_per_window)
    return reference_state("adam", [(x[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])


@pytest.mark.slow
@pytest.mark.parametrize("weighting, sizes", [("mean", (4, 4)), ("count", (5, 3))])
def test_two_workers_equal_one_process_on_their_union(rank_results, weighting, sizes):
    ranks = rank_results[weighting]
    for rank in ranks:
        # One AllReduce per window, not one per micro-step.
        assert int(rank.pop("allreduce_calls")) == WINDOWS
    for name in ranks[0]:
        np.testing.assert_array_equal(ranks[0][name], ranks[1][name], err_msg=name)
    expected = single_process_reference(sum(sizes) * ACCUMULATE_STEP)
    assert_states_close(ranks[0], expected)
