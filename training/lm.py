"""A causal language model on byte text as a ``training.task.Task``, where its text comes from, and a sample of it.

Everything particular to language modelling that the training loop needs is
wired here from ``data.text`` (the corpus and its samples), ``data.tokens``
and ``data.packing`` (padded or packed rows, token counts) and ``models.transformer`` (the network and its
loss): each micro-batch weighs its non-PAD targets (``Task.count``), so a
window's update is the large batch's mean over tokens, however the lengths fall.
"""
import functools
import math
import os
import tempfile

import mindspore as ms
import numpy as np
from mindspore import nn, ops
from mindspore.nn.learning_rate_schedule import LearningRateSchedule

import data.text  # read TINY_SHAKESPEARE_URL at call time, so tests can patch it
from common.checks import positive_int
from data.download import write_text
from data.mnist import Window, reading_order
from data.packing import first_fit, pack_rows
from data.text import (CORPUS_FILE, DEFAULT_TEXT_DIR, VOCAB_SIZE, corpus_problem, decode, encode, ensure_corpus,
                       split_corpus, split_samples, synthetic_text)
from data.tokens import PAD, pad_batch, token_count
from data.windows import window_slices
from models.transformer import CausalLM, token_loss
from training.errors import TrainingError
from training.outputs import check_writable, claim_for_synthetic, is_synthetic
from training.records import average_suffix, noise_suffix
from training.task import Task

# Summed token loss over the window's tokens (exact), or each micro-batch's mean averaged (the naive way).
LOSSES = ("token-sum", "micro-batch-mean")
# Samples end at a paragraph or line end, at most this many tokens: the model's max_length.
MAX_LENGTH = 128
# Validation batches are all [EVAL_ROWS, max_length] (the last filled with PAD rows): one compiled shape.
EVAL_ROWS = 256
SYNTHETIC_BYTES = 60_000
SYNTHETIC_DATA_SEED = 0
SYNTHETIC_MARKER = "SYNTHETIC_NOT_SHAKESPEARE.txt"
# Updates of linear warm-up before the learning rate decays as 1 / sqrt(update).
WARMUP_UPDATES = 10
PROMPT = "KING"
SAMPLE_TOKENS = 120
SAMPLE_TEMPERATURE = 0.8


class TokenLossCell(nn.Cell):
    """The loss ``Task.make_loss`` builds: ``loss(logits, targets)`` summed over non-PAD targets, or their mean.

    Example:
        >>> logits = ms.Tensor(np.zeros((1, 3, 4), np.float32))
        >>> targets = ms.Tensor([[1, 2, 0]], ms.int32)
        >>> round(float(TokenLossCell()(logits, targets)), 4), round(float(TokenLossCell(mean=True)(logits, targets)), 4)
        (2.7726, 1.3863)
    """

    def __init__(self, mean=False):
        super().__init__()
        self.mean = mean

    def construct(self, logits, targets):
        loss_sum, count = token_loss(logits, targets, PAD)
        return loss_sum / count if self.mean else loss_sum


def correct_tokens(logits, targets):
    """Non-PAD targets whose largest logit is the target: ``Task.correct`` of the summed token loss.

    Example:
        >>> logits = ms.Tensor(np.eye(3, dtype=np.float32)[None])  # predicts 0, 1, 2
        >>> int(correct_tokens(logits, ms.Tensor([[0, 1, 1]], ms.int32)))   # the PAD target does not count
        1
    """
    hits = ops.logical_and(ops.argmax(logits, -1) == targets, targets != PAD)
    return hits.astype(ms.int32).sum()


def correct_fraction(logits, targets):
    """``correct_tokens`` over the batch's tokens: ``Task.correct`` when each micro-batch counts 1.

    Example:
        >>> logits = ms.Tensor(np.eye(3, dtype=np.float32)[None])
        >>> float(correct_fraction(logits, ms.Tensor([[0, 1, 1]], ms.int32)))
        0.5
    """
    return correct_tokens(logits, targets).astype(ms.float32) / (targets != PAD).astype(ms.float32).sum()


