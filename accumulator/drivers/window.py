"""A whole accumulation window in one compiled call.

One jitted call per micro-step costs a fixed host overhead each time
(docs/performance.md#what-the-numbers-say). ``make_window_step`` compiles one
call per window instead: forward, backward and the Accumulator's sum for
every micro-batch in an in-graph ``while`` loop, the window counted once,
then ``Accumulator.flush``. All the weighting, clipping, non-finite skipping,
loss scaling and state stay in the Accumulator; this module only loops.
"""
from typing import Callable, Tuple

import numpy as np
import mindspore as ms
from mindspore import Tensor, ops

from accumulator.core.accumulator import Accumulator
from accumulator._internal.constants import ZERO_FLOAT, ZERO_INT


# Module-level helpers: lambdas in in-graph branches do not compile
# (docs/mindspore-behaviours.md#lambdas-inside-in-graph-branches-do-not-compile).
def _micro_batch(inputs, i):
    return [t[i] for t in inputs]


def _add(accumulator, grads, counts, i, tally):
    accumulator.add(grads, None if counts is None else counts[i])
    return tally


def _add_and_tally(accumulator, grads, counts, i, tally):
    """Adds, and tallies the micro-steps (and counts) ``add`` kept: for a policy that may leave one out."""
    count = None if counts is None else counts[i]
    steps, weight = tally
    kept_steps, kept_weight = accumulator.kept_share(count, accumulator.add(grads, count))
    return steps + kept_steps, weight if kept_weight is None else weight + kept_weight


def _count(accumulator, micro_steps, counts, tally, last):
    if counts is None:
        return accumulator.count(micro_steps)
    # ``last``: the loop left out the final micro-batch; accumulate counts it.
    return accumulator.count(micro_steps, counts.sum() - counts[micro_steps] if last else counts.sum())


def _count_kept(accumulator, micro_steps, counts, tally, last):
    steps, weight = tally
    return accumulator.count(micro_steps, None if counts is None else weight, steps)


def _loop(grad_fn, accumulator, add, count, inputs, counts, micro_steps, last):
    """Accumulates micro-batches ``0 .. micro_steps-1`` of the stacked ``inputs``.

    A ``while`` on a Tensor index stays one loop in the graph, so only one
    micro-batch's gradients are alive at a time; a Python ``for`` would be
    unrolled and keep them all (memory grows with N). ``micro_steps`` comes in as a
    Tensor argument so the bound is never a constant the compiler could
    fold into an unrolled loop: nothing promises a shape-derived bound stays
    a loop (docs/window-step.md#why-the-loop-is-shaped-so). The window's
    micro-steps and weight are counted once, after the loop, except when a
    policy drops micro-batches (``skip_nonfinite="micro_batch"``): then the loop tallies what ``add`` kept.
    The losses are summed, not stored one by one: a write per micro-batch costs time
    (docs/mindspore-behaviours.md#python-values-in-a-graph-is-true-tuples-and-views).
    ``last``: the final micro-batch ends the window and is the one
    ``track_noise=True`` samples, so it runs after the loop and its count,
    through ``accumulate(..., last=True)``.
    """
    loss_sum = ZERO_FLOAT
    tally = (ZERO_INT, ZERO_FLOAT)
    i = ZERO_INT
    stop = micro_steps - 1 if last else micro_steps
    while i < stop:
        loss, grads = grad_fn(*_micro_batch(inputs, i))
        tally = add(accumulator, grads, counts, i, tally)
        loss_sum = loss_sum + ops.cast(loss, ms.float32)
        i = i + 1
    count(accumulator, stop, counts, tally, last)
    if last:
        loss, grads = grad_fn(*_micro_batch(inputs, stop))
        accumulator.accumulate(grads, None if counts is None else counts[stop], True)
        loss_sum = loss_sum + ops.cast(loss, ms.float32)
    return loss_sum


