"""An equivalence self-check: does one accumulated window equal the large batch?

``check_equivalence`` runs the user's gradient function on each micro-batch
of one window and on the large batch (their concatenation, or the batch
the user builds), and compares the window's gradient, normalised as the
Accumulator would normalise it, with the large batch's. It touches no
weights, optimizer state or accumulator state, and when the two differ it
reports what it measured: a factor between the two gradients, micro-batches
the large batch weighs unevenly (uneven counts), two runs of the same batch
that differ (randomness), and the layers in training mode that explain them
(BatchNorm, dropout with a non-zero rate).
"""
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

from accumulator.core.accumulator import Accumulator
from accumulator.policies.batchnorm import WindowBatchNorm
from accumulator._internal.layers import active_dropouts, batch_statistics_norms

# Relative to each gradient tensor's largest element. The window and the
# large batch add the same per-sample terms in a different order (per
# micro-batch, then across micro-batches); float32 rounds each sum by about
# sqrt(B) * 1.2e-7 of its magnitude and by B * 1.2e-7 at worst, so 1e-4
# (~1000 float32 epsilons) holds for batches of a thousand samples even in
# the worst case, and far below what a non-equivalent net shows
# (docs/equivalence.md#does-accumulation-equal-the-large-batch-on-your-net).
RTOL = 1e-4

# Relative weights this close to the micro-batches' sizes are the sizes.
_SIZE_MATCH = 1e-3


@dataclass(frozen=True)
class EquivalenceReport:
    """What ``check_equivalence`` found; ``str(report)`` is its one-line ``summary()``.

    Attributes:
        max_abs_diff: the largest absolute difference between the window's
            gradient and the large batch's, element by element.
        max_rel_diff: the largest, over gradient tensors, of that tensor's
            largest absolute difference over its largest absolute gradient
            (element-wise ratios explode where a gradient crosses zero).
        state_bytes: bytes of the accumulator's state (buffers and counters).
        param_bytes: bytes of the optimizer's parameters it mirrors.
        equivalent: ``max_rel_diff <= rtol``, and two runs of the large batch
            agree to ``rtol`` (no randomness).
        reasons: the likely reasons it is not equivalent (empty when it is).
        verdict: the finding in plain words.
        rtol: the tolerance ``max_rel_diff`` was held to.

    Example: see ``check_equivalence``.
    """

    max_abs_diff: float
    max_rel_diff: float
    state_bytes: int
    param_bytes: int
    equivalent: bool
    reasons: tuple
    verdict: str
    rtol: float = RTOL

    def summary(self):
        """The verdict, the differences and the memory, on one line."""
        return (f"{self.verdict} (largest difference {self.max_rel_diff:.1e} of the gradient's size, "
                f"{self.max_abs_diff:.1e} absolute, tolerance {self.rtol:.0e}); accumulator state "
                f"{self.state_bytes / self.param_bytes:.2f}x the parameters' bytes "
                f"({self.state_bytes:,} / {self.param_bytes:,})")

    __str__ = summary


