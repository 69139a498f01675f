"""Train the MNIST dense network with gradient accumulation and report test accuracy.

The MindSpore quick-start, as a tool: micro-batches of ``--batch-size``
summed over ``--accumulate-step`` of them per optimizer update (an
effective batch of batch x accumulate-step), evaluated on the test split
after every epoch, with checkpoints, exact resume and JSON/PNG logs.

Examples:
    python scripts/train_mnist.py                        # real MNIST, downloaded once
    python scripts/train_mnist.py --synthetic --epochs 2 # offline, learnable look-alike
    python scripts/train_mnist.py --ckpt-dir runs/a --epochs 10
    python scripts/train_mnist.py --ckpt-dir runs/a --epochs 10 --resume

From Python (tests call it this way, without a subprocess):
    >>> summary = main(["--synthetic", "--epochs", "1"])
    >>> summary["effective_batch_size"]
    64
"""
import argparse
import contextlib
import json
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Optional

# Run from the checkout: sys.path[0] is scripts/, and models/ and data/ are not installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import mindspore as ms  # noqa: E402
from mindspore import communication, nn, ops  # noqa: E402
from tqdm import tqdm  # noqa: E402

import data.mnist  # noqa: E402  (read MNIST_URL at call time, so it can be patched)
from accumulator import (Accumulator, CheckpointMismatchError, WindowAllReduce, load_checkpoint,  # noqa: E402
                         make_window_step, save_checkpoint)
from data.idx import MnistFormatError, validate_mnist_dir, validate_split, write_synthetic_mnist  # noqa: E402
from data.mnist import (DEFAULT_DATA_DIR, MnistUnavailableError, ensure_mnist, mnist_dataset,  # noqa: E402
                        mnist_windows)
from models.mnist import MnistDenseNet, mnist_loss  # noqa: E402

DEVICES = {"cpu": "CPU", "gpu": "GPU", "ascend": "Ascend"}
MODES = ("graph", "pynative")
OPTIMIZERS = ("sgd", "momentum", "adam")
MOMENTUM = 0.9
# A tenth of MNIST: enough updates at the default settings to pass 95% in two epochs.
SYNTHETIC_SIZES = {"train": 6000, "test": 1000}
SYNTHETIC_DATA_SEED = 0
# Evaluation holds no gradients, so it can take much larger batches than training.
EVAL_BATCH_SIZE = 1000
CHECKPOINT_NAME = re.compile(r"^epoch_(\d+)\.ckpt$")
# Flags that change the arithmetic or the data order: a resumed run must use the same.
RESUME_CONFIG = ("batch_size", "accumulate_step", "lr", "optimizer", "seed", "shuffle", "drop_last", "ranks")


class TrainingError(RuntimeError):
    """A run cannot go on; the message says why and what to do (no traceback needed)."""


# ---------------------------------------------------------------- command line

def int_at_least(minimum, description):
    """argparse type factory: an int >= ``minimum``, described in errors as ``description``.

    Example:
        >>> int_at_least(1, "a positive integer")("32")
        32
    """
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {description}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {description}, got {value}")
        return value
    return parse


positive_int = int_at_least(1, "a positive integer")
non_negative_int = int_at_least(0, "a non-negative integer")


