"""Whole-batch losses under accumulation: one window by hand, then exactly the large batch's gradient, every case.

By hand: reps = w x with w = 1, micro-batches x = (1, 2) and (3): the window's loss (1 + 2 + 3)² / 2 = 18 has
gradient 6 x 6 = 36 in w (the micro-batches' own losses would give 18); SGD at 0.01 leaves w = 0.64.
"""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, nn, ops

from accumulator import Accumulator, check_equivalence
from accumulator.drivers.whole_batch import make_whole_batch_step


def half_squared_sum(reps):
    """A loss over the whole window that is no sum of per-sample terms: (sum of the reps)^2 / 2."""
    return reps.sum() ** 2 / 2


def test_a_loss_over_the_window_gets_its_own_gradient_not_the_micro_batches_sum():
    # reps = w * x with w = 1, micro-batches x = (1, 2) and (3): the window's loss (1 + 2 + 3)^2 / 2 = 18 has
    # gradient 6 * 6 = 36 in w; the micro-batches' own losses would give 3 * 3 + 3 * 3 = 18. SGD at 0.01: w = 0.64.
    encoder = nn.Dense(1, 1, weight_init="ones", has_bias=False)
    accumulator = Accumulator(nn.SGD(encoder.trainable_params(), 0.01), accumulate_step=2, reduction="sum")
    step = make_whole_batch_step(encoder, half_squared_sum, accumulator)
    loss, updated = step([Tensor([[1.0], [2.0]]), Tensor([[3.0]])])
    assert (float(loss), bool(updated)) == (18.0, True)
    np.testing.assert_allclose(encoder.weight.asnumpy(), [[0.64]], rtol=1e-6)

# Relative to each gradient tensor's largest element, as check_equivalence's RTOL.
RTOL = 1e-4
# Pairs in whole_batch_worker.py's window, split between two ranks.
PAIRS = 12


def tower(inputs, seed):
    ms.set_seed(seed)
    return nn.SequentialCell(nn.Dense(inputs, 8), nn.Tanh(), nn.Dense(8, 4))


class OneTower(nn.Cell):
    """One encoder for queries and keys: ``(query, key) -> (its rep, its rep)``."""

    def __init__(self):
        super().__init__()
        self.encoder = tower(6, seed=1)

    def construct(self, query, key):
        return self.encoder(query), self.encoder(key)


class TwoTowers(nn.Cell):
    """CLIP's shape: an image tower and a text tower of other input widths."""

    def __init__(self):
        super().__init__()
        self.image = tower(6, seed=2)
        self.text = tower(5, seed=3)

    def construct(self, image, text):
        return self.image(image), self.text(text)


def _logits(queries, keys):
    queries = queries / ops.norm(queries, dim=1, keepdim=True)
    keys = keys / ops.norm(keys, dim=1, keepdim=True)
    return ops.matmul(queries, keys.T) / 0.1


def info_nce(queries, keys):
    """Each query's key is its positive, every other key in the batch a negative."""
    logits = _logits(queries, keys)
    return ops.cross_entropy(logits, ops.arange(logits.shape[0]))


def clip_loss(images, texts):
    """CLIP's symmetric loss: images against texts and texts against images."""
    logits = _logits(images, texts)
    labels = ops.arange(logits.shape[0])
    return (ops.cross_entropy(logits, labels) + ops.cross_entropy(logits.T, labels)) / 2


def pairs(samples, second_width, seed=0):
    rng = np.random.default_rng(seed)
    first = rng.normal(size=(samples, 6)).astype(np.float32)
    # Positives are related: the second input is a noisy copy of the first (cut to its width).
    second = (first[:, :second_width] + 0.3 * rng.normal(size=(samples, second_width))).astype(np.float32)
    return first, second


def micro_batches(first, second, sizes):
    bounds = np.cumsum([0] + list(sizes))
    return [(Tensor(first[a:b]), Tensor(second[a:b])) for a, b in zip(bounds[:-1], bounds[1:])]


