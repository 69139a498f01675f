"""training.loop.train_on_windows: what an epoch meets once runs op by op, with the compiled steps' arithmetic.

By hand: 200 samples in micro-batches of 32, windows of 4: one window of 4 x 32, then 32, 32 and 8; 4 updates in
two epochs, the same whether the short tail runs op by op or compiled.
"""
import mindspore as ms
import numpy as np
import pytest

from training.config import TrainConfig
from training.context import configure_context
from training.loop import build_run, train_epoch
from training.mnist import mnist_task


def _trained(data_dir, driver, compiled_tail):
    config = configure_context(TrainConfig(batch_size=32, accumulate_step=4, lr=0.1, driver=driver))
    task = mnist_task(data_dir)
    run = build_run(config, task)
    if compiled_tail:  # the reference: every shape through a compiled graph
        run.eager_step = run.train_step
    stats = [train_epoch(run, task, config, epoch, progress=False) for epoch in (1, 2)]
    assert ms.get_context("mode") == ms.GRAPH_MODE  # put back after the op-by-op tail
    return stats, run


# One driver: every driver's op-by-op step is checked against the large batch in tests/training/test_uneven_windows.py
# (the window step's on the fast path), so this comparison runs in CI.
@pytest.mark.slow
def test_the_op_by_op_tail_trains_like_a_compiled_one(synthetic_mnist_dir):
    driver = "host"
    # 200 samples in batches of 32, windows of 4: (32 x 4), then (32, 32, 8): a short batch in a short window.
    stats, run = _trained(synthetic_mnist_dir, driver, compiled_tail=False)
    reference_stats, reference = _trained(synthetic_mnist_dir, driver, compiled_tail=True)
    assert [s["samples"] for s in stats] == [200, 200]
    assert int(run.accumulator.update_count) == int(reference.accumulator.update_count) == 4
    assert int(run.accumulator.micro_step) == 0
    for s, r in zip(stats, reference_stats):
        assert s["train_loss"] == pytest.approx(r["train_loss"], rel=1e-6)
    for mine, theirs in zip(run.optimizer.parameters, reference.optimizer.parameters):
        np.testing.assert_allclose(mine.asnumpy(), theirs.asnumpy(), rtol=1e-6, atol=1e-7, err_msg=mine.name)
