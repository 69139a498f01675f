"""benchmarks.revisions: an earlier revision's accumulator imports beside this one, and its steps run."""
import tempfile

import numpy as np

from benchmarks.revisions import import_revision, make_step, paired_ratios


def test_an_earlier_revision_imports_as_a_package_of_its_own_and_trains():
    import accumulator
    before = import_revision("HEAD", tempfile.mkdtemp())
    assert before.__name__ == "accumulator_HEAD" and before.Accumulator is not accumulator.Accumulator
    assert all(module.startswith("accumulator_HEAD") for module in before.Accumulator.__module__.split(".")[:1])
    spec = dict(family="deep", hidden=8, depth=2)
    step = make_step(before, spec, "recommended", accumulate_step=2, batch=4)
    for _ in range(2):
        step()


def test_ratios_are_paired_block_by_block():
    rows = paired_ratios({("in_graph", "before"): [1.0, 10.0, 2.0], ("in_graph", "after"): [2.0, 10.0, 1.0]})
    assert rows["in_graph"]["ratio"] == 1.0 and (rows["in_graph"]["low"], rows["in_graph"]["high"]) == (0.5, 2.0)
    assert np.isclose(rows["in_graph"]["before"], 2.0)
