"""The host-applied step: the micro-step only adds; the host counts the window and applies it by two compiled calls.

The fastest way to drive the accumulator: ``Accumulator.accumulate`` in the
user's jitted micro-step adds the gradients without a branch, and
``Accumulator.step()`` (this module) counts on the host; a full window is
closed (``end_window``) and applied (``apply_window``) by two compiled calls of
their own, with no branch in either. A data-dependent ``if`` in a graph costs
every call (docs/mindspore-behaviours.md#every-if-in-a-graph-costs-each-call-taken-or-not), and a micro-step that
applies nothing reads nothing from the device
(docs/mindspore-behaviours.md#the-window-applied-from-the-host-two-calls-no-branch-no-read-per-micro-step).
"""
import warnings

import mindspore as ms
from mindspore import nn


# The stages as Cells: a Cell compiles without running (Cell.compile), a jitted function cannot
# (docs/mindspore-behaviours.md#a-cell-compiles-without-running-a-jitted-function-cannot); jitted in PyNative
# mode too, as a window applied op by op would gain nothing.
class _Stage(nn.Cell):
    """One of ``step()``'s two compiled calls on ``accumulator``."""

    def __init__(self, accumulator):
        super().__init__(auto_prefix=False)
        self.accumulator = accumulator


class _EndWindow(_Stage):
    """``accumulator.end_window()``: the first stage."""

    @ms.jit
    def construct(self):
        return self.accumulator.end_window()


class _ApplyWindow(_Stage):
    """``accumulator.apply_window()``: the second stage."""

    @ms.jit
    def construct(self):
        return self.accumulator.apply_window()


class HostStep:
    """``Accumulator.step()``, and its count of the window on the host: ``accumulator.host``.

    Example:
        >>> from mindspore import nn, ops
        >>> from accumulator import Accumulator
        >>> net = nn.Dense(3, 1)
        >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=2)
        >>> grads = tuple(ops.ones_like(p) for p in net.trainable_params())
        >>> applied = []
        >>> for _ in range(4):
        ...     _ = accumulator.accumulate(grads)
        ...     applied.append(accumulator.step())
        >>> applied, int(accumulator.update_count)
        ([False, True, False, True], 2)
    """

    def __init__(self, accumulator):
        self.accumulator = accumulator
        self.position = 0
        self.size = accumulator.schedule.first_step
        self.stages = None  # the two compiled calls, made on first use

    def step(self, flush=False):
        """Applies the window when it is full (or with ``flush``, when it holds anything); True when applied.

        Example: the class's; ``Accumulator.step`` calls it.
        """
        counted = None
        if flush:
            # However the window was filled (an eager last micro-batch, say), it is empty after this call.
            self.position = 0
            if int(self.accumulator.micro_step) == 0:
                return False
        else:
            self.position += 1
            if self.position < self.size:
                return False
            counted, self.position = self.position, 0
        close, update = self._stages()
        applied, self.size, micro_batches = close().asnumpy().tolist()  # the window's one read
        if counted is not None and micro_batches != counted:
            warnings.warn(f"step() applied a window of {micro_batches} micro-batches where it counted {counted}: call it "
                          "once after each accumulate(), and host.sync_position() after changing the state another way",
                          stacklevel=3)
        if not applied:
            return False
        update()
        return True

    def next_ends_window(self):
        """True when the next micro-batch ``step()`` counts ends the window (``Accumulator.next_ends_window``).

        Example: ``Accumulator.next_ends_window``'s.
        """
        return self.position + 1 >= self.size

    def sync_position(self):
        """Sets the count from the state, as ``load_checkpoint`` does; call it after changing the state any other way.

        Example:
            >>> from mindspore import nn
            >>> from accumulator import Accumulator
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), accumulate_step=4)
            >>> accumulator.host.sync_position()
            >>> accumulator.host.position, accumulator.host.size
            (0, 4)
        """
        self.position = int(self.accumulator.micro_step)
        self.size = int(self.accumulator.accumulate_step)

    def compile(self):
        """Compiles both calls without running them, so the first window does not wait; graph mode only.

        In PyNative mode MindSpore keeps no graph compiled this way for the call to reuse
        (docs/mindspore-behaviours.md#a-cell-compiles-without-running-a-jitted-function-cannot).

        Example:
            >>> from mindspore import nn
            >>> from accumulator import Accumulator
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), accumulate_step=2)
            >>> accumulator.host.compile()
            >>> int(accumulator.update_count), int(accumulator.micro_step)
            (0, 0)
        """
        if ms.get_context("mode") == ms.GRAPH_MODE:
            for stage in self._stages():
                stage.compile()

    def _stages(self):
        if self.stages is None:
            self.stages = (_EndWindow(self.accumulator), _ApplyWindow(self.accumulator))
        return self.stages
