"""Why the library's checks inside a compiled step raise builtin exceptions (docs/mindspore-behaviours.md).

By hand: a jitted step that raises ``ValueError("x has 3 rows, expected 2")`` while it compiles reaches the caller as
a ValueError whose first line is that message, quoted; one that raises a class of its own becomes a RuntimeError.
"""
import mindspore as ms
import numpy as np
import pytest


class LibraryError(ValueError):
    """An exception class of a library's own."""


def test_an_error_raised_while_a_step_compiles_is_a_builtin_one_with_its_message_quoted_first():
    # docs/mindspore-behaviours.md: why the Accumulator's in-graph checks raise ValueError, and what a user sees first.
    @ms.jit
    def builtin(x):
        if x.shape[0] != 2:
            raise ValueError(f"x has {x.shape[0]} rows, expected 2")
        return x

    @ms.jit
    def own_class(x):
        if x.shape[0] != 2:
            raise LibraryError("x has the wrong number of rows")
        return x

    x = ms.Tensor(np.ones(3, np.float32))
    with pytest.raises(ValueError) as raised:
        builtin(x)
    first, *appendix = str(raised.value).splitlines()
    assert first == "'x has 3 rows, expected 2'" and "- The Traceback of Net Construct Code:" in appendix
    with pytest.raises(RuntimeError, match="Unsupported exception type: LibraryError"):
        own_class(x)
