"""The gradient accumulator: sum micro-batch gradients, update once per window."""
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

from accumulator.schedule import as_schedule

REDUCTIONS = ("mean", "sum")

_hyper_map = ops.HyperMap()
_TRUE = Tensor(True, ms.bool_)
_FALSE = Tensor(False, ms.bool_)


# Helpers live at module level: a lambda written inside an in-graph `if`
# branch does not compile in MindSpore 2.10 ("have return node!").
def _add_into(buffer, grad):
    return ops.assign_add(buffer, grad)


def _clear(buffer):
    # Assign zeros, not `buffer * 0`: NaN * 0 stays NaN.
    return ops.assign(buffer, ops.zeros_like(buffer))


def _scale(factor, grad):
    return grad * factor.astype(grad.dtype)


def _sum(by_matmul, grad):
    grad = grad.astype(ms.float32)
    if not by_matmul or grad.ndim < 2:
        return grad.sum()
    # A product with a ones column sums a matrix: MindSpore 2.10's CPU
    # reductions (ReduceSum, AllFinite) run 8-15x slower than its MatMul over
    # the same elements, more than the whole update costs.
    rows = grad.reshape((grad.shape[0], -1))
    return ops.matmul(rows, ops.ones((rows.shape[1], 1), ms.float32)).sum()


def _squared_sum(by_matmul, grad):
    grad = grad.astype(ms.float32)
    return _sum(by_matmul, grad * grad)


def _all_finite_by_matmul(grads):
    # Any NaN or Inf makes the sum NaN or Inf; a float32 sum of finite
    # gradients only overflows beyond 3e38.
    return ops.isfinite(ops.addn(_hyper_map(ops.partial(_sum, True), grads)))


def _state_parameter(value, dtype, name):
    return Parameter(Tensor(value, dtype), name=f"accumulator.{name}", requires_grad=False)


