"""Losses over the whole window (contrastive, in-batch negatives), exact under accumulation.

Accumulation equals the large batch only for a loss that is a sum of
per-sample terms. InfoNCE, CLIP's symmetric loss and every in-batch-negatives
objective compare each sample with every other one in the batch: summing
micro-batch losses trains against a micro-batch's negatives, a different
objective. ``make_whole_batch_step`` runs a window as GradCache does, with the
memory of one micro-batch plus the representations:

1. every micro-batch forward without gradients, keeping only its representations;
2. the whole-window loss on their concatenation, and its gradient with respect
   to each representation (under data parallel, every rank's representations
   take part: ``AllGatherRepresentations``);
3. every micro-batch forward again with gradients, its slice of that gradient
   back-propagated into the parameters and added to the Accumulator;
4. the window applied by the Accumulator, with all its options.

The applied gradient is the whole-window loss's, whatever the accumulator's
``reduction``: with ``"sum"`` the pieces add up to it, with ``"mean"`` each
micro-batch is weighed by its sample count and its piece scaled by the window's
sample count, which the accumulator's division cancels.
"""
from typing import Callable, Optional, Sequence, Tuple

import mindspore as ms
from mindspore import Tensor, nn, ops
from mindspore.communication import GlobalComm, get_rank

from accumulator.core.accumulator import Accumulator
from accumulator._internal.layers import active_dropouts, batch_statistics_norms


class AllGatherRepresentations:
    """Data parallel: every rank's representations take part in the loss, as CLIP's all-gather.

    Pass it as ``make_whole_batch_step(..., gather=AllGatherRepresentations())``
    and give the Accumulator ``grad_reducer=WindowAllReduce()``. Each rank
    gathers the window's representations of all ranks (``ops.AllGather``, rank
    order), computes the same whole-batch loss, and back-propagates only its own
    rows' gradient into the parameters; the window's one AllReduce then sums the
    ranks' pieces into the gradient of the loss over every rank's samples. Every
    rank must hold windows of the same number of samples. Start the processes
    with ``msrun`` and call ``mindspore.communication.init()`` first.

    A stand-in for tests needs the same two things: ``gather(tensor)`` returns
    the rows of every rank in rank order, and ``rank`` is this rank's index.

    Example:
        >>> gather = AllGatherRepresentations(group="my_group")
        >>> gather.all_gather.group
        'my_group'
    """

    def __init__(self, group: Optional[str] = None) -> None:
        self.group = group or GlobalComm.WORLD_COMM_GROUP
        self.all_gather = ops.AllGather(self.group)

    @property
    def rank(self) -> int:
        """This process's rank in the group (needs ``mindspore.communication.init()``)."""
        return get_rank(self.group)

    def __call__(self, tensor: Tensor) -> Tensor:
        return self.all_gather(tensor)


def _random_layers(network):
    """The layers whose two forward passes would differ, each as ``"name (why)"``.

    Dropout with a drop rate above 0 in training mode draws new masks in each
    pass; BatchNorm in training mode normalises each micro-batch by its own
    statistics and moves its running statistics in both passes.

    Example:
        >>> net = nn.SequentialCell(nn.Dense(3, 4), nn.Dropout(p=0.1), nn.BatchNorm1d(4))
        >>> _random_layers(net)
        []
        >>> _random_layers(net.set_train())
        ['1 (Dropout with p=0.1 in training mode)', '2 (BatchNorm1d in training mode)']
    """
    dropouts = [f"{name} ({type(cell).__name__} with p={rate:g} in training mode)"
                for name, cell, rate in active_dropouts(network)]
    return dropouts + [f"{name} ({type(cell).__name__} in training mode)"
                       for name, cell in batch_statistics_norms(network)]


def _as_tuple(value):
    return value if isinstance(value, tuple) else (value,)


def _jit_encode(encoder):
    def encode(inputs):
        return encoder(*inputs)
    return ms.jit(encode)


