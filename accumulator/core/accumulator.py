"""The gradient accumulator's core: sum micro-batch gradients, close each window in named stages, update once."""
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops
from mindspore.experimental.optim import Optimizer as NewOptimizer

from accumulator._internal import buffers
from accumulator._internal.buckets import Buckets
from accumulator._internal.checks import grads_match
from accumulator._internal.constants import FALSE, ONE_FLOAT, ONE_INT, TRUE, ZERO_FLOAT, ZERO_INT, state_parameter
from accumulator._internal.deprecation import deprecated
from accumulator.core._host_step import HostStep
from accumulator.policies.noise import NoiseTracker
from accumulator.core._options import keyword_policies
from accumulator.policies.base import HOOKS, takes_part
from accumulator._internal.runtime import block_on_cpu
from accumulator.batch_size.schedule import as_schedule
from accumulator._internal.sums import all_finite, on_cpu, squared_total

REDUCTIONS = ("mean", "sum")
# Gradients summed in float16 or bfloat16 stall: 2048 + 1 is 2048 in float16.
LOW_PRECISION = (ms.float16, ms.bfloat16)
FLOAT_DTYPES = (ms.float16, ms.bfloat16, ms.float32, ms.float64)
# nn's optimizers, and the PyTorch-style experimental.optim ones that mint.optim's subclass too.
OPTIMIZERS = (nn.Optimizer, NewOptimizer)

def _product(factor, other):
    if other is None:
        return factor
    return other if factor is None else factor * other


def _sum_dtype(param_dtype, accumulate_dtype):
    if accumulate_dtype is not None:
        return accumulate_dtype
    return ms.float32 if param_dtype in LOW_PRECISION else param_dtype


