"""The non-finite policies alone: gates, keep and the dropped count from hand-written values."""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor

from accumulator.policies import SkipNonFiniteMicroBatches, SkipNonFiniteWindows


@pytest.mark.parametrize("finite", [True, False])
def test_the_window_gate_is_the_finiteness(finite):
    assert bool(SkipNonFiniteWindows().gate({"finite": Tensor(finite)})) is finite


@pytest.mark.parametrize("value, kept", [(1.0, True), (np.nan, False), (np.inf, False), (-np.inf, False)])
def test_a_micro_batch_is_kept_only_when_every_bucket_is_finite(value, kept):
    flats = (Tensor(np.ones(128, np.float32)), Tensor(np.array([2.0, value], np.float32)))
    assert bool(SkipNonFiniteMicroBatches().keep(flats)) is kept


def test_dropped_counts_the_micro_batches_left_out():
    policy = SkipNonFiniteMicroBatches()
    policy.count(Tensor(4, ms.int32), None, Tensor(3, ms.int32))
    policy.count(Tensor(2, ms.int32), None, Tensor(0, ms.int32))
    assert int(policy.dropped_micro_batches) == 3
    assert [p.name for p in policy.state_parameters()] == ["accumulator.dropped_micro_batches"]


@pytest.mark.parametrize("finite, total, applied", [(True, 3.0, True), (True, 0.0, False), (False, 3.0, False)])
def test_a_window_that_kept_nothing_or_is_not_finite_is_skipped(finite, total, applied):
    window = {"finite": Tensor(finite), "total": Tensor(total)}
    assert bool(SkipNonFiniteMicroBatches().gate(window)) is applied
