"""Scaling rules: the optimizer follows the window when N changes (docs/scale-rules.md).

With κ = N / ``tuned_step`` (the window the learning rate was tuned at has
κ = 1), each window's update runs with

* ``"linear"`` (Goyal et al. 2017, SGD): learning rate x κ;
* ``"sqrt"`` (Malladi et al. 2022, the Adam family's SDE rule): learning
  rate x √κ, β1 → 1 − κ(1 − β1), β2 → 1 − κ(1 − β2), ε → ε / √κ, from the
  tuned betas and ε (a beta below 0 is held at 0);
* ``"adascale"`` (Johnson et al. 2020, SGD): learning rate x r, the gain
  r = (tr(Σ)/B₀ + |G|²) / (tr(Σ)/(κB₀) + |G|²), between 1 and κ, from the
  noise tracker's averages (B₀ the tuned window's batch).

The learning rate is multiplied in place, so a scheduler that computes
each step from the current learning rate (``experimental.optim``'s
``StepLR``, ``ExponentialLR``, ...) keeps the rule's factor: the rule
multiplies what the scheduler gives. The scheduler's position counts the
tuned run's updates (``progress``): κ per update, or r under AdaScale.
"""
import numpy as np
import mindspore as ms
from mindspore import Parameter, mint, nn, ops
from mindspore.experimental import optim
from mindspore.experimental.optim import Optimizer as NewOptimizer
from mindspore.experimental.optim import adam as _adam, adamw as _adamw

from accumulator._internal.checks import positive_int
from accumulator._internal.constants import ONE_FLOAT, ZERO_FLOAT, state_parameter
from accumulator.batch_size.schedule import NoiseScaleSchedule

RULES = ("linear", "sqrt", "adascale")
# Optimizers that hand their learning rate to a kernel as a Python float, compiled into their graph.
COMPILED_LR = {mint.optim.SGD: ("lr_float", ""), mint.optim.AdamW: ("lr", ", float(lr), for its fused kernel")}
BETAS_AS_PARAMETERS = (optim.Adam, optim.AdamW)


def _adamw_update(weight_decay_new, step_size, amsgrad, eps, bias_correction2_sqrt, beta1, beta2, param, grad,
                  exp_avg, exp_avg_sq, max_exp_avg_sq):
    """``experimental.optim.AdamW``'s update for Tensor betas and eps, without ``addcmul`` (float64 then)."""
    ops.assign(exp_avg, exp_avg * beta1 + grad * (1 - beta1))
    ops.assign(exp_avg_sq, exp_avg_sq * beta2 + grad * grad * (1 - beta2))
    second = exp_avg_sq
    if amsgrad:  # a Python bool, decided when the graph is built
        second = ops.maximum(max_exp_avg_sq, exp_avg_sq)
        ops.assign(max_exp_avg_sq, second)
    ops.assign(param, param * weight_decay_new - exp_avg / (ops.sqrt(second) / bias_correction2_sqrt + eps) * step_size)
    return True


# The Adam family's updates are registered for Python-float betas and eps, and a HyperMap over them
# silently skips Tensors: registered for Tensors too, Parameters can stand in (docs/scale-rules.md#optimizers).
_adamw._adamw_opt.register("Tensor", "Tensor", "Bool", *["Tensor"] * 9)(_adamw_update)
_adam._adam_opt.register(*["Tensor"] * 10)(_adam._run_adam_opt)


def _learning_rates(optimizer):
    """The optimizer's learning-rate Parameters, or a ValueError naming what holds it instead."""
    name = type(optimizer).__name__
    if type(optimizer) in COMPILED_LR:
        key, how = COMPILED_LR[type(optimizer)]
        raise ValueError(f"ScaleRule needs the learning rate as a Parameter: {name} keeps {key}="
                         f"{float(optimizer.param_groups[0][key]):g} as a Python float compiled into its graph{how}")
    if isinstance(optimizer, NewOptimizer):
        return list(optimizer.lrs)
    if optimizer.dynamic_lr:
        raise ValueError(f"ScaleRule needs a constant learning rate Parameter: {name}'s learning_rate is a schedule, "
                         f"{type(optimizer.learning_rate).__name__}, it evaluates in its graph; use an "
                         "experimental.optim optimizer with a scheduler")
    return list(optimizer.learning_rate) if optimizer.is_group_lr else [optimizer.learning_rate]