def positive_float(text):
    """argparse type: a finite float > 0.

    Example:
        >>> positive_float("1e-2")
        0.01
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def device_target(text):
    """argparse type: CPU, GPU or Ascend, any case, returned as MindSpore spells it.

    Example:
        >>> device_target("ascend")
        'Ascend'
    """
    try:
        return DEVICES[text.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"unknown device {text!r}: choose CPU, GPU or Ascend") from None


def one_of(*names):
    """argparse type factory: one of ``names``, any case, returned in lower case.

    Example:
        >>> one_of("sgd", "adam")("Adam")
        'adam'
    """
    def parse(text):
        if text.lower() not in names:
            raise argparse.ArgumentTypeError(f"unknown value {text!r}: choose {', '.join(names)}")
        return text.lower()
    return parse


def build_parser():
    """The argument parser; ``parse_args`` adds the checks between flags.

    Example:
        >>> build_parser().parse_args([]).batch_size
        32
    """
    parser = argparse.ArgumentParser(
        prog="train_mnist.py",
        description="Train the MNIST dense network with gradient accumulation and report test accuracy. "
                    "Each optimizer update averages the gradient over batch-size x accumulate-step samples.",
        epilog="Exit status: 0 on success, 1 when data, device or checkpoints fail, 2 for bad flags.")
    run = parser.add_argument_group("run")
    run.add_argument("--device-target", type=device_target, default="CPU", metavar="{CPU,GPU,Ascend}",
                     help="device MindSpore runs on (default %(default)s)")
    run.add_argument("--mode", type=one_of(*MODES), default="graph", metavar="{graph,pynative}",
                     help="graph: compile the train step, flush and evaluation once (fast); "
                          "pynative: run them op by op (slow, but print() and pdb work inside); default %(default)s")
    run.add_argument("--seed", type=non_negative_int, default=0, metavar="N",
                     help="seeds the initial weights; epoch e is shuffled with seed + e (default %(default)s)")
    run.add_argument("--window-step", action="store_true",
                     help="run each whole window (forward, backward and update of --accumulate-step "
                          "micro-batches) in one compiled call with an in-graph loop: less host overhead "
                          "per micro-step, same memory, same result")
    run.add_argument("--distributed", action="store_true",
                     help="data parallel under msrun: each rank trains on its shard, gradients are summed "
                          "across ranks once per window; only rank 0 prints and writes files")

    training = parser.add_argument_group("training")
    training.add_argument("--batch-size", type=positive_int, default=32, metavar="N",
                          help="samples per micro-batch, one forward/backward pass (default %(default)s)")
    training.add_argument("--accumulate-step", type=positive_int, default=2, metavar="N",
                          help="micro-batches summed per optimizer update; an epoch's last, shorter "
                               "window is applied too, weighted by its sample count (default %(default)s)")
    training.add_argument("--epochs", type=positive_int, default=3, metavar="N",
                          help="total epochs, with --resume including those already done (default %(default)s)")
    training.add_argument("--lr", type=positive_float, default=1e-2, help="learning rate (default %(default)s)")
    training.add_argument("--optimizer", type=one_of(*OPTIMIZERS), default="sgd", metavar="{sgd,momentum,adam}",
                          help=f"optimizer; momentum uses {MOMENTUM} (default %(default)s)")
    training.add_argument("--shuffle", action=argparse.BooleanOptionalAction, default=True,
                          help="visit the training samples in a new seeded order each epoch (default: shuffle)")
    training.add_argument("--drop-last", action="store_true",
                          help="drop each epoch's last micro-batch if it is smaller than --batch-size "
                               "(default: train on it)")

    data_group = parser.add_argument_group("data")
    data_group.add_argument("--data-dir", default=None, metavar="DIR",
                            help=f"folder with train/ and test/ idx files; MNIST is downloaded into it when "
                                 f"missing (default {DEFAULT_DATA_DIR}; with --synthetic a temporary folder)")
    data_group.add_argument("--synthetic", action="store_true",
                            help=f"no download: use a learnable MNIST look-alike "
                                 f"({SYNTHETIC_SIZES['train']} train / {SYNTHETIC_SIZES['test']} test samples), "
                                 "written into --data-dir unless it is already there")
    # Hidden: a mirror of the tutorial's zip, and the tests' way to simulate being offline.
    data_group.add_argument("--mnist-url", default=None, help=argparse.SUPPRESS)

    output = parser.add_argument_group("checkpoints and logs")
    output.add_argument("--ckpt-dir", default=None, metavar="DIR",
                        help="save network, optimizer and accumulator state after every epoch as "
                             "DIR/epoch_NNN.ckpt (default: no checkpoints)")
    output.add_argument("--resume", action="store_true",
                        help="continue from the newest checkpoint in --ckpt-dir with its next epoch, "
                             "exactly as if never stopped (starts afresh if there is none)")
    output.add_argument("--log-json", metavar="PATH", default=None,
                        help="write per-epoch records and the summary as JSON, updated after every epoch")
    output.add_argument("--plot", metavar="PATH", default=None,
                        help="write a PNG of training loss and test accuracy per epoch (needs matplotlib)")
    return parser


def parse_args(argv=None):
    """Parsed, checked flags; errors exit with status 2 and a usage line, as argparse does.

    Example:
        >>> args = parse_args(["--batch-size", "64", "--accumulate-step", "1"])
        >>> args.batch_size * args.accumulate_step
        64
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    args.rank, args.ranks = 0, 1  # configure_context reads the real ones under --distributed
    if args.resume and not args.ckpt_dir:
        parser.error("--resume needs --ckpt-dir")
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (checked here, so a long run does not fail at its end)
        except ImportError:
            parser.error("--plot needs matplotlib: pip install matplotlib (or pip install .[plot])")
    return args