def large_batch(net, loss_fn, first, second):
    """The loss of the concatenated batch and its gradient, as float64 numpy."""
    def forward(a, b):
        return loss_fn(*net(a, b))
    loss, grads = ms.value_and_grad(forward, None, net.trainable_params())(Tensor(first), Tensor(second))
    return float(loss), [g.asnumpy().astype(np.float64) for g in grads]


def weights(net):
    return [p.asnumpy().astype(np.float64) for p in net.trainable_params()]


def set_weights(net, values):
    for param, value in zip(net.trainable_params(), values):
        ops.assign(param, Tensor(value.astype(np.float32)))


def assert_close(actual, expected, rtol=RTOL):
    for a, e in zip(actual, expected):
        assert np.abs(a - e).max() <= rtol * np.abs(e).max(), (np.abs(a - e).max(), np.abs(e).max())


# Fails without the per-micro-batch scaling. Two towers summed under Momentum: one tower's InfoNCE is the data-parallel
# test's below, the mean and SGD the policies' test's.
def test_window_applies_the_large_batch_gradient_for_uneven_micro_batches():
    first, second = pairs(12, 5)
    net = TwoTowers()
    start = weights(net)
    expected_loss, expected = large_batch(net, clip_loss, first, second)

    def make_optimizer(params):
        return nn.Momentum(params, 0.5, 0.9)
    accumulator = Accumulator(make_optimizer(net.trainable_params()), accumulate_step=3, reduction="sum")
    step = make_whole_batch_step(net, clip_loss, accumulator)

    loss, updated = step(micro_batches(first, second, (3, 5, 4)))

    assert bool(updated)
    np.testing.assert_allclose(float(loss), expected_loss, rtol=1e-5)
    # A first step of Momentum moves each weight by -lr * gradient.
    applied = [(before - after) / 0.5 for before, after in zip(start, weights(net))]
    assert_close(applied, expected)
    # The weights equal one large-batch step of the same optimizer from the same weights.
    reference = TwoTowers()
    reference_optimizer = make_optimizer(reference.trainable_params())
    reference_optimizer(tuple(Tensor(g.astype(np.float32)) for g in expected))
    assert_close(weights(net), weights(reference))


def test_plain_accumulation_of_the_micro_batch_loss_differs():
    net = OneTower()
    first, second = pairs(12, 6)
    accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.5), accumulate_step=3)

    def forward(query, key):
        return info_nce(*net(query, key))
    grad_fn = ms.value_and_grad(forward, None, accumulator.optimizer.parameters)

    report = check_equivalence(grad_fn, micro_batches(first, second, (4, 4, 4)), accumulator, network=net)

    assert not report.equivalent and report.max_rel_diff > 0.05
    assert "accumulator.make_whole_batch_step" in report.reasons[-1]


def test_clipping_loss_scaling_noise_tracking_and_nonfinite_skip_act_on_the_whole_window():
    first, second = pairs(8, 5, seed=1)
    net = TwoTowers()
    start = weights(net)
    _, expected = large_batch(net, clip_loss, first, second)
    norm = np.sqrt(sum((g ** 2).sum() for g in expected))
    accumulator = Accumulator(nn.SGD(net.trainable_params(), 1.0), accumulate_step=2, clip_norm=norm / 4,
                              loss_scaler=ms.amp.StaticLossScaler(1024.0), track_noise=True)
    step = make_whole_batch_step(net, clip_loss, accumulator)

    assert bool(step(micro_batches(first, second, (4, 4)))[1])
    assert_close([before - after for before, after in zip(start, weights(net))], [g / 4 for g in expected])
    # The window's last micro-batch was sampled; one window's estimates are noisy, even negative.
    record = accumulator.noise.record()
    assert record["windows"] == 1 and np.isfinite([record["gradient_squared_norm"], record["trace"]]).all()

    after_one = weights(net)
    first[5, 0] = np.nan
    loss, updated = step(micro_batches(first, second, (4, 4)))
    assert not bool(updated) and int(accumulator.skipped_windows) == 1
    assert all(np.array_equal(a, b) for a, b in zip(after_one, weights(net)))