def _take_over_betas(optimizer):
    """Each group's ``(beta1, beta2, eps)`` as Parameters put in the group, with the tuned floats; sqrt's needs.

    ``experimental.optim`` groups hold betas and eps as Python floats, which
    a graph compiles as constants: Parameters in their place are read at
    every update instead (docs/scale-rules.md#optimizers).
    """
    name = type(optimizer).__name__
    if type(optimizer) not in BETAS_AS_PARAMETERS:
        betas = getattr(optimizer, "beta1", None)
        if isinstance(optimizer, NewOptimizer):
            betas = optimizer.param_groups[0].get("betas", (None,))[0]
        what = "no betas" if betas is None else f"beta1={float(np.asarray(betas).reshape(-1)[0]):g} as a " \
            "constant compiled into its graph"
        raise ValueError(f"ScaleRule('sqrt') needs an Adam-family optimizer's betas as Parameters: {name} has "
                         f"{what}; use mindspore.experimental.optim.Adam or AdamW")
    taken, tuned = [], []
    for index, group in enumerate(optimizer.param_groups):
        values = (*group["betas"], group["eps"])
        if any(isinstance(value, Parameter) for value in values):
            raise ValueError(f"ScaleRule('sqrt'): {name}'s group {index} betas are already Parameters: "
                             "one rule per optimizer")
        beta1, beta2, eps = (state_parameter(float(v), ms.float32, f"scale_rule.group{index}.{n}")
                             for v, n in zip(values, ("beta1", "beta2", "eps")))
        group["betas"], group["eps"] = (beta1, beta2), eps
        taken.append((beta1, beta2, eps))
        tuned.append(tuple(float(v) for v in values))
    return taken, tuned


def _tuned_batch(accumulator, tuned_step):
    """B₀, the tuned window's batch in the noise scale's units, for AdaScale's gain; checks the noise is tracked."""
    if accumulator.noise is None:
        raise ValueError("ScaleRule('adascale') needs the noise averages: Accumulator(..., track_noise=True)")
    schedule = accumulator.schedule
    if isinstance(schedule, NoiseScaleSchedule):
        return float(schedule.micro_batch_size * schedule.ranks * tuned_step)
    if accumulator.noise.micro_batch_size is None:
        raise ValueError("ScaleRule('adascale') needs the micro-batch size: Accumulator(..., micro_batch_size=...) "
                         "or a NoiseScaleSchedule, got neither")
    return float(accumulator.noise.micro_batch_size * tuned_step)


