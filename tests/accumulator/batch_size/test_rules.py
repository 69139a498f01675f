"""Scaling rules: each rule's formula at a change of N, exact resume, and the refusals.

By hand: AdamW at lr 0.01 tuned at N = 2; at N = 8 (κ = 4) the sqrt rule sets lr 0.02, beta1 0.6 (1 - 4 x 0.1)
and beta2 0.996 (1 - 4 x 0.001); the linear rule would scale the learning rate by 4.
"""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, mint, nn, ops
from mindspore.experimental import optim

from accumulator import Accumulator, load_checkpoint, save_checkpoint
from accumulator.batch_size import ScaleRule
from accumulator._internal.constants import TRUE
from tests.accumulator.helpers import sweep


def dense():
    ms.set_seed(0)
    return nn.Dense(3, 1)


def micro_step(net, accumulator):
    def forward(x):
        return (net(x) ** 2).mean()
    grad_fn = ms.value_and_grad(forward, None, accumulator.optimizer.parameters)

    @ms.jit
    def step(x):
        loss, grads = grad_fn(x)
        accumulator.accumulate(grads)
        return loss
    return step


def train(step, accumulator, micro_batches, start=0):
    """Micro-steps ``start`` on through ``step``, compiled once per run (``micro_step``), each followed by ``step()``."""
    for index in range(start, start + micro_batches):
        step(Tensor(np.full((4, 3), 0.1 * (index % 5) - 0.2, np.float32)))
        accumulator.step()


def test_sqrt_scales_adam_at_a_change_from_2_to_8():
    net = dense()
    accumulator = Accumulator(optim.AdamW(net.trainable_params(), lr=0.01), {0: 2, 1: 8})
    rule = ScaleRule(accumulator, "sqrt")   # tuned at the first window, N = 2
    step = micro_step(net, accumulator)
    train(step, accumulator, 2)
    assert rule.record()["lr"] == pytest.approx(0.01)
    train(step, accumulator, 8, start=2)    # the first window of 8: κ = 4
    values = rule.record()
    assert values["lr"] == pytest.approx(0.02)
    assert values["beta1"] == pytest.approx(0.6)
    assert values["beta2"] == pytest.approx(0.996)
    assert values["eps"] == pytest.approx(0.5e-8)
    assert values["progress"] == 5.0   # κ = 1, then 4: the tuned run's updates


# The rule writes an nn.Optimizer's learning_rate or a new optimizer's param_groups: the fast path runs one of
# each, CI every family.
@pytest.mark.parametrize("make", sweep([lambda p: nn.SGD(p, 0.1), lambda p: mint.optim.Adam(p, lr=0.1),
                                        lambda p: nn.Momentum(p, 0.1, 0.9), lambda p: optim.SGD(p, lr=0.1)], fast=2),
                         ids=["nn.SGD", "mint.Adam", "nn.Momentum", "experimental.SGD"])
def test_linear_scales_the_learning_rate_by_4_from_2_to_8(make):
    net = dense()
    optimizer = make(net.trainable_params())
    accumulator = Accumulator(optimizer, {0: 2, 1: 8})
    rule = ScaleRule(accumulator, "linear", tuned_step=2)
    train(micro_step(net, accumulator), accumulator, 10)
    lr = optimizer.learning_rate if isinstance(optimizer, nn.Optimizer) else optimizer.param_groups[0]["lr"]
    assert float(lr) == pytest.approx(0.4)
    assert rule.record()["progress"] == 5.0


def test_adascale_gain_from_known_averages():
    accumulator = Accumulator(nn.SGD(dense().trainable_params(), 0.1), 4, track_noise=True, micro_batch_size=4)
    rule = ScaleRule(accumulator, "adascale", tuned_step=1)
    ops.assign(accumulator.noise.trace, Tensor(64.0, ms.float32))   # tr(Σ)/B₀ = 16 with B₀ = 4
    ops.assign(accumulator.noise.gradient, Tensor(1.0, ms.float32))
    ops.assign(accumulator.micro_step, Tensor(4, ms.int32))          # a window of 4
    rule.close_window((), {"applied": TRUE})                        # κ = 4: r = (16 + 1) / (4 + 1)
    assert rule.record() == pytest.approx({"lr": 0.34, "progress": 3.4})


def test_adascale_gain_is_one_before_any_estimate():
    accumulator = Accumulator(nn.SGD(dense().trainable_params(), 0.1), 4, track_noise=True, micro_batch_size=4)
    rule = ScaleRule(accumulator, "adascale", tuned_step=1)
    ops.assign(accumulator.micro_step, Tensor(4, ms.int32))
    rule.close_window((), {"applied": TRUE})
    assert rule.record() == pytest.approx({"lr": 0.1, "progress": 1.0})


