"""Two CPU workers under msrun equal one process training on their union.

By hand: 3 windows of 2 micro-batches on each of 2 ranks (of 4 and 4 samples, or counted 5 and 3): one AllReduce
per window (3 in all), both ranks' states identical and equal to one process stepping on the 16 samples of a window.
"""
import numpy as np
import pytest

from tests.accumulator.devices.all_reduce_worker import ACCUMULATE_STEP, WINDOWS
from tests.accumulator.helpers import assert_states_close, make_data, reference_state


@pytest.fixture
def rank_results(msrun_folder):
    """Each weighting's final state on rank 0 and rank 1, from the session's msrun launch (distributed_worker.py)."""
    return {weighting: [dict(np.load(msrun_folder / f"{weighting}_{rank}.npz")) for rank in (0, 1)]
            for weighting in ("mean", "count")}


def single_process_reference(samples_per_window):
    x, y = make_data(samples_per_window * WINDOWS)
    bounds = range(0, samples_per_window * (WINDOWS + 1), samples_per_window)
    return reference_state("adam", [(x[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])


@pytest.mark.slow
@pytest.mark.msrun("tests.accumulator.devices.all_reduce_worker:main")
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