# ---------------------------------------------------------------- setup

def configure_context(args):
    """Sets MindSpore's execution mode and device; raises TrainingError if the device is missing.

    Example:
        >>> configure_context(parse_args(["--mode", "pynative"]))
    """
    if not ms.hal.is_available(args.device_target):
        raise TrainingError(f"MindSpore {ms.__version__} cannot run on {args.device_target} here (not built "
                            f"for it, or its driver is missing); try --device-target CPU")
    # set_device (set_context(device_target=...) is deprecated in 2.10) refuses to run
    # once any kernel has run, even to repeat the current device: call it only to change.
    if args.device_target == "CPU":
        # MindSpore 2.10's asynchronous launch made graphs without control flow
        # (the evaluation step, the window step) 3-8x slower on a 2-core CPU and
        # never helped the accumulating step (scripts/benchmark.py measures both).
        # Read when the first graph runs, so setting it here still takes effect.
        os.environ.setdefault("MS_DEV_HOST_BLOCKING_RUN", "1")
    if ms.get_context("device_target") != args.device_target:
        ms.set_device(args.device_target)
    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)
    if args.distributed:
        if not communication.GlobalComm.INITED:
            try:
                communication.init()
            except RuntimeError as error:
                raise TrainingError(f"--distributed needs a launcher such as msrun ({error})") from None
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
        args.rank, args.ranks = communication.get_rank(), communication.get_group_size()


def _local_problem(data_dir):
    if not os.path.isdir(data_dir):
        return None
    try:
        validate_mnist_dir(data_dir)
    except MnistFormatError as error:
        return str(error)
    return None


def prepare_data(args, stack):
    """The folder holding ``train/`` and ``test/``, downloaded or written if needed.

    ``stack`` (a ``contextlib.ExitStack``) owns the temporary folder of
    ``--synthetic`` without ``--data-dir``. Raises ``MnistUnavailableError``
    or ``MnistFormatError`` with a message meant for the user.

    Example:
        >>> with contextlib.ExitStack() as stack:
        ...     folder = prepare_data(parse_args(["--synthetic"]), stack)
    """
    if not args.synthetic:
        data_dir = args.data_dir or DEFAULT_DATA_DIR
        local_problem = _local_problem(data_dir)
        try:
            return ensure_mnist(data_dir, url=args.mnist_url or data.mnist.MNIST_URL)
        except MnistUnavailableError as error:
            # The download message alone would hide why the files already there were not used.
            if local_problem:
                raise MnistUnavailableError(f"The MNIST files in {data_dir} are not usable: {local_problem}\n"
                                            f"{error}") from None
            raise
    folder = args.data_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix="mnist_synthetic_"))
    try:
        found = validate_mnist_dir(folder)
    except MnistFormatError:
        found = None
    if found == SYNTHETIC_SIZES:
        return folder  # written by an earlier --synthetic run: the same seed wrote the same bytes
    if found is not None:
        raise MnistFormatError(f"{folder} already holds an MNIST set ({found['train']} train / {found['test']} "
                               "test samples); --synthetic will not overwrite it: choose another --data-dir")
    write_synthetic_mnist(folder, n_train=SYNTHETIC_SIZES["train"], n_test=SYNTHETIC_SIZES["test"],
                          seed=SYNTHETIC_DATA_SEED)
    return folder


