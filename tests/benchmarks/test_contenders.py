"""benchmarks/contenders.py: every registered row times real training.

By hand: the floors (apply_floor, checked_floor, checked_window_floor, micro_floor, two_graph_floor, window_floor) run
only with experiments; with them, every registered contender does.
"""
import numpy as np
import pytest

from benchmarks.contenders import CONTENDERS, default_contenders
from tests.accumulator.helpers import sweep

TABLE_ROWS = sorted(default_contenders())
FLOORS = sorted(set(CONTENDERS) - set(TABLE_ROWS))
# The window row with a policy added (tests/accumulator/policies/test_ema.py tests the policy's window step).
WITH_POLICY = ["window_ema"]


# The fast path trains the table's rows; the floors (--experiments) and the window row with a policy join in the full
# suite.
@pytest.mark.parametrize("name", sweep(sorted(set(TABLE_ROWS) - set(WITH_POLICY)) + WITH_POLICY + FLOORS,
                                       fast=len(TABLE_ROWS) - len(WITH_POLICY)))
def test_every_contender_trains_one_window_on_a_tiny_net(name):
    spec = dict(hidden=8, batch=4, accumulate=2, mode="graph", device_target="CPU")
    runner = CONTENDERS[name].build(spec)
    before = runner.weights()
    calls = max(1, spec["batch"] * spec["accumulate"] // runner.samples_per_call)
    for _ in range(calls):
        runner.step()
    runner.sync()
    # Every row must time real work: one window changes the weights (the micro floor's: its window's sum).
    assert any(not np.array_equal(a, b) for a, b in zip(before, runner.weights()))
    # Accumulating contenders keep about one buffer per parameter (two for the tutorial).
    assert runner.state_bytes in (0, pytest.approx(runner.param_bytes, abs=64),
                                  pytest.approx(2 * runner.param_bytes, abs=64))


def test_only_the_floors_wait_for_experiments():
    assert FLOORS == ["apply_floor", "checked_floor", "checked_window_floor", "micro_floor", "two_graph_floor",
                      "window_floor"]
    assert default_contenders(experiments=True) == list(CONTENDERS)