def _any_length(window):
    """``window`` compiled with the number of micro-batches dynamic: one graph for every window length.

    A schedule that sets N between windows would otherwise compile a graph per N, seconds each
    (docs/window-step.md#a-window-that-changes-length). The graph is built at the first call,
    from its inputs' shapes past the first axis.
    """
    compiled = {}

    def call(inputs, counts, micro_steps):
        key = (tuple((tuple(t.shape[1:]), t.dtype) for t in inputs), counts is None)
        if key not in compiled:
            spec = {"inputs": ms.mutable(tuple(Tensor(shape=[None, *t.shape[1:]], dtype=t.dtype) for t in inputs))}
            if counts is not None:
                spec["counts"] = Tensor(shape=[None], dtype=counts.dtype)
            compiled[key] = ms.enable_dynamic(**spec)(ms.jit(window))
        return compiled[key](inputs, counts, micro_steps)
    return call


def _jit_loop(grad_fn, accumulator, apply, last, any_length=False):
    # Chosen in Python: a constant `if` in the graph's while loop miscompiled
    # (docs/mindspore-behaviours.md#python-values-in-a-graph-is-true-tuples-and-views).
    if accumulator.drops_micro_batches:
        add, count = _add_and_tally, _count_kept
    else:
        add, count = _add, _count
    if apply:
        def window(inputs, counts, micro_steps):
            loss_sum = _loop(grad_fn, accumulator, add, count, inputs, counts, micro_steps, last)
            return loss_sum, accumulator.flush()
    else:
        def window(inputs, counts, micro_steps):
            return _loop(grad_fn, accumulator, add, count, inputs, counts, micro_steps, last)
    return _any_length(window) if any_length else ms.jit(window)


def _jit_uneven_loop(grad_fn, accumulator):
    """A window of equal micro-batches and a last one of another shape, in one compiled call, applied at its end.

    The loop takes the equal ones; the last runs after it, counted by ``accumulate`` as the window's last (the one
    ``track_noise=True`` samples). One graph per pair of shapes: an uneven window repeats them every epoch.
    """
    add, count = (_add_and_tally, _count_kept) if accumulator.drops_micro_batches else (_add, _count)

    def window(inputs, counts, micro_steps, tail, tail_count):
        loss_sum = _loop(grad_fn, accumulator, add, count, inputs, counts, micro_steps, False)
        loss, grads = grad_fn(*tail)
        accumulator.accumulate(grads, tail_count, True)
        return loss_sum + ops.cast(loss, ms.float32), accumulator.flush()
    return ms.jit(window)


def _jit_micro_step(grad_fn, accumulator, last):
    def micro_step(inputs, count):
        loss, grads = grad_fn(*inputs)
        if count is None:
            accumulator.accumulate(grads, None, last)
        else:
            accumulator.accumulate(grads, count, last)
        return ops.cast(loss, ms.float32)
    return ms.jit(micro_step)


def _as_counts(counts, micro_steps, accumulator):
    """``counts`` as a float32 numpy ``[micro_steps]`` array (or None), sliced on the host."""
    if counts is None:
        return None
    accumulator.check_counts()
    counts = counts.asnumpy() if isinstance(counts, Tensor) else np.asarray(counts)
    if counts.shape != (micro_steps,):
        raise ValueError(f"counts must hold one number per micro-batch, shape [{micro_steps}], "
                         f"got shape {list(counts.shape)}")
    # One dtype, so int and float counts share a graph; a fresh array, never a view
    # (docs/mindspore-behaviours.md#python-values-in-a-graph-is-true-tuples-and-views).
    return counts.astype(np.float32)


def _variables(tensors):
    # mutable(): a plain tuple would be a compile-time constant, recompiled per window
    # (docs/mindspore-behaviours.md#python-values-in-a-graph-is-true-tuples-and-views).
    return ms.mutable(tuple(tensors))


def _tensor(array):
    return None if array is None else Tensor(array)


