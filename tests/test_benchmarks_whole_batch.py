"""benchmarks/whole_batch.py: the whole-batch step against the large batch, timed."""
import json

import pytest

from benchmarks.whole_batch import run


@pytest.mark.slow
def test_benchmark_runs_with_tiny_sizes_and_writes_its_rows(tmp_path, capsys):
    rows = run(micro_batches=(2,), micro_batch_size=4, width=8, depth=1, repeats=1,
               json_path=str(tmp_path / "whole_batch.json"))

    assert [row["method"] for row in rows] == ["large", "whole"]
    assert all(row["samples"] == 8 and row["s_per_sample"] > 0 and row["peak_mb"] > 0 for row in rows)
    assert json.loads((tmp_path / "whole_batch.json").read_text())["rows"] == rows
    assert "whole batch     2      8" in capsys.readouterr().out