@pytest.mark.parametrize("adam", sweep([optim.Adam, optim.AdamW]))
def test_the_updates_run_with_the_scaled_betas(adam):
    net = dense()
    accumulator = Accumulator(adam(net.trainable_params(), lr=0.01), 8)
    ScaleRule(accumulator, "sqrt", tuned_step=2)
    train(micro_step(net, accumulator), accumulator, 16)

    reference = dense()
    optimizer = adam(reference.trainable_params(), lr=0.02, betas=(0.6, 0.996), eps=0.5e-8)
    accumulator = Accumulator(optimizer, 8)
    train(micro_step(reference, accumulator), accumulator, 16)
    for mine, theirs in zip(net.trainable_params(), reference.trainable_params()):
        assert not np.array_equal(mine.asnumpy(), dense().trainable_params()[0].asnumpy())
        np.testing.assert_allclose(mine.asnumpy(), theirs.asnumpy(), rtol=1e-6)


def test_a_chainable_scheduler_keeps_the_rules_factor():
    net = dense()
    optimizer = optim.SGD(net.trainable_params(), lr=0.1)
    scheduler = optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.5)
    accumulator = Accumulator(optimizer, 4)
    ScaleRule(accumulator, "linear", tuned_step=1)
    step = micro_step(net, accumulator)
    train(step, accumulator, 4)
    scheduler.step()
    assert float(optimizer.param_groups[0]["lr"]) == pytest.approx(0.2)   # 0.1 x 4 x 0.5
    train(step, accumulator, 4, start=4)
    assert float(optimizer.param_groups[0]["lr"]) == pytest.approx(0.2)


def build(schedule):
    net = dense()
    accumulator = Accumulator(optim.AdamW(net.trainable_params(), lr=0.01), schedule)
    return net, accumulator, ScaleRule(accumulator, "sqrt", tuned_step=1)


def test_a_resumed_run_equals_an_uninterrupted_one_across_a_change(tmp_path):
    schedule = {0: 2, 2: 4}                  # N changes after the checkpoint
    net, accumulator, _ = build(schedule)
    step = micro_step(net, accumulator)
    train(step, accumulator, 5)              # mid-window, after the second update
    path = str(tmp_path / "run.ckpt")
    save_checkpoint(path, net, accumulator.optimizer, accumulator)
    train(step, accumulator, 7, start=5)     # the uninterrupted run goes on
    expected = [p.asnumpy() for p in net.trainable_params()]
    net, accumulator, rule = build(schedule)
    load_checkpoint(path, net, accumulator.optimizer, accumulator)
    assert rule.record()["beta2"] == pytest.approx(1 - 2 * 0.001)
    train(micro_step(net, accumulator), accumulator, 7, start=5)
    for actual, wanted in zip(net.trainable_params(), expected):
        np.testing.assert_array_equal(actual.asnumpy(), wanted)


@pytest.mark.parametrize("make, rule, message", [
    (lambda p: nn.Adam(p, 0.01), "sqrt", r"ScaleRule\('sqrt'\) needs an Adam-family optimizer's betas as Parameters: "
     r"Adam has beta1=0.9 as a constant compiled into its graph; use mindspore.experimental.optim.Adam or AdamW"),
    (lambda p: nn.SGD(p, 0.1), "sqrt", "SGD has no betas; use mindspore.experimental"),
    (lambda p: mint.optim.Adam(p, lr=0.01), "sqrt", "Adam has beta1=0.9 as a constant compiled into its graph"),
    (lambda p: optim.SGD(p, lr=0.1), "sqrt", "SGD has no betas"),
    (lambda p: mint.optim.SGD(p, lr=0.1), "linear", "SGD keeps lr_float=0.1 as a Python float compiled into its graph"),
    (lambda p: mint.optim.AdamW(p, lr=0.01), "linear",
     "AdamW keeps lr=0.01 as a Python float compiled into its graph, float\\(lr\\), for its fused kernel"),
    (lambda p: nn.SGD(p, nn.ExponentialDecayLR(0.1, 0.9, 10)), "linear",
     "SGD.s learning_rate is a schedule, ExponentialDecayLR, it evaluates in its graph"),
    (lambda p: nn.SGD(p, 0.1), "adascale", r"needs the noise averages: Accumulator\(..., track_noise=True\)"),
    (lambda p: nn.SGD(p, 0.1), "cubic", r"rule must be one of \('linear', 'sqrt', 'adascale'\), got 'cubic'"),
])
def test_a_rule_that_cannot_apply_is_refused_in_one_line(make, rule, message):
    optimizer = make(dense().trainable_params())
    accumulator = Accumulator(optimizer, 2)
    state = accumulator.state_parameters()
    with pytest.raises(ValueError, match=message) as raised:
        ScaleRule(accumulator, rule)
    assert "\n" not in str(raised.value)
    assert accumulator.state_parameters() == state


def test_sqrt_refused_on_a_group_leaves_the_optimizer_as_it_was():
    optimizer = optim.Adam(dense().trainable_params(), lr=0.01)
    ScaleRule(Accumulator(optimizer, 2), "sqrt")
    betas = optimizer.param_groups[0]["betas"]
    with pytest.raises(ValueError, match="group 0 betas are already Parameters: one rule per optimizer"):
        ScaleRule(Accumulator(optimizer, 2), "sqrt")
    assert optimizer.param_groups[0]["betas"] is betas


def test_tuned_step_must_be_a_positive_int():
    with pytest.raises(ValueError, match="tuned_step must be a positive int, got 0"):
        ScaleRule(Accumulator(nn.SGD(dense().trainable_params(), 0.1), 2), "linear", tuned_step=0)
