"""The Accumulator's keywords mapped to policies, in one place and in a fixed order."""
from accumulator._internal.checks import positive_int
from accumulator.policies.clipping import ClipNorm
from accumulator.policies.loss_scale import LossScaling
from accumulator.policies.noise import NoiseFromEveryMicroBatch, NoiseFromLastMicroBatch
from accumulator.policies.nonfinite import SkipNonFiniteMicroBatches, SkipNonFiniteWindows
from accumulator.policies.spikes import SkipSpikes


def keyword_policies(reduction="mean", clip_norm=None, skip_nonfinite=True, loss_scaler=None, spike_factor=None,
                     spike_warmup=10, track_noise=False, micro_batch_size=None):
    """The policies ``Accumulator(...)``'s keywords ask for: skipping, loss scaling, noise, spikes, clipping.

    Example:
        >>> [type(p).__name__ for p in keyword_policies(clip_norm=1.0, track_noise=True, micro_batch_size=8)]
        ['SkipNonFiniteWindows', 'NoiseFromLastMicroBatch', 'ClipNorm']
        >>> keyword_policies(skip_nonfinite="yes")
        Traceback (most recent call last):
        ...
        TypeError: skip_nonfinite must be True, False or 'micro_batch', got 'yes'
    """
    if not (isinstance(skip_nonfinite, bool) or skip_nonfinite == "micro_batch"):
        raise TypeError(f"skip_nonfinite must be True, False or 'micro_batch', got {skip_nonfinite!r}")
    if not (isinstance(track_noise, bool) or track_noise == "micro_batch"):
        raise TypeError(f"track_noise must be True, False or 'micro_batch', got {track_noise!r}")
    if track_noise and reduction != "mean":
        raise ValueError(f"track_noise needs reduction='mean' (micro-batch mean gradients), got {reduction!r}")
    if micro_batch_size is not None:
        positive_int(micro_batch_size, "micro_batch_size")
    policies = []
    if skip_nonfinite == "micro_batch":
        policies.append(SkipNonFiniteMicroBatches())
    elif skip_nonfinite:
        policies.append(SkipNonFiniteWindows())
    if loss_scaler is not None:
        policies.append(LossScaling(loss_scaler))
    if track_noise:
        noise = NoiseFromLastMicroBatch if track_noise is True else NoiseFromEveryMicroBatch
        policies.append(noise(micro_batch_size))
    if spike_factor is not None:
        policies.append(SkipSpikes(spike_factor, spike_warmup))
    if clip_norm is not None:
        policies.append(ClipNorm(clip_norm))
    return policies
