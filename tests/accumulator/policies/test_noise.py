"""Gradient-noise telemetry matches a numpy oracle and never changes the update.

By hand: micro-batch gradients g_i ~ N(G, Σ / b_i) over 16 entries with tr(Σ) = 16 x 4 and |G|² = 16 x 0.25:
the noise scale tr(Σ) / |G|² is 16, and the tracker finds it within 25%.
"""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor, nn

from accumulator import Accumulator, load_checkpoint, make_window_step, save_checkpoint
from accumulator.batch_size import NoiseScaleSchedule
from accumulator.policies.noise import NOISE_DECAY
from tests.accumulator.helpers import (DoublingReducer, accumulated_step, grad_fn_for, make_data, make_net,
                                       make_optimizer, optimizer_state, split, sweep)

SHAPES = [(3, 4), (4,)]


class Free(nn.Cell):
    """Parameters of SHAPES that the tests hand gradients for directly."""

    def __init__(self):
        super().__init__()
        self.a = Parameter(Tensor(np.zeros(SHAPES[0], np.float32)), name="a")
        self.b = Parameter(Tensor(np.zeros(SHAPES[1], np.float32)), name="b")


# True samples each window's last micro-batch; "micro_batch" takes every one. Both match their oracles in
# the fast path; the tests of what surrounds the estimate run one way there (sweep) and both in CI.
TRACKING = [True, "micro_batch"]


def tracking(track_noise=True, **args):
    optimizer = nn.SGD(Free().trainable_params(), 1e-3)
    accumulator = Accumulator(optimizer, track_noise=track_noise, **args)

    def step(grads, count):
        return accumulator(grads, count)

    def step_without_count(grads):
        return accumulator(grads)

    return accumulator, ms.jit(step), ms.jit(step_without_count)


def as_grads(flat):
    return ms.mutable((Tensor(flat[:12].reshape(SHAPES[0]).astype(np.float32)),
                       Tensor(flat[12:].astype(np.float32))))


def oracle(windows, track_noise="micro_batch", ranks=1):
    """Bias-corrected averages of |G|² and tr(Σ) over windows of (mean gradients g_i, sizes b_i).

    ``track_noise=True`` takes tr(Σ) from the last micro-batch's distance
    from the window mean, |g_L - g_w|² / (1/b_L - 1/B), per device.
    ``ranks``: that many devices each saw the same window (B in |G|² counts them all).
    """
    trace = gradient = 0.0
    used = 0
    for means, sizes in windows:
        means, sizes = np.asarray(means, np.float64), np.asarray(sizes, np.float64)
        window = (means * sizes[:, None]).sum(axis=0) / sizes.sum()
        total = ranks * sizes.sum()
        t = (window ** 2).sum()
        if track_noise == "micro_batch":
            s = (np.mean((means ** 2).sum(axis=1)) - t) / (np.mean(1 / sizes) - 1 / total)
        else:
            s = ((means[-1] - window) ** 2).sum() / (1 / sizes[-1] - 1 / sizes.sum())
        trace = NOISE_DECAY * trace + (1 - NOISE_DECAY) * s
        gradient = NOISE_DECAY * gradient + (1 - NOISE_DECAY) * (t - s / total)
        used += 1
    correction = 1 - NOISE_DECAY ** used
    return {"gradient_squared_norm": gradient / correction, "trace": trace / correction, "windows": used}


def random_windows(rng, sizes_per_window):
    return [(rng.normal(0.5, 1.0, (len(sizes), 16)), sizes) for sizes in sizes_per_window]


def assert_record_close(record, expected):
    assert record["windows"] == expected["windows"]
    for key in ("gradient_squared_norm", "trace"):
        np.testing.assert_allclose(record[key], expected[key], rtol=2e-4, err_msg=key)