def count_tokens(labels):
    """The non-PAD targets of a micro-batch (``Task.count`` of the summed token loss).

    Example:
        >>> count_tokens(ms.Tensor([[5, 6, 0]], ms.int32))
        2
    """
    return token_count(labels.asnumpy())


def count_one(labels):
    """1 for every micro-batch: its mean loss weighs as much as any other's (``--loss micro-batch-mean``).

    Example:
        >>> count_one(ms.Tensor([[5, 6, 0]], ms.int32))
        1
    """
    return 1


class WarmupInverseSqrt(LearningRateSchedule):
    """``lr`` warmed up linearly over ``warmup`` updates, then decaying as ``1 / sqrt(update)``.

    The optimizer evaluates it at its ``global_step``, which the
    accumulator advances once per applied window: the schedule follows
    updates, not micro-batches, and a checkpoint holds where it is. It does
    not depend on the run's length, so a run resumed with more ``--epochs``
    continues it exactly.

    Example:
        >>> schedule = WarmupInverseSqrt(1.0, warmup=4)
        >>> [round(float(schedule(ms.Tensor(step, ms.int32))), 3) for step in (0, 3, 15)]
        [0.25, 1.0, 0.5]
    """

    def __init__(self, lr, warmup):
        super().__init__()
        self.lr = float(lr)
        self.warmup = float(positive_int(warmup, "warmup"))

    def construct(self, global_step):
        update = global_step.astype(ms.float32) + 1.0
        return self.lr * ops.minimum(update / self.warmup, ops.sqrt(self.warmup / update))


def lm_windows(samples, batch_size, accumulate_step, *, shuffle, seed, drop_remainder, num_shards, shard_id,
               length, packing=False, within_windows=False, layout=None, last_micro_batch=None):
    """One epoch of ``samples`` as windows (``data.windows.window_slices``) of micro-batches ``[batch_size, length]``.

    The samples (each at most ``length + 1`` tokens) are read in
    ``data.mnist.reading_order`` (seeded, dropping a short last batch on
    request), and shard ``shard_id`` of ``num_shards`` takes its part of each
    of the run's windows (``window_slices``); every micro-batch is padded to ``length``, and a
    short last micro-batch is filled with all-PAD rows, which hold no
    targets: the whole epoch takes one shape, so the train step compiles
    once, however the lengths fall. Each :class:`~data.mnist.Window`
    holds ``(inputs, targets)`` Tensor pairs and the same ``stacked``.

    With ``packing`` the samples, in the seeded order, are packed into rows
    of ``length`` target slots (``data.packing.first_fit``, ``pack_rows``):
    inputs are ``[batch_size, 2, length]`` (tokens, document ids), and
    padding is left only at a row's tail. The rows, not the samples, are
    then cut into windows and sharded, and ``drop_remainder`` drops a short
    last batch of rows. With ``within_windows`` a sample is packed only into
    a row of its own window (``first_fit``'s ``window``: the run's window of rows):
    each window holds a run of consecutive samples of the order, where
    first fit over the epoch moves short samples forward into rows opened
    windows before.

    With ``last_micro_batch`` each whole window ends in a micro-batch of
    that many rows (``data.windows.window_slices``), and the epoch's last
    micro-batch is filled to the size of its place in the window: the
    micro-batches take two shapes, each compiled once. A shard's short
    micro-batch that other shards' rows follow is not filled.

    ``layout``, a dict, receives the epoch's ``"slots"`` (target positions
    computed, filler rows included) and ``"tokens"`` (targets that are not
    padding) when the windows are made.

    Example:
        >>> samples = [encode("to be or not"), encode("to be"), encode("that is")]
        >>> windows = lm_windows(samples, 2, 2, shuffle=False, seed=0, drop_remainder=False,
        ...                      num_shards=None, shard_id=None, length=16)
        >>> [[(tuple(targets.shape), count_tokens(targets)) for _, targets in window] for window in windows]
        [[((2, 16), 15), ((2, 16), 6)]]
        >>> packed = lm_windows(samples, 2, 2, shuffle=False, seed=0, drop_remainder=False,
        ...                     num_shards=None, shard_id=None, length=16, packing=True)
        >>> [[(tuple(inputs.shape), count_tokens(targets)) for inputs, targets in window] for window in packed]
        [[((2, 2, 16), 21)]]
        >>> uneven = lm_windows(samples * 2, 2, 2, shuffle=False, seed=0, drop_remainder=False,
        ...                     num_shards=None, shard_id=None, length=16, last_micro_batch=1)
        >>> [[tuple(targets.shape) for _, targets in window] for window in uneven]
        [[(2, 16), (1, 16)], [(2, 16), (1, 16)]]
    """
    reading_order(len(samples), batch_size, shuffle, seed, drop_remainder, num_shards, shard_id)  # checks
    if not packing:
        order = reading_order(len(samples), batch_size, shuffle, seed, drop_remainder)
        inputs, targets = _padded_rows([samples[i] for i in order], length)
        documents = (targets != PAD).any(axis=-1).astype(np.int64)
    else:
        order = reading_order(len(samples), 1, shuffle, seed)
        ordered = [samples[i] for i in order]
        span = batch_size * (accumulate_step - 1) + (last_micro_batch or batch_size)
        rows = first_fit([len(sample) - 1 for sample in ordered], length, span if within_windows else None)
        taken = reading_order(len(rows), batch_size, False, None, drop_remainder)
        inputs, targets = pack_rows(ordered, length, [rows[i] for i in taken])
        documents = inputs[:, 1].max(axis=-1)
    windows = window_slices(len(targets), batch_size, accumulate_step, last_micro_batch, drop_remainder,
                            num_shards=num_shards, shard_id=shard_id)
    filled = max((window[-1][1] for window in windows if window), default=0)
    inputs, targets, documents = _filled(inputs, targets, documents, filled)
    if layout is not None:
        layout.update(slots=targets.size, tokens=int(np.count_nonzero(targets != PAD)))
    return _windows(inputs, targets, documents, windows)