def _stacked(micro_batches):
    """Each argument of ``micro_batches`` stacked: numpy arrays by ``np.stack`` on the host, one Tensor each (a few
    eager ``ops.stack`` cost more, docs/window-step.md#the-first-example-a-mindsporedataset-pipeline-a-window-per-call)."""
    return _variables(Tensor(np.stack(column)) if isinstance(column[0], np.ndarray) else ops.stack(column)
                      for column in zip(*micro_batches))


def _as_tensors(micro_batch):
    return _variables(Tensor(t) if isinstance(t, np.ndarray) else t for t in micro_batch)


def _check_stacked(inputs):
    if not inputs or not all(isinstance(t, Tensor) for t in inputs):
        raise TypeError("pass the window as stacked Tensors [micro-batches, ...] or as a list of micro-batch tuples")
    micro_steps = inputs[0].shape[0] if inputs[0].ndim else 0
    if micro_steps < 1 or any(t.ndim == 0 or t.shape[0] != micro_steps for t in inputs):
        raise ValueError("stacked inputs need the same leading size >= 1 (micro-batches), got shapes "
                         f"{[list(t.shape) for t in inputs]}")
    return micro_steps


def _runs(micro_batches):
    """Consecutive micro-batches of equal shapes, as ``(start, stop)`` pairs."""
    shapes = [tuple(tuple(t.shape) for t in batch) for batch in micro_batches]
    runs, start = [], 0
    for index in range(1, len(shapes) + 1):
        if index == len(shapes) or shapes[index] != shapes[start]:
            runs.append((start, index))
            start = index
    return runs


def _short_last(micro_batches):
    """True when the last micro-batch differs from the others in its first axis only (fewer samples)."""
    return all(tuple(t.shape[1:]) == tuple(u.shape[1:]) for t, u in zip(micro_batches[0], micro_batches[-1]))


