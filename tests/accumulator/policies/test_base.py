"""The policy protocol: the core calls the hooks a policy defines, and only those; a user's policy in a graph.

By hand: a policy defining ``factor``, ``gate`` and ``close_window`` takes part in those three hooks only;
``ClipNorm`` in ``factor`` alone.
"""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

from accumulator import Accumulator, Policy
from accumulator.policies import ClipNorm
from accumulator.policies.base import HOOKS, takes_part
from tests.accumulator.helpers import sweep


class Halve(Policy):
    """A factor of 0.5 and a gate that closes every other window: checkable by hand."""

    def __init__(self):
        self.windows = Parameter(Tensor(0, ms.int32), name="halve.windows", requires_grad=False)

    def state_parameters(self):
        return [self.windows]

    def factor(self, summary):
        return 0.5

    def gate(self, summary):
        return self.windows % 2 == 0

    def close_window(self, tensors, summary):
        ops.assign_add(self.windows, ops.ones_like(self.windows))


def test_a_policy_takes_part_in_the_hooks_it_defines_only():
    assert [hook for hook in HOOKS if takes_part(Halve(), hook)] == ["factor", "gate", "close_window"]
    assert [hook for hook in HOOKS if takes_part(ClipNorm(1.0), hook)] == ["factor"]


# Op by op on the fast path; CI also compiles it (a policy in a graph: the plain class's test below and ClipNorm's).
@pytest.mark.parametrize("mode", sweep([ms.PYNATIVE_MODE, ms.GRAPH_MODE]))
def test_factor_and_gate_reach_the_update_grads_1_2_3_4(mode):
    ms.set_context(mode=mode)
    try:
        w = Parameter(Tensor([0.0]), name="w")
        halve = Halve()
        accumulator = Accumulator(nn.SGD([w], 1.0), accumulate_step=2, policies=[halve])
        step = ms.jit(accumulator.__call__) if mode == ms.GRAPH_MODE else accumulator
        applied = [bool(step((Tensor([g]),))) for g in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)]
        # Windows of means 1.5, 3.5, 5.5; the second is gated out; the others apply half their mean.
        assert applied == [False, True, False, False, False, True]
        np.testing.assert_allclose(w.asnumpy(), [-(1.5 + 5.5) / 2])
        assert (int(accumulator.skipped_windows), int(halve.windows)) == (1, 3)
        assert halve.windows in accumulator.state_parameters()
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)


def test_an_object_without_the_protocol_is_refused():
    accumulator = Accumulator(nn.SGD([Parameter(Tensor([0.0]), name="w")], 1.0), 2)
    with pytest.raises(TypeError, match="a policy needs state_parameters\\(\\) and window_tensors\\(\\), got object"):
        accumulator.attach(object())


class GateBelowTotal:
    """A policy as a plain class: neither a Policy subclass nor an ms.jit_class. Closes windows of total < 3."""

    def __init__(self):
        self.closed = Parameter(Tensor(0, ms.int32), name="below.closed", requires_grad=False)

    def state_parameters(self):
        return [self.closed]

    def window_tensors(self):
        return ()

    def gate(self, summary):
        return summary["total"] >= 3

    def close_window(self, tensors, summary):
        ops.assign_add(self.closed, ops.logical_not(summary["applied"]).astype(ms.int32))


def test_a_plain_class_policy_compiles_in_the_graph_and_under_step():
    w = Parameter(Tensor([0.0]), name="w")
    gate = GateBelowTotal()
    accumulator = Accumulator(nn.SGD([w], 1.0), accumulate_step=2, policies=[gate])
    step = ms.jit(accumulator.__call__)
    # Windows of 2 micro-steps: total 2 < 3, so every window is gated out, in the graph and from the host.
    assert [bool(step((Tensor([g]),))) for g in (1.0, 2.0, 3.0, 4.0)] == [False] * 4
    accumulator.accumulate((Tensor([5.0]),))
    assert accumulator.step(flush=True) is False
    assert (int(gate.closed), int(accumulator.skipped_windows), float(w.asnumpy()[0])) == (3, 3, 0.0)


def test_an_attribute_named_like_a_hook_is_refused():
    class Shadowed(Policy):
        def __init__(self):
            self.factor = 2.0

    accumulator = Accumulator(nn.SGD([Parameter(Tensor([0.0]), name="w")], 1.0), 2)
    with pytest.raises(TypeError, match="Shadowed has an attribute named like the hook 'factor'"):
        accumulator.attach(Shadowed())
    assert len(accumulator.policies) == 1