@pytest.mark.parametrize("track_noise", TRACKING)
def test_uneven_counts_match_the_oracle(mode, track_noise):
    rng = np.random.default_rng(0)
    windows = random_windows(rng, [[5, 3, 8], [2, 7, 4], [6, 6, 1]])
    accumulator, step, _ = tracking(track_noise, accumulate_step=3)
    for means, sizes in windows:
        for mean, size in zip(means, sizes):
            # A summed loss's gradient: the micro-batch's mean gradient times its size.
            step(as_grads(mean * size), Tensor(size, ms.float32))
    expected = oracle(windows, track_noise)
    assert_record_close(accumulator.noise.record(), expected)
    assert accumulator.noise_scale == pytest.approx(expected["trace"] / expected["gradient_squared_norm"], rel=2e-4)


def test_the_two_ways_differ_where_the_oracles_do():
    # Guards the parametrized tests: each way must match its own oracle, not both.
    windows = random_windows(np.random.default_rng(0), [[5, 3, 8], [2, 7, 4]])
    last, every = oracle(windows, True), oracle(windows, "micro_batch")
    assert abs(last["trace"] - every["trace"]) > 0.1 * abs(every["trace"])


@pytest.mark.parametrize("track_noise", TRACKING)
def test_equal_micro_batches_without_counts_use_micro_batch_size(graph_mode, track_noise):
    rng = np.random.default_rng(1)
    windows = random_windows(rng, [[32] * 4] * 3)
    accumulator, _, step = tracking(track_noise, accumulate_step=4, micro_batch_size=32)
    for means, _ in windows:
        for mean in means:
            step(as_grads(mean))
    assert_record_close(accumulator.noise.record(), oracle(windows, track_noise))


@pytest.mark.parametrize("track_noise, windows", sweep([("micro_batch", 60), (True, 60)]))
def test_the_noise_scale_of_known_gradients_is_found(track_noise, windows):
    # g_i ~ N(G, Σ / b_i) with tr(Σ) = 16 * 4 and |G|² = 16 * 0.25: the noise scale is 16.
    rng = np.random.default_rng(2)
    sizes = [4, 8, 2, 6]
    windows = [(np.array([rng.normal(0.5, 2.0 / np.sqrt(b), 16) for b in sizes]), sizes) for _ in range(windows)]
    accumulator, step, _ = tracking(track_noise, accumulate_step=4)
    for means, sizes_ in windows:
        for mean, size in zip(means, sizes_):
            step(as_grads(mean * size), Tensor(size, ms.float32))
    assert accumulator.noise_scale == pytest.approx(16.0, rel=0.25)
    assert_record_close(accumulator.noise.record(), oracle(windows, track_noise))


@pytest.mark.parametrize("track_noise", sweep(TRACKING))
def test_under_data_parallel_the_sums_ride_the_reducer_and_b_counts_every_rank(track_noise):
    # Two ranks that saw the same micro-batches: the window holds each twice
    # (with track_noise=True, both ranks' last ones are A's samples).
    rng = np.random.default_rng(3)
    windows = random_windows(rng, [[5, 3], [2, 7]])
    accumulator, step, _ = tracking(track_noise, accumulate_step=2, grad_reducer=DoublingReducer())
    for means, sizes in windows:
        for mean, size in zip(means, sizes):
            step(as_grads(mean * size), Tensor(size, ms.float32))
    expected = oracle(windows, track_noise, ranks=2)
    assert_record_close(accumulator.noise.record(), expected)


@pytest.mark.parametrize("track_noise", sweep(TRACKING[::-1]))
def test_loss_scaling_is_removed_before_the_norms(track_noise):
    rng = np.random.default_rng(4)
    windows = random_windows(rng, [[4, 4, 4]] * 2)
    scaler = ms.amp.StaticLossScaler(2.0 ** 10)
    optimizer = nn.SGD(Free().trainable_params(), 1e-3)
    accumulator = Accumulator(optimizer, 3, track_noise=track_noise, micro_batch_size=4, loss_scaler=scaler)
    step = ms.jit(accumulator.__call__)
    for means, _ in windows:
        for mean in means:
            step(as_grads(mean * 2.0 ** 10))
    assert_record_close(accumulator.noise.record(), oracle(windows, track_noise))