def _jit_representation_grads(loss_fn, accumulator):
    """``(reps) -> (loss, the loss's gradient w.r.t. the reps)``, compiled once per shape."""
    # Counts weigh each micro-batch under "mean", so the pieces become summed-loss
    # gradients: the accumulator's division by the window's samples cancels this factor.
    per_sample = accumulator.reduction == "mean"
    # The pieces carry the loss scale the accumulator unscales the window by, as a scaled loss's gradients do.
    loss_scale = accumulator.loss_scale

    def scaled_loss(representations):
        loss = loss_fn(*representations)
        scaled = loss * representations[0].shape[0] if per_sample else loss
        if loss_scale is not None:
            scaled = scaled * loss_scale
        return scaled, loss

    grad_fn = ms.value_and_grad(scaled_loss, 0, has_aux=True)

    def representation_grads(representations):
        (_, loss), grads = grad_fn(representations)
        return loss, grads
    return ms.jit(representation_grads)


def _jit_backward(encoder, accumulator, last):
    """``(inputs, sensitivities, count)``: the micro-batch's gradient pieces, added to the window."""
    def contribution(inputs, sensitivities):
        representations = _as_tuple(encoder(*inputs))
        total = (representations[0] * sensitivities[0]).sum()
        for representation, sensitivity in zip(representations[1:], sensitivities[1:]):
            total = total + (representation * sensitivity).sum()
        return total

    grad_fn = ms.grad(contribution, None, accumulator.optimizer.parameters)

    def backward(inputs, sensitivities, count):
        return accumulator.accumulate(grad_fn(inputs, sensitivities), count, last)
    return ms.jit(backward)


def _check_window(micro_batches, accumulate_step):
    """The window as a list of input tuples, or one clear error about ``micro_batches``."""
    if not isinstance(micro_batches, (list, tuple)) or not micro_batches:
        raise ValueError(f"micro_batches must be a non-empty list of micro-batches, got {micro_batches!r}")
    window = [tuple(batch) if isinstance(batch, (list, tuple)) else (batch,) for batch in micro_batches]
    for index, batch in enumerate(window):
        if not batch or not all(isinstance(t, Tensor) and t.ndim > 0 for t in batch):
            raise TypeError(f"micro_batches[{index}] must be a Tensor or a tuple of Tensors with a batch axis, "
                            f"got {batch!r}")
        if len({t.shape[0] for t in batch}) > 1:
            raise ValueError(f"micro_batches[{index}] holds tensors of different batch sizes "
                             f"{[t.shape[0] for t in batch]}")
    if accumulate_step is not None and len(window) > accumulate_step:
        raise ValueError(f"a window holds at most accumulate_step={accumulate_step} micro-batches, "
                         f"got {len(window)}")
    return window


