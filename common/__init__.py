"""What the data, the models and the training tools share that is not accumulation.

``checks`` holds the argument checks, ``files`` the atomic file write and the
finding of what killed writes left behind. Both are the library's own
(``accumulator.checks``, ``accumulator.files``): the library is installed
alone, may import MindSpore alone, and writes its checkpoints atomically, so it
keeps the one copy and does not export them. The tools name them here, never
in the library, so that ``accumulator`` exports accumulation only.
"""
