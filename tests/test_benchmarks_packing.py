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


def test_from_json_merges_the_saved_runs_into_one_table_and_refuses_runs_that_disagree(tmp_path, capsys):
    padded, packed, control = "--no-packing --batch-size 8", "--packing --batch-size 5", "--no-packing --batch-size 31"
    first, second, merged = tmp_path / "first.json", tmp_path / "second.json", tmp_path / "merged.json"
    first.write_text(json.dumps({padded: {"0": [3.0, 2.0], "1": [2.5, 2.2]}, packed: {"0": [2.97, 2.0], "1": [2.5, 2.2]}}))
    second.write_text(json.dumps({control: {"1": [2.55, 2.2], "0": [3.0, 1.98]}}))
    picked = [f"--contender={flags}" for flags in (padded, control)]
    assert packing.main(["loss", "--from-json", str(first), str(second), *picked, "--json", str(merged)]) == 0
    table = capsys.readouterr().out.splitlines()[2:]
    assert [line.split()[-2:] for line in table[2:]] == [["+0.0%,", "+2.0%"], ["-1.0%,", "+0.0%"]]
    assert list(json.loads(merged.read_text())) == [padded, control]  # packed left out, padded the reference
    assert list(packing.load_loss([str(second)])[control]) == [0, 1]  # in seed order
    second.write_text(json.dumps({padded: {"1": [2.5, 2.3]}}))
    with pytest.raises(ValueError, match="seed 1 of '--no-packing --batch-size 8' differs"):
        packing.load_loss([str(first), str(second)])
    with pytest.raises(ValueError, match="no results for '--packing --batch-size 8'"):
        packing.load_loss([str(first)], ["--packing --batch-size 8"])
