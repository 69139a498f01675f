"""The keywords mapped to policies: which, in what order, and the refusals.

By hand: no keyword gives ``[SkipNonFiniteWindows]``; ``clip_norm=0`` is refused with ``clip_norm must be a
positive number or None, got 0``.
"""
import re

import pytest
from mindspore import amp

from accumulator.core._options import keyword_policies


def names(**keywords):
    return [type(policy).__name__ for policy in keyword_policies(**keywords)]


def test_the_default_is_the_window_finiteness_check_alone():
    assert names() == ["SkipNonFiniteWindows"]


def test_every_keyword_in_the_fixed_order():
    assert names(clip_norm=1.0, skip_nonfinite="micro_batch", loss_scaler=amp.StaticLossScaler(4.0),
                 spike_factor=3.0, track_noise="micro_batch", micro_batch_size=8) == [
        "SkipNonFiniteMicroBatches", "LossScaling", "NoiseFromEveryMicroBatch", "SkipSpikes", "ClipNorm"]


def test_no_checks_at_all():
    assert names(skip_nonfinite=False) == []


# The Accumulator's keywords reach the policies through keyword_policies: each refusal, as the user typed it.
@pytest.mark.parametrize("keywords, error, message", [
    *[({"clip_norm": bad}, ValueError, f"clip_norm must be a positive number or None, got {bad!r}")
      for bad in (0, -1.0, True, "1")],
    ({"loss_scaler": 1024.0}, TypeError, "loss_scaler must be a mindspore.amp.LossScaler, got float"),
    ({"spike_factor": 1.0}, ValueError, "spike_factor must be a number above 1 or None, got 1.0"),
    ({"spike_factor": float("inf")}, ValueError, "spike_factor must be a number above 1 or None, got inf"),
    ({"spike_factor": 10, "spike_warmup": -1}, ValueError, "spike_warmup must be a non-negative int, got -1"),
    ({"skip_nonfinite": "window"}, TypeError, "skip_nonfinite must be True, False or 'micro_batch', got 'window'"),
    ({"track_noise": 1}, TypeError, "track_noise must be True, False or 'micro_batch', got 1"),
    ({"track_noise": True, "reduction": "sum"}, ValueError, "track_noise needs reduction='mean'"),
    ({"micro_batch_size": 0}, ValueError, "micro_batch_size must be a positive int, got 0"),
])
def test_a_bad_keyword_is_one_line_with_its_value(keywords, error, message):
    with pytest.raises(error, match=re.escape(message)):
        keyword_policies(**keywords)
