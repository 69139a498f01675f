"""BatchNorm under accumulation: moving statistics from the whole window.

A plain ``nn.BatchNorm2d`` updates ``moving_mean`` and ``moving_variance``
once per micro-batch, from that micro-batch alone. ``convert_batchnorm``
makes each BatchNorm pool its micro-batches' moments over the window and
update the moving statistics once, when the window applies, exactly as one
BatchNorm update on the whole window's batch would.

What can and cannot be equal to the large batch: the training forward is
the plain layer's own kernel and still normalises each micro-batch with its
own mean and variance, since the whole window is never in memory at once.
So the loss, the gradients and therefore the weights differ from a
large-batch run (as with "ghost" BatchNorm; with one micro-batch per window
they equal the plain network's to the bit). The moving statistics equal one
large-batch update on what each layer was fed during the window: for a
BatchNorm fed by the data, or by layers without BatchNorm, the window's
whole batch; deeper ones see activations normalised per micro-batch.
"""
from typing import TYPE_CHECKING, List

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops
from mindspore.communication import GlobalComm, get_group_size, get_rank

from accumulator.devices.all_reduce import WindowAllReduce
from accumulator.policies.base import Policy

if TYPE_CHECKING:  # the core imports the policies: a name for the annotation only
    from accumulator.core.accumulator import Accumulator


def _state(value, name):
    return Parameter(Tensor(value, ms.float32), name=name, requires_grad=False)


def _blend(moving, value, momentum, update):
    # BatchNorm's own convention: ``momentum`` here is the layer's attribute,
    # the new batch's weight (1 - the constructor's momentum, 0.1 by default).
    blended = moving * (1.0 - momentum) + value * momentum
    return ops.assign(moving, ops.where(update, blended, moving))


@ms.jit_class
class _WindowMoments(Policy):
    """One layer's pooled moments over the window, attached to an Accumulator.

    Each rank keeps its part of the window as a count, a mean and M2 (the
    sum of squared deviations from the mean) per channel, and merges every
    micro-batch in with Chan et al.'s pairwise update: no difference of two
    large numbers is taken, as E[x**2] - E[x]**2 would, so data at 300 +- 0.5
    keep their variance in float32. The mean is held as an offset from a
    shift, the window's first micro-batch mean: float32 places a mean near
    300 only to 1.5e-5, which would cost the spread between micro-batch means
    1e-4 of itself; offsets near 0 keep it to 1e-7.

    Across ranks the window's AllReduce only sums. M2s add up as they are,
    but the spread between the ranks' means needs the means: moments summed
    about a common point (the moving mean, say) cancel catastrophically in
    float32 when the data sit far from it, and AllReduce takes no float64
    (docs/batchnorm.md#batchnorm says how much). So each rank hands over its
    count, shift and offset in its own row of otherwise zero ``[ranks, ...]``
    tensors: the sum gives every rank every rank's values, exactly (adding
    zeros rounds nothing), like an AllGather, for ``ranks * (2 C + 1)``
    floats per layer and window. The parallel-variance formula then merges
    them, again with small differences only.
    """

    def __init__(self, layer, prefix, rank, ranks):
        self.moving_mean = layer.moving_mean
        self.moving_variance = layer.moving_variance
        self.momentum = float(layer.momentum)
        self.row = Tensor(np.eye(ranks, dtype=np.float32)[rank])
        zeros = np.zeros(layer.num_features, np.float32)
        # Not `self.count`: that is a hook's name (accumulator.policies.base); the Parameter keeps its name.
        self.samples = _state(0.0, prefix + "window_count")
        self.shift = _state(zeros, prefix + "window_shift")
        self.mean = _state(zeros, prefix + "window_mean")
        self.m2 = _state(zeros, prefix + "window_m2")
        # The plain layer's own training kernel, so the forward and its
        # gradient are the plain layer's, to the bit. With momentum 1 it
        # writes the micro-batch's mean and unbiased variance into these, not
        # into the moving statistics. Written and read within one
        # micro-step, so they are no state.
        self.batch_norm = ops.BatchNorm(is_training=True, epsilon=layer.eps, momentum=1.0)
        self.batch_mean = _state(zeros, prefix + "batch_mean")
        self.batch_variance = _state(zeros, prefix + "batch_variance")

    def normalize(self, x, gamma, beta):
        """The micro-batch ``x`` normalised with its own statistics, which join the window."""
        y = self.batch_norm(x, gamma, beta, self.batch_mean, self.batch_variance)[0]
        return ops.depend(y, self.add_batch(ops.stop_gradient(x)))

    def add_batch(self, x):
        """Merges the micro-batch ``x``, whose statistics ``batch_norm`` has just written."""
        axes = (0,) + tuple(range(2, x.ndim))
        count = x.size // x.shape[1]
        mean = self.batch_mean
        # The rounding error of ``mean``: float32 holds a mean near 300 only
        # to 1.5e-5, but x - mean is exact, and so is its mean, nearly.
        correction = ops.mean(x - mean.reshape((1, -1) + (1,) * (x.ndim - 2)), axes)
        m2 = self.batch_variance * (count - 1.0)
        shift = ops.where(self.samples > 0, self.shift, mean)
        # Exact while mean and shift are within a factor 2 (Sterbenz), as
        # the means of one channel far from 0 are; near 0 little is lost.
        offset = (mean - shift) + correction
        total = self.samples + count
        delta = offset - self.mean
        new_mean = self.mean + delta * (count / total)
        new_m2 = self.m2 + m2 + delta * delta * (self.samples * count / total)
        ops.assign(self.shift, shift)
        ops.assign(self.mean, new_mean)
        ops.assign(self.m2, new_m2)
        return ops.assign(self.samples, total)

    def state_parameters(self):
        return [self.samples, self.shift, self.mean, self.m2]

    def window_tensors(self):
        column = self.row.reshape((-1, 1))
        return (self.row * self.samples, column * self.shift, column * self.mean, self.m2)

    def close_window(self, tensors, summary):
        counts, shifts, offsets, m2 = tensors
        total = counts.sum()
        counts = counts.reshape((-1, 1))
        reference = (counts * shifts).sum(0) / total
        deviations = (shifts - reference) + offsets
        offset = (counts * deviations).sum(0) / total
        m2 = m2 + (counts * (deviations - offset) * (deviations - offset)).sum(0)
        # BatchNorm's moving variance is the unbiased one (n - 1), n the
        # values per channel; a layer that saw nothing this window keeps
        # its statistics (a count of 0 makes the values above NaN, never chosen).
        update = ops.logical_and(summary["applied"], total > 0)
        _blend(self.moving_mean, reference + offset, self.momentum, update)
        _blend(self.moving_variance, m2 / (total - 1.0), self.momentum, update)
        for state in self.state_parameters():
            ops.assign(state, ops.zeros_like(state))


