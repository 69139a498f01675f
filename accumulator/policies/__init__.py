"""Policies: each one optional behaviour of the window, as one small object (docs/policies.md).

``Policy`` is the protocol; the Accumulator's keywords make the common ones (``clip_norm=`` makes a
``ClipNorm``), and ``policies=`` attaches any other.
"""
from accumulator.policies.base import Policy
from accumulator.policies.batchnorm import WindowBatchNorm, convert_batchnorm
from accumulator.policies.clipping import ClipNorm
from accumulator.policies.ema import EMA
from accumulator.policies.loss_scale import LossScaling
from accumulator.policies.noise import NoiseFromEveryMicroBatch, NoiseFromLastMicroBatch
from accumulator.policies.nonfinite import SkipNonFiniteMicroBatches, SkipNonFiniteWindows
from accumulator.policies.spikes import SkipSpikes

__all__ = ["ClipNorm", "EMA", "LossScaling", "NoiseFromEveryMicroBatch", "NoiseFromLastMicroBatch", "Policy",
           "SkipNonFiniteMicroBatches", "SkipNonFiniteWindows", "SkipSpikes", "WindowBatchNorm", "convert_batchnorm"]
