"""convert_batchnorm: the moving statistics of a window equal one BatchNorm update on its whole batch.

What is equal and what is not: each micro-batch is still normalised with its
own statistics (by the plain layer's kernel), so losses, gradients and
weights differ from a large-batch run; with one micro-batch per window they
equal the plain network's to the bit. The moving statistics equal one plain
BatchNorm update on everything the layer saw during the window; for a layer
fed by the data (or by layers without BatchNorm) that is the window's whole
batch.

By hand: a window of micro-batches of 5 and 3 samples moves each moving mean as one plain BatchNorm update on all 8:
with momentum 0.9, ``0.9 * mean + 0.1 * (mean of the 8 samples)``.
"""
import numpy as np
import pytest
import mindspore as ms
import mindspore.dataset as ds
from mindspore import Parameter, Tensor, nn, ops
from mindspore.train import Model

from accumulator import (AccumulationTrainCell, Accumulator, FlushAtEpochEnd, WindowAllReduce, load_checkpoint,
                         make_window_step, save_checkpoint)
from accumulator.policies.batchnorm import WindowBatchNorm, convert_batchnorm
from tests.accumulator.policies.batchnorm_worker import SIZES, window_batches
from tests.accumulator.helpers import sweep

ACCUMULATE_STEP = 4
MICRO_BATCH = 8
# (layer, per-sample shape, momentum): 2-D images, 1-D features, 1-D sequences.
LAYOUTS = {"2d": (nn.BatchNorm2d, (3, 4, 4), 0.9), "1d": (nn.BatchNorm1d, (5,), 0.0),
           "1d-sequence": (nn.BatchNorm1d, (5, 6), 0.9)}
STATISTICS = ("moving_mean", "moving_variance")


def window_data(shape, windows, seed=0):
    """Windows of ``ACCUMULATE_STEP`` micro-batches at mean 300, std about 0.5, float32 ``[windows, samples, ...]``.

    The micro-batch means lie 0.3 apart, so the spread between them is a good
    part of the variance: averaging the micro-batch variances would miss it.
    """
    rng = np.random.default_rng(seed)
    offsets = np.repeat([-0.45, -0.15, 0.15, 0.45], MICRO_BATCH).reshape((-1,) + (1,) * len(shape))
    return np.stack([300 + offsets + 0.4 * rng.standard_normal((ACCUMULATE_STEP * MICRO_BATCH,) + shape)
                     for _ in range(windows)]).astype(np.float32)


def micro_batches(batch):
    return [Tensor(batch[i:i + MICRO_BATCH]) for i in range(0, len(batch), MICRO_BATCH)]


def converted(layer_class, channels, momentum=0.9):
    """A one-layer net, converted, with its accumulator (SGD, so gamma and beta train)."""
    net = nn.SequentialCell(layer_class(channels, momentum=momentum))
    accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.01), ACCUMULATE_STEP)
    assert convert_batchnorm(net, accumulator) == ["0"]
    return net.set_train(), accumulator


def loss_grad_fn(net, accumulator):
    """Gradient of ``mean(net(x)**2) * scale``: a scale of inf makes the gradient non-finite."""
    def forward(x, scale):
        return (net(x) ** 2).mean() * scale
    return ms.value_and_grad(forward, None, accumulator.optimizer.parameters)


def micro_step(net, accumulator, mode="graph"):
    """``step(x, scale=1.0)``: one micro-batch into the accumulator, compiled in graph mode, eager in PyNative."""
    grad_fn = loss_grad_fn(net, accumulator)

    def step(x, scale):
        return accumulator(grad_fn(x, scale)[1])

    compiled = ms.jit(step) if mode == "graph" else step
    return lambda x, scale=1.0: compiled(x, Tensor(scale, ms.float32))


def plain_reference(layer_class, channels, momentum, batches):
    """A plain layer after one training forward per whole batch."""
    layer = layer_class(channels, momentum=momentum).set_train()
    for batch in batches:
        layer(Tensor(batch))
    return layer


