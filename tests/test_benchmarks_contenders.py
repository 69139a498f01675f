"""benchmarks/contenders.py: every registered row times real training."""
import numpy as np
import pytest

from benchmarks.contenders import CONTENDERS, Runner, available_contenders, register
from helpers import sweep

TABLE_ROWS = sorted(available_contenders())
EXPERIMENT_ROWS = sorted(set(available_contenders(experiments=True)) - set(TABLE_ROWS))


# The fast path trains the table's rows; the experiment rows (--experiments) join in the full suite.
@pytest.mark.parametrize("name", sweep(TABLE_ROWS + EXPERIMENT_ROWS, fast=len(TABLE_ROWS)))
def test_every_contender_trains_one_window_on_a_tiny_net(name):
    spec = dict(hidden=8, batch=4, accumulate=2, mode="graph", device_target="CPU")
    runner = CONTENDERS[name].build(spec)
    before = runner.weights()
    calls = max(1, spec["batch"] * spec["accumulate"] // runner.samples_per_call)
    for _ in range(calls):
        runner.step()
    if runner.sync:
        runner.sync()
    # Every row of the table must time real training: one window changes the weights.
    assert any(not np.array_equal(a, b) for a, b in zip(before, runner.weights()))
    assert runner.param_bytes == 4 * sum(w.size for w in before)
    # Accumulating contenders keep about one buffer per parameter (two for the tutorial).
    assert runner.state_bytes in (0, pytest.approx(runner.param_bytes, abs=64),
                                  pytest.approx(2 * runner.param_bytes, abs=64))


def test_experiment_rows_join_only_when_asked():
    experiments = {name for name, contender in CONTENDERS.items() if contender.experiment}
    assert experiments == {"acc_no_finite_check", "acc_micro_batch", "acc_noise", "acc_noise_micro_batch",
                           "acc_read_pass", "acc_sum", "window_noise", "window_floor", "window_floor_mean",
                           "window_floor_check", "window_floor_checked", "micro_floor", "apply_floor",
                           "two_graph_floor"}
    assert not experiments & set(available_contenders())
    assert experiments <= set(available_contenders(experiments=True))


def test_register_adds_a_row_the_registry_builds():
    try:
        @register("test_row", "a row of this test", modes=("graph",), available=lambda: False)
        def build(spec):
            return Runner(step=lambda: None, samples_per_call=spec["batch"], state_bytes=0, param_bytes=4)
        assert CONTENDERS["test_row"].build(dict(batch=3)).samples_per_call == 3
        assert "test_row" not in available_contenders(experiments=True)  # not available here
    finally:
        CONTENDERS.pop("test_row", None)