def _check_arguments(optimizer, reduction, grad_reducer, accumulate_dtype):
    if not isinstance(optimizer, OPTIMIZERS):
        raise TypeError("optimizer must be a mindspore.nn.Optimizer or a mindspore.experimental.optim "
                        f"(or mint.optim) Optimizer, got {type(optimizer).__name__}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if grad_reducer is not None and not callable(grad_reducer):
        raise TypeError(f"grad_reducer must be callable, got {grad_reducer!r}")
    if accumulate_dtype is not None and accumulate_dtype not in FLOAT_DTYPES:
        raise ValueError(f"accumulate_dtype must be None or one of {[str(d) for d in FLOAT_DTYPES]}, "
                         f"got {accumulate_dtype}")


def _reduced(grads, total, closing, grad_reducer):
    """The window's sums, its weight and each closing policy's tensors, reduced across devices when asked."""
    tensors = [policy.window_tensors() for policy in closing]
    if grad_reducer is not None:
        extra = ()
        for own in tensors:
            extra = extra + own
        reduced = grad_reducer(tuple(grads) + extra + (total,))
        grads, total = reduced[:len(grads)], reduced[-1]
        start, parts = len(grads), ()
        for own in tensors:
            parts = parts + (reduced[start:start + len(own)],)
            start = start + len(own)
        tensors = parts
    return grads, total, tensors


def _summary(needs, by_matmul, grads, factor, total, unscale, nonempty):
    """The window's summary the policies read (``accumulator.policies.base``): each value computed once, if asked for."""
    summary = {"total": total, "unscale": unscale, "nonempty": nonempty}
    norm = None
    if needs["norm"]:
        # Any NaN or Inf makes the norm NaN or Inf, so on CPU it is the finiteness check too.
        norm = ops.sqrt(squared_total(by_matmul, grads))
        summary["norm"] = norm if factor is None else norm * factor
    if needs["finite"]:
        summary["finite"] = (ops.isfinite(summary["norm"]) if by_matmul and norm is not None
                              else all_finite(by_matmul, grads))
    return summary


@ms.jit_class
class Accumulator:
    """Sums micro-batch gradients and runs ``optimizer`` once per window.

    Call it with each micro-batch's gradients in your jitted step (or ``accumulate`` there and
    ``step()`` on the host). A full window is closed once: reduced, normalised, summarised, scaled
    by the policies' factors, applied unless a gate skips it, and cleared. With ``reduction="mean"``
    it is divided by its micro-steps, or by the sum of the ``count``s of a summed loss. Every driver
    (``window``, ``whole_batch``, ``cell``, ``host_step``) uses the public calls that
    docs/how-it-works.md#the-window-protocol lists.

    Args:
        optimizer: an ``nn.Optimizer``, or an ``experimental.optim`` / ``mint.optim`` one.
        accumulate_step: N: an int, a dict ``{update_count: N}``, a callable
            or a ``NoiseScaleSchedule`` (``accumulator.batch_size.schedule``).
        reduction: ``"mean"`` or ``"sum"`` (the raw sum).
        grad_reducer: run on the window's tensors once per window (``accumulator.devices.all_reduce``).
        accumulate_dtype: the sums' dtype; ``None``: float32 for 16-bit parameters, else theirs.
        clip_norm, skip_nonfinite, loss_scaler, spike_factor, spike_warmup, track_noise,
            micro_batch_size: the common policies' keywords (``accumulator.core._options``).
        policies: more policies (``accumulator.policies.base``), after the keywords'.

    Attributes:
        buffers: the window's sums, in flat buckets (``accumulator._internal.buckets``).
        accumulate_step, micro_step, weight_total, update_count, skipped_windows:
            Parameters: N, micro-batches added, the mean's divisor, windows applied and skipped.
        policies: in the order their hooks run; ``noise``: the noise tracker, or None.

    Example: gradients 1, 2, 3, 4 in windows of 2, SGD at learning rate 1: the means 1.5 and 3.5 apply.
        >>> w = Parameter(Tensor([0.0]), name="w")
        >>> accumulator = Accumulator(nn.SGD([w], 1.0), accumulate_step=2)
        >>> def make_train_step(accumulator):
        ...     @ms.jit
        ...     def train_step(grad):
        ...         return accumulator((grad,))
        ...     return train_step
        >>> train_step = make_train_step(accumulator)
        >>> [bool(train_step(Tensor([g]))) for g in (1.0, 2.0, 3.0, 4.0)], w.asnumpy()
        ([False, True, False, True], array([-5.], dtype=float32))
    """

    def __init__(self, optimizer, accumulate_step=1, reduction="mean", clip_norm=None,
                 skip_nonfinite=True, loss_scaler=None, grad_reducer=None, accumulate_dtype=None,
                 spike_factor=None, spike_warmup=10, track_noise=False, micro_batch_size=None, policies=()):
        _check_arguments(optimizer, reduction, grad_reducer, accumulate_dtype)
        # Here, not at import: the device is chosen by now, and no graph of the library has run yet
        # (docs/mindspore-behaviours.md#asynchronous-launch-slows-small-graphs-on-cpu).
        block_on_cpu()
        self.schedule = as_schedule(accumulate_step)
        chosen = keyword_policies(reduction, clip_norm, skip_nonfinite, loss_scaler, spike_factor, spike_warmup,
                                  track_noise, micro_batch_size) + list(policies)
        self.optimizer = optimizer
        self.reduction = reduction
        self.grad_reducer = grad_reducer
        self.sum_by_matmul = on_cpu()
        self._param_shapes = tuple(list(p.shape) for p in optimizer.parameters)
        # The parameters' bytes and nothing else of that size: cleared by assigning zeros, no "zeros" clone.
        dtypes = [_sum_dtype(p.dtype, accumulate_dtype) for p in optimizer.parameters]
        self.buckets = Buckets(optimizer.parameters, dtypes)
        self.buffers = self.buckets.zeros(optimizer.parameters, "accumulator")
        self._casts = any(d != p.dtype for d, p in zip(dtypes, optimizer.parameters))
        self.accumulate_step = state_parameter(self.schedule.first_step, ms.int32, "accumulate_step")
        self.micro_step = state_parameter(0, ms.int32, "micro_step")
        self.weight_total = state_parameter(0.0, ms.float32, "weight_total")
        self.update_count = state_parameter(0, ms.int32, "update_count")
        self.skipped_windows = state_parameter(0, ms.int32, "skipped_windows")
        # Written by a close and read by the update right after it, so not checkpointed: whether the window applies
        # (the closes whose update may skip: ``flush``, ``_close_held``) and by what factor (``_close_held``).
        self.ready = state_parameter(False, ms.bool_, "ready")
        self.window_factor = state_parameter(1.0, ms.float32, "window_factor")
        self.policies = []
        self.hooks = {hook: [] for hook in HOOKS}
        self.needs = {"norm": False, "finite": False}  # what the window summary computes
        for policy in chosen:
            self.attach(policy)
        self.noise = self.find(NoiseTracker)
        if self.schedule.reads_state:
            self.schedule.bind(self)
        self.host = HostStep(self)

    def attach(self, policy):
        """Adds ``policy`` (an ``accumulator.policies.base.Policy``, or an object with its hooks) before the first compile.

        Example:
            >>> from accumulator.policies.clipping import ClipNorm
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), accumulate_step=2)
            >>> accumulator.attach(ClipNorm(1.0))
            >>> [type(p).__name__ for p in accumulator.policies]
            ['SkipNonFiniteWindows', 'ClipNorm']
        """
        if not all(callable(getattr(policy, name, None)) for name in ("state_parameters", "window_tensors")):
            raise TypeError(f"a policy needs state_parameters() and window_tensors(), got {type(policy).__name__}")
        shadowed = [hook for hook in HOOKS if hook in vars(policy)]
        if shadowed:
            raise TypeError(f"{type(policy).__name__} has an attribute named like the hook {shadowed[0]!r}: the hook "
                            "names are the policy protocol (docs/policies.md#the-hooks), rename the attribute")
        self.policies.append(policy)
        for need in self.needs:
            self.needs[need] = self.needs[need] or getattr(policy, f"needs_{need}", False)
        for hook in HOOKS:
            if takes_part(policy, hook):
                self.hooks[hook].append(policy)

    def find(self, kind):
        """The first attached policy that is a ``kind``, or None.

        Example:
            >>> Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 2).find(NoiseTracker) is None
            True
        """
        return next((policy for policy in self.policies if isinstance(policy, kind)), None)

    @property
    def samples_last(self):
        """True when a policy samples the window's last micro-batch (``track_noise=True``): a driver that does not
        count in the graph tells ``accumulate`` which micro-batch is last (``last``), or the graph branches on it.

        Example:
            >>> Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4, track_noise=True).samples_last
            True
        """
        return bool(self.hooks["sample_last"])

    @property
    def drops_micro_batches(self):
        """True when a policy may leave a micro-batch out of the sum (``skip_nonfinite="micro_batch"``): a driver
        that counts a run of micro-batches at once counts what ``add`` kept (``kept_share``).

        Example:
            >>> Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4,
            ...             skip_nonfinite="micro_batch").drops_micro_batches
            True
        """
        return bool(self.hooks["keep"])

    @property
    def loss_scale(self):
        """The scale the gradients carry (a ``loss_scaler``'s Parameter), for a driver that scales a loss of its
        own making; None when no policy unscales the window.

        Example:
            >>> scaler = ms.amp.StaticLossScaler(1024.0)
            >>> float(Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4, loss_scaler=scaler).loss_scale)
            1024.0
        """
        scale = None
        for policy in self.hooks["unscale"]:
            scale = _product(getattr(policy, "loss_scale", None), scale)
        return scale

    def next_ends_window(self):
        """True when the next micro-batch ``step()`` counts ends the window: its count on the host, no read from
        the device. For ``accumulate``'s ``last`` in a loop driven by ``step()``.

        Example:
            >>> accumulator = Accumulator(nn.SGD([Parameter(Tensor([0.0]), name="w")], 0.1), accumulate_step=2)
            >>> _ = accumulator.accumulate((Tensor([1.0]),))
            >>> accumulator.step(), accumulator.next_ends_window()
            (False, True)
        """
        return self.host.next_ends_window()

    def state_parameters(self):
        """Every Parameter of the state, the policies' included, for checkpoints.

        Example:
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4)
            >>> [p.name for p in accumulator.state_parameters()][1:3]
            ['accumulator.accumulate_step', 'accumulator.micro_step']
        """
        own = list(self.buffers) + [self.accumulate_step, self.micro_step, self.weight_total, self.update_count,
                                    self.skipped_windows]
        return own + [p for policy in self.policies for p in policy.state_parameters()]

    def __call__(self, grads, count=None, flush=False):
        """The in-graph driver: adds ``grads`` (of ``count`` samples), applies a full window (or with ``flush``,
        a bool Tensor, any); True when it applied (see the class example)."""
        flats = self._packed(grads, count)
        kept = self._add(flats, count)
        self._count_one(count, kept)
        full = self.micro_step >= self.accumulate_step
        if flush is not False:
            full = ops.logical_or(full, flush)
        # One branch, every path of it returning what the call returns, nothing computed in it crossing into the
        # `if` inside: else MindSpore leaks host memory (docs/mindspore-behaviours.md#branches-that-leak-host-memory).
        if full:
            if self.samples_last:  # a Python test: an empty call here is a side effect MindSpore warns of
                self._sample_last(flats, count, kept)
            if self.hooks["gate"]:  # a Python test: a gate may skip the window, which the close leaves in `ready`
                return self._update_if_ready(None, self._close_held())
            # Nothing can skip it: the close's own Tensors go to the update, with no Parameter to hold them
            # (indexed: an element unpacked and unread warns, docs/mindspore-behaviours.md#python-values-in-a-graph-is-true-tuples-and-views).
            closed = self._closed(None)
            return self._update(closed[0], closed[1])
        return FALSE

    def accumulate(self, grads, count=None, last=None):
        """``add`` and ``count`` one micro-batch, returns the position; ``step()`` or ``flush`` applies. ``last``: True
        for the window's last micro-batch, when a policy samples it (``samples_last``); ``None``: the position
        decides (a branch, then).

        Example:
            >>> accumulator = Accumulator(nn.SGD([Parameter(Tensor([0.0]), name="w")], 0.1), accumulate_step=2)
            >>> [int(accumulator.accumulate((Tensor([1.0]),))) for _ in range(3)]   # past N: nothing applies
            [1, 2, 3]
        """
        flats = self._packed(grads, count)
        kept = self._add(flats, count)
        position = self._count_one(count, kept)
        if self.hooks["sample_last"]:
            if last is None:
                if position >= self.accumulate_step:
                    self._sample_last(flats, count, kept)
            elif last:
                self._sample_last(flats, count, kept)
        return position

    def step(self, flush=False):
        """On the host after each ``accumulate``: True when it applied the window (``accumulator.core._host_step``).

        Example:
            >>> accumulator = Accumulator(nn.SGD([Parameter(Tensor([0.0]), name="w")], 0.1), accumulate_step=2)
            >>> _ = accumulator.accumulate((Tensor([1.0]),))
            >>> accumulator.step(), accumulator.step(flush=True), accumulator.step(flush=True)
            (False, True, False)
        """
        return self.host.step(flush)

    def add(self, grads, count=None):
        """Sums ``grads`` without counting them (``count`` does); True when kept. For loops (``accumulator.drivers.window``).

        Example:
            >>> accumulator = Accumulator(nn.SGD([Parameter(Tensor([0.0]), name="w")], 0.1), accumulate_step=4)
            >>> bool(accumulator.add((Tensor([2.0]),))), accumulator.grad_buffers[0].asnumpy()
            (True, array([2.], dtype=float32))
        """
        return self._add(self._packed(grads, count), count)

    def count(self, micro_steps, weight=None, kept=None):
        """Counts ``micro_steps`` added micro-batches, ``kept`` of them kept, of summed counts ``weight``; the position.

        Example:
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4)
            >>> int(accumulator.count(Tensor(2, ms.int32), Tensor(50.0))), float(accumulator.weight_total)
            (2, 50.0)
        """
        if weight is not None:
            self.check_counts()
        steps = micro_steps if kept is None else kept
        for policy in self.hooks["count"]:
            policy.count(micro_steps, weight, steps)
        ops.assign_add(self.weight_total, ops.cast(steps if weight is None else weight, ms.float32))
        return ops.assign_add(self.micro_step, micro_steps)

    def kept_share(self, count, kept):
        """``(steps, weight)`` one micro-batch adds to the window's count when ``add`` returned ``kept`` for it:
        1 and its ``count`` (None without one) when kept, 0 and 0 when left out. A loop sums these and passes them
        to ``count`` once (``accumulator.drivers.window``).

        Example:
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4)
            >>> [float(x) for x in accumulator.kept_share(Tensor(5.0), Tensor(True))]
            [1.0, 5.0]
            >>> [float(x) for x in accumulator.kept_share(Tensor(5.0), Tensor(False))]
            [0.0, 0.0]
        """
        weight = None if count is None else ops.cast(count, ms.float32) * kept.astype(ms.float32)
        return kept.astype(ms.int32), weight

    def tally(self, tally, count, kept):
        """Deprecated: add ``kept_share(count, kept)`` to ``tally`` yourself (the same numbers).

        Example:
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4)
            >>> import warnings
            >>> with warnings.catch_warnings():
            ...     warnings.simplefilter("ignore")
            ...     [float(x) for x in accumulator.tally((ZERO_INT, ZERO_FLOAT), Tensor(5.0), Tensor(True))]
            [1.0, 5.0]
        """
        deprecated("Accumulator.tally", "Accumulator.kept_share")
        steps, weight = tally
        share, share_weight = self.kept_share(count, kept)
        return steps + share, weight if share_weight is None else weight + share_weight

    def flush(self):
        """Applies a partial window now (an epoch's end), normalised by what it holds; an empty one does nothing.

        Example:
            >>> accumulator = Accumulator(nn.SGD([Parameter(Tensor([0.0]), name="w")], 0.1), accumulate_step=4)
            >>> bool(accumulator((Tensor([1.0]),))), bool(accumulator.flush()), bool(accumulator.flush())
            (False, True, False)
        """
        # No `if` on emptiness: an empty window is not `ready`.
        grads, factor, applied = self._closed(self.micro_step > 0)
        ops.assign(self.ready, applied)
        return self._update_if_ready(grads, factor)

    def end_window(self):
        """``step()``'s first stage: closes the window; returns int32 ``[applied, next N, micro-batches in it]``.

        Example:
            >>> accumulator = Accumulator(nn.SGD([Parameter(Tensor([0.0]), name="w")], 0.1), accumulate_step=4)
            >>> _ = accumulator.accumulate((Tensor([1.0]),))
            >>> accumulator.end_window().asnumpy().tolist(), bool(accumulator.apply_window())    # applied, N, size
            ([1, 4, 1], True)
        """
        # Read before the close resets it: a kernel; `* 1` is folded into a read of the reset Parameter.
        micro_batches = ops.maximum(self.micro_step, ZERO_INT)
        applied = self._close_window()
        # `* 1`: op by op, Stack takes no Parameter; in a graph it reads N as the close left it.
        return ops.stack((applied.astype(ms.int32), self.accumulate_step * 1, micro_batches))

    def apply_window(self):
        """``step()``'s second stage: the update of a window ``end_window`` applied (see its example)."""
        return self._update()

    def _close_window(self):
        """Closes a full window in place: its stages, then the buffers scaled into the update's gradient
        (by 0 when a gate skipped it); returns ``applied``, a bool Tensor."""
        grads, factor, applied = self._closed(None)
        if self.hooks["gate"]:
            # select, not factor * applied: an empty window's factor is 1/0, and inf * 0 is NaN.
            factor = ops.select(applied, ONE_FLOAT if factor is None else factor, ZERO_FLOAT)
        if factor is not None or self.grad_reducer is not None:
            buffers.scale_into(self.buffers, grads, factor)
        return applied

    def _close_held(self):
        """Closes a full window for an update that reads only Parameters (``_update_if_ready``): the reduced sums
        written back, the factor held in ``window_factor``; returns that Parameter, or None when nothing scales."""
        # Indexed, as in __call__: the sums go unread without a reducer.
        closed = self._closed(None)
        factor = closed[1]
        ops.assign(self.ready, closed[2])
        if self.grad_reducer is not None:
            buffers.scale_into(self.buffers, closed[0], None)
        if factor is None:
            return None
        ops.assign(self.window_factor, factor)
        return self.window_factor

    def _closed(self, nonempty):
        """The close's stages: reduce, summarise, the policies' factors, gates and ends, the counters reset.
        ``nonempty``: None for a full window, else a bool Tensor (False: nothing in it). Returns ``(grads, factor,
        applied)``: the reduced sums, what the update multiplies them by (None: nothing) and whether it runs."""
        grads, total, tensors = _reduced(self.buffers, self.weight_total, self.hooks["close_window"], self.grad_reducer)
        if nonempty is not None and self.grad_reducer is not None:
            nonempty = total > 0  # any rank's: one with nothing applies the others' window (docs/devices.md)
        factor = 1.0 / total if self.reduction == "mean" else None
        unscale = ONE_FLOAT
        for policy in self.hooks["unscale"]:
            unscale = unscale * policy.unscale()
        if self.hooks["unscale"]:
            factor = _product(factor, unscale)
        summary = _summary(self.needs, self.sum_by_matmul, grads, factor, total, unscale,
                           TRUE if nonempty is None else nonempty)
        for policy in self.hooks["factor"]:
            factor = _product(factor, policy.factor(summary))
        applied = nonempty
        for policy in self.hooks["gate"]:
            gate = policy.gate(summary)
            applied = gate if applied is None else ops.logical_and(applied, gate)
        applied = TRUE if applied is None else applied
        summary["applied"] = applied
        for policy, own in zip(self.hooks["close_window"], tensors):
            policy.close_window(own, summary)
        if self.hooks["gate"] or nonempty is not None:
            skipped = ops.logical_not(applied)
            if nonempty is not None:  # a Python test: a full window is never empty
                skipped = ops.logical_and(skipped, nonempty)
            ops.assign_add(self.skipped_windows, skipped.astype(ms.int32))
        ops.assign(self.micro_step, ZERO_INT)
        ops.assign(self.weight_total, ZERO_FLOAT)
        if self.schedule.fixed_step is None:
            ops.assign(self.accumulate_step, self.schedule(self.update_count + applied.astype(ms.int32)))
        return grads, factor, applied

    def _update_if_ready(self, grads, factor):
        # Reads `ready`, a Parameter; nested, it must read only Parameters (docs/mindspore-behaviours.md#branches-that-leak-host-memory).
        if self.ready:
            return self._update(grads, factor)
        buffers.clear(self.buffers)
        return FALSE

    def _update(self, grads=None, factor=None):
        grads = self.buffers if grads is None else grads
        if factor is not None:
            grads = buffers.scaled(grads, factor)
        grads = self.buckets.split(grads)  # per parameter only here, where the optimizer takes them
        if self._casts:
            grads = buffers.cast_like(self.optimizer.parameters, grads)
        self.optimizer(grads)
        for policy in self.hooks["after_update"]:
            policy.after_update()
        ops.assign_add(self.update_count, ONE_INT)
        buffers.clear(self.buffers)
        return TRUE

    def _packed(self, grads, count=None):
        if count is not None:
            self.check_counts()
        grads_match(grads, self._param_shapes)
        return self.buckets.flatten(grads)

    def _add(self, flats, count):
        kept = None
        for policy in self.hooks["keep"]:
            keep = policy.keep(flats)
            kept = keep if kept is None else ops.logical_and(kept, keep)
        buffers.add(self.buffers, flats, None if kept is None else kept.astype(ms.float32))
        kept = TRUE if kept is None else kept
        for policy in self.hooks["add"]:
            policy.add(flats, count, kept)
        return kept

    def _count_one(self, count, kept):
        # Not one helper returning (kept, position): that dropped add()'s writes (docs/mindspore-behaviours.md#python-values-in-a-graph-is-true-tuples-and-views).
        if not self.hooks["keep"]:
            return self.count(ONE_INT, count)
        steps, weight = self.kept_share(count, kept)
        return self.count(ONE_INT, weight, steps)

    def _sample_last(self, flats, count, kept):  # after the window's last micro-batch is added and counted
        for policy in self.hooks["sample_last"]:
            policy.sample_last(flats, count, kept, self.buffers, self.weight_total)

    @property
    def noise_scale(self):
        """The gradient noise scale tr(Σ) / |G|² (``track_noise``), read on the host; None until estimated.

        Example:
            >>> Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4, track_noise=True).noise_scale is None
            True
        """
        if self.noise is None:
            raise ValueError("noise_scale needs Accumulator(..., track_noise=True)")
        return self.noise.noise_scale()

    @property
    def grad_buffers(self):
        """The window's running sum per optimizer parameter, copied on the host.

        Example:
            >>> [tuple(b.shape) for b in Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4).grad_buffers]
            [(1, 3), (1,)]
        """
        return self.buckets.split(self.buffers)

    def check_counts(self):
        """Raises ValueError unless this accumulator takes counts (``reduction="mean"``).

        Example:
            >>> Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 2, reduction="sum").check_counts()
            Traceback (most recent call last):
            ...
            ValueError: counts were given to an Accumulator with reduction='sum': counts weigh the window's mean, so use reduction='mean' with counts, or give none
        """
        if self.reduction != "mean":
            raise ValueError(f"counts were given to an Accumulator with reduction='{self.reduction}': counts weigh "
                             "the window's mean, so use reduction='mean' with counts, or give none")