class FakeGather:
    """Two ranks in one process: returns this rank's rows and ``other``'s, in rank order."""

    def __init__(self):
        self.rank, self.other = 0, []

    def __call__(self, tensor):
        other = self.other.pop(0)
        return ops.concat([tensor, other] if self.rank == 0 else [other, tensor])


@ms.jit_class
class WeightOfTwoRanks:
    """Acts as the window's AllReduce where the other rank's gradient piece is added by the test."""

    def __call__(self, tensors):
        return tensors[:-1] + (tensors[-1] * 2,)


def test_data_parallel_ranks_pieces_sum_to_the_gradient_of_the_gathered_loss():
    first, second = pairs(12, 6, seed=2)
    net = OneTower()
    start = weights(net)
    _, expected = large_batch(net, info_nce, first, second)
    gather = FakeGather()
    accumulator = Accumulator(nn.SGD(net.trainable_params(), 1.0), accumulate_step=2,
                              grad_reducer=WeightOfTwoRanks())
    step = make_whole_batch_step(net, info_nce, accumulator, gather=gather)
    pieces = []
    for rank, rows in ((0, slice(0, 6)), (1, slice(6, 12))):
        other = slice(6, 12) if rank == 0 else slice(0, 6)
        gather.rank, gather.other = rank, list(net(Tensor(first[other]), Tensor(second[other])))
        local_loss, _ = step(micro_batches(first[rows], second[rows], (3, 3)))
        pieces.append([before - after for before, after in zip(start, weights(net))])
        set_weights(net, start)

    assert_close([a + b for a, b in zip(*pieces)], expected)


@pytest.mark.slow
@pytest.mark.msrun("tests.accumulator.drivers.whole_batch_worker:main")
def test_two_ranks_under_msrun_train_on_the_loss_over_both_ranks_pairs(msrun_folder):
    net = TwoTowers()
    start = weights(net)
    expected_loss, expected = large_batch(net, clip_loss, *pairs(PAIRS, 5))
    for rank in (0, 1):
        saved = np.load(msrun_folder / f"rank_{rank}.npz")
        assert bool(saved["updated"])
        np.testing.assert_allclose(float(saved["loss"]), expected_loss, rtol=1e-5)
        assert_close([before - saved[f"arr_{index}"] for index, before in enumerate(start)], expected)


def test_layers_that_differ_between_the_two_passes_are_refused_by_name():
    net = nn.SequentialCell(nn.Dense(6, 8), nn.Dropout(p=0.1), nn.BatchNorm1d(8)).set_train()
    accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=2)
    step = make_whole_batch_step(net, lambda reps: reps.sum(), accumulator)
    x = Tensor(np.ones((4, 6), np.float32))
    with pytest.raises(ValueError, match=r"1 \(Dropout with p=0.1 in training mode\), 2 \(BatchNorm1d in training"):
        step([x, x])


def test_bad_input_gets_one_clear_line():
    net = nn.Dense(6, 4)
    accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=2)
    with pytest.raises(TypeError, match="encoder must be a Cell or a function .*got 3"):
        make_whole_batch_step(3, info_nce, accumulator)
    with pytest.raises(ValueError, match="may drop some \\(skip_nonfinite='micro_batch'"):
        make_whole_batch_step(net, info_nce, Accumulator(nn.SGD(net.trainable_params(), 0.1), 2,
                                                         skip_nonfinite="micro_batch"))
    step = make_whole_batch_step(net, lambda reps: reps.sum(), accumulator)
    x = Tensor(np.ones((4, 6), np.float32))
    with pytest.raises(ValueError, match="at most accumulate_step=2 micro-batches, got 3"):
        step([x, x, x])
    with pytest.raises(ValueError, match=r"micro_batches must be a non-empty list of micro-batches, got \[\]"):
        step([])
    accumulator.accumulate(tuple(ops.zeros_like(p) for p in net.trainable_params()))
    with pytest.raises(ValueError, match="already holds 1 micro-batches"):
        step([x, x])
