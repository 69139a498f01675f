"""The weights' moving average (accumulator.policies.ema): once per applied window, equal to the large batch's EMA.

By hand: the average starts at the weights; a window that moves a weight from 0 to w moves the average to
(1 - decay) w; a window of twice the reference's weight moves it with decay ** 2; a skipped window moves nothing.
"""
import os
import re

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, nn, ops

from accumulator import Accumulator, load_checkpoint, save_checkpoint
from accumulator.drivers.whole_batch import make_whole_batch_step
from accumulator.drivers.window import make_window_step
from accumulator.policies import EMA
from tests.accumulator.helpers import Scale, large_batch_step, make_data, make_net, make_optimizer, sweep

DECAY = 0.8
WINDOWS, N, MICRO_BATCH = 2, 2, 3
RNG = np.random.default_rng(0)
X = RNG.normal(size=(WINDOWS, N, MICRO_BATCH, 4)).astype(np.float32)
Y = RNG.normal(size=(WINDOWS, N, MICRO_BATCH, 2)).astype(np.float32)
W0, B0 = RNG.normal(size=(2, 4)).astype(np.float32), RNG.normal(size=2).astype(np.float32)


def regression():
    """nn.Dense(4, 2) from fixed weights, SGD at 0.1 over them, its mean squared error and its gradient."""
    net = nn.Dense(4, 2, weight_init=Tensor(W0), bias_init=Tensor(B0))
    optimizer, loss_fn = nn.SGD(net.trainable_params(), 0.1), nn.MSELoss()

    def forward(x, y):
        return loss_fn(net(x), y)

    return net, optimizer, loss_fn, ms.value_and_grad(forward, None, optimizer.parameters)


def large_batch_average():
    """The EMA (decay DECAY per update) of the weights after each large-batch step on a whole window."""
    _, optimizer, _, grad_fn = regression()
    average = [W0.astype(np.float64), B0.astype(np.float64)]
    for window in range(WINDOWS):
        optimizer(grad_fn(Tensor(X[window].reshape(-1, 4)), Tensor(Y[window].reshape(-1, 2)))[1])
        average = [DECAY * a + (1 - DECAY) * p.asnumpy() for a, p in zip(average, optimizer.parameters)]
    return average


def in_graph(net, accumulator, grad_fn, loss_fn):
    @ms.jit
    def step(x, y):
        return accumulator(grad_fn(x, y)[1])

    for window in range(WINDOWS):
        for i in range(N):
            step(Tensor(X[window, i]), Tensor(Y[window, i]))


def host_step(net, accumulator, grad_fn, loss_fn):
    @ms.jit
    def micro_step(x, y):
        return accumulator.accumulate(grad_fn(x, y)[1])

    for window in range(WINDOWS):
        for i in range(N):
            micro_step(Tensor(X[window, i]), Tensor(Y[window, i]))
            accumulator.step()


def window_step(net, accumulator, grad_fn, loss_fn):
    step = make_window_step(grad_fn, accumulator)
    for window in range(WINDOWS):
        step(Tensor(X[window]), Tensor(Y[window]))


