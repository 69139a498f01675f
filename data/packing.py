"""Token samples packed into rows of one length: no padding but at a row's tail, documents kept apart.

Padding every sample to the longest a sample can be gives one shape (one
compile) but computes the padding: about half of every row on the
language-model tool's text. Packing fills each row of ``length`` target
slots with several samples (``first_fit``, in the order given, so a seeded
shuffle stays a seeded shuffle) and marks which document each slot belongs
to. With a model that attends within a document only and restarts
positions at each (``models.transformer.CausalLM`` given the document ids,
``models.transformer.document_mask``), a packed row computes what its
documents would compute one by one: each document's logits are the same, so
summed token losses and token counts are too, and accumulation stays exact.

A packed batch is ``(inputs, targets)`` like a padded one (``data.tokens.pad_batch``),
so every step that takes a padded batch takes it: ``inputs`` is
``[rows, 2, length]``, the tokens (``inputs[:, 0]``) and their document ids
(``inputs[:, 1]``: 1, 2, ... within each row, ``NO_DOCUMENT`` at the tail's
padding); ``targets`` is ``[rows, length]``, ``PAD`` at the padding.
"""
import numpy as np

from common.checks import positive_int
from data.tokens import PAD

# The document id of a row's padding: no document, attended by nothing.
NO_DOCUMENT = 0


def first_fit(sizes, capacity, window=None):
    """Rows of indices into ``sizes``: each size, in the order given, goes to the first row with room for it.

    A row holds at most ``capacity``; a size that fits no open row opens a
    new one. Rows are listed in the order they were opened, each with its
    indices in the order they came, so the same ``sizes`` give the same rows.

    ``window`` bounds how far a size moves: the rows come in windows of
    ``window`` rows (rows ``0 .. window - 1``, then the next ``window``, ...)
    and a size may go only to a row of the last window; when none of them
    has room and the window is full, the size opens the next window. Each
    window then holds the sizes of a run of consecutive indices, and every
    window but the last exactly ``window`` rows. By default (None) any
    open row may take a size, however far back it was opened.

    Raises:
        ValueError: a size is below 1 or above ``capacity``.

    Example:
        >>> first_fit([5, 7, 3, 2, 4], capacity=8)
        [[0, 2], [1], [3, 4]]
        >>> first_fit([5, 7, 6, 3], capacity=8, window=2), first_fit([5, 7, 6, 3], capacity=8)  # 3 stays in its window
        ([[0], [1], [2], [3]], [[0, 3], [1], [2]])
        >>> first_fit([9], capacity=8)
        Traceback (most recent call last):
        ...
        ValueError: sizes must each be 1 to capacity (8), got 9 at index 0
    """
    capacity = positive_int(capacity, "capacity")
    window = None if window is None else positive_int(window, "window")
    sizes = np.asarray(sizes, np.int64)
    bad = np.flatnonzero((sizes < 1) | (sizes > capacity))
    if bad.size:
        raise ValueError(f"sizes must each be 1 to capacity ({capacity}), got {sizes[bad[0]]} at index {bad[0]}")
    free = np.empty(len(sizes), np.int64)  # the room left in each open row
    rows = []
    for index, size in enumerate(sizes):
        first = (len(rows) - 1) // window * window if window and rows else 0  # the first row that may take it
        fits = free[first:len(rows)] >= size
        row = first + int(fits.argmax()) if fits.any() else len(rows)
        if row == len(rows):
            rows.append([])
            free[row] = capacity
        rows[row].append(index)
        free[row] -= size
    return rows


def pack_rows(sequences, length, rows=None):
    """``sequences`` packed into rows of ``length`` target slots: ``(inputs [R, 2, length], targets [R, length])``.

    A sequence of n tokens takes n - 1 slots (inputs without its last
    token, targets without its first), as in ``data.tokens.pad_batch``.
    ``rows`` lists which sequences each row holds (indices, in order);
    by default ``first_fit`` of the sequences in the order given. A row's
    documents are numbered from 1 in ``inputs[:, 1]``; the tail after the
    last one is ``PAD`` tokens and targets in ``NO_DOCUMENT``.

    Raises:
        ValueError: no sequences, one shorter than 2 tokens, or more than
            ``length + 1``; or a row of ``rows`` holding more than ``length``.

    Example:
        >>> inputs, targets = pack_rows([[5, 6, 7], [8, 9], [1, 2, 3, 4]], length=4)
        >>> inputs[:, 0].tolist(), inputs[:, 1].tolist()          # tokens, document ids
        ([[5, 6, 8, 0], [1, 2, 3, 0]], [[1, 1, 2, 0], [1, 1, 1, 0]])
        >>> targets.tolist()
        [[6, 7, 9, 0], [2, 3, 4, 0]]
    """
    length = positive_int(length, "length")
    sequences = [np.asarray(sequence, np.int32) for sequence in sequences]
    if not sequences:
        raise ValueError("sequences must hold at least one sequence, got none")
    slots = np.array([len(sequence) - 1 for sequence in sequences])
    if slots.min() < 1 or slots.max() > length:
        raise ValueError(f"sequences must each hold 2 to length + 1 ({length + 1}) tokens, "
                         f"got one of {slots.min() + 1 if slots.min() < 1 else slots.max() + 1}")
    rows = first_fit(slots, length) if rows is None else rows
    inputs = np.full((len(rows), 2, length), PAD, np.int32)
    inputs[:, 1] = NO_DOCUMENT
    targets = np.full((len(rows), length), PAD, np.int32)
    for r, row in enumerate(rows):
        if sum(slots[i] for i in row) > length:
            raise ValueError(f"rows[{r}] holds {sum(slots[i] for i in row)} target slots, more than length {length}")
        start = 0
        for document, i in enumerate(row, 1):
            end = start + slots[i]
            inputs[r, 0, start:end] = sequences[i][:-1]
            inputs[r, 1, start:end] = document
            targets[r, start:end] = sequences[i][1:]
            start = end
    return inputs, targets


def padding_fraction(targets):
    """The fraction of target slots that hold ``PAD``: computed, and worth nothing.

    Example:
        >>> _, targets = pack_rows([[5, 6, 7], [8, 9], [1, 2, 3, 4]], length=4)
        >>> padding_fraction(targets)
        0.25
    """
    targets = np.asarray(targets)
    return float(np.count_nonzero(targets == PAD)) / max(targets.size, 1)