def check_equivalence(grad_fn: Callable, micro_batches: Sequence[tuple], accumulator: Accumulator,
                      counts: Optional[Sequence[float]] = None, network: Optional[nn.Cell] = None, rtol: float = RTOL,
                      large_batch: Optional[tuple] = None) -> "EquivalenceReport":
    """Compares one accumulated window's gradient with the large batch's, changing nothing.

    Args:
        grad_fn: the training step's gradient function, ``grad_fn(*inputs)
            -> (loss, grads)``, such as ``ms.value_and_grad(forward, None,
            optimizer.parameters)``.
        micro_batches: one window: a list of input tuples for ``grad_fn``.
            The large batch is their concatenation along axis 0, unless
            ``large_batch`` is given.
        accumulator: the ``Accumulator`` the step feeds. Only its
            ``reduction``, optimizer and state sizes are read.
        counts: each micro-batch's sample (or token) count, as the step passes
            them with a summed loss; ``None`` when it passes none.
        network: the network, to scan for BatchNorm and dropout in training
            mode and to restore its non-trainable state (BatchNorm's running
            statistics move on every forward pass in training mode).
        rtol: the largest difference, relative to each gradient tensor's
            largest element, still called equivalent (see ``RTOL``).
        large_batch: the window's micro-batches as one input tuple for
            ``grad_fn``, for micro-batches that do not concatenate: token
            batches each padded to its own length, say, passed as all their
            sequences padded together. Its count is the sum of ``counts``.

    The window's gradient is what the accumulator would apply: the micro-batch
    gradients summed in buffers of the parameters' dtype, then divided by the
    number of micro-batches (``reduction="mean"``), by the sum of ``counts``,
    or left as the sum (``reduction="sum"``). The large batch's gradient,
    ``grad_fn`` on the concatenation, is normalised the same way: as is for a
    mean loss, divided by the sum of counts for a summed loss, and with
    ``reduction="sum"`` as is (a summed loss) or times N (a loss divided by
    N), whichever fits. A constant factor inside ``grad_fn`` (such as the
    MindSpore tutorial's ``loss / N``) scales both sides alike and is not
    seen. Loss-scale unscaling and clipping act alike on both and are left out.

    Every Parameter of ``network``, of the optimizer and of the accumulator
    is put back bit for bit afterwards. Random number generators are not:
    with dropout, training after the check draws other masks than without it.

    Returns:
        an ``EquivalenceReport``.

    Example:
        >>> from accumulator import Accumulator
        >>> net = nn.Dense(3, 2)
        >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=2)
        >>> def make_grad_fn(net, parameters):
        ...     def forward(x, y):
        ...         return ((net(x) - y) ** 2).mean()
        ...     return ms.value_and_grad(forward, None, parameters)
        >>> grad_fn = make_grad_fn(net, accumulator.optimizer.parameters)
        >>> x, y = np.arange(24, dtype=np.float32).reshape(8, 3) / 24, np.zeros((8, 2), np.float32)
        >>> window = [(Tensor(x[:4]), Tensor(y[:4])), (Tensor(x[4:]), Tensor(y[4:]))]
        >>> report = check_equivalence(grad_fn, window, accumulator, network=net)
        >>> report.equivalent, report.reasons, report.max_rel_diff < 1e-6
        (True, (), True)
        >>> print(report)
        equivalent: the window's gradient is the large batch's, to float32 rounding (largest difference
        ...e... of the gradient's size, ...e... absolute, tolerance 1e-04); accumulator state ...x the
        parameters' bytes (... / 32)

    Uneven micro-batches averaged without counts are a mean of means; the
    check measures how the large batch weighs them:
        >>> uneven = [(Tensor(x[:2]), Tensor(y[:2])), (Tensor(x[2:]), Tensor(y[2:]))]
        >>> check_equivalence(grad_fn, uneven, accumulator).reasons
        ("uneven counts: the large batch weighs the micro-batches 0.50, 1.50 times their mean weight (measured), the window weighs them alike; they hold 2, 6 samples: take the gradient of a loss summed over samples and pass each micro-batch's count",)
    """
    micro_batches = [tuple(batch) for batch in micro_batches]
    if not micro_batches:
        raise ValueError("a window needs at least one micro-batch")
    if counts is not None:
        counts = [float(c) for c in counts]
        if len(counts) != len(micro_batches):
            raise ValueError(f"counts must hold one number per micro-batch ({len(micro_batches)}), got {len(counts)}")
        accumulator.check_counts()
    large_batch = _concatenate(micro_batches) if large_batch is None else tuple(large_batch)
    saved = _snapshot(network, accumulator)
    try:
        window, micro_grads, micro_losses = _window_gradient(grad_fn, micro_batches, accumulator, counts)
        large_loss, first = grad_fn(*large_batch)
        first = _as_float64(first)
        second = _as_float64(grad_fn(*large_batch)[1])
    finally:
        _restore(saved)
    # The same batch twice: any difference is randomness, whatever op draws it.
    # Twice: dropout masks repeat for each new input shape, so once can pass by chance
    # (docs/mindspore-behaviours.md#dropout-masks-repeat-for-each-new-input-shape).
    noise = _differences(second, first)[1]
    reference = _normalise(first, window, accumulator.reduction, counts, len(micro_batches))
    max_abs, max_rel = _differences(window, reference)
    equivalent = max_rel <= rtol and noise <= rtol
    reasons = () if equivalent else tuple(_reasons(window, reference, micro_grads, noise, micro_batches,
                                                   accumulator, counts, network, rtol, (large_loss, micro_losses)))
    if equivalent:
        verdict = "equivalent: the window's gradient is the large batch's, to float32 rounding"
    else:
        verdict = "NOT equivalent: the window's gradient differs from the large batch's; likely " + "; ".join(reasons)
    state_bytes = sum(p.nbytes for p in accumulator.state_parameters())
    param_bytes = sum(p.nbytes for p in accumulator.optimizer.parameters)
    return EquivalenceReport(max_abs, max_rel, state_bytes, param_bytes, equivalent, reasons, verdict, rtol)