def make_optimizer(name, params, lr):
    """``sgd``, ``momentum`` or ``adam`` over ``params``.

    Example:
        >>> optimizer = make_optimizer("momentum", MnistDenseNet().trainable_params(), 0.01)
    """
    if name == "sgd":
        return nn.SGD(params, lr)
    if name == "momentum":
        return nn.Momentum(params, lr, MOMENTUM)
    if name == "adam":
        return nn.Adam(params, lr)
    raise ValueError(f"unknown optimizer {name!r}")


def _eager(function):
    return function


@dataclass
class Run:
    """Everything one training run holds: the objects and their (compiled) steps.

    ``train_step(images, labels) -> summed loss`` adds one micro-batch to
    the accumulator (which updates the weights when its window is full);
    ``flush() -> bool`` applies a partial window; ``eval_step(images,
    labels) -> (summed loss, correct count)``; ``window_step(micro_batches,
    counts) -> (summed losses, updated)`` is set with ``--window-step``.
    """
    net: nn.Cell
    optimizer: nn.Optimizer
    accumulator: Accumulator
    train_step: Callable
    flush: Callable
    eval_step: Callable
    window_step: Optional[Callable] = None


def build(args):
    """Network, optimizer, accumulator and their steps, jitted in graph mode.

    Weights start from ``args.seed``. The train step takes the gradient of
    the micro-batch's *summed* loss and passes its sample count, so the
    accumulator divides the window's sum by the samples it really held: a
    short last micro-batch weighs what its samples weigh, exactly as in one
    large batch. Under ``--distributed`` the window's sums and counts are
    added across ranks once per window. With ``--window-step``,
    ``window_step(micro_batches, counts)`` runs a whole window per call.

    Example:
        >>> run = build(parse_args([]))
        >>> loss_sum = run.train_step(images, labels)
    """
    ms.set_seed(args.seed)
    net = MnistDenseNet()
    optimizer = make_optimizer(args.optimizer, net.trainable_params(), args.lr)
    accumulator = Accumulator(optimizer, args.accumulate_step,
                              grad_reducer=WindowAllReduce() if args.distributed else None)
    loss_fn = mnist_loss("sum")

    def forward(images, labels):
        return loss_fn(net(images), labels)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    def train_step(images, labels):
        loss_sum, grads = grad_fn(images, labels)
        accumulator(grads, ms.Tensor(labels.shape[0], ms.float32))
        return loss_sum

    def flush():
        return accumulator.flush()

    # No net.set_train(False): the network has neither dropout nor batch norm.
    def eval_step(images, labels):
        logits = net(images)
        correct = (ops.argmax(logits, -1) == labels).astype(ms.int32).sum()
        return loss_fn(logits, labels), correct

    compile_ = ms.jit if args.mode == "graph" else _eager
    # make_window_step compiles its loop in either mode: a loop run op by op would gain nothing.
    window_step = make_window_step(grad_fn, accumulator) if args.window_step else None
    return Run(net, optimizer, accumulator, compile_(train_step), compile_(flush), compile_(eval_step),
               window_step)


# ---------------------------------------------------------------- one epoch

