"""Padded token batches: shifted inputs/targets, bounded shapes, token counts, windows of one length.

By hand: sequence [5, 6, 7] padded to a multiple of 8 gives inputs [5, 6, 0, ...] and targets [6, 7, 0, ...]: 2
tokens counted; a sequence of one token has no target and is refused.
"""
import numpy as np
import pytest

from data.tokens import PAD, pad_batch, padded_length, random_sequences, token_count, window_batches


def test_pad_batch_shifts_and_pads_to_a_multiple():
    sequences = random_sequences(7, 50, seed=3)
    inputs, targets = pad_batch(sequences, multiple=16)
    longest = max(len(s) for s in sequences) - 1
    assert inputs.dtype == targets.dtype == np.int32
    assert inputs.shape == targets.shape == (7, padded_length(longest, 16))
    assert inputs.shape[1] % 16 == 0 and inputs.shape[1] - 16 < longest
    for row, sequence in enumerate(sequences):
        n = len(sequence) - 1
        np.testing.assert_array_equal(inputs[row, :n], sequence[:-1])
        np.testing.assert_array_equal(targets[row, :n], sequence[1:])
        assert (inputs[row, n:] == PAD).all() and (targets[row, n:] == PAD).all()
    assert token_count(targets) == sum(len(s) - 1 for s in sequences)


def test_lengths_5_to_40_make_few_shapes():
    sequences = random_sequences(200, 50, min_length=5, max_length=40, seed=0)
    widths = {pad_batch(sequences[i:i + 4], multiple=8)[0].shape[1] for i in range(0, 200, 4)}
    assert widths <= {8, 16, 24, 32, 40} and len(widths) >= 3


@pytest.mark.parametrize("bad, message", [([], "got none"), ([[1, 2], [3]], "got one of length 1")])
def test_pad_batch_refuses_bad_sequences(bad, message):
    with pytest.raises(ValueError, match=message):
        pad_batch(bad)


def test_window_batches_pad_a_window_to_one_length_and_fill_short_micro_batches():
    sequences = random_sequences(11, 50, seed=5)
    windows = list(window_batches(sequences, batch_size=2, accumulate_step=3, multiple=8))
    assert [w[0].shape[0] for w in windows] == [3, 3]
    taken = 0
    for inputs, targets, counts in windows:
        chunk = sequences[taken:taken + 6]
        taken += len(chunk)
        assert inputs.shape[2] == padded_length(max(len(s) for s in chunk) - 1, 8)
        assert counts.dtype == np.float32
        assert counts.tolist() == [token_count(t) for t in targets]
        assert counts.sum() == sum(len(s) - 1 for s in chunk)
    assert (windows[-1][0][-1, 1] == PAD).all()        # the last micro-batch's missing row is all PAD


def test_random_sequences_refuses_bad_lengths():
    with pytest.raises(ValueError, match="got 1 and 40"):
        random_sequences(3, 10, min_length=1)
