"""The weights' exponential moving average, moved once per applied window and following N (docs/ema.md)."""
import contextlib
import numbers

import mindspore as ms
from mindspore import Parameter, Tensor, ops

from accumulator._internal.checks import boolean
from accumulator._internal.constants import ONE_FLOAT, ONE_INT, state_parameter
from accumulator.policies.base import Policy


def _check_decay(decay):
    if isinstance(decay, bool) or not isinstance(decay, numbers.Real) or not 0 < decay < 1:
        raise ValueError(f"ema decay must be a number in (0, 1), got {decay!r}")
    return float(decay)


def _check_reference(reference):
    if reference is not None and (isinstance(reference, bool) or not isinstance(reference, numbers.Real)
                                  or not 0 < reference < float("inf")):
        raise ValueError(f"ema reference must be None or a positive number, got {reference!r}")
    return 0.0 if reference is None else float(reference)


@ms.jit_class
class EMA(Policy):
    """A float32 exponential moving average of ``weights``, moved after each applied window's update.

    After the optimizer runs on a window of weight ``w`` (its micro-steps, or its summed counts: the mean's
    divisor, across devices), ``average = rho * average + (1 - rho) * weights`` with
    ``rho = decay ** (w / reference)``: ``decay`` per update at a window of weight ``reference``, and
    ``decay ** kappa`` at ``kappa`` times that window (docs/ema.md#why-decay-follows-n). ``reference=None``:
    the first applied window's weight. ``warmup=True`` caps ``rho`` at ``(1 + t) / (10 + t)`` after ``t``
    moves, as TensorFlow's ``ExponentialMovingAverage(num_updates=t)``. A skipped or empty window moves
    nothing. The average starts at the weights as they are when it is made; ``averaged()`` puts it in
    the weights for a block.

    Example: SGD at learning rate 1 on a gradient of 1 per micro-batch, windows of 2, decay 0.5.
        >>> from mindspore import nn
        >>> from accumulator import Accumulator
        >>> w = Parameter(Tensor([0.0]), name="w")
        >>> ema = EMA([w], decay=0.5)
        >>> accumulator = Accumulator(nn.SGD([w], 1.0), accumulate_step=2, policies=[ema])
        >>> for _ in range(4):
        ...     _ = accumulator.accumulate((Tensor([1.0]),))
        ...     _ = accumulator.step()
        >>> w.asnumpy(), ema.average[0].asnumpy()      # 0.5 * (0.5 * 0 + 0.5 * -1) + 0.5 * -2
        (array([-2.], dtype=float32), array([-1.25], dtype=float32))
        >>> with ema.averaged():
        ...     print(w.asnumpy())
        [-1.25]
        >>> w.asnumpy()
        array([-2.], dtype=float32)
    """

    def __init__(self, weights, decay, reference=None, warmup=False):
        self.decay = Tensor(_check_decay(decay), ms.float32)
        reference = _check_reference(reference)
        self.warmup = boolean(warmup, "ema warmup")
        self.weights = tuple(weights)
        if not self.weights or not all(isinstance(weight, Parameter) for weight in self.weights):
            raise TypeError(f"ema weights must be Parameters (optimizer.parameters, say), got {weights!r}")
        self.average = tuple(Parameter(weight.astype(ms.float32), name=f"accumulator.ema.{weight.name}",
                                       requires_grad=False) for weight in self.weights)
        self.reference = state_parameter(reference, ms.float32, "ema.reference")  # 0: the first window sets it
        self.moves = state_parameter(0, ms.int32, "ema.moves")
        # The closing window's weight, read by after_update(): set and read in one window, so not checkpointed.
        self.window_weight = state_parameter(0.0, ms.float32, "ema.window_weight")

    def state_parameters(self):
        return list(self.average) + [self.reference, self.moves]

    def close_window(self, tensors, summary):
        return ops.assign(self.window_weight, summary["total"])

    def after_update(self):
        reference = ops.select(self.reference > 0, self.reference, self.window_weight)
        ops.assign(self.reference, reference)
        rho = ops.pow(self.decay, self.window_weight / reference)
        if self.warmup:
            moves = self.moves.astype(ms.float32)
            rho = ops.minimum(rho, (ONE_FLOAT + moves) / (10.0 + moves))
        step = ONE_FLOAT - rho
        # Not ops.lerp: its CPU kernel takes about three times as long (docs/ema.md#what-it-costs).
        for average, weight in zip(self.average, self.weights):
            ops.assign_add(average, (weight.astype(ms.float32) - average) * step)
        return ops.assign_add(self.moves, ONE_INT)

    @contextlib.contextmanager
    def averaged(self):
        """Within the block, the weights hold the average (cast to their dtype); after it, the trained ones again.

        Example: the class's.
        """
        trained = [ops.deepcopy(weight) for weight in self.weights]
        for weight, average in zip(self.weights, self.average):
            ops.assign(weight, average.astype(weight.dtype))
        try:
            yield
        finally:
            for weight, value in zip(self.weights, trained):
                ops.assign(weight, value)