def pooled_reference(momentum, batches):
    """The same in float64 numpy: ``moving = momentum * moving + (1 - momentum) * batch`` (unbiased variance)."""
    mean, variance = 0.0, 1.0
    for batch in batches:
        axes = (0,) + tuple(range(2, batch.ndim))
        values = batch.astype(np.float64)
        mean = momentum * mean + (1 - momentum) * values.mean(axes)
        variance = momentum * variance + (1 - momentum) * values.var(axes, ddof=1)
    return {"moving_mean": mean, "moving_variance": variance}


def statistics(layer):
    """The moving statistics of a layer (or a dict of them) as numpy, by name."""
    if isinstance(layer, dict):
        return layer
    return {name: getattr(layer, name).asnumpy().copy() for name in STATISTICS}


def assert_statistics_close(actual, expected, rtol=1e-6, atol=0.0):
    actual, expected = statistics(actual), statistics(expected)
    for name in STATISTICS:
        np.testing.assert_allclose(actual[name], expected[name], rtol=rtol, atol=atol, err_msg=name)


def window_state(accumulator):
    return {p.name: p.asnumpy().copy() for p in accumulator.state_parameters() if ".window_" in p.name}


# Fewer than 4 dims are reshaped to 4 (WindowBatchNorm.construct): the fast path runs a 4-D and a 3-D input, CI
# the 2-D one too.
@pytest.mark.parametrize("layout", sweep(["2d", "1d-sequence", "1d"], fast=2))
def test_moving_statistics_equal_one_update_on_the_whole_window(mode, layout):
    layer_class, shape, momentum = LAYOUTS[layout]
    batches = window_data(shape, windows=2)
    net, accumulator = converted(layer_class, shape[0], momentum)
    step = micro_step(net, accumulator, mode)
    for batch in batches:
        assert [bool(step(x)) for x in micro_batches(batch)] == [False, False, False, True]
    reference = plain_reference(layer_class, shape[0], momentum, batches)
    # Measured: at most 2.4e-7 relative against the plain layer (itself up
    # to 2.2e-7 off float64), 6.6e-8 against float64.
    assert_statistics_close(net[0], reference)
    assert_statistics_close(net[0], pooled_reference(momentum, batches))
    assert not any(value.any() for value in window_state(accumulator).values())
    # Evaluation is the plain layer's, given the same values.
    plain = nn.SequentialCell(layer_class(shape[0]))
    ms.load_param_into_net(plain, {p.name: Parameter(p.asnumpy().copy(), name=p.name) for p in net.get_parameters()})
    sample = Tensor(batches[0][:4])
    np.testing.assert_array_equal(net.set_train(False)(sample).asnumpy(), plain.set_train(False)(sample).asnumpy())


def test_a_plain_batchnorm_under_accumulation_misses_the_window():
    """Why convert: the data above tell the window's statistics from the last micro-batch's and from averaging."""
    batches = window_data((3, 4, 4), windows=1)
    net = nn.SequentialCell(nn.BatchNorm2d(3, momentum=0.0)).set_train()
    accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.01), ACCUMULATE_STEP)
    step = micro_step(net, accumulator)
    for x in micro_batches(batches[0]):
        step(x)
    expected = pooled_reference(0.0, batches)
    plain_variance = net[0].moving_variance.asnumpy()
    assert np.abs(plain_variance / expected["moving_variance"] - 1).min() > 0.2
    # Averaging micro-batch variances (TensorFlow's AccumBatchNormalization) drops the spread of their means.
    averaged = np.mean([x.asnumpy().astype(np.float64).var((0, 2, 3), ddof=1) for x in micro_batches(batches[0])], 0)
    assert np.abs(averaged / expected["moving_variance"] - 1).min() > 0.2


