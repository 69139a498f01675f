"""A whole accumulation window in one compiled call.

One jitted call per micro-step costs a fixed host overhead each time
(about 0.35 ms on the MNIST dense net). ``make_window_step`` compiles one
call per window instead: forward, backward and the Accumulator's sum for
every micro-batch in an in-graph ``while`` loop, the window counted once,
then ``Accumulator.flush``. All the weighting, clipping, non-finite skipping,
loss scaling and state stay in the Accumulator; this module only loops.
"""
import numpy as np
import mindspore as ms
from mindspore import Tensor, ops

from accumulator.schedule import ConstantSchedule


# Module-level helpers, not lambdas or nested functions in the jitted code:
# MindSpore 2.10 fails to compile lambdas inside in-graph branches.
def _micro_batch(inputs, i):
    return [t[i] for t in inputs]


def _loop(grad_fn, accumulator, inputs, counts, k):
    """Accumulates micro-batches ``0 .. k-1`` of the stacked ``inputs``.

    A ``while`` on a Tensor index stays one loop in the graph, so only one
    micro-batch's gradients are alive at a time; a Python ``for`` would be
    unrolled and keep all k (memory grows with N). ``k`` comes in as a
    Tensor argument so the bound is never a constant the compiler could
    fold into an unrolled loop (a shape-derived bound was also measured
    flat in MindSpore 2.10, but nothing promises it stays so). The window's
    micro-steps and weight are counted once, after the loop.
    """
    losses = ops.zeros(inputs[0].shape[:1], ms.float32)
    i = ops.zeros((), ms.int32)
    while i < k:
        loss, grads = grad_fn(*_micro_batch(inputs, i))
        accumulator._add(grads)
        losses[i] = ops.cast(loss, ms.float32)
        i = i + 1
    if counts is None:
        weight = ops.cast(k, ms.float32)
    else:
        weight = accumulator._weight(counts.sum())
    accumulator._count(k, weight)
    return losses


def _jit_loop(grad_fn, accumulator, apply):
    if apply:
        def window(inputs, counts, k):
            losses = _loop(grad_fn, accumulator, inputs, counts, k)
            return losses, accumulator.flush()
    else:
        def window(inputs, counts, k):
            return _loop(grad_fn, accumulator, inputs, counts, k)
    return ms.jit(window)


def _jit_micro_step(grad_fn, accumulator):
    def micro_step(inputs, count):
        loss, grads = grad_fn(*inputs)
        if count is None:
            accumulator.accumulate(grads)
        else:
            accumulator.accumulate(grads, count)
        return ops.cast(loss, ms.float32)
    return ms.jit(micro_step)


def _as_counts(counts, k):
    """``counts`` as a float32 numpy ``[k]`` array (or None), sliced on the host."""
    if counts is None:
        return None
    counts = counts.asnumpy() if isinstance(counts, Tensor) else np.asarray(counts)
    if counts.shape != (k,):
        raise ValueError(f"counts must hold one number per micro-batch, shape [{k}], got shape {list(counts.shape)}")
    # One dtype for every call, so int and float counts share a graph. And
    # counts become fresh Tensors, never views: MindSpore 2.10 misreads a view
    # (``counts[0:3]``) passed straight into a compiled while loop, as 0 or
    # stale values that change from call to call. Views inside a mutable
    # tuple, as the stacked inputs are passed, are read correctly.
    return counts.astype(np.float32)


def _variables(tensors):
    # A plain tuple of Tensors is a compile-time constant to ms.jit: every
    # new window would recompile. mutable() makes its items graph inputs.
    return ms.mutable(tuple(tensors))


def _tensor(array):
    return None if array is None else Tensor(array)


def _check_stacked(inputs):
    if not inputs or not all(isinstance(t, Tensor) for t in inputs):
        raise TypeError("pass the window as stacked Tensors [k, ...] or as a list of micro-batch tuples")
    k = inputs[0].shape[0] if inputs[0].ndim else 0
    if k < 1 or any(t.ndim == 0 or t.shape[0] != k for t in inputs):
        raise ValueError("stacked inputs need the same leading size k >= 1 (micro-batches), got shapes "
                         f"{[list(t.shape) for t in inputs]}")
    return k


def _runs(micro_batches):
    """Consecutive micro-batches of equal shapes, as ``(start, stop)`` pairs."""
    shapes = [tuple(tuple(t.shape) for t in batch) for batch in micro_batches]
    runs, start = [], 0
    for index in range(1, len(shapes) + 1):
        if index == len(shapes) or shapes[index] != shapes[start]:
            runs.append((start, index))
            start = index
    return runs


