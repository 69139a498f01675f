"""Files written whole, for the data, the models and the training tools: a crash mid-write never leaves half a file.

Example:
    >>> write_atomically("run.txt", lambda temporary: open(temporary, "w").close())
    >>> unfinished_writes("run.txt")
    []
"""
from accumulator.files import unfinished_writes, write_atomically

__all__ = ["unfinished_writes", "write_atomically"]