class WindowBatchNorm:
    """What ``convert_batchnorm`` turns a BatchNorm into; test with ``isinstance``.

    A converted layer is still an ``nn.BatchNorm1d`` or ``nn.BatchNorm2d``
    (mixed precision keeps those in float32 by their type), with the same
    Parameters under the same names. In training it runs the plain layer's
    kernel on each micro-batch (normalising with the micro-batch's own
    statistics) and adds the micro-batch's moments to ``window``, the state
    its accumulator applies once per window. In evaluation it is the plain
    layer.

    Example:
        >>> from accumulator import Accumulator
        >>> net = nn.SequentialCell(nn.Dense(3, 4), nn.BatchNorm1d(4))
        >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), 2)
        >>> convert_batchnorm(net, accumulator)
        ['1']
        >>> isinstance(net[1], WindowBatchNorm), isinstance(net[1], nn.BatchNorm1d)
        (True, True)
    """

    def construct(self, x):
        self._check_input_dim(self.shape(x), self.cls_name)
        if self.use_batch_statistics is None and not self.training:
            return self._infer(x)
        return self.window.normalize(x, self.gamma, self.beta)

    def _infer(self, x):
        # The plain layer's inference path: its kernel wants 4-D input.
        shape = x.shape
        if x.ndim < 4:
            x = x.reshape(shape + (1,) * (4 - x.ndim))
        y = self.bn_infer(x, self.gamma, self.beta, self.moving_mean, self.moving_variance)[0]
        return y.reshape(shape)


class _WindowBatchNorm1d(WindowBatchNorm, nn.BatchNorm1d):
    pass


class _WindowBatchNorm2d(WindowBatchNorm, nn.BatchNorm2d):
    pass


_CONVERSIONS = {nn.BatchNorm1d: _WindowBatchNorm1d, nn.BatchNorm2d: _WindowBatchNorm2d}


def _prefix(layer):
    # The layer's own Parameter names give a unique stem ("features.1.").
    name = layer.moving_mean.name
    return "accumulator." + (name.rsplit(".", 1)[0] + "." if "." in name else "")