def test_a_skipped_window_leaves_the_moving_statistics_untouched(graph_mode):
    batches = window_data((3, 4, 4), windows=2)
    net, accumulator = converted(nn.BatchNorm2d, 3)
    step = micro_step(net, accumulator)
    before = statistics(net[0])
    scales = [1.0, float("inf"), 1.0, 1.0]
    assert [bool(step(x, scale)) for x, scale in zip(micro_batches(batches[0]), scales)] == [False] * 4
    assert int(accumulator.skipped_windows) == 1
    assert_statistics_close(net[0], before, rtol=0)
    assert not any(value.any() for value in window_state(accumulator).values())
    # The skipped window's moments are gone: the next window counts alone.
    for x in micro_batches(batches[1]):
        step(x)
    assert_statistics_close(net[0], plain_reference(nn.BatchNorm2d, 3, 0.9, batches[1:]))


def run_windows(step, batches, first, last):
    """Micro-batches ``first .. last-1`` of the run, counted across windows."""
    flat = [x for batch in batches for x in micro_batches(batch)]
    for x in flat[first:last]:
        step(x)


def test_checkpoint_mid_window_resumes_exactly(tmp_path):
    batches = window_data((3, 4, 4), windows=3)
    total = 3 * ACCUMULATE_STEP
    path = str(tmp_path / "mid_window.ckpt")
    net, accumulator = converted(nn.BatchNorm2d, 3)
    step = micro_step(net, accumulator)
    run_windows(step, batches, 0, ACCUMULATE_STEP + 2)
    save_checkpoint(path, net, accumulator.optimizer, accumulator)
    saved = ms.load_checkpoint(path)
    assert float(saved["accumulator.0.window_count"].asnumpy()) == 2 * MICRO_BATCH * 16
    run_windows(step, batches, ACCUMULATE_STEP + 2, total)   # the uninterrupted run goes on
    expected = statistics(net[0])

    # Restored in place, the compiled step runs on (a fresh run's restore: tests/accumulator/core/test_checkpoints.py).
    load_checkpoint(path, net, accumulator.optimizer, accumulator)
    assert float(window_state(accumulator)["accumulator.0.window_count"]) == 2 * MICRO_BATCH * 16  # back mid-window
    run_windows(step, batches, ACCUMULATE_STEP + 2, total)
    assert_statistics_close(net[0], expected, rtol=0)


def test_checkpoints_of_the_plain_network_load_into_the_converted_one_and_back(tmp_path):
    plain = nn.SequentialCell(nn.Dense(4, 3), nn.BatchNorm1d(3, moving_mean_init="normal", moving_var_init="uniform"))
    names = [p.name for p in plain.get_parameters()]
    ms.save_checkpoint(plain, str(tmp_path / "plain.ckpt"))
    net = nn.SequentialCell(nn.Dense(4, 3), nn.BatchNorm1d(3))
    accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), 2)
    convert_batchnorm(net, accumulator)
    assert [p.name for p in net.get_parameters()] == names
    assert ms.load_param_into_net(net, ms.load_checkpoint(str(tmp_path / "plain.ckpt")), strict_load=True) == ([], [])
    for ours, theirs in zip(net.get_parameters(), plain.get_parameters()):
        np.testing.assert_array_equal(ours.asnumpy(), theirs.asnumpy(), err_msg=ours.name)
    ms.save_checkpoint(net, str(tmp_path / "converted.ckpt"))
    fresh = nn.SequentialCell(nn.Dense(4, 3), nn.BatchNorm1d(3))
    saved = ms.load_checkpoint(str(tmp_path / "converted.ckpt"))
    assert ms.load_param_into_net(fresh, saved, strict_load=True) == ([], [])


def test_the_window_step_pools_its_loop(graph_mode):
    batches = window_data((3, 4, 4), windows=2)
    net, accumulator = converted(nn.BatchNorm2d, 3)
    window_step = make_window_step(loss_grad_fn(net, accumulator), accumulator)
    for batch in batches:
        stacked = batch.reshape((ACCUMULATE_STEP, MICRO_BATCH) + batch.shape[1:])
        ones = np.ones(ACCUMULATE_STEP, np.float32)
        assert bool(window_step(Tensor(stacked), Tensor(ones))[1])
    assert_statistics_close(net[0], plain_reference(nn.BatchNorm2d, 3, 0.9, batches))