def _window_gradient(grad_fn, micro_batches, accumulator, counts):
    """The update the accumulator would apply, in its arithmetic, as float64; each micro-batch's gradient and loss."""
    sums = [np.zeros_like(buffer.asnumpy()) for buffer in accumulator.grad_buffers]
    micro_grads, micro_losses = [], []
    for batch in micro_batches:
        loss, grads = grad_fn(*batch)
        micro_losses.append(loss)
        for total, grad in zip(sums, grads):
            total += grad.asnumpy().astype(total.dtype)
        micro_grads.append(_as_float64(grads))
    if accumulator.reduction == "sum":
        return [total.astype(np.float64) for total in sums], micro_grads, micro_losses
    # The accumulator's float32 weight and its one multiply by 1 / weight.
    weight = np.float32(0)
    for count in counts or [1.0] * len(micro_batches):
        weight += np.float32(count)
    factor = np.float32(1) / weight
    return [(total * factor.astype(total.dtype)).astype(np.float64) for total in sums], micro_grads, micro_losses


def _normalise(reference, window, reduction, counts, micro_steps):
    if counts is not None:
        return [grad / sum(counts) for grad in reference]
    if reduction == "mean":
        return reference
    # reduction="sum" fits a summed loss (the window's sum is the large batch's)
    # and a loss divided by N (the large batch's, through the same division, is N times smaller).
    scale = _scale(window, reference)
    factor = micro_steps if abs(scale - micro_steps) < abs(scale - 1) else 1
    return [grad * factor for grad in reference]


def _reasons(window, reference, micro_grads, noise, micro_batches, accumulator, counts, network, rtol, losses):
    """What was measured to explain the difference, a list a caller may extend."""
    scale = _scale(window, reference)
    if noise <= rtol and _differences(window, [grad * scale for grad in reference])[1] <= rtol:
        return [_scale_reason(scale, accumulator.reduction, counts)]
    if noise <= rtol and counts is None and accumulator.reduction == "mean" and len(micro_batches) > 1:
        weights, left = _micro_batch_weights(micro_grads, reference)
        if left <= rtol:
            return [_uneven_reason(weights, micro_batches)]
    reasons = _training_mode_reasons(network)
    if noise > rtol:
        reasons.append(f"randomness: two runs of the same large batch differ by {noise:.1e} of the gradient's size "
                       "(dropout or another random op in training mode; the window cannot draw the large batch's "
                       "random numbers)")
    if not reasons:
        best = _differences(window, [grad * scale for grad in reference])[1]
        reasons.append(f"no factor maps the window's gradient onto the large batch's (the best, {scale:.3g}x, "
                       f"leaves {best:.1e} of the gradient's size), nor does weighting the micro-batches, and two "
                       "runs agree: the loss or the model couples the samples of a batch (a loss over the whole "
                       "batch, batch statistics), so the mean of micro-batch gradients is not the large batch's"
                       + _whole_batch_hint(*losses, micro_batches, rtol))
    return reasons


def _whole_batch_hint(large_loss, micro_losses, micro_batches, rtol):
    """Points to accumulator.drivers.whole_batch when the large batch's loss is no sum or mean of the micro-batches' losses."""
    values = [_loss_value(loss) for loss in [large_loss] + micro_losses]
    if None in values:
        return ""
    large, losses = values[0], np.array(values[1:])
    sizes = np.array([batch[0].shape[0] for batch in micro_batches], np.float64)
    # A loss summed or averaged over samples is one of these, to float32 rounding.
    for candidate in (losses.sum(), losses.mean(), (losses * sizes).sum() / sizes.sum()):
        if abs(large - candidate) <= rtol * max(abs(large), abs(candidate)):
            return ""
    shown = ", ".join(f"{loss:.4g}" for loss in losses)
    return (f"; and the large batch's loss, {large:.4g}, is neither the sum nor a mean of the micro-batches' "
            f"({shown}): for a loss over the whole batch (contrastive, in-batch negatives), "
            "accumulator.make_whole_batch_step computes it over the whole window exactly (docs/whole-batch.md)")


def _loss_value(loss):
    """``grad_fn``'s loss as a float (the first item of a ``has_aux`` tuple), or None when it is no scalar."""
    if isinstance(loss, (tuple, list)):
        loss = loss[0] if loss else None
    value = np.asarray(_numpy(loss), np.float64) if isinstance(loss, (Tensor, np.ndarray, float, int)) else None
    return value.item() if value is not None and value.size == 1 else None


def _micro_batch_weights(micro_grads, reference):
    """The weights ``w`` that best make ``sum(w_i * micro_grads[i])`` the reference, and the difference left."""
    matrix = np.stack([np.concatenate([grad.ravel() for grad in grads]) for grads in micro_grads], axis=1)
    target = np.concatenate([grad.ravel() for grad in reference])
    weights = np.linalg.lstsq(matrix, target, rcond=None)[0]
    fitted = [sum(w * grads[index] for w, grads in zip(weights, micro_grads)) for index in range(len(reference))]
    return weights, _differences(fitted, reference)[1]