def _padded_rows(ordered, length):
    """The samples, one a row, padded to ``length``: ``(inputs [R, length], targets [R, length])``."""
    if not ordered:
        return np.zeros((0, length), np.int32), np.zeros((0, length), np.int32)
    return pad_batch(ordered, multiple=length)


def _filled(inputs, targets, documents, rows):
    """The rows with all-PAD rows added up to ``rows`` (they hold no target and no sample)."""
    filler = max(rows - len(targets), 0)  # a shard's rows may end before the epoch's
    return (np.pad(inputs, ((0, filler),) + ((0, 0),) * (inputs.ndim - 1)), np.pad(targets, ((0, filler), (0, 0))),
            np.pad(documents, (0, filler)))


def _windows(inputs, targets, documents, windows):
    """The windows of ``data.windows.window_slices``, each knowing the samples its rows hold."""
    for window in windows:
        if not window:  # a shard with no rows in this window
            yield Window([])
            continue
        start, stop = window[0][0], window[-1][1]
        stacked = None
        if len({b - a for a, b in window}) == 1:  # micro-batches all of one size
            x, y = inputs[start:stop], targets[start:stop]
            k = len(window)
            stacked = ms.Tensor(x.reshape(k, -1, *x.shape[1:])), ms.Tensor(y.reshape(k, -1, *y.shape[1:]))
        yield Window([(ms.Tensor(inputs[a:b]), ms.Tensor(targets[a:b])) for a, b in window], stacked,
                     samples=int(documents[start:stop].sum()))


