"""data.text: byte tokens, samples split at paragraph and line ends, the held-out split, the download up to the network.

By hand: byte ``a`` (97) is token 98, one above PAD (0), and decodes back to ``a``; the same seed writes the same
synthetic text, another seed another.
"""
import os

import numpy as np
import pytest

from data.text import (CORPUS_FILE, VOCAB_SIZE, TextUnavailableError, decode, encode, ensure_corpus, split_corpus,
                       split_samples, synthetic_text)
from tests.tools.helpers import serving

# Port 9 (discard) on loopback: nothing listens, so the connection is refused at once.
UNREACHABLE_URL = "http://127.0.0.1:9/input.txt"


def test_bytes_become_tokens_one_above_pad_and_back():
    text = "To be, or not to be: ça?\n"
    tokens = encode(text)
    assert tokens.dtype == np.int32 and tokens.min() >= 1 and tokens.max() < VOCAB_SIZE
    assert len(tokens) == len(text.encode("utf-8"))  # bytes, not characters
    assert decode(tokens) == text
    assert encode(bytes(range(256))).tolist() == list(range(1, 257))


def test_samples_keep_the_text_end_at_line_ends_and_respect_the_cap():
    text = synthetic_text(5000, seed=3)
    samples = split_samples(encode(text), cap=64)
    joined = "".join(decode(sample) for sample in samples)
    # Nothing lost, nothing reordered; only a blank line that fits no sample is left out.
    assert joined.replace("\n\n", "\n") == text.replace("\n\n", "\n") and len(joined) > 0.98 * len(text)
    assert all(2 <= len(sample) <= 64 for sample in samples)
    assert all(decode(sample).endswith("\n") for sample in samples)
    assert len({len(sample) for sample in samples}) > 10  # lengths vary: what token counts are for


def test_a_line_longer_than_the_cap_is_cut_and_single_tokens_dropped():
    samples = split_samples(encode("x" * 10 + "\n\n\nab\n"), cap=4)
    assert [decode(s) for s in samples] == ["xxxx", "xxxx", "xx\n\n", "ab\n"]


def test_the_held_out_split_is_the_end_of_the_corpus():
    samples = list(range(95))
    train, validation = split_corpus(samples)
    assert train + validation == samples and len(validation) == 10


def test_synthetic_text_is_seeded():
    assert synthetic_text(2000, seed=1) == synthetic_text(2000, seed=1) != synthetic_text(2000, seed=2)


def test_offline_leaves_nothing_and_names_the_address_and_the_file(tmp_path):
    data_dir = tmp_path / "new" / "text"
    with pytest.raises(TextUnavailableError) as caught:
        ensure_corpus(str(data_dir), url=UNREACHABLE_URL)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"Could not download Tiny Shakespeare from {UNREACHABLE_URL} (")
    assert f"Save that file by hand as {data_dir / CORPUS_FILE}, or use --synthetic." in message
    assert os.listdir(tmp_path) == []  # not even the folders on the way


def test_a_download_is_installed_once_and_a_cut_short_one_refused(tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    (served / "input.txt").write_text("First Citizen:\n" * 10)
    (served / "short.txt").write_text("First Citizen:\n")
    data_dir = tmp_path / "text"
    with serving(served) as base_url:
        with pytest.raises(TextUnavailableError,
                           match=r"\(the file holds 15 bytes, expected 150 \(cut short\?\); nothing installed\)"):
            ensure_corpus(str(data_dir), url=f"{base_url}/short.txt", size=150)
        assert sorted(os.listdir(tmp_path)) == ["served"]
        path = ensure_corpus(str(data_dir), url=f"{base_url}/input.txt", size=150)
    assert path == str(data_dir / CORPUS_FILE) and open(path).read() == "First Citizen:\n" * 10
    assert sorted(os.listdir(tmp_path)) == ["served", "text"] and os.listdir(data_dir) == [CORPUS_FILE]
    assert ensure_corpus(str(data_dir), url=UNREACHABLE_URL, size=150) == path  # there: no network needed
