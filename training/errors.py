"""The one error a training run raises for faults the user can fix."""


class TrainingError(RuntimeError):
    """A run cannot go on; the message says why and what to do (no traceback needed).

    Command-line tools print it as ``error: <message>`` and exit 1.

    Example:
        >>> raise TrainingError("could not write checkpoint runs/a/epoch_002.ckpt: disk full")
        Traceback (most recent call last):
        ...
        training.errors.TrainingError: could not write checkpoint runs/a/epoch_002.ckpt: disk full
    """
