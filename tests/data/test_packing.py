"""data.packing: first-fit rows that hold every sample once, in order, within the row length; packed rows' layout.

By hand: first fit of sizes 30, 40, 20 into rows of 64: rows [30, 20] and [40]; a size of 0 or of 65 is refused,
naming its index.
"""
import numpy as np
import pytest

from data.packing import NO_DOCUMENT, first_fit, pack_rows, padding_fraction
from data.tokens import PAD, random_sequences, token_count


def test_first_fit_places_every_size_once_within_capacity_in_the_first_row_with_room():
    sizes = np.random.default_rng(0).integers(1, 65, size=300)
    rows = first_fit(sizes, 64)
    assert sorted(i for row in rows for i in row) == list(range(300))
    assert all(sum(sizes[i] for i in row) <= 64 for row in rows)
    assert all(row == sorted(row) for row in rows)               # a row keeps the order the sizes came in
    for row_index, row in enumerate(rows):
        for i in row:                                           # no earlier row had room when i came
            for earlier in rows[:row_index]:
                assert sum(sizes[j] for j in earlier if j < i) + sizes[i] > 64
    assert len(rows) < 0.7 * 300                                # fewer rows than samples: what packing is for


def test_first_fit_follows_the_order_it_is_given():
    sizes = [30, 40, 30, 20]
    assert first_fit(sizes, 64) == [[0, 2], [1, 3]]
    assert first_fit(sizes[::-1], 64) == [[0, 1], [2], [3]]


@pytest.mark.parametrize("sizes, message", [([3, 0], "got 0 at index 1"), ([65], "got 65 at index 0")])
def test_first_fit_refuses_sizes_it_cannot_place(sizes, message):
    with pytest.raises(ValueError, match=message):
        first_fit(sizes, 64)


def test_packed_rows_hold_each_sequence_shifted_with_its_document_id_and_padding_only_at_the_tail():
    sequences = random_sequences(40, 50, min_length=3, max_length=30, seed=2)
    inputs, targets = pack_rows(sequences, 32)
    rows = first_fit([len(s) - 1 for s in sequences], 32)
    assert inputs.shape == (len(rows), 2, 32) and targets.shape == (len(rows), 32)
    assert inputs.dtype == targets.dtype == np.int32
    for r, row in enumerate(rows):
        start = 0
        for document, i in enumerate(row, 1):
            end = start + len(sequences[i]) - 1
            np.testing.assert_array_equal(inputs[r, 0, start:end], sequences[i][:-1])
            np.testing.assert_array_equal(targets[r, start:end], sequences[i][1:])
            assert (inputs[r, 1, start:end] == document).all()
            start = end
        assert (inputs[r, 0, start:] == PAD).all() and (targets[r, start:] == PAD).all()
        assert (inputs[r, 1, start:] == NO_DOCUMENT).all()
    assert token_count(targets) == sum(len(s) - 1 for s in sequences)
    assert padding_fraction(targets) == pytest.approx(1 - token_count(targets) / targets.size)


def test_pack_rows_takes_the_rows_it_is_given_and_refuses_bad_ones():
    sequences = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    inputs, targets = pack_rows(sequences, 4, rows=[[2], [1, 0]])
    assert targets.tolist() == [[7, 8, 9, 0], [5, 2, 3, 0]]
    assert inputs[:, 1].tolist() == [[1, 1, 1, 0], [1, 2, 2, 0]]
    with pytest.raises(ValueError, match=r"rows\[0\] holds 5 target slots, more than length 4"):
        pack_rows(sequences, 4, rows=[[0, 2]])
    with pytest.raises(ValueError, match=r"2 to length \+ 1 \(4\) tokens, got one of 5"):
        pack_rows([[1, 2, 3, 4, 5]], 3)
    with pytest.raises(ValueError, match="got one of 1"):
        pack_rows([[1]], 3)


@pytest.mark.parametrize("window", [1, 3, 20])
def test_first_fit_within_windows_keeps_each_size_in_a_window_of_consecutive_indices(window):
    sizes = np.random.default_rng(1).integers(1, 65, size=300)
    rows = first_fit(sizes, 64, window)
    assert sorted(i for row in rows for i in row) == list(range(300))   # nothing lost, nothing twice
    assert all(sum(sizes[i] for i in row) <= 64 for row in rows)
    assert all(row == sorted(row) for row in rows)
    windows = [sorted(i for row in rows[start:start + window] for i in row) for start in range(0, len(rows), window)]
    assert all(len(rows[start:start + window]) == window for start in range(0, len(rows) - window, window))
    assert [i for indices in windows for i in indices] == list(range(300))  # windows in order, each a run
    for start, run in zip(range(0, len(rows), window), windows):
        block = rows[start:start + window]
        assert [[run[k] for k in row] for row in first_fit(sizes[run], 64)] == block  # plain first fit within it
        if run[-1] + 1 < len(sizes):                                     # and the next size had no room in it
            assert all(sum(sizes[i] for i in row) + sizes[run[-1] + 1] > 64 for row in block)
    assert first_fit(sizes, 64, len(sizes)) == first_fit(sizes, 64)    # a window as long as the epoch: no bound
    assert len(first_fit(sizes, 64, window)) >= len(first_fit(sizes, 64))
