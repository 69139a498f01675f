"""What the data, the models and the training tools share that is not accumulation: the argument checks.

``checks`` imports nothing from ``accumulator`` and sets nothing in MindSpore; the library is installed alone
and keeps its own few lines of them (``accumulator._internal.checks``). Files are written through the library's
atomic write (``accumulator.core.checkpoints.write_atomically``).
"""