def make_window_step(grad_fn, accumulator):
    """Builds ``window_step``: one compiled call runs a whole accumulation window.

    Args:
        grad_fn: the per-micro-batch gradient function, as for the
            per-micro-step loop: ``ms.value_and_grad(forward, None,
            optimizer.parameters)``, returning ``(loss, grads)`` with a scalar
            loss. Its arguments are one micro-batch's inputs.
        accumulator: the :class:`~accumulator.Accumulator` that sums, weights,
            checks, clips and applies; the window step only drives it.

    Returns:
        ``window_step(*stacked, counts=None)`` or
        ``window_step(micro_batches, counts=None)``, returning
        ``(losses, updated)``: a float32 ``[k]`` Tensor of the micro-batch
        losses and a bool Tensor, True when the optimizer ran.

        * ``stacked``: one Tensor per ``grad_fn`` argument, each ``[k, ...]``
          with micro-batch ``i`` at index ``i``. Each new ``k`` (such as the
          epoch's last, shorter window) compiles once more.
        * ``micro_batches``: a list or tuple of per-micro-batch argument
          tuples, e.g. from ``data.mnist.mnist_windows``. Runs of equal shapes
          are stacked and looped; a micro-batch of another size (the epoch's
          uneven last batch) goes through a separately compiled
          single-micro-batch accumulate. The loop stays in the graph either way.
        * ``counts``: ``k`` sample (or token) counts, when ``grad_fn`` is the
          gradient of a *summed* loss: the update is then
          ``sum(grads) / sum(counts)``, exact for uneven micro-batches.

    The window is applied with ``accumulator.flush()`` after its last
    micro-batch, so pass at most ``accumulate_step`` micro-batches, and
    start from an empty accumulator window unless you mean to add to it.

    Example:
        >>> accumulator = Accumulator(optimizer, accumulate_step=4)
        >>> grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
        >>> window_step = make_window_step(grad_fn, accumulator)
        >>> losses, updated = window_step(images, labels)   # [4, B, ...], [4, B]
        >>> for window in mnist_windows("MNIST_Data/train", 32, 4):
        ...     losses, updated = window_step(window)

    With a summed loss and counts, the epoch's short last batch weighs
    exactly as many samples as it holds:
        >>> window_step(window, counts=[len(x) for x, _ in window])
    """
    # A host-side read of the window size would wait for the device every
    # call; only a constant schedule's N is known up front.
    if isinstance(accumulator.schedule, ConstantSchedule):
        max_k = int(accumulator.schedule.step.asnumpy())
    else:
        max_k = None
    apply_loop = _jit_loop(grad_fn, accumulator, apply=True)
    add_loop = _jit_loop(grad_fn, accumulator, apply=False)
    add_one = _jit_micro_step(grad_fn, accumulator)
    flush = ms.jit(accumulator.flush)

    def check_k(k):
        if max_k is not None and k > max_k:
            raise ValueError(f"a window holds at most accumulate_step={max_k} micro-batches, got {k}")

    def window_step(*inputs, counts=None):
        """One window: ``window_step(*stacked, counts=None)`` or ``window_step(micro_batches, counts=None)``.

        Example:
            >>> losses, updated = window_step(images, labels)
        """
        if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            return _run_micro_batches(list(inputs[0]), counts)
        k = _check_stacked(inputs)
        check_k(k)
        return apply_loop(_variables(inputs), _tensor(_as_counts(counts, k)), Tensor(k, ms.int32))

    def _run_micro_batches(micro_batches, counts):
        if not micro_batches:
            raise ValueError("a window needs at least one micro-batch")
        micro_batches = [tuple(batch) for batch in micro_batches]
        k = len(micro_batches)
        check_k(k)
        counts = _as_counts(counts, k)
        runs = _runs(micro_batches)
        if len(runs) == 1:
            # The common case stays one compiled call, flush included.
            stacked = _variables(ops.stack(column) for column in zip(*micro_batches))
            return apply_loop(stacked, _tensor(counts), Tensor(k, ms.int32))
        losses = []
        for start, stop in runs:
            run_counts = None if counts is None else counts[start:stop]
            if stop - start == 1:
                count = None if counts is None else Tensor(counts[start])
                losses.append(add_one(_variables(micro_batches[start]), count).reshape((1,)))
            else:
                stacked = _variables(ops.stack(column) for column in zip(*micro_batches[start:stop]))
                losses.append(add_loop(stacked, _tensor(run_counts), Tensor(stop - start, ms.int32)))
        return ops.concat(losses), flush()

    return window_step