def _uneven_reason(weights, micro_batches):
    relative = weights / weights.mean()
    sizes = np.array([int(batch[0].shape[0]) for batch in micro_batches], np.float64)
    shown = ", ".join(f"{w:.2f}" for w in relative)
    held = (f"they hold {', '.join(str(int(n)) for n in sizes)} samples"
            if np.allclose(relative, sizes / sizes.mean(), rtol=_SIZE_MATCH) else
            "in proportion to what each holds (tokens or samples), not to their sizes")
    return (f"uneven counts: the large batch weighs the micro-batches {shown} times their mean weight (measured), "
            f"the window weighs them alike; {held}: take the gradient of a loss summed over samples and pass "
            "each micro-batch's count")


def _scale_reason(scale, reduction, counts):
    if counts is not None:
        hint = "counts need the gradient of a loss summed over samples, not a mean"
    elif reduction == "mean":
        hint = "a loss summed over samples needs counts (each micro-batch's sample count), or use a mean loss"
    else:
        hint = "reduction='sum' needs a loss summed over samples or a mean divided by N"
    return f"a normalisation mismatch: the window's gradient is {scale:.3g}x the large batch's: {hint}"


def _training_mode_reasons(network):
    if network is None:
        return []
    batch_norms = batch_statistics_norms(network)
    dropouts = [f"{name}, rate {rate:g}" for name, _, rate in active_dropouts(network)]
    plain = [name for name, cell in batch_norms if not isinstance(cell, WindowBatchNorm)]
    converted = [name for name, cell in batch_norms if isinstance(cell, WindowBatchNorm)]
    reasons = []
    gradients = ("each micro-batch is normalised by its own mean and variance, not the large batch's; use "
                 "GroupNorm or LayerNorm, or accept the difference")
    if plain:
        reasons.append(f"BatchNorm in training mode ({', '.join(plain)}): {gradients} (convert_batchnorm makes "
                       "its moving statistics the whole window's, not its gradients)")
    if converted:
        reasons.append(f"BatchNorm in training mode ({', '.join(converted)}), converted by convert_batchnorm: its "
                       f"moving statistics are the whole window's, but {gradients}")
    if dropouts:
        reasons.append(f"dropout in training mode ({', '.join(dropouts)}): every forward pass draws new masks")
    return reasons


def _snapshot(network, accumulator):
    params = list(accumulator.optimizer.get_parameters()) + accumulator.state_parameters()
    if network is not None:
        params += list(network.get_parameters())
    unique = {id(param): param for param in params}
    return [(param, param.asnumpy().copy()) for param in unique.values()]


def _restore(saved):
    for param, value in saved:
        if param.asnumpy().tobytes() != value.tobytes():
            # ops.assign writes into the Parameter's own memory, so graphs
            # compiled before the check keep training the same Parameter.
            ops.assign(param, Tensor(value))


def _concatenate(micro_batches):
    columns = [[_numpy(item) for item in column] for column in zip(*micro_batches)]
    for index, column in enumerate(columns):
        shapes = sorted({array.shape[1:] for array in column})
        if len(shapes) > 1:
            raise ValueError(f"the micro-batches' input {index} has different shapes beyond axis 0 "
                             f"({', '.join(str(list(shape)) for shape in shapes)}), so they do not concatenate: "
                             "pass large_batch=..., the window as one batch (e.g. all its sequences padded together)")
    return tuple(Tensor(np.concatenate(column)) for column in columns)


def _numpy(value):
    return value.asnumpy() if isinstance(value, Tensor) else np.asarray(value)


def _as_float64(grads):
    return [grad.asnumpy().astype(np.float64) for grad in grads]


def _scale(window, reference):
    """The factor that best maps ``reference`` onto ``window`` (least squares)."""
    dot = sum(float((w * r).sum()) for w, r in zip(window, reference))
    norm = sum(float((r * r).sum()) for r in reference)
    return dot / norm if norm else 1.0


def _differences(window, reference):
    max_abs = max_rel = 0.0
    for w, r in zip(window, reference):
        diff = float(np.abs(w - r).max()) if w.size else 0.0
        size = float(np.abs(r).max()) if r.size else 0.0
        max_abs = max(max_abs, diff)
        max_rel = max(max_rel, diff / size if size else (0.0 if diff == 0 else float("inf")))
    return max_abs, max_rel
