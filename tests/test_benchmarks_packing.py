"""benchmarks/packing.py: packed against padded rows of train_lm.py, in useful tokens/s and in loss per token."""
import json

import pytest

from benchmarks import packing
from data.text import synthetic_text

TINY = "--width 16 --depth 1 --max-length 32 --accumulate-step 2"


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(synthetic_text(3000))
    return str(path)


def test_packed_rows_hold_the_padded_rows_tokens_in_fewer_rows(corpus):
    padded = packing.contender(f"--no-packing --batch-size 4 {TINY}", corpus)
    packed = packing.contender(f"--packing --batch-size 4 {TINY}", corpus)
    (padded_rows, padded_padding), (packed_rows, packed_padding) = (packing.rows_and_padding(*padded),
                                                                     packing.rows_and_padding(*packed))
    tokens = [rows * 32 * (1 - padding) for rows, padding in ((padded_rows, padded_padding),
                                                               (packed_rows, packed_padding))]
    assert tokens[0] == pytest.approx(tokens[1])
    assert packed_rows < padded_rows and packed_padding < padded_padding


@pytest.mark.slow  # compiles four tiny transformers and trains each an epoch
def test_a_contender_paired_with_itself_differs_by_nothing_and_seeds_differ():
    flags = (f"--packing --batch-size 4 {TINY}", f"--batch-size 4 {TINY}")  # the same run: packing is the default
    results = packing.loss(flags, seeds=(0, 1), epochs=1, text_bytes=3000, say=lambda line: None)
    reference, same = results.values()
    assert reference == same  # same seed, same weights, same order: the pairing is exact
    assert reference[0] != reference[1]
    for row in packing.paired_differences(reference, same):
        assert row["mean"] == row["sd"] == row["low"] == row["high"] == 0
    assert packing.format_loss(results).count("\n") == 2


@pytest.mark.slow  # compiles two tiny transformers and trains two epochs of each
def test_the_speed_command_times_each_contender_every_round_and_writes_json(tmp_path, capsys):
    path = tmp_path / "speed.json"
    contenders = [f"--contender=--no-packing --batch-size 4 {TINY}", f"--contender=--batch-size 4 {TINY}"]
    assert packing.main(["speed", "--rounds", "2", "--text-bytes", "3000", *contenders, "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("round ") == 2 and "useful tokens/s" in out
    results = json.loads(path.read_text())
    padded, packed = results.values()
    for result in (padded, packed):
        assert len(result["rates"]) == 2 and min(result["rates"]) > 0
    assert packed["rows"] < padded["rows"]
