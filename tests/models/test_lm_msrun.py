"""Two msrun ranks (lm_distributed_worker.py) with windows of different token counts update as the large batch.

By hand: each rank holds two micro-batches of four of the sixteen sequences; WindowAllReduce sums both ranks'
gradients and token counts once, so each rank's update divides by all tokens: the large batch's.
"""
import numpy as np
import pytest

from tests.models.lm_helpers import reference, relative_change_error


@pytest.mark.slow
@pytest.mark.msrun("tests.models.lm_distributed_worker:main")
def test_two_ranks_under_msrun_count_every_ranks_tokens(msrun_folder):
    """Each rank's window holds a different number of tokens; the update divides by both ranks' total."""
    start, large = reference("nn.SGD")
    ranks = [np.load(msrun_folder / f"rank_{rank}.npz") for rank in range(2)]
    assert ranks[0]["tokens"] != ranks[1]["tokens"]
    for rank in ranks:
        assert int(rank["update_count"]) == 1
        trained = [rank[f"arr_{i}"] for i in range(len(start))]
        assert relative_change_error(trained, large, start) < 1e-5
