"""What the data, the models and the training tools share that is not accumulation.

``checks`` holds the argument checks, ``files`` the atomic file write and the
finding of what killed checkpoint writes left behind. They import nothing from
``accumulator`` and set nothing in MindSpore: the library is installed alone
and keeps its own few lines of each (``accumulator._internal.checks``,
``accumulator._internal.files``), and the data and the models load without it.
"""