@ms.jit_class
class Accumulator:
    """Sums micro-batch gradients and runs ``optimizer`` once per window.

    Call it with each micro-batch's gradients inside your (jitted) train
    step. When the window is full it scales the summed gradient once (the
    mean, loss-scale unscaling and clipping in one multiply), checks it,
    hands it to the optimizer and clears its buffers. Compute
    the loss as for one batch: with ``reduction="mean"`` do not divide it by
    ``accumulate_step``, the accumulator divides once per window.

    Args:
        optimizer: any ``mindspore.nn.Optimizer``. It runs once per window,
            so learning-rate lists and schedules advance per update.
        accumulate_step: micro-batches per window: a positive int, a dict
            ``{update_count: N}`` or a callable ``update_count -> N`` (see
            ``accumulator.schedule``). N changes only between windows.
        reduction: ``"mean"`` divides the window's sum by its number of
            micro-steps, or by the sum of counts when counts are passed;
            ``"sum"`` applies the raw sum.
        clip_norm: clip the window's gradient to this global norm once per
            window, just before the optimizer; ``None`` disables clipping.
            On CPU the norm doubles as the non-finite check, so a window whose
            norm overflows float32 (beyond about 1e19) is skipped as non-finite.
        skip_nonfinite: when the window's gradient holds NaN or Inf, skip
            the optimizer, clear the window and count it in
            ``skipped_windows``. Always on with a ``loss_scaler``.
        loss_scaler: a ``mindspore.amp`` loss scaler whose ``scale`` you
            applied to the loss. The window's gradient is unscaled once, and
            the scaler adjusts once per window.
        grad_reducer: a callable run on the window's gradients (with the
            window's weight as the last item) once per window, before
            normalising; see ``accumulator.distributed``.

    Example:
        >>> net = nn.Dense(4, 2)
        >>> optimizer = nn.SGD(net.trainable_params(), 0.1)
        >>> accumulator = Accumulator(optimizer, accumulate_step=4)
        >>> def forward(x, y):
        ...     return ((net(x) - y) ** 2).mean()
        >>> grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
        >>> @ms.jit
        ... def train_step(x, y):
        ...     loss, grads = grad_fn(x, y)
        ...     return loss, accumulator(grads)

    For micro-batches of different sizes, take the gradient of a *summed*
    loss and pass each micro-batch's sample count,
    ``accumulator(grads, count)``: the update uses
    ``sum(grads) / sum(counts)``, exactly the large batch's mean gradient.
    """

    def __init__(self, optimizer, accumulate_step=1, reduction="mean", clip_norm=None,
                 skip_nonfinite=True, loss_scaler=None, grad_reducer=None):
        if not isinstance(optimizer, nn.Optimizer):
            raise TypeError(f"optimizer must be a mindspore.nn.Optimizer, got {type(optimizer).__name__}")
        self.schedule, first_step = as_schedule(accumulate_step)
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        if clip_norm is not None and (isinstance(clip_norm, bool) or not isinstance(clip_norm, (int, float))
                                      or not clip_norm > 0):
            raise ValueError(f"clip_norm must be a positive number or None, got {clip_norm!r}")
        if not isinstance(skip_nonfinite, bool):
            raise TypeError(f"skip_nonfinite must be a bool, got {skip_nonfinite!r}")
        if loss_scaler is not None and not isinstance(loss_scaler, ms.amp.LossScaler):
            raise TypeError(f"loss_scaler must be a mindspore.amp.LossScaler, got {type(loss_scaler).__name__}")
        if grad_reducer is not None and not callable(grad_reducer):
            raise TypeError(f"grad_reducer must be callable, got {grad_reducer!r}")

        self.optimizer = optimizer
        self.reduction = reduction
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        # An overflowed window under loss scaling must never reach the weights.
        self.skip_nonfinite = skip_nonfinite or loss_scaler is not None
        self.loss_scaler = loss_scaler
        self.grad_reducer = grad_reducer
        # Sums by MatMul on CPU only: Ascend and GPU read their own overflow
        # status in ms.amp.all_finite, and Ascend may run a float32 MatMul in
        # float16, where a sum of squares overflows.
        self._sum_by_matmul = ms.get_context("device_target") == "CPU"
        self._param_shapes = tuple(list(p.shape) for p in optimizer.parameters)
        # One buffer per parameter and nothing else of that size: the window is
        # cleared by assigning zeros, so no second "zeros" clone is kept.
        self.grad_buffers = optimizer.parameters.clone(prefix="accumulator", init="zeros")
        self.window_size = _state_parameter(first_step, ms.int32, "window_size")
        self.micro_step = _state_parameter(0, ms.int32, "micro_step")
        # Sum of counts, or of 1 per micro-step: the mean's denominator.
        self.weight_total = _state_parameter(0.0, ms.float32, "weight_total")
        self.update_count = _state_parameter(0, ms.int32, "update_count")
        self.skipped_count = _state_parameter(0, ms.int32, "skipped_count")

    @property
    def accumulate_step(self):
        """Micro-batches in the current window (an int, read on the host)."""
        return int(self.window_size.asnumpy())

    @property
    def window_position(self):
        """Micro-batches accumulated so far in the current window."""
        return int(self.micro_step.asnumpy())

    @property
    def updates(self):
        """Windows applied by the optimizer so far."""
        return int(self.update_count.asnumpy())

    @property
    def skipped_windows(self):
        """Windows dropped because their gradient was not finite."""
        return int(self.skipped_count.asnumpy())

    def state_parameters(self):
        """Every Parameter of the accumulator's state, for checkpoints.

        Example:
            >>> ms.save_checkpoint([{"name": p.name, "data": p}
            ...                     for p in accumulator.state_parameters()], "acc.ckpt")
        """
        return list(self.grad_buffers) + [self.window_size, self.micro_step, self.weight_total,
                                          self.update_count, self.skipped_count]

    def __call__(self, grads, count=None):
        """Adds one micro-batch's ``grads``; applies the window when it is full.

        ``count`` is the micro-batch's number of samples (or tokens) when the
        grads come from a summed loss. Returns a bool Tensor, True when the
        optimizer ran on this call.
        """
        self.accumulate(grads, count)
        # Branch on the comparison itself and return fresh constants: binding
        # the condition to a name that is also returned makes MindSpore 2.10's
        # graph compiler drop the branch.
        if self.micro_step >= self.window_size:
            return self._apply()
        return _FALSE

    def accumulate(self, grads, count=None):
        """Adds one micro-batch's ``grads`` to the window and never applies it.

        For loops that decide themselves when to apply (``flush``), such as
        ``accumulator.window.make_window_step``. Returns the position in the window.

        Example:
            >>> accumulator.accumulate(grads)
            >>> accumulator.flush()
        """
        weight = self._weight(count)
        self._add(grads)
        return self._count(ops.ones((), ms.int32), weight)

    def _add(self, grads):
        self._check_grads(grads)
        _hyper_map(_add_into, self.grad_buffers, grads)

    def _count(self, steps, weight):
        # Apart from _add so that a loop over micro-batches (the window step)
        # counts once after it: two scalar kernels per iteration cost ~0.1 ms.
        ops.assign_add(self.weight_total, weight)
        return ops.assign_add(self.micro_step, steps)

    def flush(self):
        """Applies a partial window now, normalised by what it holds.

        Call it at the end of an epoch so no gradient is dropped; it does
        nothing on an empty window. Returns True when the optimizer ran.

        Example:
            >>> for data, label in dataset:
            ...     train_step(data, label)
            >>> accumulator.flush()
        """
        if self.micro_step > 0:
            return self._apply()
        return _FALSE

    def _apply(self):
        grads = self.grad_buffers
        total = self.weight_total
        if self.grad_reducer is not None:
            reduced = self.grad_reducer(tuple(grads) + (total,))
            grads, total = reduced[:-1], reduced[-1]
        factor = self._normalising_factor(total)
        norm = None
        if self.clip_norm is not None:
            # The norm of the summed window, scaled as the update will be; any
            # NaN or Inf makes it NaN or Inf, so it is the finiteness check too.
            norm = ops.sqrt(ops.addn(_hyper_map(ops.partial(_squared_sum, self._sum_by_matmul), grads)))
            if factor is not None:
                norm = norm * factor
            clip = self.clip_norm / ops.maximum(norm, self.clip_norm)
            factor = clip if factor is None else factor * clip
        # Unscaling, the mean and clipping share one multiply per window.
        if factor is not None:
            grads = self._scaled(grads, factor)
        finite = self._finite(grads, norm)
        if self.loss_scaler is not None:
            self.loss_scaler.adjust(finite)
        updated = self._update_if(finite, grads)
        self._clear_buffers()
        ops.assign(self.micro_step, ops.zeros((), ms.int32))
        ops.assign(self.weight_total, ops.zeros((), ms.float32))
        ops.assign(self.window_size, self.schedule(self.update_count))
        return updated

    def _normalising_factor(self, total):
        """The scalar the window's sum is multiplied by, or None for none."""
        divisor = total if self.reduction == "mean" else None
        if self.loss_scaler is not None:
            scale = self.loss_scaler.scale_value
            divisor = scale if divisor is None else divisor * scale
        return None if divisor is None else 1.0 / divisor

    def _scaled(self, grads, factor):
        return _hyper_map(ops.partial(_scale, factor), grads)

    def _clear_buffers(self):
        _hyper_map(_clear, self.grad_buffers)

    def _finite(self, grads, norm):
        if not self.skip_nonfinite:
            return _TRUE
        if not self._sum_by_matmul:
            return ms.amp.all_finite(grads)
        if norm is not None:
            return ops.isfinite(norm)
        return _all_finite_by_matmul(grads)

    def _update_if(self, finite, grads):
        if finite:
            self.optimizer(grads)
            ops.assign_add(self.update_count, ops.ones((), ms.int32))
            return _TRUE
        ops.assign_add(self.skipped_count, ops.ones((), ms.int32))
        return _FALSE

    def _weight(self, count):
        if count is None:
            return ops.ones((), ms.float32)
        if self.reduction != "mean":
            raise ValueError("count weighting needs reduction='mean', got reduction='sum'")
        return ops.cast(count, ms.float32)

    def _check_grads(self, grads):
        if len(grads) != len(self._param_shapes):
            raise ValueError(f"grads holds {len(grads)} tensors but the optimizer has "
                             f"{len(self._param_shapes)} parameters")
        for index, (grad, shape) in enumerate(zip(grads, self._param_shapes)):
            # Shapes are lists: the graph compiler prints a tuple (9,) as (9).
            if list(grad.shape) != shape:
                raise ValueError(f"grads[{index}] has shape {list(grad.shape)}, expected {shape} "
                                 "like the optimizer's parameter")