def train_epoch(run, train_dir, args, epoch, progress=True):
    """One epoch: every micro-batch accumulated, every window applied, the last partial one too.

    The samples are visited in the order seeded by ``args.seed + epoch``
    (which does not depend on the batch size), so a resumed run sees the
    same data as an uninterrupted one. Under ``--distributed`` each rank
    reads its own shard. Returns ``{"train_loss" (mean per sample),
    "samples" (over all ranks), "seconds"}``.

    Example:
        >>> stats = train_epoch(build(args), "MNIST_Data/train", args, epoch=1)
        >>> stats["train_loss"] < 2.3
        True
    """
    shard = {"num_shards": args.ranks, "shard_id": args.rank} if args.distributed else {}
    options = dict(shuffle=args.shuffle, seed=args.seed + epoch, drop_remainder=args.drop_last, **shard)
    n = -(-validate_split(train_dir, "train") // args.ranks)
    total = n - n % args.batch_size if args.drop_last else n
    loss_sum, samples = 0.0, 0
    started = time.perf_counter()
    with tqdm(total=total, desc=f"epoch {epoch}/{args.epochs}", unit="sample", unit_scale=True,
              leave=False, disable=not progress, dynamic_ncols=True) as bar:
        for window in _train_windows(run, train_dir, args, options):
            window_loss, window_samples = window
            # Reading the loss waits for the device; once per window keeps the queue full.
            loss_sum += float(window_loss.asnumpy())
            samples += window_samples
            bar.set_postfix(loss=f"{loss_sum / samples:.4f}", refresh=False)
            bar.update(window_samples)
        run.flush()
    seconds = time.perf_counter() - started
    return {"train_loss": loss_sum / max(samples, 1), "samples": samples * args.ranks, "seconds": seconds}


def _train_windows(run, train_dir, args, options):
    """Trains window by window, yielding each window's (summed loss Tensor, samples)."""
    if run.window_step is not None:
        for window in mnist_windows(train_dir, args.batch_size, args.accumulate_step, **options):
            counts = [labels.shape[0] for _, labels in window]
            losses, _ = run.window_step(window, counts=counts)
            yield losses.sum(), sum(counts)
        return
    dataset = mnist_dataset(train_dir, args.batch_size, **options)
    window_loss, window_samples = 0.0, 0
    for index, (images, labels) in enumerate(dataset.create_tuple_iterator(num_epochs=1), start=1):
        window_loss = window_loss + run.train_step(images, labels)
        window_samples += labels.shape[0]
        if index % args.accumulate_step == 0:
            yield window_loss, window_samples
            window_loss, window_samples = 0.0, 0
    if window_samples:
        yield window_loss, window_samples


def evaluate(run, test_dir):
    """Test accuracy (argmax of the logits against the label) and mean loss per sample.

    Example:
        >>> evaluate(run, "MNIST_Data/test")
        {'test_accuracy': 0.9231, 'test_loss': 0.27}
    """
    loss_sum, correct, samples = 0.0, 0, 0
    for images, labels in mnist_dataset(test_dir, EVAL_BATCH_SIZE).create_tuple_iterator(num_epochs=1):
        batch_loss, batch_correct = run.eval_step(images, labels)
        loss_sum += float(batch_loss.asnumpy())
        correct += int(batch_correct.asnumpy())
        samples += labels.shape[0]
    return {"test_accuracy": correct / samples, "test_loss": loss_sum / samples}


# ---------------------------------------------------------------- checkpoints

def _config(args):
    return {name: getattr(args, name) for name in RESUME_CONFIG}


def checkpoint_path(ckpt_dir, epoch):
    """Where the checkpoint taken after ``epoch`` goes.

    Example:
        >>> checkpoint_path("runs/a", 3)
        'runs/a/epoch_003.ckpt'
    """
    return os.path.join(ckpt_dir, f"epoch_{epoch:03d}.ckpt")


def find_checkpoints(ckpt_dir):
    """The ``epoch_NNN.ckpt`` files in ``ckpt_dir``, newest epoch first.

    Example:
        >>> find_checkpoints("runs/a")
        ['runs/a/epoch_002.ckpt', 'runs/a/epoch_001.ckpt']
    """
    if not os.path.isdir(ckpt_dir):
        return []
    found = [(int(match.group(1)), name) for name in os.listdir(ckpt_dir)
             if (match := CHECKPOINT_NAME.match(name))]
    return [os.path.join(ckpt_dir, name) for _, name in sorted(found, reverse=True)]


def save_epoch_checkpoint(run, args, epoch, history):
    """Writes ``epoch_NNN.ckpt`` atomically: a failed write leaves older checkpoints as they were.

    Holds the network, optimizer and accumulator state, the epoch, the
    flags a resume must share (seed included: it fixes every later
    epoch's shuffle) and the history of per-epoch records.

    Example:
        >>> save_epoch_checkpoint(run, args, 1, [{"epoch": 1, "test_accuracy": 0.9}])
        'runs/a/epoch_001.ckpt'
    """
    path = checkpoint_path(args.ckpt_dir, epoch)
    extra = {"epoch": epoch, "config": json.dumps(_config(args)), "history": json.dumps(history)}
    try:
        save_checkpoint(path, run.net, run.optimizer, run.accumulator, extra=extra)
    except OSError as error:
        previous = f"; {os.path.basename(checkpoint_path(args.ckpt_dir, epoch - 1))} is intact" if epoch > 1 else ""
        raise TrainingError(f"could not write checkpoint {path}: {error}{previous}") from error
    return path


def _quiet(*_):
    pass


def resume(run, args, say=print):
    """Loads the newest readable checkpoint of ``args.ckpt_dir`` into ``run``.

    Returns ``(epochs_done, history)``, ``(0, [])`` when there is none.
    Unreadable files are skipped with a warning; a checkpoint from other
    flags raises ``TrainingError`` rather than resume inexactly.

    Example:
        >>> done, history = resume(run, args)
    """
    for path in find_checkpoints(args.ckpt_dir):
        try:
            extra = load_checkpoint(path, run.net, run.optimizer, run.accumulator)
        except CheckpointMismatchError as error:
            raise TrainingError(f"cannot resume: {error}") from error
        except (ValueError, RuntimeError, OSError) as error:
            print(f"warning: skipping unreadable checkpoint {path}: {error}", file=sys.stderr)
            continue
        saved = json.loads(extra["config"])
        changed = [f"--{name.replace('_', '-')} was {saved[name]!r}, now {value!r}"
                   for name, value in _config(args).items() if saved.get(name) != value]
        if changed:
            raise TrainingError(f"cannot resume exactly from {path}: " + "; ".join(changed)
                                + ". Pass the same flags, or another --ckpt-dir.")
        say(f"resumed from {path} (epoch {extra['epoch']})")
        return int(extra["epoch"]), json.loads(extra["history"])
    say(f"no checkpoint in {args.ckpt_dir}: starting from epoch 1")
    return 0, []


# ---------------------------------------------------------------- logs

def _replace_atomically(path, write):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    os.close(fd)
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def write_json_log(path, args, history, summary=None):
    """``{"config", "epochs": [records], "summary"}`` to ``path`` (summary None until the end).

    Example:
        >>> write_json_log("run.json", args, history)
    """
    content = {"config": {**_config(args), "device_target": args.device_target, "mode": args.mode},
               "epochs": history, "summary": summary}

    def write(temporary):
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(content, f, indent=2)

    _replace_atomically(path, write)


def write_plot(path, history):
    """A PNG of training loss and test accuracy per epoch.

    Example:
        >>> write_plot("run.png", history)
    """
    import matplotlib
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    epochs = [record["epoch"] for record in history]
    figure, (loss_axes, accuracy_axes) = plt.subplots(1, 2, figsize=(9, 3.5))
    loss_axes.plot(epochs, [record["train_loss"] for record in history], "o-", label="train")
    loss_axes.plot(epochs, [record["test_loss"] for record in history], "s--", label="test")
    loss_axes.set(xlabel="epoch", ylabel="loss per sample", title="Loss")
    loss_axes.legend()
    accuracy_axes.plot(epochs, [100 * record["test_accuracy"] for record in history], "o-")
    accuracy_axes.set(xlabel="epoch", ylabel="%", title="Test accuracy")
    for axes in (loss_axes, accuracy_axes):
        axes.xaxis.get_major_locator().set_params(integer=True)
    figure.tight_layout()
    _replace_atomically(path, lambda temporary: figure.savefig(temporary, format="png", dpi=100))
    plt.close(figure)


# ---------------------------------------------------------------- the run

def effective_batch_size(args):
    """Samples per optimizer update: micro-batch x accumulate-step x ranks.

    Example:
        >>> effective_batch_size(parse_args([]))
        64
    """
    return args.batch_size * args.accumulate_step * args.ranks


def summarize(args, history, run):
    """The end-of-run summary: best and final accuracy, throughput, effective batch.

    Example:
        >>> summarize(args, history, run)["effective_batch_size"]
        64
    """
    best = max(history, key=lambda record: record["test_accuracy"])
    final = history[-1]
    seconds = sum(record["seconds"] for record in history)
    return {
        "epochs": final["epoch"],
        "best_accuracy": best["test_accuracy"],
        "best_epoch": best["epoch"],
        "final_accuracy": final["test_accuracy"],
        "final_test_loss": final["test_loss"],
        "final_train_loss": final["train_loss"],
        "samples_per_second": sum(record["samples"] for record in history) / seconds if seconds else 0.0,
        "train_seconds": seconds,
        "batch_size": args.batch_size,
        "accumulate_step": args.accumulate_step,
        "effective_batch_size": effective_batch_size(args),
        "updates": run.accumulator.updates,
        "skipped_windows": run.accumulator.skipped_windows,
    }


def train(args, data_dir, progress=True):
    """Trains ``args.epochs`` epochs on ``data_dir``; returns ``(summary, run)``.

    Evaluates after every epoch and writes the checkpoint and logs the
    flags ask for. ``run`` holds the trained network, for callers that
    want the weights.

    Example:
        >>> summary, run = train(parse_args(["--epochs", "1"]), "MNIST_Data")
        >>> summary["final_accuracy"] > 0.8
        True
    """
    configure_context(args)
    train_dir, test_dir = os.path.join(data_dir, "train"), os.path.join(data_dir, "test")
    sizes = validate_mnist_dir(data_dir)
    # Under --distributed every rank trains; only rank 0 talks and writes files.
    main_rank = args.rank == 0
    say = print if main_rank else _quiet
    ranks = f" x {args.ranks} ranks" if args.distributed else ""
    say(f"MNIST from {data_dir}: {sizes['train']} train / {sizes['test']} test samples; "
        f"batch {args.batch_size} x {args.accumulate_step}{ranks} = effective {effective_batch_size(args)}; "
        f"{args.optimizer} lr {args.lr:g}; {args.mode} mode on {args.device_target}"
        + ("; one compiled call per window" if args.window_step else ""))
    run = build(args)
    done, history = resume(run, args, say) if args.resume else (0, [])
    for epoch in range(done + 1, args.epochs + 1):
        record = {"epoch": epoch, **train_epoch(run, train_dir, args, epoch, progress and main_rank)}
        evaluated = time.perf_counter()
        record.update(evaluate(run, test_dir))
        record["eval_seconds"] = time.perf_counter() - evaluated
        record["samples_per_second"] = record["samples"] / record["seconds"]
        history.append(record)
        say(f"epoch {epoch}/{args.epochs}: train loss {record['train_loss']:.4f}, "
            f"test accuracy {record['test_accuracy']:.2%}, test loss {record['test_loss']:.4f}, "
            f"{record['samples_per_second']:,.0f} samples/s, {record['seconds']:.1f} s")
        if args.ckpt_dir and main_rank:
            save_epoch_checkpoint(run, args, epoch, history)
        if args.log_json and main_rank:
            write_json_log(args.log_json, args, history)
        if args.plot and main_rank:
            write_plot(args.plot, history)
    if done >= args.epochs:
        say(f"the checkpoint already holds {done} epochs (--epochs {args.epochs}): nothing to train")
    summary = summarize(args, history, run)
    if args.log_json and main_rank:
        write_json_log(args.log_json, args, history, summary)
    say(f"best test accuracy {summary['best_accuracy']:.2%} (epoch {summary['best_epoch']}), "
        f"final {summary['final_accuracy']:.2%}; {summary['samples_per_second']:,.0f} samples/s; "
        f"effective batch {summary['effective_batch_size']} ({args.batch_size} x {args.accumulate_step}{ranks}), "
        f"{summary['updates']} updates")
    return summary, run


def main(argv=None):
    """Command-line entry point; returns the summary dict.

    Failures the user can fix (no network, bad files, missing device,
    unusable checkpoints) print a short message to stderr and exit 1.

    Example:
        >>> main(["--synthetic", "--epochs", "2", "--log-json", "run.json"])["best_accuracy"] > 0.9
        True
    """
    args = parse_args(argv)
    try:
        configure_context(args)  # before prepare_data: a missing device should not wait for a download
        with contextlib.ExitStack() as stack:
            data_dir = prepare_data(args, stack)
            summary, _ = train(args, data_dir)
    except (MnistUnavailableError, MnistFormatError, TrainingError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        hint = " (resume with --resume)" if args.ckpt_dir else ""
        print(f"interrupted{hint}", file=sys.stderr)
        raise SystemExit(130) from None
    return summary


if __name__ == "__main__":
    main()