def make_window_step(grad_fn: Callable, accumulator: Accumulator) -> Callable[..., Tuple[Tensor, Tensor]]:
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
        ``(loss_sum, updated)``: the window's micro-batch losses summed, a
        float32 Tensor, and a bool Tensor, True when the optimizer ran.

        * ``stacked``: one Tensor per ``grad_fn`` argument, each
          ``[micro-batches, ...]`` with micro-batch ``i`` at index ``i``. With
          a fixed N, each new number of micro-batches (such as the epoch's
          last, shorter window) compiles once more; with a schedule that
          changes N, one graph takes every number.
        * ``micro_batches``: a list or tuple of per-micro-batch argument
          tuples, of Tensors or numpy arrays (stacked on the host, faster),
          e.g. from ``data.mnist.mnist_windows``. Runs of equal shapes
          are stacked and looped. A window whose last micro-batch alone holds
          fewer samples (an uneven window, every epoch alike) stays one compiled
          call, compiled once for its pair of shapes; any other mix goes
          through a compiled call per run, then ``flush``.
        * ``counts``: one sample (or token) count per micro-batch, when
          ``grad_fn`` is the gradient of a *summed* loss: the update is then
          ``sum(grads) / sum(counts)``, exact for uneven micro-batches.

    The window is applied with ``accumulator.flush()`` after its last
    micro-batch, so pass at most ``accumulate_step`` micro-batches, and
    start from an empty accumulator window unless you mean to add to it.

    Example:
        >>> import numpy as np
        >>> from mindspore import nn
        >>> from accumulator import Accumulator
        >>> net = nn.Dense(3, 1)
        >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=4)
        >>> def make_grad_fn(net, parameters):
        ...     def forward(x, y):
        ...         return ((net(x) - y) ** 2).sum()
        ...     return ms.value_and_grad(forward, None, parameters)
        >>> window_step = make_window_step(make_grad_fn(net, accumulator.optimizer.parameters), accumulator)
        >>> x, y = Tensor(np.ones((4, 2, 3), np.float32)), Tensor(np.zeros((4, 2, 1), np.float32))
        >>> loss_sum, updated = window_step(x, y)            # stacked: [4, B, ...]
        >>> loss_sum.shape, bool(updated), int(accumulator.update_count)   # the 4 losses summed
        ((), True, 1)

    A list of micro-batches may end with a shorter one; with a summed loss
    and counts it weighs exactly as many samples as it holds:
        >>> window = [(x[0], y[0]), (x[1, :1], y[1, :1])]
        >>> loss_sum, updated = window_step(window, counts=[2, 1])
        >>> loss_sum.shape, float(accumulator.weight_total), int(accumulator.update_count)
        ((), 0.0, 2)
    """
    # A host-side read of the window size would wait for the device every
    # call; only a fixed schedule's N is known up front.
    accumulate_step = accumulator.schedule.fixed_step
    # Only a policy that samples the last micro-batch (track_noise=True) needs it on its own; a loop
    # body written twice costs compile time.
    last = accumulator.samples_last
    apply_loop = _jit_loop(grad_fn, accumulator, apply=True, last=last, any_length=accumulate_step is None)
    add_loops = {False: _jit_loop(grad_fn, accumulator, apply=False, last=False),
                 True: _jit_loop(grad_fn, accumulator, apply=False, last=last)}
    add_ones = {False: _jit_micro_step(grad_fn, accumulator, last=False),
                True: _jit_micro_step(grad_fn, accumulator, last=last)}
    uneven_loop = _jit_uneven_loop(grad_fn, accumulator)
    flush = ms.jit(accumulator.flush)

    def check_length(micro_steps):
        if accumulate_step is not None and micro_steps > accumulate_step:
            raise ValueError(f"a window holds at most accumulate_step={accumulate_step} micro-batches, "
                             f"got {micro_steps}")

    def window_step(*inputs, counts=None):
        if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            return _run_micro_batches(list(inputs[0]), counts)
        micro_steps = _check_stacked(inputs)
        check_length(micro_steps)
        return apply_loop(_variables(inputs), _tensor(_as_counts(counts, micro_steps, accumulator)),
                          Tensor(micro_steps, ms.int32))

    def _run_micro_batches(micro_batches, counts):
        if not micro_batches:
            raise ValueError("a window needs at least one micro-batch")
        micro_batches = [tuple(batch) for batch in micro_batches]
        micro_steps = len(micro_batches)
        check_length(micro_steps)
        counts = _as_counts(counts, micro_steps, accumulator)
        runs = _runs(micro_batches)
        if len(runs) == 1:
            # The common case stays one compiled call, flush included.
            return apply_loop(_stacked(micro_batches), _tensor(counts), Tensor(micro_steps, ms.int32))
        if len(runs) == 2 and runs[1][0] == micro_steps - 1 and _short_last(micro_batches):
            # Equal micro-batches and a shorter last (an uneven window): still one compiled call.
            stacked = _stacked(micro_batches[:-1])
            head_counts = None if counts is None else counts[:-1]
            tail_count = None if counts is None else Tensor(counts[-1])
            return uneven_loop(stacked, _tensor(head_counts), Tensor(micro_steps - 1, ms.int32),
                               _as_tensors(micro_batches[-1]), tail_count)
        loss_sum = ZERO_FLOAT
        for start, stop in runs:
            ends_window = stop == micro_steps
            if stop - start == 1:
                count = None if counts is None else Tensor(counts[start])
                loss_sum = loss_sum + add_ones[ends_window](_as_tensors(micro_batches[start]), count)
            else:
                run_counts = None if counts is None else counts[start:stop]
                stacked = _stacked(micro_batches[start:stop])
                loss_sum = loss_sum + add_loops[ends_window](stacked, _tensor(run_counts),
                                                             Tensor(stop - start, ms.int32))
        return loss_sum, flush()

    return window_step