def make_whole_batch_step(encoder: Callable, loss_fn: Callable, accumulator: Accumulator,
                          network: Optional[nn.Cell] = None, gather: Optional[Callable] = None
                          ) -> Callable[[Sequence], Tuple[Tensor, Tensor]]:
    """Builds ``whole_batch_step``: one window trained on a loss over all its micro-batches, exactly.

    Args:
        encoder: a Cell or function of one micro-batch's inputs returning its
            representations: a Tensor ``[samples, ...]``, or a tuple of them
            (two towers, or a query and a key).
        loss_fn: a function of the whole window's representations,
            concatenated along axis 0 (``loss_fn(reps)``, or
            ``loss_fn(image_reps, text_reps)`` for a tuple), returning a
            scalar: InfoNCE, CLIP's symmetric loss, any in-batch-negatives
            loss. Applied as given: the update is its gradient.
        accumulator: the :class:`~accumulator.Accumulator` that applies the
            window, with its clipping, non-finite skipping, loss scaling,
            noise tracking and ``grad_reducer``; either ``reduction`` gives the
            loss's exact gradient. Its window must be empty at each call, and
            ``skip_nonfinite="micro_batch"`` is refused: leaving out a piece of
            one loss's gradient leaves a gradient of nothing.
        network: the Cell to scan for dropout and BatchNorm in training mode
            (refused: the two forward passes must match); defaults to
            ``encoder`` when it is a Cell.
        gather: ``None`` on one device, or ``AllGatherRepresentations()``
            under data parallel.

    Returns:
        ``whole_batch_step(micro_batches) -> (loss, updated)``: the window's
        micro-batches as a list of input tuples (or of Tensors, for an encoder
        of one input), any sizes; the whole-window loss (float32 Tensor) and a
        bool Tensor, True when the optimizer ran. Each micro-batch shape
        compiles its forward and backward once, each window size its loss.

    Example:
        >>> import numpy as np
        >>> from accumulator import Accumulator
        >>> encoder = nn.Dense(4, 3)
        >>> accumulator = Accumulator(nn.SGD(encoder.trainable_params(), 0.1), accumulate_step=2)
        >>> def info_nce(reps):   # pairs (2i, 2i+1) are positives; every other sample a negative
        ...     reps = reps / ops.norm(reps, dim=1, keepdim=True)
        ...     logits = ops.matmul(reps[0::2], reps[1::2].T) / 0.1
        ...     return ops.cross_entropy(logits, ops.arange(logits.shape[0]))
        >>> step = make_whole_batch_step(encoder, info_nce, accumulator)
        >>> x = Tensor(np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32))
        >>> loss, updated = step([x[:4], x[4:]])
        >>> loss.shape, bool(updated), int(accumulator.update_count)
        ((), True, 1)
    """
    if not callable(encoder):
        raise TypeError(f"encoder must be a Cell or a function of a micro-batch's inputs, got {encoder!r}")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be a function of the window's representations, got {loss_fn!r}")
    if not isinstance(accumulator, Accumulator):
        raise TypeError(f"accumulator must be an accumulator.Accumulator, got {type(accumulator).__name__}")
    if accumulator.drops_micro_batches:
        raise ValueError("make_whole_batch_step needs an accumulator that keeps every micro-batch, got one whose "
                         "policies may drop some (skip_nonfinite='micro_batch'; use True or False): leaving out "
                         "one micro-batch's piece of the whole-window loss's gradient applies a gradient of nothing")
    if network is None and isinstance(encoder, nn.Cell):
        network = encoder
    if network is not None and not isinstance(network, nn.Cell):
        raise TypeError(f"network must be a mindspore.nn.Cell or None, got {type(network).__name__}")
    if gather is not None and not (callable(gather) and hasattr(gather, "rank")):
        raise TypeError(f"gather must be None or AllGatherRepresentations() (a callable with a rank), got {gather!r}")

    encode = _jit_encode(encoder)
    representation_grads = _jit_representation_grads(loss_fn, accumulator)
    # Only a policy that samples the window's last micro-batch (track_noise=True) needs it on its own (a second compile per shape).
    backward = _jit_backward(encoder, accumulator, last=False)
    backwards = {False: backward,
                 True: _jit_backward(encoder, accumulator, last=True) if accumulator.samples_last else backward}
    flush = ms.jit(accumulator.flush)
    weighs = accumulator.reduction == "mean"

    def whole_batch_step(micro_batches):
        window = _check_window(micro_batches, accumulator.schedule.fixed_step)
        differing = [] if network is None else _random_layers(network)
        if differing:
            raise ValueError("make_whole_batch_step runs each micro-batch forward twice, and these layers would "
                             f"differ between the passes: {', '.join(differing)}; set them to "
                             "evaluation mode (cell.set_train(False)) or remove them")
        if int(accumulator.micro_step):
            raise ValueError(f"the accumulator's window already holds {int(accumulator.micro_step)} micro-batches: "
                             "a whole-batch window must start empty (flush it first)")
        parts = [_as_tuple(encode(ms.mutable(batch))) for batch in window]
        local = tuple(ops.concat(column) for column in zip(*parts))
        gathered = local if gather is None else tuple(gather(t) for t in local)
        loss, grads = representation_grads(ms.mutable(gathered))
        sizes = [part[0].shape[0] for part in parts]
        start = 0 if gather is None else gather.rank * local[0].shape[0]
        for index, (batch, size) in enumerate(zip(window, sizes)):
            sensitivities = tuple(g[start:start + size] for g in grads)
            start += size
            count = Tensor(size, ms.float32) if weighs else None
            backwards[index == len(window) - 1](ms.mutable(batch), ms.mutable(sensitivities), count)
        return loss, flush()

    return whole_batch_step