class WithTargets(nn.Cell):
    """``(x, y) -> (net(x), y)``: the targets pass through to the whole-window loss."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def construct(self, x, y):
        return self.net(x), y


def whole_batch(net, accumulator, grad_fn, loss_fn):
    step = make_whole_batch_step(WithTargets(net), loss_fn, accumulator)
    for window in range(WINDOWS):
        step([(Tensor(X[window, i]), Tensor(Y[window, i])) for i in range(N)])


# The fast path runs the in-graph call; the host step drives every other test here. Model.train's cell makes the
# in-graph call in its graph (tests/accumulator/drivers/test_model.py: equal to the hand-written jitted loop).
@pytest.mark.parametrize("driver", sweep([in_graph, host_step, window_step, whole_batch]),
                         ids=lambda driver: driver.__name__)
def test_after_k_windows_the_average_is_the_large_batch_runs_average(driver):
    net, optimizer, loss_fn, grad_fn = regression()
    ema = EMA(optimizer.parameters, DECAY)
    accumulator = Accumulator(optimizer, N, policies=[ema])
    driver(net, accumulator, grad_fn, loss_fn)
    assert (int(accumulator.update_count), int(ema.moves)) == (WINDOWS, WINDOWS)
    for actual, expected in zip(ema.average, large_batch_average()):
        np.testing.assert_allclose(actual.asnumpy(), expected, rtol=1e-5, atol=1e-6)


def scale_run(dtype=ms.float32, **accumulator_options):
    """A ``Scale`` weight (its gradient is the input), SGD at 1, and ``(host step, ema)`` with the options given."""
    net = Scale(dtype)
    ema = EMA([net.w], DECAY, **accumulator_options.pop("ema", {}))
    accumulator = Accumulator(nn.SGD([net.w], 1.0), policies=[ema], **accumulator_options)
    grad_fn = ms.grad(net, None, [net.w])

    @ms.jit
    def micro_step(x, count):
        return accumulator.accumulate(grad_fn(x), count)

    return net, accumulator, ema, micro_step


@pytest.mark.parametrize("warmup", sweep([False, True]))
def test_a_changing_counted_window_moves_by_decay_to_its_weight_over_the_reference(warmup):
    # Windows of 2 then 3 micro-batches (a dict schedule), counts 5 + 3 and 4 + 4 + 4 against a reference of 4:
    # kappa 2 then 3, so rho = DECAY**2 then DECAY**3, capped by (1 + t) / (10 + t) with the warm-up.
    net, accumulator, ema, micro_step = scale_run(accumulate_step={0: 2, 1: 3}, reduction="mean",
                                                  ema={"reference": 4.0, "warmup": warmup})
    average, weights = np.zeros(2), []
    for t, (kappa, counts) in enumerate([(2, (5, 3)), (3, (4, 4, 4))]):
        for count in counts:
            micro_step(Tensor([1.0, -2.0]) * count, Tensor(count, ms.float32))
            accumulator.step()
        rho = DECAY ** kappa if not warmup else min(DECAY ** kappa, (1 + t) / (10 + t))
        average = rho * average + (1 - rho) * net.w.asnumpy()
        weights.append(net.w.asnumpy().copy())
    np.testing.assert_allclose(weights, [[-1, 2], [-2, 4]])  # one update per window: the counted mean, 1 and -2
    np.testing.assert_allclose(ema.average[0].asnumpy(), average, rtol=1e-6)


def test_a_skipped_window_and_an_empty_flush_leave_the_average_and_the_first_window_sets_the_reference():
    # The second window is skipped as non-finite, the third as a spike: its norm, about 500, is over 10 times the
    # first's, 1.4.
    net, accumulator, ema, micro_step = scale_run(accumulate_step=2, spike_factor=10, spike_warmup=1)
    for x in ([1.0, 1.0], [1.0, 1.0], [np.nan, 1.0], [1.0, 1.0], [1000.0, 1.0], [1.0, 1.0]):
        micro_step(Tensor(x, ms.float32), None)
        accumulator.step()
    after_one = ema.average[0].asnumpy().copy()
    np.testing.assert_allclose(after_one, [-(1 - DECAY)] * 2, rtol=1e-6)
    ms.jit(accumulator.flush)()
    assert (int(accumulator.skipped_windows), int(accumulator.update_count), int(ema.moves)) == (2, 1, 1)
    assert float(ema.reference) == 2.0
    np.testing.assert_array_equal(ema.average[0].asnumpy(), after_one)


def test_float16_weights_average_in_float32_and_averaged_puts_the_trained_ones_back():
    # From 1, a float16 weight moves by about 1e-3 a window; its average moves by a thousandth of that, below
    # float16's resolution near 1 (1e-3): held in float16 it would stay 1. Held in float32, it moves as in float64.
    net = Scale(ms.float16)
    ops.assign(net.w, Tensor(np.ones(2), ms.float16))
    ema = EMA([net.w], 0.999)
    accumulator = Accumulator(nn.SGD([net.w], 1e-3), accumulate_step=1, policies=[ema])
    grad_fn = ms.grad(net, None, [net.w])

    @ms.jit
    def step(x):
        return accumulator(grad_fn(x))

    average = np.ones(2)
    for _ in range(3):
        step(Tensor([-1.0, 1.0]))
        average = 0.999 * average + 0.001 * net.w.asnumpy().astype(np.float64)
    assert ema.average[0].dtype == ms.float32
    np.testing.assert_allclose(ema.average[0].asnumpy(), average, rtol=0, atol=2e-7)
    assert np.all(ema.average[0].asnumpy() != 1.0) and np.all(average.astype(np.float16) == 1.0)
    trained = net.w.asnumpy().copy()
    with ema.averaged():
        assert net.w.dtype == ms.float16
        np.testing.assert_array_equal(net.w.asnumpy(), average.astype(np.float16))
    np.testing.assert_array_equal(net.w.asnumpy(), trained)


def test_a_checkpoint_resumes_the_average_exactly(tmp_path):
    path = os.path.join(tmp_path, "run.ckpt")
    before, after = [[1.0, 2.0]] * 3, [[3.0, -1.0], [0.5, 0.5], [2.0, 2.0]]

    def run(load):
        net, accumulator, ema, micro_step = scale_run(accumulate_step=2)
        if load:
            load_checkpoint(path, net, accumulator.optimizer, accumulator)
        for x in ([] if load else before) + after:
            micro_step(Tensor(x), None)
            accumulator.step()
            if not load and int(accumulator.micro_step) == 1 and int(ema.moves) == 1:
                save_checkpoint(path, net, accumulator.optimizer, accumulator)  # mid-window, after one update
        return ema.average[0].asnumpy(), float(ema.reference), int(ema.moves)

    straight, resumed = run(load=False), run(load=True)
    np.testing.assert_array_equal(straight[0], resumed[0])
    assert straight[1:] == resumed[1:] == (2.0, 3)


@pytest.mark.parametrize("decay", [0, 1, 1.5, -0.1, "0.9", True, float("nan")])
def test_a_decay_outside_0_1_is_one_clear_line(decay):
    with pytest.raises(ValueError, match=r"^ema decay must be a number in \(0, 1\), got " + re.escape(repr(decay))):
        EMA([Scale().w], decay)


def test_a_reference_that_is_no_positive_number_or_weights_that_are_no_parameters_are_one_clear_line():
    with pytest.raises(ValueError, match=r"^ema reference must be None or a positive number, got 0$"):
        EMA([Scale().w], 0.9, reference=0)
    with pytest.raises(TypeError, match=r"^ema weights must be Parameters \(optimizer.parameters, say\), got \[\]$"):
        EMA([], 0.9)


@pytest.mark.slow
@pytest.mark.msrun("tests.accumulator.policies.ema_worker:main")
def test_two_ranks_hold_the_same_average_the_large_batchs_without_communicating(msrun_folder):
    from tests.accumulator.policies import ema_worker
    ranks = [dict(np.load(msrun_folder / f"ema_{rank}.npz")) for rank in (0, 1)]
    for name in ranks[0]:
        np.testing.assert_array_equal(ranks[0][name], ranks[1][name], err_msg=name)
    window = sum(ema_worker.SIZES) * ema_worker.ACCUMULATE_STEP
    assert (float(ranks[0]["reference"]), int(ranks[0]["moves"])) == (window, ema_worker.WINDOWS)
    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    step = large_batch_step(net, optimizer)
    x, y = make_data(window * ema_worker.WINDOWS)
    average = [p.asnumpy().astype(np.float64) for p in optimizer.parameters]
    for start in range(0, window * ema_worker.WINDOWS, window):
        step(Tensor(x[start:start + window]), Tensor(y[start:start + window]))
        average = [ema_worker.DECAY * a + (1 - ema_worker.DECAY) * p.asnumpy() for a, p in zip(average,
                                                                                               optimizer.parameters)]
    for i, expected in enumerate(average):
        np.testing.assert_allclose(ranks[0][f"average_{i}"], expected, rtol=1e-5, atol=1e-6)
