"""The gradient accumulator's core: sum micro-batch gradients, close each window in named stages, update once."""
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops
from mindspore.experimental.optim import Optimizer as NewOptimizer

from accumulator.buckets import Buckets
from accumulator.constants import FALSE, ONE_FLOAT, ONE_INT, TRUE, ZERO_FLOAT, ZERO_INT
from accumulator.host_step import HostStep
from accumulator.noise import NoiseTracker
from accumulator.options import keyword_policies
from accumulator.policy import HOOKS, takes_part
from accumulator.schedule import as_schedule
from accumulator.sums import all_finite, on_cpu, squared_total

REDUCTIONS = ("mean", "sum")
# Gradients summed in float16 or bfloat16 stall: 2048 + 1 is 2048 in float16.
LOW_PRECISION = (ms.float16, ms.bfloat16)
FLOAT_DTYPES = (ms.float16, ms.bfloat16, ms.float32, ms.float64)
# nn's optimizers, and the PyTorch-style experimental.optim ones that mint.optim's subclass too.
OPTIMIZERS = (nn.Optimizer, NewOptimizer)

_hyper_map = ops.HyperMap()
_mul_no_nan = ops.MulNoNan()


# Module-level helpers: lambdas in in-graph branches do not compile
# (docs/mindspore-behaviours.md#lambdas-inside-in-graph-branches-do-not-compile).
def _add_into(buffer, grad):
    return ops.assign_add(buffer, grad)


def _times(factor, grad):
    """``grad * factor`` with 0 wherever ``factor`` is 0, even where ``grad`` is NaN or Inf."""
    if grad.dtype != ms.float32:
        factor = factor.astype(grad.dtype)
    if grad.dtype == ms.bfloat16:  # MulNoNan has no bfloat16 kernel on CPU
        return ops.where(factor != 0, grad * factor, ops.zeros_like(grad))
    # MulNoNan, not where(factor != 0, ...): no zeros or mask tensors (docs/performance.md#memory).
    return _mul_no_nan(grad, factor)


def _add_if(keep, buffer, grad):
    # A multiply by the 0/1 ``keep``, not a branch (docs/mindspore-behaviours.md#every-if-in-a-graph-costs-each-call-taken-or-not).
    return ops.assign_add(buffer, _times(keep, grad))


def _cast_like(param, buffer):
    return buffer.astype(param.dtype)


def _scaled(factor, grad):
    if grad.dtype != ms.float32:
        factor = factor.astype(grad.dtype)
    return grad * factor


def _clear(buffer):
    # Assign zeros, not `buffer * 0`: NaN * 0 stays NaN.
    return ops.assign(buffer, ops.zeros_like(buffer))


def _assign(buffer, value):
    return ops.assign(buffer, value)


def _scale_into(factor, buffer, grad):
    return ops.assign(buffer, _times(factor, grad))


def _product(factor, other):
    if other is None:
        return factor
    return other if factor is None else factor * other


def _sum_dtype(param_dtype, accumulate_dtype):
    if accumulate_dtype is not None:
        return accumulate_dtype
    return ms.float32 if param_dtype in LOW_PRECISION else param_dtype


def _state_parameter(value, dtype, name):
    return Parameter(Tensor(value, dtype), name=f"accumulator.{name}", requires_grad=False)


