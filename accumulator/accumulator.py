"""The gradient accumulator: sum micro-batch gradients, update once per window."""
import warnings

import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops
from mindspore.experimental.optim import Optimizer as NewOptimizer

from accumulator.buckets import Buckets
from accumulator.checks import non_negative_int, positive_int
from accumulator.constants import FALSE, ONE_FLOAT, ONE_INT, TRUE, ZERO_FLOAT, ZERO_INT, ones
from accumulator.noise import NoiseTracker
from accumulator.schedule import as_schedule

REDUCTIONS = ("mean", "sum")
# Gradients summed in float16 or bfloat16 stall: 2048 + 1 is 2048 in float16.
LOW_PRECISION = (ms.float16, ms.bfloat16)
FLOAT_DTYPES = (ms.float16, ms.bfloat16, ms.float32, ms.float64)
# The optimizer families MindSpore 2.10 ships: nn's, and the PyTorch-style
# experimental.optim ones that mint.optim's Adam, AdamW and SGD subclass too.
OPTIMIZERS = (nn.Optimizer, NewOptimizer)
# The running mean of window norms that spike_factor compares against: an
# exponential average over roughly the last ten windows, bias-corrected.
NORM_DECAY = 0.9

_hyper_map = ops.HyperMap()
_mul_no_nan = ops.MulNoNan()


# Helpers live at module level: lambdas in in-graph branches do not compile (docs/mindspore-behaviours.md).
def _add_into(buffer, grad):
    return ops.assign_add(buffer, grad)


def _times(factor, grad):
    """``grad * factor`` with 0 wherever ``factor`` is 0, even where ``grad`` is NaN or Inf."""
    if grad.dtype != ms.float32:
        factor = factor.astype(grad.dtype)
    if grad.dtype == ms.bfloat16:  # MulNoNan has no bfloat16 kernel on CPU
        return ops.where(factor != 0, grad * factor, ops.zeros_like(grad))
    # MulNoNan, not where(factor != 0, grad * factor, 0): no zeros or mask
    # tensors, and the wide benchmark net's peak memory drops by 600 MB.
    return _mul_no_nan(grad, factor)


def _add_if(keep, buffer, grad):
    # A multiply by the 0/1 ``keep``, not a branch inside the window step's loop (docs/mindspore-behaviours.md).
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


def _float32(grad):
    return grad if grad.dtype == ms.float32 else grad.astype(ms.float32)


def _distance(factor, grad, buffer):
    return _float32(grad) - _float32(buffer) * factor


def _square(grad):
    grad = _float32(grad)
    return grad * grad


def _plain_sum(grad):
    return _float32(grad).sum()


def _row_width(size):
    """The widest of 64, 32, ..., 2 that divides ``size``: a flat bucket's rows for ``_row_sums``; 1 if none."""
    for width in (64, 32, 16, 8, 4, 2):
        if size % width == 0:
            return width
    return 1


def _row_sums(grad):
    """A column of partial sums by MatMul: a matrix's row sums, a flat bucket's as rows of up to 64."""
    grad = _float32(grad)
    if grad.ndim < 2:
        width = _row_width(grad.size)
        if width == 1:
            return ops.matmul(grad.reshape((1, -1)), ones((grad.size, 1)))
        # Rows, not one (1, size) row: that MatMul is 3x slower (docs/mindspore-behaviours.md#cpu-reductions-are-slower-than-matmul).
        return ops.matmul(grad.reshape((-1, width)), ones((width, 1)))
    rows = grad.reshape((grad.shape[0], -1))
    return ops.matmul(rows, ones((rows.shape[1], 1)))


def _total(by_matmul, grads):
    """The float32 sum of every element of ``grads``, a 0-d Tensor."""
    if not by_matmul:
        return ops.addn(_hyper_map(_plain_sum, grads))
    # Row sums joined, summed by one more MatMul: faster on CPU than ReduceSum (docs/mindspore-behaviours.md).
    column = ops.concat(_hyper_map(_row_sums, grads))
    return ops.matmul(ones((1, column.shape[0])), column).reshape(())


def _squared_total(by_matmul, grads):
    return _total(by_matmul, _hyper_map(_square, grads))


def _all_finite(by_matmul, grads):
    if not by_matmul:
        return ms.amp.all_finite(grads)
    # Any NaN or Inf makes the sum NaN or Inf; a float32 sum of finite
    # gradients only overflows beyond 3e38.
    return ops.isfinite(_total(True, grads))


def _sum_dtype(param_dtype, accumulate_dtype):
    if accumulate_dtype is not None:
        return accumulate_dtype
    return ms.float32 if param_dtype in LOW_PRECISION else param_dtype


def _state_parameter(value, dtype, name):
    return Parameter(Tensor(value, dtype), name=f"accumulator.{name}", requires_grad=False)