class SquaredOutput(nn.Cell):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def construct(self, x):
        return (self.net(x) ** 2).mean()


def test_the_train_cell_under_model_train_pools_windows_and_the_epoch_end_flush(mode):
    # 6 micro-batches: a window of 4, then 2 flushed at the epoch's end, which updates once from what it holds.
    data = window_data((5, 6), windows=2).reshape((-1, 5, 6))[:6 * MICRO_BATCH]
    net, accumulator = converted(nn.BatchNorm1d, 5)
    cell = AccumulationTrainCell(SquaredOutput(net), accumulator)
    dataset = ds.NumpySlicesDataset({"x": data}, shuffle=False).batch(MICRO_BATCH)
    Model(cell).train(1, dataset, callbacks=[FlushAtEpochEnd(cell)], dataset_sink_mode=False)
    assert int(accumulator.update_count) == 2
    windows = [data[:ACCUMULATE_STEP * MICRO_BATCH], data[ACCUMULATE_STEP * MICRO_BATCH:]]
    assert_statistics_close(net[0], plain_reference(nn.BatchNorm1d, 5, 0.9, windows))


def make_cnn():
    ms.set_seed(3)
    return nn.SequentialCell(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 3),
                             nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Dense(4 * 8 * 8, 3))


def copy_of(net):
    """A plain CNN with ``net``'s current values (same Parameter names)."""
    plain = make_cnn()
    values = {p.name: Parameter(Tensor(p.asnumpy()), name=p.name) for p in net.get_parameters()}
    assert ms.load_param_into_net(plain, values, strict_load=True) == ([], [])
    return plain


def cnn_step(net, optimizer, step_fn):
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def forward(x, y):
        return loss_fn(net(x), y)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    def step(x, y):
        return step_fn(grad_fn(x, y)[1])

    return ms.jit(step)