@ms.jit_class
class Accumulator:
    """Sums micro-batch gradients and runs ``optimizer`` once per window.

    Call it with each micro-batch's gradients inside your jitted train step
    (or ``accumulate`` there and ``step()`` on the host). When the window is
    full it is closed once: reduced across devices, normalised, summarised
    (norm, finiteness), scaled by the policies' factors, applied unless a
    policy's gate says skip, and cleared. Compute the loss as for one batch:
    with ``reduction="mean"`` the accumulator divides once per window.

    Args:
        optimizer: a ``mindspore.nn.Optimizer``, or a ``mindspore.experimental.optim``
            / ``mindspore.mint.optim`` one; it runs once per window.
        accumulate_step: N, micro-batches per window: an int, a dict
            ``{update_count: N}``, a callable or a ``NoiseScaleSchedule``
            (``accumulator.schedule``); N changes only between windows.
        reduction: ``"mean"`` divides the window's sum by its micro-steps, or
            by the sum of the counts passed; ``"sum"`` applies the raw sum.
        grad_reducer: a callable run once per window on the window's tensors
            (its weight last), before normalising (``accumulator.distributed``).
        accumulate_dtype: the sums' dtype; ``None`` sums float16 and bfloat16
            gradients in float32 and every other in its parameter's dtype.
        clip_norm, skip_nonfinite, loss_scaler, spike_factor, spike_warmup,
            track_noise, micro_batch_size: keywords for the common policies
            (``accumulator.options``): ``ClipNorm``, ``SkipNonFiniteWindows``
            (``True``, the default) or ``SkipNonFiniteMicroBatches``
            (``"micro_batch"``), ``LossScaling``, ``SkipSpikes``,
            ``NoiseFromLastMicroBatch`` (``True``) or ``NoiseFromEveryMicroBatch``.
        policies: more policies (``accumulator.policy``), after the keywords'.

    Attributes:
        buffers: the window's running sum, in flat buckets (``accumulator.buckets``).
        accumulate_step, micro_step, weight_total, update_count, skipped_windows:
            Parameters: N of this window, micro-batches added, the mean's
            divisor, windows applied, windows a gate skipped.
        policies: the policies in the order their hooks run; ``noise`` the
            noise tracker among them, or None.

    Example:
        >>> import numpy as np
        >>> net = nn.Dense(3, 1)
        >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=2)
        >>> def make_train_step(net, accumulator):
        ...     def forward(x):
        ...         return net(x).sum()
        ...     grad_fn = ms.value_and_grad(forward, None, accumulator.optimizer.parameters)
        ...     @ms.jit
        ...     def train_step(x):
        ...         loss, grads = grad_fn(x)
        ...         return loss, accumulator(grads)
        ...     return train_step
        >>> train_step = make_train_step(net, accumulator)
        >>> [bool(train_step(Tensor(np.ones((4, 3), np.float32)))[1]) for _ in range(4)]
        [False, True, False, True]

    For micro-batches of different sizes, take the gradient of a summed
    loss and pass each one's sample count, ``accumulator(grads, count)``:
    the update uses ``sum(grads) / sum(counts)``, the large batch's mean.
    """

    def __init__(self, optimizer, accumulate_step=1, reduction="mean", clip_norm=None,
                 skip_nonfinite=True, loss_scaler=None, grad_reducer=None, accumulate_dtype=None,
                 spike_factor=None, spike_warmup=10, track_noise=False, micro_batch_size=None, policies=()):
        if not isinstance(optimizer, OPTIMIZERS):
            raise TypeError("optimizer must be a mindspore.nn.Optimizer or a mindspore.experimental.optim "
                            f"(or mint.optim) Optimizer, got {type(optimizer).__name__}")
        self.schedule = as_schedule(accumulate_step)
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        if grad_reducer is not None and not callable(grad_reducer):
            raise TypeError(f"grad_reducer must be callable, got {grad_reducer!r}")
        if accumulate_dtype is not None and accumulate_dtype not in FLOAT_DTYPES:
            raise ValueError(f"accumulate_dtype must be None or one of {[str(d) for d in FLOAT_DTYPES]}, "
                             f"got {accumulate_dtype}")
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
        self.accumulate_step = _state_parameter(self.schedule.first_step, ms.int32, "accumulate_step")
        self.micro_step = _state_parameter(0, ms.int32, "micro_step")
        self.weight_total = _state_parameter(0.0, ms.float32, "weight_total")
        self.update_count = _state_parameter(0, ms.int32, "update_count")
        self.skipped_windows = _state_parameter(0, ms.int32, "skipped_windows")
        # Set and cleared within one call (see _update_if_ready), so never checkpointed.
        self.ready = _state_parameter(False, ms.bool_, "ready")
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
        """Adds ``policy`` (``accumulator.policy.Policy``, or any object with its hooks) after those there.

        Attach before the first compiled call.

        Example:
            >>> from accumulator.clipping import ClipNorm
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), accumulate_step=2)
            >>> accumulator.attach(ClipNorm(1.0))
            >>> [type(p).__name__ for p in accumulator.policies]
            ['SkipNonFiniteWindows', 'ClipNorm']
            >>> accumulator.attach(object())
            Traceback (most recent call last):
            ...
            TypeError: a policy must have state_parameters() and window_tensors() methods, got object
        """
        if not all(callable(getattr(policy, name, None)) for name in ("state_parameters", "window_tensors")):
            raise TypeError(f"a policy must have state_parameters() and window_tensors() methods, "
                            f"got {type(policy).__name__}")
        self.policies.append(policy)
        self.needs["norm"] = self.needs["norm"] or getattr(policy, "needs_norm", False)
        self.needs["finite"] = self.needs["finite"] or getattr(policy, "needs_finite", False)
        for hook in HOOKS:
            if takes_part(policy, hook):
                self.hooks[hook].append(policy)

    def find(self, kind):
        """The first attached policy that is a ``kind``, or None.

        Example:
            >>> from accumulator.nonfinite import SkipNonFiniteWindows
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 2, skip_nonfinite=False)
            >>> accumulator.find(SkipNonFiniteWindows) is None
            True
        """
        return next((policy for policy in self.policies if isinstance(policy, kind)), None)

    def state_parameters(self):
        """Every Parameter of the accumulator's state, its policies' included, for checkpoints.

        Example:
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4)
            >>> [p.name for p in accumulator.state_parameters()][1:]
            ['accumulator.accumulate_step', 'accumulator.micro_step', 'accumulator.weight_total',
             'accumulator.update_count', 'accumulator.skipped_windows']
        """
        own = list(self.buffers) + [self.accumulate_step, self.micro_step, self.weight_total, self.update_count,
                                    self.skipped_windows]
        return own + [p for policy in self.policies for p in policy.state_parameters()]

    def __call__(self, grads, count=None, flush=False):
        """Adds one micro-batch's ``grads``; applies the window when it is full: the in-graph driver.

        ``count``: the micro-batch's samples (or tokens) when the grads come
        from a summed loss. ``flush`` (a bool Tensor) applies the window after
        this micro-batch even if it is not full. Returns a bool Tensor, True
        when the optimizer ran (see the class example).
        """
        self._check_weight(count)
        flats = self._packed(grads)
        kept = self._add(flats, count)
        self._count_one(count, kept)
        full = self.micro_step >= self.accumulate_step
        if flush is not False:
            full = ops.logical_or(full, flush)
        # Branch on a name that is not returned (docs/mindspore-behaviours.md#a-branch-whose-condition-is-also-returned-is-dropped).
        if full:
            self._sample_last(flats, count, kept)
            self._close_window()
        return self._update_if_ready()

    def accumulate(self, grads, count=None, last=None):
        """Adds one micro-batch's ``grads`` and never applies: ``step()`` on the host, or ``flush``, applies.

        ``last``: True for the micro-batch that ends the window, for a policy
        that samples it (``track_noise=True``); ``None`` lets the position
        decide (a branch, with such a policy only). Returns the position.

        Example:
            >>> net = nn.Dense(3, 1)
            >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=2)
            >>> grads = tuple(ops.ones_like(p) for p in net.trainable_params())
            >>> [int(accumulator.accumulate(grads)) for _ in range(3)]   # past N: nothing applies
            [1, 2, 3]
            >>> bool(accumulator.flush()), int(accumulator.micro_step)
            (True, 0)
        """
        self._check_weight(count)
        flats = self._packed(grads)
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
        """Applies the window when it is full; call it on the host after each ``accumulate`` (``accumulator.host_step``).

        A micro-step that applies nothing reads nothing from the device; a
        full window is closed and applied by two compiled calls. ``flush=True``
        applies a window that is not full. Returns True when the optimizer ran.

        Example:
            >>> net = nn.Dense(3, 1)
            >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=2)
            >>> _ = accumulator.accumulate(tuple(ops.ones_like(p) for p in net.trainable_params()))
            >>> accumulator.step(), accumulator.step(flush=True), accumulator.step(flush=True)
            (False, True, False)
        """
        return self.host.step(flush)

    def sync_position(self):
        """Sets ``step()``'s count of the window from the state; ``load_checkpoint`` calls it.

        Call it after changing the state any other way between ``step()`` calls.

        Example:
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), accumulate_step=4)
            >>> accumulator.sync_position()
            >>> accumulator.host.position, accumulator.host.size
            (0, 4)
        """
        self.host.sync_position()

    def compile_step(self):
        """Compiles ``step()``'s two calls without running them, so the first window does not wait (graph mode).

        Example:
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), accumulate_step=2)
            >>> accumulator.compile_step()
            >>> int(accumulator.update_count), int(accumulator.micro_step)
            (0, 0)
        """
        self.host.compile()

    def add(self, grads, count=None):
        """Sums ``grads`` into the buffers without counting them; pair it with ``count``.

        For a loop of many micro-batches in one graph (``accumulator.window``),
        which counts once after it. Returns a bool Tensor, True when the
        gradients were added (a ``keep`` policy may leave them out).

        Example:
            >>> net = nn.Dense(3, 1)
            >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=4)
            >>> for _ in range(3):
            ...     _ = accumulator.add(tuple(ops.ones_like(p) for p in net.trainable_params()))
            >>> int(accumulator.count(Tensor(3, ms.int32))), accumulator.grad_buffers[1].asnumpy()
            (3, array([3.], dtype=float32))
        """
        return self._add(self._packed(grads), count)

    def count(self, micro_steps, weight=None, kept=None):
        """Counts ``micro_steps`` added micro-batches; returns the position in the window.

        ``weight``: their summed counts, when the gradients come from a summed
        loss (``reduction="mean"`` only); ``None`` weighs each kept micro-step
        1. ``kept``: how many of them ``add`` kept (all when ``None``).

        Example:
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4)
            >>> int(accumulator.count(Tensor(2, ms.int32), Tensor(50.0))), float(accumulator.weight_total)
            (2, 50.0)
        """
        self._check_weight(weight)
        steps = micro_steps if kept is None else kept
        for policy in self.hooks["count"]:
            policy.count(micro_steps, weight, steps)
        ops.assign_add(self.weight_total, ops.cast(steps if weight is None else weight, ms.float32))
        return ops.assign_add(self.micro_step, micro_steps)

    def tally(self, tally, count, kept):
        """``(steps, weight)`` with one more micro-batch that ``add`` may have kept: ``count``'s arguments for a loop.

        Example:
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4)
            >>> steps, weight = accumulator.tally((ZERO_INT, ZERO_FLOAT), Tensor(5.0), Tensor(True))
            >>> int(steps), float(weight)
            (1, 5.0)
        """
        steps, weight = tally
        if count is not None:
            weight = weight + ops.cast(count, ms.float32) * kept.astype(ms.float32)
        return steps + kept.astype(ms.int32), weight

    def flush(self):
        """Applies a partial window now, normalised by what it holds; True when the optimizer ran.

        Call it at an epoch's end so no gradient is dropped; an empty window
        applies nothing and counts as nothing.

        Example:
            >>> net = nn.Dense(3, 1)
            >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=4)
            >>> grads = tuple(ops.ones_like(p) for p in net.trainable_params())
            >>> bool(accumulator(grads)), bool(accumulator.flush()), bool(accumulator.flush())
            (False, True, False)
        """
        # No `if` on emptiness, which every call would pay for; outside a branch the buffers are cleared after
        # the update whatever happened, so the update scales them as it hands them over (no write-back pass).
        grads, factor = self._close_window(self.micro_step > 0, write_back=False)
        updated = self._update_if_ready(grads, factor, clear=False)
        _hyper_map(_clear, self.buffers)
        return updated

    def end_window(self):
        """``step()``'s first stage: closes a window that holds micro-batches, applying nothing yet.

        Returns an int32 Tensor ``[applied, next N, micro-batches held]``.

        Example:
            >>> net = nn.Dense(3, 1)
            >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=4)
            >>> _ = accumulator.accumulate(tuple(ops.ones_like(p) for p in net.trainable_params()))
            >>> accumulator.end_window().asnumpy().tolist()    # applied, N, held
            [1, 4, 1]
            >>> bool(accumulator.apply_window()), int(accumulator.update_count)
            (True, 1)
        """
        # Read before the close resets it: a kernel, as `* 1` is folded into a read of the reset Parameter.
        held = ops.maximum(self.micro_step, ZERO_INT)
        applied = self._close_window()
        # `* 1`: op by op, Stack takes no Parameter; in a graph it reads N as the close left it.
        return ops.stack((applied.astype(ms.int32), self.accumulate_step * 1, held))

    def apply_window(self):
        """``step()``'s second stage: hands the window ``end_window`` applied to the optimizer and clears it."""
        return self._update()

    def _close_window(self, nonempty=None, write_back=True):
        """The window's close: reduce, summarise, the policies' factors and gates, their ends, then the counters.

        ``nonempty``: a bool Tensor, False for an empty window, which neither
        applies nor counts as skipped. With ``write_back`` the buffers are
        scaled in place for the update (0 for a skipped window, which MulNoNan
        makes 0 even for NaN); without it (``flush``) the grads and the scalar go to the update.
        """
        grads, total, tensors = self._reduce()
        factor = 1.0 / total if self.reduction == "mean" else None
        unscale = ONE_FLOAT
        for policy in self.hooks["unscale"]:
            unscale = unscale * policy.unscale()
        if self.hooks["unscale"]:
            factor = _product(factor, unscale)
        window = self._summary(grads, factor, total, unscale, TRUE if nonempty is None else nonempty)
        for policy in self.hooks["factor"]:
            factor = _product(factor, policy.factor(window))
        applied = window["nonempty"]
        for policy in self.hooks["gate"]:
            applied = ops.logical_and(applied, policy.gate(window))
        window["applied"] = applied
        for policy, own in zip(self.hooks["close_window"], tensors):
            policy.close_window(own, window)
        if self.hooks["gate"] or nonempty is not None:
            ops.assign_add(self.skipped_windows, ops.logical_and(ops.logical_not(applied), window["nonempty"])
                           .astype(ms.int32))
            if write_back:
                # select, not factor * applied: an empty window's factor is 1/0, and inf * 0 is NaN.
                factor = ops.select(applied, ONE_FLOAT if factor is None else factor, ZERO_FLOAT)
        if write_back and factor is not None:
            _hyper_map(ops.partial(_scale_into, factor), self.buffers, grads)
        elif write_back and self.grad_reducer is not None:
            _hyper_map(_assign, self.buffers, grads)
        ops.assign(self.ready, applied)
        ops.assign(self.micro_step, ZERO_INT)
        ops.assign(self.weight_total, ZERO_FLOAT)
        if self.schedule.fixed_step is None:
            ops.assign(self.accumulate_step, self.schedule(self.update_count + applied.astype(ms.int32)))
        if not write_back:
            return grads, factor
        return applied

    def _reduce(self):
        """The window's sums, its weight and each closing policy's tensors, reduced across devices when asked."""
        grads, total = self.buffers, self.weight_total
        tensors = [policy.window_tensors() for policy in self.hooks["close_window"]]
        if self.grad_reducer is not None:
            extra = ()
            for own in tensors:
                extra = extra + own
            reduced = self.grad_reducer(tuple(grads) + extra + (total,))
            grads, total = reduced[:len(grads)], reduced[-1]
            start, parts = len(grads), ()
            for own in tensors:
                parts = parts + (reduced[start:start + len(own)],)
                start = start + len(own)
            tensors = parts
        return grads, total, tensors

    def _summary(self, grads, factor, total, unscale, nonempty):
        """The window summary the policies read (``accumulator.policy``): each value computed once, if asked for."""
        window = {"total": total, "unscale": unscale, "nonempty": nonempty}
        norm = None
        if self.needs["norm"]:
            # Any NaN or Inf makes the norm NaN or Inf, so on CPU it is the finiteness check too.
            norm = ops.sqrt(squared_total(self.sum_by_matmul, grads))
            window["norm"] = norm if factor is None else norm * factor
        if self.needs["finite"]:
            by_norm = self.sum_by_matmul and norm is not None
            window["finite"] = ops.isfinite(window["norm"]) if by_norm else all_finite(self.sum_by_matmul, grads)
        return window

    def _update_if_ready(self, grads=None, factor=None, clear=True):
        # A sibling of the closing branch, not inside it (docs/mindspore-behaviours.md#a-data-dependent-if-inside-another-leaks-host-memory).
        if self.ready:
            return self._update(grads, factor, clear)
        return FALSE

    def _update(self, grads=None, factor=None, clear=True):
        if grads is None:
            grads = self.buffers
        if factor is not None:
            grads = _hyper_map(ops.partial(_scaled, factor), grads)
        grads = self.buckets.split(grads)  # per parameter only here, where the optimizer takes them
        if self._casts:
            grads = _hyper_map(_cast_like, self.optimizer.parameters, grads)
        self.optimizer(grads)
        ops.assign_add(self.update_count, ONE_INT)
        if clear:
            _hyper_map(_clear, self.buffers)
        ops.assign(self.ready, FALSE)
        return TRUE

    def _packed(self, grads):
        self._check_grads(grads)
        return self.buckets.flatten(grads)

    def _add(self, flats, count):
        """``add`` on gradients packed as the buffers are: one add per bucket; returns whether they were kept."""
        kept = None
        for policy in self.hooks["keep"]:
            keep = policy.keep(flats)
            kept = keep if kept is None else ops.logical_and(kept, keep)
        if kept is None:
            _hyper_map(_add_into, self.buffers, flats)
            kept = TRUE
        else:
            _hyper_map(ops.partial(_add_if, kept.astype(ms.float32)), self.buffers, flats)
        for policy in self.hooks["add"]:
            policy.add(flats, count, kept)
        return kept

    def _count_one(self, count, kept):
        # Not one helper returning (kept, position): that dropped add()'s writes
        # (docs/mindspore-behaviours.md#python-values-in-a-graph-is-true-tuples-and-views).
        if not self.hooks["keep"]:
            return self.count(ONE_INT, count)
        steps, weight = self.tally((ZERO_INT, ZERO_FLOAT), count, kept)
        return self.count(ONE_INT, None if count is None else weight, steps)

    def _sample_last(self, flats, count, kept):
        for policy in self.hooks["sample_last"]:
            policy.sample_last(flats, count, kept, self.buffers, self.weight_total)

    @property
    def noise_scale(self):
        """The gradient noise scale tr(Σ) / |G|², a float read on the host; None until it can be estimated.

        Needs ``track_noise``; ``noise.record()`` holds the averages behind it.

        Example:
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4,
            ...                           track_noise=True, micro_batch_size=32)
            >>> accumulator.noise_scale is None
            True
        """
        if self.noise is None:
            raise ValueError("noise_scale needs Accumulator(..., track_noise=True)")
        return self.noise.noise_scale()

    @property
    def grad_buffers(self):
        """The window's running sum per optimizer parameter, of its shape: a tuple of Tensors, copied on the host.

        Example:
            >>> net = nn.Dense(3, 1)
            >>> [tuple(b.shape) for b in Accumulator(nn.SGD(net.trainable_params(), 0.1), 4).grad_buffers]
            [(1, 3), (1,)]
        """
        return self.buckets.split(self.buffers)

    def _check_weight(self, weight):
        if weight is not None:
            self.check_counts()

    def check_counts(self):
        """Raises ValueError unless this accumulator takes counts (``reduction="mean"``), before anything compiles.

        Example:
            >>> Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 2, reduction="sum").check_counts()
            Traceback (most recent call last):
            ...
            ValueError: counts were given to an Accumulator with reduction='sum': counts weigh the window's mean, so use reduction='mean' with counts, or give none
        """
        if self.reduction != "mean":
            raise ValueError(f"counts were given to an Accumulator with reduction='{self.reduction}': counts weigh "
                             "the window's mean, so use reduction='mean' with counts, or give none")

    def _check_grads(self, grads):
        # Runs while the step compiles, on shapes alone; the hint names value_and_grad's weights, the usual cause.
        hint = "take them with ms.value_and_grad(forward, None, optimizer.parameters)"
        if isinstance(grads, Tensor):
            raise ValueError(f"grads must be a tuple with one gradient per optimizer parameter "
                             f"({len(self._param_shapes)}), got one Tensor of shape {list(grads.shape)}: {hint}")
        if len(grads) != len(self._param_shapes):
            raise ValueError(f"grads holds {len(grads)} gradients but the optimizer has "
                             f"{len(self._param_shapes)} parameters: {hint}")
        for index, (grad, shape) in enumerate(zip(grads, self._param_shapes)):
            # Shapes are lists: the graph compiler prints a tuple (9,) as (9).
            if list(grad.shape) != shape:
                raise ValueError(f"grads[{index}] has shape {list(grad.shape)}, expected {shape} "
                                 f"like the optimizer's parameter: {hint}")