@ms.jit_class
class Accumulator:
    """Sums micro-batch gradients and runs ``optimizer`` once per window.

    Call it with each micro-batch's gradients inside your (jitted) train
    step. When the window is full it scales the summed gradient once (the
    mean, loss-scale unscaling and clipping in one multiply), checks it,
    hands it to the optimizer and clears its buffers. Compute the loss as
    for one batch: with ``reduction="mean"`` do not divide it by
    ``accumulate_step``, the accumulator divides once per window.

    Args:
        optimizer: a ``mindspore.nn.Optimizer``, or a
            ``mindspore.experimental.optim`` / ``mindspore.mint.optim`` one.
            It runs once per window, so learning-rate lists and schedules
            advance per update; step an ``experimental.optim.lr_scheduler``
            when a call returns True (the window was applied).
        accumulate_step: micro-batches per window: a positive int, a dict
            ``{update_count: N}``, a callable ``update_count -> N`` or a
            ``NoiseScaleSchedule`` (see ``accumulator.schedule``). N changes
            only between windows.
        reduction: ``"mean"`` divides the window's sum by its number of
            micro-steps, or by the sum of counts when counts are passed;
            ``"sum"`` applies the raw sum.
        clip_norm: clip the window's gradient to this global norm once per
            window, just before the optimizer; ``None`` disables clipping.
            On CPU the norm doubles as the non-finite check, so a window whose
            norm overflows float32 (beyond about 1e19) is skipped as non-finite.
        skip_nonfinite: ``True``: when the window's gradient holds NaN or
            Inf, skip the optimizer, clear the window and count it in
            ``skipped_windows`` (always on with a ``loss_scaler``).
            ``"micro_batch"``: also leave out of the sum any micro-batch whose
            gradient holds NaN or Inf, counted in ``dropped_micro_batches``;
            the window still applies at its usual boundary, normalised by the
            micro-batches (or counts) it kept, and is skipped only when it
            kept none. Costs a check per micro-step. ``False``: no checks.
        loss_scaler: a ``mindspore.amp`` loss scaler whose ``scale`` you
            applied to the loss. The window's gradient is unscaled once, and
            the scaler adjusts once per window.
        grad_reducer: a callable run on the window's gradients (with the
            window's weight as the last item) once per window, before
            normalising; see ``accumulator.distributed``.
        accumulate_dtype: the dtype of the gradient sums. ``None`` (the
            default) sums float16 and bfloat16 parameters' gradients in
            float32 and every other parameter's in its own dtype; a
            floating dtype sums every gradient in it. The window is cast to
            each parameter's dtype once, just before the optimizer.
        spike_factor: skip a window (count it in ``skipped_windows``) whose
            gradient norm, before clipping, exceeds ``spike_factor`` times the
            running mean of recent applied windows' norms; the spike does not
            enter the mean. ``None`` disables it.
        spike_warmup: windows applied before ``spike_factor`` acts.
        track_noise: estimate the gradient noise scale (``noise_scale``,
            ``noise.record()``; see ``accumulator.noise``) from how far the
            window's last micro-batch gradient lies from the window's mean
            (``True``: a read of one gradient per window), or from every
            micro-batch's squared norm (``"micro_batch"``: less noisy, and
            the only way with one micro-batch per window on each of several
            devices; a read of the gradient per micro-step). Needs
            ``reduction="mean"`` and each micro-batch's
            sample count: the ``count`` of each call, or ``micro_batch_size``
            when every micro-batch has that many. Never changes the update.
        micro_batch_size: samples per micro-batch, for ``track_noise``
            without counts.

    Attributes:
        buffers: the window's running sum, packed into a few flat buckets
            laid out by ``buckets`` (see ``accumulator.buckets``).
        grad_buffers: the running sum per optimizer parameter, of its shape
            and buffer dtype: a copy, read on the host.
        accumulate_step: int32 Parameter, N of the current window (set from
            the schedule after every window).
        micro_step: int32 Parameter, micro-batches added to the current window.
        weight_total: float32 Parameter, the mean's divisor: the window's
            micro-steps, or the sum of their counts.
        update_count: int32 Parameter, windows the optimizer has applied.
        skipped_windows: int32 Parameter, windows dropped as non-finite (or
            as spikes).
        dropped_micro_batches: int32 Parameter, micro-batches left out as
            non-finite; only with ``skip_nonfinite="micro_batch"``.
        norm_average, norm_windows: float32 and int32 Parameters, the
            exponential average of applied windows' norms and how many it
            holds; only with ``spike_factor``.
        noise: the ``NoiseTracker`` and its state; only with ``track_noise``.
        ready: what the branch that closed a window tells the update branch
            after it in the same call: apply; never checkpointed.
        schedule: where the next window's N comes from (``fixed_step`` is
            its N when it never changes).
        sum_by_matmul: take the finiteness check and the clip norm as MatMul
            sums (the default on CPU; see ``_sum``).

    All the Parameters are the state ``state_parameters()`` returns and
    checkpoints hold; read one on the host with ``int(...)`` or ``float(...)``.

    Example:
        >>> import numpy as np
        >>> net = nn.Dense(3, 1)
        >>> optimizer = nn.SGD(net.trainable_params(), 0.1)
        >>> accumulator = Accumulator(optimizer, accumulate_step=2)
        >>> def make_train_step(net, accumulator):
        ...     def forward(x, y):
        ...         return ((net(x) - y) ** 2).mean()
        ...     grad_fn = ms.value_and_grad(forward, None, accumulator.optimizer.parameters)
        ...     @ms.jit
        ...     def train_step(x, y):
        ...         loss, grads = grad_fn(x, y)
        ...         return loss, accumulator(grads)
        ...     return train_step
        >>> train_step = make_train_step(net, accumulator)
        >>> x, y = Tensor(np.ones((4, 3), np.float32)), Tensor(np.zeros((4, 1), np.float32))
        >>> [bool(train_step(x, y)[1]) for _ in range(4)]
        [False, True, False, True]
        >>> int(accumulator.update_count), int(accumulator.micro_step)
        (2, 0)

    For micro-batches of different sizes, take the gradient of a *summed*
    loss and pass each micro-batch's sample count,
    ``accumulator(grads, count)``: the update uses
    ``sum(grads) / sum(counts)``, exactly the large batch's mean gradient.
    """

    def __init__(self, optimizer, accumulate_step=1, reduction="mean", clip_norm=None,
                 skip_nonfinite=True, loss_scaler=None, grad_reducer=None, accumulate_dtype=None,
                 spike_factor=None, spike_warmup=10, track_noise=False, micro_batch_size=None):
        if not isinstance(optimizer, OPTIMIZERS):
            raise TypeError("optimizer must be a mindspore.nn.Optimizer or a mindspore.experimental.optim "
                            f"(or mint.optim) Optimizer, got {type(optimizer).__name__}")
        self.schedule = as_schedule(accumulate_step)
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        if clip_norm is not None and (isinstance(clip_norm, bool) or not isinstance(clip_norm, (int, float))
                                      or not clip_norm > 0):
            raise ValueError(f"clip_norm must be a positive number or None, got {clip_norm!r}")
        if not (isinstance(skip_nonfinite, bool) or skip_nonfinite == "micro_batch"):
            raise TypeError(f"skip_nonfinite must be True, False or 'micro_batch', got {skip_nonfinite!r}")
        if loss_scaler is not None and not isinstance(loss_scaler, ms.amp.LossScaler):
            raise TypeError(f"loss_scaler must be a mindspore.amp.LossScaler, got {type(loss_scaler).__name__}")
        if grad_reducer is not None and not callable(grad_reducer):
            raise TypeError(f"grad_reducer must be callable, got {grad_reducer!r}")
        if accumulate_dtype is not None and accumulate_dtype not in FLOAT_DTYPES:
            raise ValueError(f"accumulate_dtype must be None or one of {[str(d) for d in FLOAT_DTYPES]}, "
                             f"got {accumulate_dtype}")
        if spike_factor is not None and (isinstance(spike_factor, bool) or not isinstance(spike_factor, (int, float))
                                         or not 1 < spike_factor < float("inf")):
            raise ValueError(f"spike_factor must be a number above 1 or None, got {spike_factor!r}")
        spike_warmup = non_negative_int(spike_warmup, "spike_warmup")
        if not (isinstance(track_noise, bool) or track_noise == "micro_batch"):
            raise TypeError(f"track_noise must be True, False or 'micro_batch', got {track_noise!r}")
        if track_noise and reduction != "mean":
            raise ValueError(f"track_noise needs reduction='mean' (micro-batch mean gradients), got {reduction!r}")
        if micro_batch_size is not None:
            micro_batch_size = positive_int(micro_batch_size, "micro_batch_size")

        self.optimizer = optimizer
        self.reduction = reduction
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        # An overflowed window under loss scaling must never reach the weights.
        self.skip_nonfinite = skip_nonfinite or loss_scaler is not None
        self.loss_scaler = loss_scaler
        self.grad_reducer = grad_reducer
        self.spike_factor = None if spike_factor is None else float(spike_factor)
        self.spike_warmup = spike_warmup
        self.micro_batch_size = micro_batch_size
        self.track_noise = track_noise
        # Decided here: graph code misreads `self.track_noise is True` for a str (docs/mindspore-behaviours.md).
        self._samples_last = track_noise is True
        # Sums by MatMul on CPU only: Ascend and GPU read their own overflow
        # status in ms.amp.all_finite, and Ascend may run a float32 MatMul in
        # float16, where a sum of squares overflows.
        self.sum_by_matmul = ms.get_context("device_target") == "CPU"
        self._param_shapes = tuple(list(p.shape) for p in optimizer.parameters)
        # The parameters' bytes and nothing else of that size: the window is
        # cleared by assigning zeros, so no second "zeros" clone is kept.
        dtypes = [_sum_dtype(p.dtype, accumulate_dtype) for p in optimizer.parameters]
        self.buckets = Buckets(optimizer.parameters, dtypes)
        self.buffers = self.buckets.zeros(optimizer.parameters, "accumulator")
        self._casts = any(d != p.dtype for d, p in zip(dtypes, optimizer.parameters))
        self.accumulate_step = _state_parameter(self.schedule.first_step, ms.int32, "accumulate_step")
        self.micro_step = _state_parameter(0, ms.int32, "micro_step")
        self.weight_total = _state_parameter(0.0, ms.float32, "weight_total")
        self.update_count = _state_parameter(0, ms.int32, "update_count")
        self.skipped_windows = _state_parameter(0, ms.int32, "skipped_windows")
        self._optional_state = []
        if skip_nonfinite == "micro_batch":
            self.dropped_micro_batches = _state_parameter(0, ms.int32, "dropped_micro_batches")
            self._optional_state.append(self.dropped_micro_batches)
        if spike_factor is not None:
            self.norm_average = _state_parameter(0.0, ms.float32, "norm_average")
            self.norm_windows = _state_parameter(0, ms.int32, "norm_windows")
            self._optional_state += [self.norm_average, self.norm_windows]
        self.noise = NoiseTracker(centered=track_noise is True) if track_noise else None
        if track_noise:
            self._optional_state += self.noise.state_parameters()
        if self.schedule.reads_state:
            self.schedule.bind(self)
        # Set and cleared within one call (see _update_if_ready), so never checkpointed.
        self.ready = _state_parameter(False, ms.bool_, "ready")
        self._skips = bool(self.skip_nonfinite) or spike_factor is not None
        self._stages = None  # step()'s two compiled calls (_HostStage), made on first use
        # step()'s count of the window, kept on the host: a micro-step that applies nothing reads nothing
        # (docs/mindspore-behaviours.md#the-window-applied-from-the-host-two-calls-no-branch-no-read-per-micro-step).
        self._position = 0
        self._size = self.schedule.first_step
        self.members = []

    def attach(self, member):
        """Adds ``member``'s per-window state to this accumulator's window.

        For state that, like the gradient, must cover the whole window
        (``convert_batchnorm``'s pooled batch statistics). ``member`` is a
        ``@ms.jit_class`` object with three methods:

        * ``state_parameters()``: its Parameters, checkpointed with the accumulator's;
        * ``window_tensors()``: a tuple of Tensors to be summed across devices
          with the window (by ``grad_reducer``);
        * ``close_window(tensors, applied)``: called once per window with those
          tensors, reduced, and a bool Tensor, True when the window is applied.
          It runs inside a branch, so it must not branch on Tensors itself
          (use ``ops.select``; see ``_update_if_ready``).

        Attach before the first compiled call and before building an
        ``AccumulationTrainCell``.

        Example:
            >>> @ms.jit_class
            ... class WindowCounter:
            ...     def __init__(self):
            ...         self.windows = Parameter(Tensor(0, ms.int32), name="windows", requires_grad=False)
            ...     def state_parameters(self):
            ...         return [self.windows]
            ...     def window_tensors(self):
            ...         return ()
            ...     def close_window(self, tensors, applied):
            ...         ops.assign_add(self.windows, applied.astype(ms.int32))
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), accumulate_step=2)
            >>> accumulator.attach(WindowCounter())
            >>> accumulator.state_parameters()[-1].name
            'windows'
            >>> accumulator.attach(object())
            Traceback (most recent call last):
            ...
            TypeError: member must have a state_parameters() method, got object
        """
        for method in ("state_parameters", "window_tensors", "close_window"):
            if not callable(getattr(member, method, None)):
                raise TypeError(f"member must have a {method}() method, got {type(member).__name__}")
        self.members.append(member)

    def state_parameters(self):
        """Every Parameter of the accumulator's state, for checkpoints.

        Example:
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4)
            >>> [p.name for p in accumulator.state_parameters()][1:]
            ['accumulator.accumulate_step', 'accumulator.micro_step', 'accumulator.weight_total',
             'accumulator.update_count', 'accumulator.skipped_windows']
        """
        own = list(self.buffers) + [self.accumulate_step, self.micro_step, self.weight_total,
                                         self.update_count, self.skipped_windows] + self._optional_state
        return own + [p for member in self.members for p in member.state_parameters()]

    def __call__(self, grads, count=None, flush=False):
        """Adds one micro-batch's ``grads``; applies the window when it is full.

        ``count`` is the micro-batch's number of samples (or tokens) when the
        grads come from a summed loss. ``flush`` (a bool Tensor) applies the
        window after this micro-batch even if it is not full, as ``flush()``
        would, in the same branch: for the last micro-batch of an epoch.
        Returns a bool Tensor, True when the optimizer ran on this call (see
        the class example).
        """
        self._check_weight(count)
        flats = self._packed(grads)
        kept = self._add(flats, count)
        self._count_one(count, kept)
        full = self.micro_step >= self.accumulate_step
        if flush is not False:
            full = ops.logical_or(full, flush)
        # Branch on a name that is not returned, or the branch is dropped (docs/mindspore-behaviours.md).
        if full:
            if self._samples_last:
                # Here, once a window: a norm per micro-step would cost a read of every gradient.
                self._sample_noise(flats, count, kept)
            self._close_window()
        return self._update_if_ready()

    def accumulate(self, grads, count=None, last=None):
        """Adds one micro-batch's ``grads`` to the window and never applies it.

        For loops that decide themselves when to apply: ``step()`` after
        each call, or ``flush``. ``last``: True for the micro-batch that ends
        the window, the one ``track_noise=True`` samples; ``None`` lets the
        window's position decide (a branch, with ``track_noise=True`` only).
        Returns the position in the window.

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
        if self._samples_last:
            if last is None:
                if position >= self.accumulate_step:
                    self._sample_noise(flats, count, kept)
            elif last:
                self._sample_noise(flats, count, kept)
        return position

    def step(self, flush=False):
        """Applies the window when it is full; call it on the host after each micro-step's ``accumulate``.

        The fastest way to drive the accumulator: the jitted micro-step adds
        the gradients without a branch (``accumulate(grads)``), and a full
        window is closed and applied here by two compiled calls of their own,
        with no branch in either: the close (reduce, normalise, clip, check,
        counters) returns whether the window is applied, and only
        then does the update (the optimizer and the clear) run. A
        data-dependent ``if`` in a graph costs every call, more with every
        tensor that crosses it (docs/mindspore-behaviours.md#every-if-in-a-graph-costs-each-call-taken-or-not).

        The window's position is counted here, on the host: a micro-step that
        applies nothing reads nothing from the device, and a window reads one
        result, its close's. ``load_checkpoint`` sets the count from the
        restored state; after changing the state any other way, call
        ``sync_position()``. ``flush=True`` applies a window that is not full
        (an epoch's last micro-batches, however they were added) by the same
        compiled calls, as ``flush()`` would. Returns True when the optimizer
        ran. ``compile_step()`` compiles those calls ahead of the first window.

        Example:
            >>> import numpy as np
            >>> net = nn.Dense(3, 1)
            >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=2)
            >>> def make_micro_step(net, accumulator):
            ...     def forward(x):
            ...         return net(x).sum()
            ...     grad_fn = ms.value_and_grad(forward, None, accumulator.optimizer.parameters)
            ...     @ms.jit
            ...     def micro_step(x):
            ...         loss, grads = grad_fn(x)
            ...         accumulator.accumulate(grads)      # no branch: adds to the window
            ...         return loss
            ...     return micro_step
            >>> micro_step = make_micro_step(net, accumulator)
            >>> x = Tensor(np.ones((4, 3), np.float32))
            >>> updates = []
            >>> for _ in range(4):
            ...     _ = micro_step(x)
            ...     updates.append(accumulator.step())    # the host applies every 2nd micro-step
            >>> updates, int(accumulator.update_count)
            ([False, True, False, True], 2)
        """
        counted = None
        if flush:
            # However the window was filled (an eager last micro-batch, say), it is empty after this call.
            self._position = 0
            if int(self.micro_step) == 0:
                return False
        else:
            self._position += 1
            if self._position < self._size:
                return False
            counted, self._position = self._position, 0
        close, update = self._host_stages()
        applied, self._size, held = close().asnumpy().tolist()  # the window's one read
        if counted is not None and held != counted:
            warnings.warn(f"step() applied a window of {held} micro-batches where it counted {counted}: call it "
                          "once after each accumulate(), and sync_position() after changing the state another way",
                          stacklevel=2)
        if not applied:
            return False
        update()
        return True

    def sync_position(self):
        """Sets ``step()``'s count of the window from the state: its position and N, read from the device.

        ``load_checkpoint`` calls it; call it yourself after changing the
        accumulator's state any other way between ``step()`` calls.

        Example:
            >>> net = nn.Dense(3, 1)
            >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=4)
            >>> grads = tuple(ops.ones_like(p) for p in net.trainable_params())
            >>> for _ in range(3):        # added by the in-graph call, op by op: step() counted none
            ...     _ = accumulator(grads)
            >>> accumulator.sync_position()
            >>> _ = accumulator.accumulate(grads)
            >>> accumulator.step()        # the 4th micro-batch of a window of 4: applied
            True
        """
        self._position = int(self.micro_step)
        self._size = int(self.accumulate_step)

    def compile_step(self):
        """Compiles the calls ``step()`` applies windows with, without running them.

        Call it before training, so that the first full window does not wait
        for the compile. Weights and state are left as they are. Graph mode
        only: in PyNative mode MindSpore 2.10 keeps no graph compiled this way
        for the call to reuse, so it does nothing and the first window compiles
        (docs/mindspore-behaviours.md#a-cell-compiles-without-running-a-jitted-function-cannot).

        Example:
            >>> net = nn.Dense(3, 1)
            >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=2)
            >>> accumulator.compile_step()
            >>> int(accumulator.update_count), int(accumulator.micro_step)
            (0, 0)
        """
        if ms.get_context("mode") == ms.GRAPH_MODE:
            for stage in self._host_stages():
                stage.compile()

    def _host_stages(self):
        if self._stages is None:
            self._stages = (_HostStage(self, close=True), _HostStage(self, close=False))
        return self._stages

    def _count_one(self, count, kept):
        # Not one helper returning (kept, position): that dropped add()'s writes (docs/mindspore-behaviours.md).
        if self.skip_nonfinite != "micro_batch":
            return self.count(ONE_INT, count)
        weight = None if count is None else ops.cast(count, ms.float32) * kept.astype(ms.float32)
        return self.count(ONE_INT, weight, kept.astype(ms.int32))

    def add(self, grads, count=None):
        """Sums ``grads`` into the buffers without counting them; pair it with ``count``.

        A loop over many micro-batches in one graph (``make_window_step``)
        adds each and counts once after the loop: two scalar kernels per
        micro-batch cost about 0.1 ms. Checks that ``grads`` match the
        optimizer's parameters. Returns a bool Tensor, True when the
        gradients were added: with ``skip_nonfinite="micro_batch"`` a
        micro-batch holding NaN or Inf is left out (tell ``count``). The
        micro-batch's sample ``count`` is needed here only by
        ``track_noise="micro_batch"``.

        Example:
            >>> net = nn.Dense(3, 1)
            >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=4)
            >>> grads = tuple(ops.ones_like(p) for p in net.trainable_params())
            >>> for _ in range(3):
            ...     _ = accumulator.add(grads)
            >>> int(accumulator.count(Tensor(3, ms.int32)))
            3
            >>> accumulator.grad_buffers[1].asnumpy()
            array([3.], dtype=float32)
        """
        return self._add(self._packed(grads), count)

    def _packed(self, grads):
        self._check_grads(grads)
        return self.buckets.flatten(grads)

    def _add(self, flats, count):
        """``add`` on the gradients packed as ``buckets.flatten`` packs them: one add per bucket."""
        if self.skip_nonfinite == "micro_batch":
            kept = _all_finite(self.sum_by_matmul, flats)
            _hyper_map(ops.partial(_add_if, kept.astype(ms.float32)), self.buffers, flats)
        else:
            _hyper_map(_add_into, self.buffers, flats)
            kept = TRUE
        if self.noise is not None and self.track_noise == "micro_batch":
            self._check_noise_size(count)
            size = self._noise_size(count)
            # A summed loss's gradient is count times the micro-batch's mean gradient.
            squared_norm = _squared_total(self.sum_by_matmul, flats)
            if count is not None:
                squared_norm = squared_norm / (size * size)
            self.noise.add(squared_norm, 1.0 / size, kept)
        return kept

    def _sample_noise(self, flats, count, kept):
        """Adds the window's last micro-batch, counted already, as track_noise=True's sample.

        Its squared distance from this device's window mean, |g_L - g_w|²,
        has the expectation tr(Σ) (1/b_L - 1/B): no |G|² in it to add noise.
        """
        self._check_noise_size(count)
        size = self._noise_size(count)
        # The buffers times this are the window mean, on the scale of grads.
        factor = ops.cast(count, ms.float32) / self.weight_total if count is not None else 1.0 / self.weight_total
        distance = _hyper_map(ops.partial(_distance, factor), flats, self.buffers)
        squared = _squared_total(self.sum_by_matmul, distance)
        if count is not None:
            squared = squared / (size * size)
        self.noise.add(squared, 1.0 / size - 1.0 / self.noise.samples, kept)

    def _noise_size(self, count):
        return self.micro_batch_size if count is None else ops.cast(count, ms.float32)

    def _check_noise_size(self, count):
        if count is None and self.micro_batch_size is None:
            raise ValueError("track_noise needs each micro-batch's sample count: pass it as "
                             "accumulator(grads, count) or set Accumulator(..., micro_batch_size=...)")

    def count(self, micro_steps, weight=None, kept=None):
        """Counts ``micro_steps`` added micro-batches; returns the position in the window.

        ``weight`` is their summed ``count`` (samples or tokens) when the
        gradients come from a summed loss; ``None`` weighs each kept
        micro-step 1. Only ``reduction="mean"`` takes a weight. ``kept``:
        how many of them ``add`` kept (all when ``None``); the others count
        in ``dropped_micro_batches``.

        Example:
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4)
            >>> int(accumulator.count(Tensor(2, ms.int32), Tensor(50.0)))
            2
            >>> float(accumulator.weight_total)
            50.0
        """
        self._check_weight(weight)
        if kept is not None:
            ops.assign_add(self.dropped_micro_batches, micro_steps - kept)
        steps = micro_steps if kept is None else kept
        if self.noise is not None:
            # B counts every kept sample, whichever micro-batches the norms sample.
            self._check_noise_size(weight)
            samples = weight if weight is not None else ops.cast(steps, ms.float32) * self.micro_batch_size
            self.noise.count(ops.cast(samples, ms.float32))
        if weight is None:
            weight = steps
        ops.assign_add(self.weight_total, ops.cast(weight, ms.float32))
        return ops.assign_add(self.micro_step, micro_steps)

    def flush(self):
        """Applies a partial window now, normalised by what it holds.

        Call it at the end of an epoch so no gradient is dropped; it does
        nothing on an empty window. Returns True when the optimizer ran.

        Example:
            >>> net = nn.Dense(3, 1)
            >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=4)
            >>> grads = tuple(ops.ones_like(p) for p in net.trainable_params())
            >>> bool(accumulator(grads)), bool(accumulator.flush()), bool(accumulator.flush())
            (False, True, False)
        """
        if self.loss_scaler is not None:
            # A loss scaler must not count an empty window as a good step.
            if self.micro_step > 0:
                self._close_window()
            return self._update_if_ready()
        # Closed whether or not it holds anything, with nothing applied or
        # skipped when empty: no `if` to pay for every window (docs/mindspore-behaviours.md). Outside a branch,
        # the buffers are cleared after the update whatever happened, so the
        # update can scale them as it hands them over (no write-back pass).
        grads, factor = self._close_window(self.micro_step > 0, write_back=False)
        updated = self._update_if_ready(grads, factor, clear=False)
        _hyper_map(_clear, self.buffers)
        return updated

    def _update_if_ready(self, grads=None, factor=None, clear=True):
        # A sibling of the closing branch, not inside it: nested `if`s leak (docs/mindspore-behaviours.md).
        if self.ready:
            return self._update(grads, factor, clear)
        return FALSE

    def _close_window(self, nonempty=None, write_back=True):
        """Decides the closed window's fate and sets ``ready`` when it is to be applied.

        ``nonempty``: a bool Tensor, False for a window with nothing in it,
        which then neither applies nor counts as skipped; ``None`` when the
        caller knows it holds a micro-batch.

        Unscaling, the mean and clipping fold into one scalar, and one
        multiply per bucket writes the window back for the update branch to
        hand to the optimizer; a skipped or empty window is multiplied by 0,
        which MulNoNan makes a real 0 even for NaN or Inf. That costs no
        branch, which every call would pay for (docs/mindspore-behaviours.md). Without ``write_back``
        (``flush``, which clears the buffers after the update anyway) it
        returns the window's gradients and the scalar, for the update to
        multiply as it hands them over: a pass over the buffers less.
        """
        grads = self.buffers
        total = self.weight_total
        extra = ()
        for member in self.members:
            extra = extra + member.window_tensors()
        if self.noise is not None:
            extra = extra + self.noise.window_tensors()
        if self.grad_reducer is not None:
            reduced = self.grad_reducer(tuple(grads) + extra + (total,))
            grads, extra, total = reduced[:len(grads)], reduced[len(grads):-1], reduced[-1]
        factor = self._normalising_factor(total)
        norm = None
        if self.clip_norm is not None or self.spike_factor is not None or self.noise is not None:
            # The norm of the summed window, scaled as the update will be; any
            # NaN or Inf makes it NaN or Inf, so it is the finiteness check too.
            norm = ops.sqrt(_squared_total(self.sum_by_matmul, grads))
            if factor is not None:
                norm = norm * factor
        if self.clip_norm is not None:
            clip = self.clip_norm / ops.maximum(norm, self.clip_norm)
            factor = clip if factor is None else factor * clip
        finite = self._finite(grads, norm)
        if self.skip_nonfinite == "micro_batch":
            # A window that kept no micro-batch has nothing to apply.
            finite = ops.logical_and(finite, total > 0)
        applied = finite if nonempty is None else ops.logical_and(finite, nonempty)
        if self.spike_factor is not None:
            applied = self._not_a_spike(applied, norm)
        if self.noise is not None:
            # Before the loss scaler adjusts: the squares hold this window's scale.
            scale = 1.0 if self.loss_scaler is None else self.loss_scaler.scale_value
            self.noise.close(extra[-4:], norm * norm, scale, applied)
        if self.loss_scaler is not None:
            self.loss_scaler.adjust(finite)
        if self.schedule.fixed_step is None:
            # Before the members' ends of window: they see the next window's N.
            ops.assign(self.accumulate_step, self.schedule(self.update_count + applied.astype(ms.int32)))
        start = 0
        for member in self.members:
            size = len(member.window_tensors())
            member.close_window(extra[start:start + size], applied)
            start = start + size
        if self._skips or nonempty is not None:
            skipped = ops.logical_not(applied)
            if nonempty is not None:
                skipped = ops.logical_and(skipped, nonempty)
            ops.assign_add(self.skipped_windows, skipped.astype(ms.int32))
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
        if not write_back:
            return grads, factor
        return applied

    def end_window(self):
        """``step()``'s first stage: closes a window that holds micro-batches, applying nothing yet.

        Decides the window's fate (finite, not a spike), runs the policies'
        ends of window and the counters, and scales the buffers for
        ``apply_window``. Returns an int32 Tensor ``[applied, next N,
        micro-batches held]``. ``step()`` calls both in compiled calls of
        their own; call them yourself only to drive the window another way.

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
        """``step()``'s second stage: hands a window ``end_window`` applied to the optimizer and clears it.

        Returns a bool Tensor, True. Call it only when ``end_window`` said
        applied; see ``end_window`` for the example.
        """
        return self._update()

    @property
    def noise_scale(self):
        """The gradient noise scale tr(Σ) / |G|², a float read on the host; None until it can be estimated.

        Needs ``track_noise=True``; ``noise.record()`` holds the smoothed
        |G|² and tr(Σ) and the windows behind them. An effective batch near
        the noise scale trains about as fast per sample as smaller ones and
        takes far fewer steps; much beyond it, a larger batch buys little.

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
            >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), 4)
            >>> [tuple(b.shape) for b in accumulator.grad_buffers]
            [(1, 3), (1,)]
        """
        return self.buckets.split(self.buffers)

    def _not_a_spike(self, finite, norm):
        """``finite`` and the norm within ``spike_factor`` of the running mean; updates the mean if so."""
        windows = self.norm_windows.astype(ms.float32)
        average = self.norm_average / (1 - ops.pow(Tensor(NORM_DECAY, ms.float32), windows))
        spike = ops.logical_and(self.norm_windows >= max(self.spike_warmup, 1), norm > self.spike_factor * average)
        applied = ops.logical_and(finite, ops.logical_not(spike))
        # select, not arithmetic on the flag: a NaN norm must not reach the mean.
        absorbed = NORM_DECAY * self.norm_average + (1 - NORM_DECAY) * norm
        ops.assign(self.norm_average, ops.select(applied, absorbed, self.norm_average))
        ops.assign_add(self.norm_windows, applied.astype(ms.int32))
        return applied

    def _update(self, grads=None, factor=None, clear=True):
        if grads is None:
            grads = self.buffers
        if factor is not None:
            grads = _hyper_map(ops.partial(_scaled, factor), grads)
        # Per parameter only here, where the optimizer takes them.
        grads = self.buckets.split(grads)
        if self._casts:
            grads = _hyper_map(_cast_like, self.optimizer.parameters, grads)
        self.optimizer(grads)
        ops.assign_add(self.update_count, ONE_INT)
        if clear:
            _hyper_map(_clear, self.buffers)
        ops.assign(self.ready, FALSE)
        return TRUE

    def _normalising_factor(self, total):
        """The scalar the window's sum is multiplied by, or None for none."""
        divisor = total if self.reduction == "mean" else None
        if self.loss_scaler is not None:
            scale = self.loss_scaler.scale_value
            divisor = scale if divisor is None else divisor * scale
        return None if divisor is None else 1.0 / divisor

    def _finite(self, grads, norm):
        if not self.skip_nonfinite:
            return TRUE
        if self.sum_by_matmul and norm is not None:
            return ops.isfinite(norm)
        return _all_finite(self.sum_by_matmul, grads)

    def _check_weight(self, weight):
        if weight is not None:
            self.check_counts()

    def check_counts(self):
        """Raises ValueError unless this accumulator takes counts (``reduction="mean"``).

        Callers that receive counts in Python run it before anything compiles.

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
        # Runs while the step compiles, on shapes alone; the messages name
        # value_and_grad's weights argument, the usual cause of a mismatch.
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


# step()'s stages as Cells: a Cell compiles without running (Cell.compile), a jitted function cannot;
# jitted in PyNative mode too, as a window applied op by op would gain nothing.
class _HostStage(nn.Cell):
    """``close``: closes a window that holds micro-batches, ``[applied, next N, held]``, the buffers scaled for
    the update; otherwise hands the closed, applied window to the optimizer and clears it."""

    def __init__(self, accumulator, close):
        super().__init__(auto_prefix=False)
        self.accumulator = accumulator
        self.close = close

    @ms.jit
    def construct(self):
        if self.close:  # a Python bool: decided when the graph is built
            return self.accumulator.end_window()
        return self.accumulator.apply_window()
