"""SkipSpikes alone: its gate against a running mean set by hand, and the mean it keeps.

By hand: SkipSpikes(2.0) with a running mean norm of 1: a window of norm 1.9 applies, one of 2.1 is skipped, and a
NaN norm is left to the finiteness check; skipped windows stay out of the mean.
"""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, ops

from accumulator.policies import SkipSpikes
from accumulator.policies.spikes import NORM_DECAY
from tests.accumulator.helpers import per_micro_step, scale_setup


def with_mean(mean, windows, factor=2.0, warmup=1):
    policy = SkipSpikes(factor, warmup)
    # The stored average is bias-corrected by 1 - decay^windows when read.
    ops.assign(policy.norm_average, Tensor(mean * (1 - NORM_DECAY ** windows), ms.float32))
    ops.assign(policy.norm_windows, Tensor(windows, ms.int32))
    return policy


@pytest.mark.parametrize("norm, passes", [(1.9, True), (2.1, False), (float("nan"), True)])
def test_the_gate_closes_above_factor_times_the_mean_and_leaves_nan_to_the_finiteness_check(norm, passes):
    assert bool(with_mean(1.0, 5).gate({"norm": Tensor(norm)})) is passes


def test_during_warmup_nothing_is_a_spike():
    assert bool(with_mean(1.0, 2, warmup=3).gate({"norm": Tensor(100.0)}))


def test_only_applied_windows_enter_the_mean():
    policy = SkipSpikes(2.0, 0)
    policy.close_window((), {"norm": Tensor(4.0), "applied": Tensor(True)})
    policy.close_window((), {"norm": Tensor(1000.0), "applied": Tensor(False)})
    assert int(policy.norm_windows) == 1
    assert float(policy.norm_average) / (1 - NORM_DECAY) == pytest.approx(4.0)


@pytest.mark.parametrize("bad", [1, 1.0, float("inf"), True, "2"])
def test_a_factor_not_above_one_is_refused_with_its_value(bad):
    with pytest.raises(ValueError, match="spike_factor must be a number above 1 or None"):
        SkipSpikes(bad)


def test_a_spike_window_is_skipped_and_kept_out_of_the_running_mean(graph_mode):
    net, accumulator, grad_fn = scale_setup(1, spike_factor=10)
    step = per_micro_step(accumulator, grad_fn)
    # Window norms 1 (twelve times), 100, then 1: a gradient of g/sqrt(2) per entry has norm g.
    norms = [1.0] * 12 + [100.0, 1.0]
    updated = [bool(step(ms.Tensor(np.full(2, g / np.sqrt(2), np.float32)))) for g in norms]
    assert updated == [True] * 12 + [False, True]
    assert (int(accumulator.update_count), int(accumulator.skipped_windows)) == (13, 1)
    np.testing.assert_allclose(float(accumulator.find(SkipSpikes).norm_average) / (1 - 0.9 ** 13), 1.0, rtol=1e-5)
    np.testing.assert_allclose(net.w.asnumpy(), [-13 / np.sqrt(2)] * 2, rtol=1e-5)


def test_spikes_wait_for_the_warmup():
    net, accumulator, grad_fn = scale_setup(1, spike_factor=10, spike_warmup=3)
    step = per_micro_step(accumulator, grad_fn)
    updated = [bool(step(ms.Tensor(np.full(2, g, np.float32)))) for g in (1.0, 100.0, 1.0, 1.0, 1000.0)]
    assert updated == [True, True, True, True, False]