@ms.jit_class
class ScaleRule:
    """Scales the learning rate (and for ``"sqrt"`` Adam's betas and ε) with the window; attaches itself.

    ``rule``: ``"linear"``, ``"sqrt"`` or ``"adascale"`` (see the module
    docstring); ``tuned_step``: the N the hyperparameters were tuned at
    (κ = 1), by default the accumulator's first window. Every update runs
    with the values for the N of the window it applies (the micro-batches
    it holds), set at that window's close: a policy of the accumulator
    (``accumulator.policies.base``). Build it before the first compiled call.
    Refuses, with one line naming what is missing, an optimizer it cannot
    change: a learning rate or betas compiled into its graph as constants.

    Attributes:
        lr_scale: float32 Parameter, the factor the learning rates hold now.
        progress: float32 Parameter, the schedule's position in the tuned
            run's updates: each update adds its κ, or for ``"adascale"`` its
            gain; step a scheduler to ``int(progress)``.

    Example:
        >>> from mindspore.experimental import optim
        >>> from accumulator import Accumulator
        >>> net = nn.Dense(3, 1)
        >>> accumulator = Accumulator(optim.AdamW(net.trainable_params(), lr=0.01), accumulate_step=4)
        >>> rule = ScaleRule(accumulator, "sqrt", tuned_step=1)
        >>> grads = tuple(ops.ones_like(p) for p in net.trainable_params())
        >>> [bool(accumulator(grads)) for _ in range(4)]
        [False, False, False, True]
        >>> rule.record()     # κ = 4: lr x 2, β → 1 - 4 (1 - β), ε / 2
        {'lr': 0.02, 'beta1': 0.6, 'beta2': 0.996, 'eps': 5e-09, 'progress': 4.0}
    """

    def __init__(self, accumulator, rule="sqrt", tuned_step=None):
        if rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
        tuned_step = accumulator.schedule.first_step if tuned_step is None else positive_int(tuned_step, "tuned_step")
        optimizer = accumulator.optimizer
        self.learning_rates = _learning_rates(optimizer)
        self.tuned_batch = _tuned_batch(accumulator, tuned_step) if rule == "adascale" else None
        self.betas, self.tuned_betas = _take_over_betas(optimizer) if rule == "sqrt" else ([], [])
        self.rule = rule
        self.tuned_step = float(tuned_step)
        self.accumulator = accumulator
        self.lr_scale = state_parameter(1.0, ms.float32, "scale_rule.lr_scale")
        self.progress = state_parameter(0.0, ms.float32, "scale_rule.progress")
        accumulator.attach(self)

    def state_parameters(self):
        """Its Parameters, and the betas and ε it set in the optimizer's groups, for checkpoints."""
        return [self.lr_scale, self.progress] + [p for group in self.betas for p in group]

    def window_tensors(self):
        """Nothing to sum across devices: the rule reads N and the noise averages, already reduced."""
        return ()

    def close_window(self, tensors, summary):
        """Sets the hyperparameters for the closing window's N and, when it is applied, advances ``progress``.

        Runs in the accumulator's close, before the window's update: N is
        the micro-batches the window holds (``micro_step``, not yet reset),
        so a flushed partial window is scaled for what it holds.
        """
        kappa = self.accumulator.micro_step.astype(ms.float32) / self.tuned_step
        if self.rule == "adascale":  # a Python str: decided when the graph is built
            scale = self._gain(kappa)
            advance = scale
        else:
            scale = kappa if self.rule == "linear" else ops.sqrt(kappa)
            advance = kappa
        for lr in self.learning_rates:
            ops.assign(lr, lr * (scale / self.lr_scale))
        for (beta1, beta2, eps), (tuned1, tuned2, tuned_eps) in zip(self.betas, self.tuned_betas):
            ops.assign(beta1, ops.maximum(1.0 - kappa * (1.0 - tuned1), 0.0))
            ops.assign(beta2, ops.maximum(1.0 - kappa * (1.0 - tuned2), 0.0))
            ops.assign(eps, tuned_eps / ops.sqrt(kappa))
        ops.assign(self.lr_scale, scale)
        return ops.assign_add(self.progress, ops.select(summary["applied"], advance, ZERO_FLOAT))

    def _gain(self, kappa):
        """AdaScale's r for ``kappa``, 1 while the averages hold no estimate; the averages' bias corrections cancel."""
        noise = self.accumulator.noise
        trace = ops.maximum(noise.trace, 0.0) / self.tuned_batch
        gradient = ops.maximum(noise.gradient, 0.0)
        denominator = trace / kappa + gradient
        gain = (trace + gradient) / ops.select(denominator > 0, denominator, 1.0)
        return ops.clip_by_value(ops.select(denominator > 0, gain, 1.0), 1.0, kappa)

    def record(self):
        """The first group's learning rate, betas and ε in use, and ``progress``, read on the host.

        Example:
            >>> from accumulator import Accumulator
            >>> rule = ScaleRule(Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), 4), "linear", 1)
            >>> rule.record()
            {'lr': 0.1, 'progress': 0.0}
        """
        values = {"lr": self.learning_rates[0].asnumpy().reshape(-1)[0]}
        if self.betas:
            values.update(zip(("beta1", "beta2", "eps"), (p.asnumpy() for p in self.betas[0])))
        values["progress"] = self.progress.asnumpy()
        # float32's 7 digits, not the float64 that prints 0.1 as 0.10000000149
        return {name: float(f"{float(value):.7g}") for name, value in values.items()}
