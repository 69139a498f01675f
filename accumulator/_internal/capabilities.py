"""What the installed MindSpore can do, where releases differ: each asked once, by trying it, never at import.

The library runs on MindSpore 2.7 to 2.10; where an op is missing from a
release it takes another way, chosen by what the release can do, not by its
version string (docs/mindspore-behaviours.md#versions). A check compiles a
tiny graph the first time the library needs its answer (building the first
``Accumulator``), a fraction of a second, and keeps the answer for the
process. It only compiles: no kernel runs, nothing is written, no random
state or Parameter changes, and the device stays free to be chosen.
"""
import functools

import numpy as np
from mindspore import Tensor, nn

try:
    from mindspore.ops.auto_generate import SplitWithSize
except ImportError:  # the primitive's module has moved between releases before: then it is missing
    SplitWithSize = None


class _SplitWithSizeGraph(nn.Cell):
    """The smallest graph that needs a SplitWithSize kernel: three elements into pieces of 1 and 2."""

    def __init__(self) -> None:
        super().__init__()
        self.split = SplitWithSize()

    def construct(self, flat):
        return self.split(flat, (1, 2), 0)


@functools.lru_cache(maxsize=None)
def split_with_size() -> bool:
    """True when a graph with a ``SplitWithSize`` compiles on the device in use: a bucket splits in one kernel.

    MindSpore 2.7's CPU has no SplitWithSize kernel ("Unsupported op
    [SplitWithSize] on CPU"); 2.8 to 2.10 have one. Where it is missing,
    ``Buckets.split`` slices each piece instead
    (docs/mindspore-behaviours.md#versions). The first call compiles a
    three-element graph without running it; later calls return the kept answer.

    Example:
        >>> split_with_size() in (True, False)
        True
        >>> split_with_size() is split_with_size()   # asked once: the same answer, not a second compile
        True
    """
    if SplitWithSize is None:
        return False
    try:
        # Cell.compile builds the graph and selects its kernels without running it.
        _SplitWithSizeGraph().compile(Tensor(np.zeros(3, np.float32)))
    except Exception:  # pylint: disable=broad-except
        # "Unsupported op [SplitWithSize] on CPU" is a RuntimeError; any failure to compile means: do without.
        return False
    return True