def lm_batches(samples, batch_size, length, packing=False):
    """The validation pass: batches of ``min(batch_size, EVAL_ROWS, rows)`` rows, all ``[rows, length]``.

    The last batch is filled with all-PAD rows, which hold no targets: every
    batch has one shape, so evaluation compiles once. With ``packing`` the
    samples are packed, in their order, into rows (``lm_windows``): the same
    losses and counts, in fewer rows.

    Example:
        >>> batches = list(lm_batches([encode("to be")] * 3, 2, length=8))
        >>> [(tuple(inputs.shape), count_tokens(targets)) for inputs, targets in batches]
        [((2, 8), 8), ((2, 8), 4)]
        >>> [(tuple(inputs.shape), count_tokens(targets)) for inputs, targets in lm_batches(
        ...     [encode("to be")] * 3, 2, length=8, packing=True)]
        [((2, 2, 8), 12)]
    """
    if packing:
        inputs, targets = pack_rows(samples, length)
    else:
        inputs, targets = pad_batch(samples, multiple=length)
    rows = min(batch_size, EVAL_ROWS, len(targets))
    inputs, targets, _ = _filled(inputs, targets, np.zeros(len(targets)), -(-len(targets) // rows) * rows)
    for start in range(0, len(targets), rows):
        yield ms.Tensor(inputs[start:start + rows]), ms.Tensor(targets[start:start + rows])


def _targets(samples):
    return sum(len(sample) - 1 for sample in samples)


def lm_task(corpus_path, loss="token-sum", width=64, depth=2, heads=4, max_length=MAX_LENGTH, packing=True,
            within_windows=False):
    """The byte-level language model on the corpus at ``corpus_path``, as a ``Task``.

    The text is split into samples of at most ``max_length`` tokens
    (``data.text.split_samples``), the last tenth held out for validation.
    The network is ``models.transformer.CausalLM(257, width, depth, heads, max_length)``;
    training and validation batches are all ``max_length`` long: with
    ``packing`` (the default) rows of several samples, each attended to
    alone (``lm_windows``; with ``within_windows`` each sample packed into a row
    of its own window), else one sample per row, padded. ``loss="token-sum"`` sums the token loss and counts
    tokens, so windows equal the large batch; ``"micro-batch-mean"`` takes
    each micro-batch's mean and counts each micro-batch once, the mean of
    means a naive loop computes (its reported losses are means of means too).
    The learning rate warms up and decays per update (``WarmupInverseSqrt``).
    Each epoch's record gets ``"padding"``, the fraction of the target
    positions computed that were padding.

    Example:
        >>> _ = open("input.txt", "w").write(synthetic_text(3000))
        >>> task = lm_task("input.txt", width=32, depth=1)
        >>> task.description
        'text from input.txt: 37 train / 4 validation samples (2,670 / 327 tokens, up to 128 each, packed into rows of 128)'
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    with open(corpus_path, "rb") as f:
        train, validation = split_corpus(split_samples(encode(f.read()), max_length))
    label = "synthetic text" if is_synthetic(os.path.dirname(corpus_path) or ".", SYNTHETIC_MARKER) else "text"
    mean = loss == "micro-batch-mean"
    epoch_tokens = _targets(train)
    layout = {}  # the last epoch's windows' slots and tokens (lm_windows), for its padding

    def measure(record, history):
        updates = record["updates"] - (history[-1]["updates"] if history else 0)
        return {"perplexity": math.exp(min(record["test_loss"], 50.0)),
                "tokens_per_second": epoch_tokens / record["seconds"],
                "tokens_per_update": epoch_tokens / max(updates, 1),
                "padding": 1 - layout["tokens"] / layout["slots"] if layout.get("slots") else 0.0}

    packed = f", packed into rows of {max_length}" if packing else ""
    return Task(
        description=f"{label} from {corpus_path}: {len(train)} train / {len(validation)} validation samples "
                    f"({epoch_tokens:,} / {_targets(validation):,} tokens, up to {max_length} each{packed})",
        train_samples=len(train),
        make_net=functools.partial(CausalLM, VOCAB_SIZE, width, depth, heads, max_length),
        make_loss=functools.partial(TokenLossCell, mean),
        train_windows=functools.partial(lm_windows, train, length=max_length, packing=packing,
                                        within_windows=within_windows, layout=layout),
        test_batches=functools.partial(lm_batches, validation, length=max_length, packing=packing),
        count=count_one if mean else count_tokens,
        correct=correct_fraction if mean else correct_tokens,
        learning_rate=lambda config: WarmupInverseSqrt(config.lr, WARMUP_UPDATES),
        measure=measure,
        epoch_line=lm_epoch_line,
        summary_line=functools.partial(lm_summary_line, epoch_tokens=epoch_tokens),
    )


def lm_task_from_flags(corpus_path, flags):
    """``lm_task`` on the corpus at ``corpus_path`` for the tool's own flags (``training.lm_command.parse_args``'s).

    Example:
        >>> from training.lm_command import parse_args
        >>> _ = open("input.txt", "w").write(synthetic_text(3000))
        >>> lm_task_from_flags("input.txt", parse_args(["--no-packing", "--width", "16"])[1]).description[-15:]
        'up to 128 each)'
    """
    return lm_task(corpus_path, flags["loss"], flags["width"], flags["depth"], flags["heads"], flags["max_length"],
                   flags["packing"], flags["pack_within_windows"])


def lm_epoch_line(record, epochs):
    """The line printed after an epoch of the language model.

    Example:
        >>> print(lm_epoch_line({"epoch": 1, "train_loss": 2.5, "test_loss": 2.0, "perplexity": 7.39,
        ...                      "test_accuracy": 0.4, "tokens_per_second": 9000.0, "tokens_per_update": 2100.0,
        ...                      "padding": 0.125, "seconds": 30.0}, 2))
        epoch 1/2: train loss 2.5000, validation loss 2.0000 (perplexity 7.39), next-token accuracy 40.0%, 9,000 tokens/s, 2,100 tokens per update, 12.5% padding, 30.0 s
    """
    padding = f", {record['padding']:.1%} padding" if "padding" in record else ""
    return (f"epoch {record['epoch']}/{epochs}: train loss {record['train_loss']:.4f}, validation loss "
            f"{record['test_loss']:.4f} (perplexity {record['perplexity']:.2f}), next-token accuracy "
            f"{record['test_accuracy']:.1%}, {record['tokens_per_second']:,.0f} tokens/s, "
            f"{record['tokens_per_update']:,.0f} tokens per update{padding}, {record['seconds']:.1f} s"
            + noise_suffix(record) + average_suffix(record))


def lm_summary_line(summary, config, epoch_tokens):
    """The last line a language-model run prints; ``epoch_tokens`` are the training tokens of one epoch.

    Example:
        >>> from training.config import TrainConfig
        >>> print(lm_summary_line({"final_test_loss": 2.0, "epochs": 2, "train_seconds": 40.0, "updates": 20},
        ...                       TrainConfig(batch_size=8, accumulate_step=4), epoch_tokens=90000))
        final validation loss 2.0000 (perplexity 7.39); 4,500 tokens/s; effective batch 8 x 4 = effective 32 rows, 9,000 tokens per update on average; 20 updates
    """
    tokens = summary["epochs"] * epoch_tokens
    return (f"final validation loss {summary['final_test_loss']:.4f} (perplexity "
            f"{math.exp(min(summary['final_test_loss'], 50.0)):.2f}); "
            f"{tokens / summary['train_seconds']:,.0f} tokens/s; effective batch {config.batch_description()} "
            f"rows, {tokens / max(summary['updates'], 1):,.0f} tokens per update on average; "
            f"{summary['updates']} updates")


def generate(net, prompt=PROMPT, tokens=SAMPLE_TOKENS, temperature=SAMPLE_TEMPERATURE, seed=0):
    """``prompt`` continued by ``net`` for up to ``tokens`` bytes: sampled at ``temperature``, greedy at 0.

    Every step feeds one ``[1, max_length]`` batch (the text so far, then
    PAD, which attention ignores), so the whole sample compiles once. The
    continuation stops at ``max_length``. The same ``seed`` draws the same text.

    Example:
        >>> ms.set_seed(0)
        >>> net = CausalLM(VOCAB_SIZE, width=32, depth=1, max_length=16)
        >>> text = generate(net, "to", tokens=5)
        >>> text.startswith("to"), len(text) <= 7   # an untrained net's bytes may not be UTF-8: fewer characters
        (True, True)
    """
    max_length = net.position.embedding_table.shape[0]
    rng = np.random.default_rng(seed)
    context = list(encode(prompt))
    batch = np.full((1, max_length), PAD, np.int32)
    while len(context) < min(len(encode(prompt)) + tokens, max_length + 1):
        batch[0, :len(context)] = context
        logits = net(ms.Tensor(batch))[0, len(context) - 1].asnumpy().astype(np.float64)
        logits[PAD] = -np.inf
        if temperature == 0:
            context.append(int(np.argmax(logits)))
        else:
            probabilities = np.exp((logits - logits.max()) / temperature)
            context.append(int(rng.choice(len(logits), p=probabilities / probabilities.sum())))
        if len(context) > max_length:
            break
    return decode(context)


def _synthetic(folder):
    path = os.path.join(folder, CORPUS_FILE)
    held = f"{path}, which --synthetic did not write" if os.path.exists(path) else None
    claim_for_synthetic(folder, DEFAULT_TEXT_DIR, "Tiny Shakespeare", held, SYNTHETIC_MARKER,
                        "This folder holds a synthetic text written by scripts/train_lm.py --synthetic (seed "
                        f"{SYNTHETIC_DATA_SEED}); it is not Tiny Shakespeare. Runs without --synthetic refuse it.\n")
    text = synthetic_text(SYNTHETIC_BYTES, SYNTHETIC_DATA_SEED)
    with open(path, "a+", encoding="utf-8") as f:
        f.seek(0)
        written = f.read() == text  # by an earlier synthetic run: the same seed wrote the same text
    if not written:
        write_text(path, text)
    return path


def prepare_text(data_dir, synthetic, url, stack):
    """The corpus file to train on: found, downloaded, or written.

    Tiny Shakespeare (``synthetic`` False) is used from ``data_dir``
    (default ``DEFAULT_TEXT_DIR``) or downloaded from ``url`` (default
    ``data.text.TINY_SHAKESPEARE_URL``), unless ``data_dir`` holds the
    synthetic text. The synthetic text (``SYNTHETIC_BYTES``) is written into
    ``data_dir``, marked with ``SYNTHETIC_MARKER``, or into a temporary
    folder that ``stack`` (a ``contextlib.ExitStack``) removes; never into
    ``DEFAULT_TEXT_DIR`` nor over a corpus it did not write. A folder to be
    written must be writable (``training.outputs.check_writable``). Raises
    ``data.text.TextUnavailableError`` or ``TrainingError`` with a message
    meant for the user.

    Example:
        >>> import contextlib
        >>> with contextlib.ExitStack() as stack:
        ...     path = prepare_text(None, synthetic=True, url=None, stack=stack)
        ...     sorted(os.listdir(os.path.dirname(path)))
        ['SYNTHETIC_NOT_SHAKESPEARE.txt', 'input.txt']
        >>> os.path.exists(path)
        False
    """
    if synthetic:
        return _synthetic(data_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix="text_synthetic_")))
    folder = data_dir or DEFAULT_TEXT_DIR
    if is_synthetic(folder, SYNTHETIC_MARKER):
        raise TrainingError(f"{folder} holds the synthetic text that --synthetic wrote, not Tiny Shakespeare "
                            f"({SYNTHETIC_MARKER}): add --synthetic to train on it, or choose another --data-dir")
    if corpus_problem(os.path.join(folder, CORPUS_FILE)):  # to be downloaded into
        check_writable("--data-dir", folder, folder=True)
    return ensure_corpus(folder, url or data.text.TINY_SHAKESPEARE_URL)