def _rank_and_ranks(reducer):
    """This process's place among the ranks ``reducer`` sums over (0 of 1 without communication)."""
    if not GlobalComm.INITED:
        if isinstance(reducer, WindowAllReduce):
            # Every rank would take row 0, and the sum would add their shifts.
            raise RuntimeError("call mindspore.communication.init() before convert_batchnorm: "
                               "each rank hands over its window's moments in its own row")
        return 0, 1
    if reducer is None:
        return 0, 1
    group = getattr(getattr(reducer, "all_reduce", None), "group", GlobalComm.WORLD_COMM_GROUP)
    return get_rank(group), get_group_size(group)


def convert_batchnorm(net: nn.Cell, accumulator: "Accumulator") -> List[str]:
    """Makes every ``nn.BatchNorm1d``/``nn.BatchNorm2d`` in ``net`` pool its statistics over ``accumulator``'s window.

    Each layer is converted in place: the same object, with the same
    ``gamma``, ``beta``, ``moving_mean`` and ``moving_variance`` Parameters
    under the same names, so an optimizer built before keeps training them
    and checkpoints of the plain network load unchanged. Its window state
    (count, and shift, mean and M2 per channel: ``accumulator.<layer>.window_*``)
    is attached to ``accumulator``: checkpointed with it, summed across
    devices with its window, and applied or dropped with its window. Every
    training-mode forward counts into the window, as it would move a plain
    layer's statistics.

    During training each micro-batch is normalised with its own statistics
    (the whole window is never in memory at once), so the weights still
    differ from a large-batch run. The moving statistics do not: when the
    window applies (also by ``flush``), they are updated once, with the
    layer's momentum and unbiased variance, as one update on the
    concatenation of what the layer saw during the window would update
    them; a window skipped as non-finite leaves them as they were. For the
    first BatchNorm of a network that is the whole window's batch. In
    evaluation the layers are plain BatchNorm.

    Convert after building the accumulator and before the first compiled
    call (and before building an ``AccumulationTrainCell``); under data
    parallel, after ``mindspore.communication.init()`` (with a
    ``WindowAllReduce`` it raises otherwise), since each rank hands over its
    moments in its own row (of ``WindowAllReduce``'s group, or of all ranks
    for another ``grad_reducer``). Only
    ``data_format="NCHW"`` is supported; subclasses of the BatchNorms and
    layers with ``use_batch_statistics=False`` (which never update their
    moving statistics) are left alone. Returns the converted layers' names
    in ``net`` (``""`` when ``net`` is one).

    Example:
        >>> from accumulator import Accumulator
        >>> net = nn.SequentialCell(nn.BatchNorm1d(2, momentum=0.0))   # moving statistics = last batch's
        >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=2)
        >>> convert_batchnorm(net, accumulator)
        ['0']
        >>> def make_step(net, accumulator):
        ...     def forward(x):
        ...         return net(x).sum()
        ...     grad_fn = ms.value_and_grad(forward, None, accumulator.optimizer.parameters)
        ...     @ms.jit
        ...     def step(x):
        ...         return accumulator(grad_fn(x)[1])
        ...     return step
        >>> step = make_step(net.set_train(), accumulator)
        >>> [bool(step(Tensor([[0.0, 1.0], [2.0, 1.0]]))), bool(step(Tensor([[4.0, 1.0], [6.0, 1.0]])))]
        [False, True]
        >>> net[0].moving_mean.asnumpy(), net[0].moving_variance.asnumpy()   # of all 4 rows, not the last 2
        (array([3., 1.], dtype=float32), array([6.6666665, 0.       ], dtype=float32))
    """
    layers = [(name, cell) for name, cell in net.cells_and_names()
              if type(cell) in _CONVERSIONS and cell.use_batch_statistics is not False]
    taken = {p.name for p in accumulator.state_parameters()}
    for name, layer in layers:
        if layer.format != "NCHW":
            raise ValueError(f"{name or 'net'}: only data_format='NCHW' is supported, got {layer.format!r}")
        if _prefix(layer) + "window_count" in taken:
            raise ValueError(f"{name or 'net'}: its window state {_prefix(layer)}window_* is already in the "
                             "accumulator; give the layers distinct parameter names")
        taken.add(_prefix(layer) + "window_count")
    rank, ranks = _rank_and_ranks(accumulator.grad_reducer)
    for name, layer in layers:
        window = _WindowMoments(layer, _prefix(layer), rank, ranks)
        accumulator.attach(window)
        # Changing the class, not replacing the cell, keeps the very
        # Parameter objects (the optimizer already holds gamma and beta),
        # their names, the parent's reference and isinstance checks.
        layer.__class__ = _CONVERSIONS[type(layer)]
        layer.window = window
    return [name for name, _ in layers]