@pytest.mark.parametrize("track_noise", sweep(TRACKING))
def test_skipped_windows_and_single_micro_batches_feed_nothing(track_noise):
    accumulator, _, step = tracking(track_noise, accumulate_step=2, micro_batch_size=8)
    nan = np.full(16, np.nan)
    step(as_grads(np.ones(16)))
    step(as_grads(nan))
    assert int(accumulator.skipped_windows) == 1 and accumulator.noise_scale is None
    single, _, single_step = tracking(track_noise, accumulate_step=1, micro_batch_size=8)
    for _ in range(3):
        single_step(as_grads(np.ones(16)))
    assert int(single.update_count) == 3 and single.noise.record()["windows"] == 0 and single.noise_scale is None


def test_a_window_flush_closes_samples_nothing_by_default():
    # flush() has no micro-batch in hand to sample: with track_noise=True the
    # partial window trains but does not feed the estimate; the sums restart.
    rng = np.random.default_rng(6)
    accumulator, _, step = tracking(accumulate_step=4, micro_batch_size=8)
    for mean in rng.normal(0.5, 1.0, (3, 16)):
        step(as_grads(mean))
    assert bool(accumulator.flush()) and accumulator.noise.record()["windows"] == 0
    windows = random_windows(rng, [[8] * 4])
    for mean in windows[0][0]:
        step(as_grads(mean))
    assert_record_close(accumulator.noise.record(), oracle(windows, True))


class Linear(Free):
    """loss = the sum of x's rows against the parameters: the gradient is that sum."""

    def construct(self, x):
        total = x.sum(axis=0)
        return (total[:12].reshape(SHAPES[0]) * self.a).sum() + (total[12:] * self.b).sum()


# True samples the window's last micro-batch, which the window step runs on its own: after a lone first micro-batch
# and a loop, as the short last of a list, after a loop over a stacked window. "micro_batch" runs no micro-batch
# apart: its short last and stacked windows show its uneven counts, without the lone first's compile.
@pytest.mark.parametrize("track_noise, first", sweep([(True, 0), ("micro_batch", 1)]))
def test_the_window_step_samples_as_the_per_micro_step_call_does(track_noise, first):
    # A micro-batch of b rows, each its mean gradient: the summed loss's gradient is b times it.
    rng = np.random.default_rng(7)
    # Two shapes only, so few graphs compile.
    windows = random_windows(rng, [[3, 4, 4], [4, 4, 3], [4, 4, 4]])[first:]
    net = Linear()
    accumulator = Accumulator(nn.SGD(net.trainable_params(), 1e-3), 3, track_noise=track_noise)
    window_step = make_window_step(ms.value_and_grad(net, None, accumulator.optimizer.parameters), accumulator)
    for means, sizes in windows[:-1]:
        micro_batches = [(Tensor(np.tile(mean, (size, 1)).astype(np.float32)),) for mean, size in zip(means, sizes)]
        window_step(micro_batches, counts=sizes)
    means, sizes = windows[-1]
    window_step(Tensor(np.stack([np.tile(mean, (4, 1)) for mean in means]).astype(np.float32)), counts=sizes)
    assert_record_close(accumulator.noise.record(), oracle(windows, track_noise))


def train(track_noise, batches, path=None):
    """Adam on the small net, 4 micro-batches of 4 per window, optionally checkpointed after 6 micro-steps.

    Returns the optimizer's state, and the run's net, optimizer, accumulator and compiled step.
    """
    net = make_net()
    optimizer = make_optimizer("adam", net.trainable_params())
    accumulator = Accumulator(optimizer, 4, track_noise=track_noise, micro_batch_size=4)
    step = accumulated_step(accumulator, grad_fn_for(net, optimizer))
    for index, (data, label) in enumerate(batches):
        step(data, label)
        if path and index == 5:
            save_checkpoint(path, net, optimizer, accumulator)
    return optimizer_state(optimizer), (net, optimizer, accumulator, step)


