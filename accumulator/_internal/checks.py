"""The library's argument checks (the tools beside it have their own in ``common.checks``: the library stands alone).

Each returns the value in its plain Python type or raises ``ValueError``
naming the argument and the value, so callers check before touching state.
"""
import numbers


def positive_int(value, name):
    """``value`` as an int >= 1, or a ValueError naming ``name``.

    Example:
        >>> positive_int(4, "accumulate_step")
        4
        >>> positive_int(0, "accumulate_step")
        Traceback (most recent call last):
        ...
        ValueError: accumulate_step must be a positive int, got 0
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def non_negative_int(value, name):
    """``value`` as an int >= 0, or a ValueError naming ``name``.

    Example:
        >>> non_negative_int(0, "seed")
        0
        >>> non_negative_int(-1, "seed")
        Traceback (most recent call last):
        ...
        ValueError: seed must be a non-negative int, got -1
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return int(value)


def boolean(value, name):
    """``value`` if it is True or False, else a ValueError naming ``name``.

    Example:
        >>> boolean("yes", "shuffle")
        Traceback (most recent call last):
        ...
        ValueError: shuffle must be True or False, got 'yes'
    """
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def grads_match(grads, shapes):
    """Raises ValueError unless ``grads`` hold one gradient of each shape in ``shapes``, naming the first that does not.

    Runs while the step compiles, on shapes alone; the hint names value_and_grad's weights, the usual cause.

    Example:
        >>> import numpy as np
        >>> grads_match((np.zeros((2, 3)),), [[3, 2]])
        Traceback (most recent call last):
        ...
        ValueError: grads[0] has shape [2, 3], expected [3, 2] like the optimizer's parameter: take them with ms.value_and_grad(forward, None, optimizer.parameters)
    """
    hint = "take them with ms.value_and_grad(forward, None, optimizer.parameters)"
    if not isinstance(grads, (tuple, list)):
        raise ValueError(f"grads must be a tuple with one gradient per optimizer parameter "
                         f"({len(shapes)}), got one Tensor of shape {list(grads.shape)}: {hint}")
    if len(grads) != len(shapes):
        raise ValueError(f"grads holds {len(grads)} gradients but the optimizer has {len(shapes)} parameters: {hint}")
    for index, (grad, shape) in enumerate(zip(grads, shapes)):
        # Shapes are lists: the graph compiler prints a tuple (9,) as (9).
        if list(grad.shape) != shape:
            raise ValueError(f"grads[{index}] has shape {list(grad.shape)}, expected {shape} "
                             f"like the optimizer's parameter: {hint}")