def test_a_cnn_trained_32x4_has_the_moving_statistics_of_its_whole_batches_not_the_weights_of_128x1():
    """The first BatchNorm sees the whole batch; the second sees what the first normalised per micro-batch."""
    windows, batch = 3, ACCUMULATE_STEP * 32
    rng = np.random.default_rng(0)
    images = rng.normal(size=(windows, batch, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 3, (windows, batch)).astype(np.int32)

    large = make_cnn().set_train()
    large_optimizer = nn.Momentum(large.trainable_params(), 0.1, 0.9)
    large_step = cnn_step(large, large_optimizer, large_optimizer)
    net = copy_of(large).set_train()
    optimizer = nn.Momentum(net.trainable_params(), 0.1, 0.9)
    accumulator = Accumulator(optimizer, ACCUMULATE_STEP)
    assert convert_batchnorm(net, accumulator) == ["1", "4"]
    step = cnn_step(net, optimizer, accumulator)

    for window in range(windows):
        micro = [(Tensor(images[window, i:i + 32]), Tensor(labels[window, i:i + 32])) for i in range(0, batch, 32)]
        # References from this run's own weights at the window's start.
        first = copy_of(net).set_train()
        first(Tensor(images[window]))
        second = nn.BatchNorm2d(4).set_train()
        ops.assign(second.moving_mean, net[4].moving_mean)
        ops.assign(second.moving_variance, net[4].moving_variance)
        seen = copy_of(net).set_train()
        second(ops.concat([seen[3](seen[2](seen[1](seen[0](x)))) for x, _ in micro]))

        for x, y in micro:
            step(x, y)
        large_step(Tensor(images[window]), Tensor(labels[window]))
        assert_statistics_close(net[1], first[1], rtol=1e-5, atol=1e-7)
        assert_statistics_close(net[4], second, rtol=1e-5, atol=1e-7)
        if window == 0:
            # Same weights before the first window: the first layer matches the
            # 128 x 1 run. The second cannot: there its input was normalised
            # with the whole batch's statistics, here with each micro-batch's.
            assert_statistics_close(net[1], large[1], rtol=1e-5, atol=1e-7)
            variance = net[4].moving_variance.asnumpy()
            own_error = np.abs(variance - second.moving_variance.asnumpy()).max()
            assert np.abs(variance - large[4].moving_variance.asnumpy()).max() > 10 * own_error
    weights = {p.name: p.asnumpy() for p in large.trainable_params()}
    assert max(np.abs(p.asnumpy() - weights[p.name]).max() for p in net.trainable_params()) > 1e-3


def test_one_micro_batch_windows_train_exactly_like_the_plain_network():
    """The training forward and gradient are the plain layer's own kernel: with N = 1 the weights match to the bit."""
    rng = np.random.default_rng(1)
    images = rng.normal(size=(3, 16, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 3, (3, 16)).astype(np.int32)
    plain = make_cnn().set_train()
    plain_optimizer = nn.Momentum(plain.trainable_params(), 0.1, 0.9)
    plain_step = cnn_step(plain, plain_optimizer, plain_optimizer)
    net = copy_of(plain).set_train()
    optimizer = nn.Momentum(net.trainable_params(), 0.1, 0.9)
    accumulator = Accumulator(optimizer, 1)
    convert_batchnorm(net, accumulator)
    step = cnn_step(net, optimizer, accumulator)
    for x, y in zip(images, labels):
        plain_step(Tensor(x), Tensor(y))
        step(Tensor(x), Tensor(y))
    for ours, theirs in zip(net.get_parameters(), plain.get_parameters()):
        if "moving" in ours.name:
            np.testing.assert_allclose(ours.asnumpy(), theirs.asnumpy(), rtol=1e-6, atol=1e-7, err_msg=ours.name)
        else:
            np.testing.assert_array_equal(ours.asnumpy(), theirs.asnumpy(), err_msg=ours.name)


def test_convert_batchnorm_converts_the_plain_layers_once():
    class OwnBatchNorm(nn.BatchNorm2d):
        pass

    net = nn.SequentialCell(nn.BatchNorm2d(2), nn.BatchNorm1d(2, use_batch_statistics=False), OwnBatchNorm(2),
                            nn.SequentialCell(nn.BatchNorm1d(2)))
    accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), 2)
    assert convert_batchnorm(net, accumulator) == ["0", "3.0"]
    layers = (net[0], net[1], net[2], net[3][0])
    assert [isinstance(layer, WindowBatchNorm) for layer in layers] == [True, False, False, True]
    assert [p.name for p in accumulator.state_parameters() if p.name.endswith("window_count")] == \
        ["accumulator.0.window_count", "accumulator.3.0.window_count"]
    assert convert_batchnorm(net, accumulator) == []

    other = nn.SequentialCell(nn.BatchNorm2d(2))
    with pytest.raises(ValueError, match="accumulator.0.window_"):
        convert_batchnorm(other, accumulator)
    with pytest.raises(RuntimeError, match="init()"):
        convert_batchnorm(other, Accumulator(nn.SGD(other.trainable_params(), 0.1), 2, grad_reducer=WindowAllReduce()))
    other[0].format = "NHWC"   # NHWC layers can only be built on GPU
    with pytest.raises(ValueError, match="NCHW"):
        convert_batchnorm(other, Accumulator(nn.SGD(other.trainable_params(), 0.1), 2))
    assert not isinstance(other[0], WindowBatchNorm)


@pytest.mark.slow
@pytest.mark.msrun("tests.accumulator.policies.batchnorm_worker:main")
def test_two_ranks_equal_one_process_on_their_union(msrun_folder):
    ranks = [dict(np.load(msrun_folder / f"rank_{rank}.npz")) for rank in range(len(SIZES))]
    for rank in ranks:
        assert int(rank.pop("updates")) == len(window_batches())
    assert_statistics_close(ranks[0], ranks[1], rtol=0)
    assert_statistics_close(ranks[0], plain_reference(nn.BatchNorm2d, 3, 0.9, window_batches()))
