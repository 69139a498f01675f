"""The optimizers a run can ask for by name: the one place that maps names to ``mindspore.nn``."""
from mindspore import nn

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")
MOMENTUM = 0.9


def make_optimizer(name, params, lr, weight_decay=0.0):
    """One of ``OPTIMIZERS`` over ``params`` with learning rate ``lr``.

    ``momentum`` uses ``MOMENTUM``; ``adamw`` is ``nn.AdamWeightDecay``
    (decoupled decay), the others take ``weight_decay`` as an L2 term.

    Example:
        >>> net = nn.Dense(3, 2)
        >>> type(make_optimizer("momentum", net.trainable_params(), 0.01)).__name__
        'Momentum'
        >>> make_optimizer("rmsprop", net.trainable_params(), 0.01)
        Traceback (most recent call last):
        ...
        ValueError: optimizer must be one of ('sgd', 'momentum', 'adam', 'adamw'), got 'rmsprop'
    """
    if name == "sgd":
        return nn.SGD(params, lr, weight_decay=weight_decay)
    if name == "momentum":
        return nn.Momentum(params, lr, MOMENTUM, weight_decay=weight_decay)
    if name == "adam":
        return nn.Adam(params, lr, weight_decay=weight_decay)
    if name == "adamw":
        return nn.AdamWeightDecay(params, lr, weight_decay=weight_decay)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")
