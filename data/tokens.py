"""Padded variable-length token batches for the causal language model.

A batch of sequences becomes ``(inputs, targets)``: each sequence without its
last token, and without its first, right-padded with ``PAD``. The padded
length is rounded up to a multiple, so an epoch of lengths 5-40 compiles a
handful of shapes instead of one per length (docs/your-project.md).
"""
import numpy as np

from common.checks import positive_int

PAD = 0


def padded_length(longest, multiple=8):
    """``longest`` rounded up to a multiple of ``multiple`` (at least ``multiple``).

    Example:
        >>> padded_length(5), padded_length(17), padded_length(17, multiple=16)
        (8, 24, 32)
    """
    multiple = positive_int(multiple, "multiple")
    return max(1, -(-longest // multiple)) * multiple


def pad_batch(sequences, multiple=8, length=None):
    """Shifted inputs and targets of ``sequences``, right-padded with ``PAD``.

    Args:
        sequences: token id sequences (lists or 1-D arrays of non-PAD ids),
            each at least 2 tokens long.
        multiple: the padded length L is the longest ``len - 1`` rounded up to
            a multiple of this, which bounds the number of distinct shapes.
        length: pad to at least this many positions (a window padding all its
            micro-batches to one length passes its own longest).

    Returns:
        ``(inputs, targets)``, int32 arrays ``[len(sequences), L]``.

    Example:
        >>> inputs, targets = pad_batch([[5, 6, 7], [8, 9]], multiple=4)
        >>> inputs.tolist(), targets.tolist()
        ([[5, 6, 0, 0], [8, 0, 0, 0]], [[6, 7, 0, 0], [9, 0, 0, 0]])
        >>> pad_batch([[5]])
        Traceback (most recent call last):
        ...
        ValueError: sequences must each hold at least 2 tokens, got one of length 1
    """
    sequences = [np.asarray(sequence, np.int32) for sequence in sequences]
    if not sequences:
        raise ValueError("sequences must hold at least one sequence, got none")
    shortest = min(len(sequence) for sequence in sequences)
    if shortest < 2:
        raise ValueError(f"sequences must each hold at least 2 tokens, got one of length {shortest}")
    longest = max(len(sequence) for sequence in sequences) - 1
    width = padded_length(max(longest, length or 0), multiple)
    inputs = np.full((len(sequences), width), PAD, np.int32)
    targets = np.full((len(sequences), width), PAD, np.int32)
    for row, sequence in enumerate(sequences):
        inputs[row, :len(sequence) - 1] = sequence[:-1]
        targets[row, :len(sequence) - 1] = sequence[1:]
    return inputs, targets


def token_count(targets):
    """The number of non-PAD targets: what a summed token loss is divided by.

    Example:
        >>> _, targets = pad_batch([[5, 6, 7], [8, 9]])
        >>> token_count(targets)
        3
    """
    return int(np.count_nonzero(np.asarray(targets) != PAD))


def random_sequences(count, vocab_size, min_length=5, max_length=40, seed=0):
    """``count`` random sequences of ids ``1..vocab_size-1``, lengths uniform in ``[min_length, max_length]``.

    Example:
        >>> [len(s) for s in random_sequences(3, 100, seed=1)]
        [22, 23, 32]
    """
    if not 2 <= min_length <= max_length:
        raise ValueError(f"min_length and max_length must satisfy 2 <= min_length <= max_length, "
                         f"got {min_length} and {max_length}")
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_length, max_length + 1, size=positive_int(count, "count"))
    return [rng.integers(1, positive_int(vocab_size, "vocab_size"), size=n).astype(np.int32) for n in lengths]


def window_batches(sequences, batch_size, accumulate_step, multiple=8):
    """Accumulation windows for ``make_window_step``: every micro-batch of a window padded to one length.

    Consecutive ``batch_size`` sequences form a micro-batch, consecutive
    ``accumulate_step`` micro-batches a window; a short last micro-batch is
    filled with all-PAD rows, which hold no tokens, so with a summed token
    loss and the counts they change nothing.

    Yields:
        ``(inputs, targets, counts)``: int32 arrays ``[n, batch_size, L]``
        (``n`` micro-batches, ``accumulate_step`` except in the last window)
        and the float32 token count of each micro-batch, ``[n]``.

    Example:
        >>> sequences = random_sequences(10, 100, seed=0)
        >>> [len(s) for s in sequences]
        [35, 27, 23, 14, 16, 6, 7, 5, 11, 34]
        >>> [(inputs.shape, counts.tolist()) for inputs, _, counts in window_batches(sequences, 3, 2)]
        [((2, 3, 40), [82.0, 33.0]), ((2, 3, 40), [20.0, 33.0])]
    """
    batch_size = positive_int(batch_size, "batch_size")
    window = batch_size * positive_int(accumulate_step, "accumulate_step")
    for start in range(0, len(sequences), window):
        chunk = list(sequences[start:start + window])
        longest = max(len(sequence) for sequence in chunk) - 1
        micro = [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
        pairs = [pad_batch(group, multiple, length=longest) for group in micro]
        inputs = np.zeros((len(pairs), batch_size, pairs[0][0].shape[1]), np.int32)
        targets = np.zeros_like(inputs)
        for i, (group_inputs, group_targets) in enumerate(pairs):
            inputs[i, :len(group_inputs)] = group_inputs
            targets[i, :len(group_targets)] = group_targets
        yield inputs, targets, np.array([token_count(t) for t in targets], np.float32)