def test_tracking_never_changes_the_update_and_survives_resume(tmp_path):
    x, y = make_data(48)
    batches = split(x, y, [4] * 12)
    plain, _ = train(False, batches)
    path = str(tmp_path / "mid.ckpt")
    tracked, (net, optimizer, accumulator, step) = train(True, batches, path=path)
    for name in plain:
        np.testing.assert_array_equal(tracked[name], plain[name], err_msg=name)
    record = accumulator.noise.record()
    assert record["windows"] == 3
    # Restored in place mid-window, the compiled step ends on the same record (no compile of a second run).
    load_checkpoint(path, net, optimizer, accumulator)
    for data, label in batches[6:]:
        step(data, label)
    assert accumulator.noise.record() == record


def test_tracking_needs_sizes_and_a_mean():
    accumulator, _, step = tracking(accumulate_step=2)
    with pytest.raises(ValueError, match="track_noise needs each micro-batch's sample count"):
        step(as_grads(np.ones(16)))
    assert int(accumulator.micro_step) == 0
    optimizer = nn.SGD(Free().trainable_params(), 1e-3)
    with pytest.raises(ValueError, match="track_noise needs reduction='mean'"):
        Accumulator(optimizer, 2, reduction="sum", track_noise=True)
    with pytest.raises(ValueError, match="noise_scale needs Accumulator"):
        Accumulator(optimizer, 2).noise_scale


def adaptive_run(micro_steps, path=None, resume=None, save_at=None):
    """Micro-batches of 4 with noise scale 16 (tr(Σ) = 64, |G|² = 4); returns the N of every window."""
    rng = np.random.default_rng(5)
    means = rng.normal(0.5, 2.0 / np.sqrt(4), (micro_steps, 16))
    optimizer = nn.SGD(Free().trainable_params(), 1e-3)
    schedule = NoiseScaleSchedule(micro_batch_size=4, min_step=1, max_step=16)
    accumulator = Accumulator(optimizer, schedule, track_noise="micro_batch", micro_batch_size=4)
    step = ms.jit(accumulator.__call__)
    start = 0
    if resume:
        load_checkpoint(resume, Free(), optimizer, accumulator)
        start = save_at
    steps = []
    for index in range(start, micro_steps):
        if bool(step(as_grads(means[index]))):
            steps.append(int(accumulator.accumulate_step))
        if index + 1 == save_at and path:
            save_checkpoint(path, Free(), optimizer, accumulator)
    return steps


def test_the_adaptive_window_settles_on_the_noise_scale_without_flapping(tmp_path):
    # It leaves N = 2 after about 40 micro-steps: 150 hold it about 28 windows at 4, saved mid-window among them.
    # The schedule reads only the estimate: track_noise=True's is checked against its oracle above, down to the
    # known scale (test_the_noise_scale_of_known_gradients_is_found).
    steps = adaptive_run(150, path=str(tmp_path / "mid.ckpt"), save_at=76)
    # Effective batch 4 x N near the noise scale 16: N = 4.
    assert steps[-1] == 4 and steps.count(4) >= 20
    changes = sum(a != b for a, b in zip(steps, steps[1:]))
    assert changes <= 3, steps
    resumed = adaptive_run(150, resume=str(tmp_path / "mid.ckpt"), save_at=76)
    assert resumed == steps[-len(resumed):]


def test_the_adaptive_window_needs_noise_tracking():
    optimizer = nn.SGD(Free().trainable_params(), 1e-3)
    with pytest.raises(ValueError, match="NoiseScaleSchedule needs Accumulator"):
        Accumulator(optimizer, NoiseScaleSchedule(micro_batch_size=4))
    with pytest.raises(ValueError, match="max_step must be at least min_step=8, got 4"):
        NoiseScaleSchedule(micro_batch_size=4, min_step=8, max_step=4)
