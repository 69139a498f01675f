"""The optimizers a run can ask for by name: the one place that maps names to MindSpore optimizers."""
import mindspore as ms
from mindspore import mint, nn
from mindspore.experimental import optim
from mindspore.nn.learning_rate_schedule import LearningRateSchedule

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")
MOMENTUM = 0.9


def make_optimizer(name, params, lr, weight_decay=0.0):
    """One of ``OPTIMIZERS`` over ``params`` with learning rate ``lr`` (a number or a ``LearningRateSchedule``).

    ``momentum`` uses ``MOMENTUM``; the others take ``weight_decay`` as an
    L2 term, except ``adamw``: MindSpore 2.x's AdamW with decoupled decay
    (``adamw_class``). With a number, ``sgd``, ``momentum`` and ``adam``
    are ``nn`` optimizers. With a schedule, every one is an
    ``experimental.optim`` optimizer whose learning rate is a Parameter: it
    starts at the schedule's first value and ``make_lr_scheduler`` moves it
    along, so a ``ScaleRule`` can scale it (an ``nn`` optimizer evaluates a
    schedule inside its graph, where nothing can: docs/scale-rules.md#optimizers).

    Example:
        >>> from mindspore.nn import PolynomialDecayLR
        >>> net = nn.Dense(3, 2)
        >>> type(make_optimizer("momentum", net.trainable_params(), 0.01)).__name__
        'Momentum'
        >>> schedule = PolynomialDecayLR(0.1, 0.0, decay_steps=4, power=1.0)
        >>> type(make_optimizer("momentum", net.trainable_params(), schedule)).__module__
        'mindspore.experimental.optim.sgd'
        >>> make_optimizer("rmsprop", net.trainable_params(), 0.01)
        Traceback (most recent call last):
        ...
        ValueError: optimizer must be one of ('sgd', 'momentum', 'adam', 'adamw'), got 'rmsprop'
    """
    if isinstance(lr, LearningRateSchedule) and name in ("sgd", "momentum", "adam"):
        if name == "adam":
            return optim.Adam(params, lr=_schedule_at(lr, 0), weight_decay=weight_decay)
        return optim.SGD(params, lr=_schedule_at(lr, 0), momentum=MOMENTUM if name == "momentum" else 0.0,
                         weight_decay=weight_decay)
    if name == "sgd":
        return nn.SGD(params, lr, weight_decay=weight_decay)
    if name == "momentum":
        return nn.Momentum(params, lr, MOMENTUM, weight_decay=weight_decay)
    if name == "adam":
        return nn.Adam(params, lr, weight_decay=weight_decay)
    if name == "adamw":
        return adamw_class(ms.get_context("device_target"))(params, lr=_schedule_at(lr, 0), weight_decay=weight_decay)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")


def adamw_class(device_target):
    """``mint.optim.AdamW`` on GPU and Ascend; on CPU, where it has no kernel, ``experimental.optim.AdamW``.

    Both take the same arguments, and the Accumulator takes either.

    Example:
        >>> adamw_class("Ascend") is mint.optim.AdamW, adamw_class("CPU") is optim.AdamW
        (True, True)
    """
    return optim.AdamW if device_target == "CPU" else mint.optim.AdamW


def _schedule_at(lr, update):
    return float(lr(ms.Tensor(update, ms.int32))) if isinstance(lr, LearningRateSchedule) else float(lr)


class FollowSchedule(optim.lr_scheduler.LRScheduler):
    """An ``experimental.optim`` scheduler whose learning rate at step ``u`` is ``schedule(u)``, times ``scale``.

    ``schedule`` is the ``LearningRateSchedule`` an ``nn.Optimizer`` reads at
    its ``global_step``: stepped once per update, the new optimizers follow
    the very same schedule. ``scale``, a float32 Parameter (a
    ``ScaleRule``'s ``lr_scale``) or None, is the factor the learning rate
    holds besides the schedule's: the rule multiplies what the schedule gives.

    Example:
        >>> from mindspore.nn import PolynomialDecayLR
        >>> schedule = PolynomialDecayLR(0.1, 0.0, decay_steps=4, power=1.0)
        >>> scheduler = FollowSchedule(optim.AdamW(nn.Dense(3, 2).trainable_params(), lr=0.1), schedule)
        >>> _ = scheduler.step()
        >>> round(float(scheduler.get_last_lr()[0]), 4)
        0.075
    """

    def __init__(self, optimizer, schedule, scale=None):
        self.schedule = schedule
        self.scale = scale
        super().__init__(optimizer)

    def get_lr(self):
        lr = ms.Tensor(_schedule_at(self.schedule, int(self.last_epoch)), ms.float32)
        if self.scale is not None:
            lr = lr * self.scale
        return [lr] * self.groups_num


def make_lr_scheduler(optimizer, lr, scale_rule=None):
    """The scheduler to step once per update for ``optimizer`` and ``lr``: None for a constant ``lr``.

    For a ``LearningRateSchedule`` (``make_optimizer`` then made an
    ``experimental.optim`` optimizer), a ``FollowSchedule``, which keeps
    ``scale_rule``'s factor (a ``ScaleRule`` or None).

    Example:
        >>> from mindspore.nn import PolynomialDecayLR
        >>> net, schedule = nn.Dense(3, 2), PolynomialDecayLR(0.1, 0.0, decay_steps=4, power=1.0)
        >>> make_lr_scheduler(make_optimizer("adam", net.trainable_params(), 0.1), 0.1) is None
        True
        >>> type(make_lr_scheduler(make_optimizer("adamw", net.trainable_params(), schedule), schedule)).__name__
        'FollowSchedule'
    """
    if not isinstance(lr, LearningRateSchedule):
        return None
    return FollowSchedule(optimizer, lr, None if scale_rule is None else scale_rule.lr_scale)
