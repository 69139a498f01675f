"""The training run: build the network and its steps, train epoch by epoch, evaluate.

``train`` is the whole run; ``build_run``, ``train_epoch`` and ``evaluate``
are its parts, for callers that drive their own loop. What is trained comes
from a ``training.task.Task``; checkpoints and records have their own modules.
"""
import contextlib
import ctypes
import ctypes.util
import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Callable, Optional

import mindspore as ms
from mindspore import nn, ops
from tqdm import tqdm

from accumulator import Accumulator, WindowAllReduce, check_equivalence, make_window_step, training_state
from accumulator.batch_size import CriticalBatchSchedule, NoiseScaleSchedule, ScaleRule, restore_state, snapshot_state
from accumulator.policies import EMA
from data.windows import window_slices
from training.checkpoints import clear_checkpoints, resume, save_epoch_checkpoint
from training.config import AUTO, FEW_TENSORS, NOISE, NOISE_STEPS, WINDOW_STEP
from training.errors import TrainingError
from training.interrupts import deferred, finishing
from training.optimizers import make_lr_scheduler, make_optimizer
from training.probe import held_out_loss, measured_schedule, train_probing
from training.ranks import rank_sizes, rank_steps, run_steps, whole_on_every_rank
from training.records import summarize, write_json_log, write_plot
from training.task import count_rows

_END = object()  # what _marking_last draws past the last window

# Evaluation holds no gradients, so it can take much larger batches than training.
EVAL_BATCH_SIZE = 1000


@dataclass
class Run:
    """Everything one training run holds: the objects and their (compiled) steps.

    ``driver`` is how windows are driven (``training.config.DRIVERS``, never
    ``"auto"``: ``choose_driver``'s pick). ``train_step(inputs, labels, count)
    -> summed loss`` adds one micro-batch and its count (a float32 Tensor,
    ``Task.count``) to the accumulator and updates the weights when its
    window is full: in graph mode the Cell ``compiled_step``, an
    ``InGraphStep`` whose accumulator applies the window in the same graph
    (driver ``"in-graph"``), or a ``MicroStep`` that only adds while
    ``Accumulator.step()`` applies full windows from the host (``"host"``
    and ``"window"``); ``flush() -> bool`` applies a partial window (in graph
    mode by a compiled call); ``compile_window()`` compiles the calls that
    apply windows without running them (None in PyNative mode); ``eval_step(inputs,
    labels) -> (summed loss, correct count)``; ``window_step(micro_batches,
    counts) -> (summed loss, updated)`` is set when the config asks for it;
    ``grad_fn(inputs, labels) -> (summed loss, grads)`` is the step's
    gradient, uncompiled (for ``check_equivalence``); ``eager_step`` is
    ``train_step`` uncompiled, for shapes an epoch meets once (see
    ``train_on_windows``; under ``distributed`` it only adds: a compiled
    flush applies the window); ``lr_scheduler``
    is an ``experimental.optim`` optimizer's schedule, stepped once per
    update (``training.optimizers.make_lr_scheduler``), or None;
    ``scale_rule`` the ``ScaleRule`` that makes the optimizer follow N, or None;
    ``critical`` the ``CriticalBatchSchedule`` of ``--accumulate-step auto``, or None.

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> run = build_run(TrainConfig(mode="pynative"), toy_task())
        >>> run.driver, run.window_step is None
        ('in-graph', True)
    """
    driver: str
    net: nn.Cell
    optimizer: nn.Cell
    accumulator: Accumulator
    train_step: Callable
    flush: Callable
    eval_step: Callable
    grad_fn: Callable
    window_step: Optional[Callable] = None
    eager_step: Optional[Callable] = None
    lr_scheduler: Optional[object] = None
    compiled_step: Optional[nn.Cell] = None
    compile_window: Optional[Callable] = None
    scale_rule: Optional[ScaleRule] = None
    critical: Optional[CriticalBatchSchedule] = None


class MicroStep(nn.Cell):
    """The host driver's step: a micro-batch's gradient added to the window, never applied: ``(inputs, labels, count, last)``.

    No window's ``if`` in its graph, which would cost every call;
    ``Accumulator.step()`` applies full windows from the host
    (docs/performance.md#which-driver). ``last`` is ``accumulate``'s:
    None, or with ``track_noise=True`` a bool Tensor (``_last``). A Cell, so
    ``compile`` compiles it without running it.

    Example:
        >>> import numpy as np
        >>> from mindspore import Tensor
        >>> net = nn.Dense(3, 1)
        >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=2)
        >>> def make_step(net, accumulator):           # a closure: the graph reads net from it
        ...     def forward(x, y):
        ...         return ((net(x) - y) ** 2).sum()
        ...     return MicroStep(ms.value_and_grad(forward, None, accumulator.optimizer.parameters), accumulator)
        >>> step = make_step(net, accumulator)
        >>> x, y = Tensor(np.ones((4, 3), np.float32)), Tensor(np.zeros((4, 1), np.float32))
        >>> step.compile(x, y, Tensor(4.0), None)
        >>> int(accumulator.micro_step)          # compiled, not run
        0
        >>> _ = step(x, y, Tensor(4.0), None)
        >>> int(accumulator.micro_step), bool(accumulator.step()), int(accumulator.update_count)
        (1, False, 0)
    """

    def __init__(self, grad_fn, accumulator):
        super().__init__(auto_prefix=False)
        self.grad_fn = grad_fn
        self.accumulator = accumulator

    def construct(self, inputs, labels, count, last):
        loss_sum, grads = self.grad_fn(inputs, labels)
        self.accumulator.accumulate(grads, count, last)
        return loss_sum


class InGraphStep(nn.Cell):
    """The in-graph driver's step: a micro-batch's gradient added, its window applied when full: ``(inputs, labels, count)``.

    Example:
        >>> import numpy as np
        >>> from mindspore import Tensor
        >>> net = nn.Dense(3, 1)
        >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), accumulate_step=2)
        >>> def make_step(net, accumulator):
        ...     def forward(x, y):
        ...         return ((net(x) - y) ** 2).sum()
        ...     return InGraphStep(ms.value_and_grad(forward, None, accumulator.optimizer.parameters), accumulator)
        >>> step = make_step(net, accumulator)
        >>> x, y = Tensor(np.ones((4, 3), np.float32)), Tensor(np.zeros((4, 1), np.float32))
        >>> _ = [step(x, y, Tensor(4.0)) for _ in range(3)]
        >>> int(accumulator.update_count), int(accumulator.micro_step)
        (1, 1)
    """

    def __init__(self, grad_fn, accumulator):
        super().__init__(auto_prefix=False)
        self.grad_fn = grad_fn
        self.accumulator = accumulator

    def construct(self, inputs, labels, count):
        loss_sum, grads = self.grad_fn(inputs, labels)
        self.accumulator(grads, count)
        return loss_sum


class _Flush(nn.Cell):
    """``Accumulator.flush`` as a Cell: compiled ahead like the steps (``compile_train_step``)."""

    def __init__(self, accumulator):
        super().__init__(auto_prefix=False)
        self.accumulator = accumulator

    def construct(self):
        return self.accumulator.flush()


def choose_driver(config, optimizer):
    """How ``config``'s run drives its windows: ``config.driver``, or for ``"auto"`` the fastest for the net.

    ``"auto"`` is ``"window"`` at a fixed N, and for the measured window
    (``--accumulate-step auto``: N set on the host between windows, one
    graph for every N): in one process a window ending in a smaller
    micro-batch (``last_micro_batch``) is one compiled call still; across
    ranks every rank's part must be whole micro-batches
    (``training.ranks.whole_on_every_rank``). While the noise scale changes N
    in the graph (the host would wait for it to stack a window), or a rank's
    part is uneven, ``"in-graph"`` for an optimizer of at most
    ``FEW_TENSORS`` parameter tensors and ``"host"`` above. With a
    ``memory_budget`` memory comes first: ``"host"``, the leanest driver on both
    tools (BENCHMARKS.md#peak-memory-each-driver-on-both-tools). PyNative mode
    runs op by op, where only the in-graph call adds and applies in one
    step (docs/performance.md#which-driver).

    Example:
        >>> from training.config import TrainConfig
        >>> small, large = nn.Dense(3, 1), nn.SequentialCell([nn.Dense(3, 3) for _ in range(8)])
        >>> [choose_driver(TrainConfig(), nn.SGD(n.trainable_params(), 0.1)) for n in (small, large)]
        ['window', 'window']
        >>> [choose_driver(TrainConfig(accumulate_step=step), nn.SGD(small.trainable_params(), 0.1))
        ...  for step in ("auto", "noise")]
        ['window', 'in-graph']
        >>> choose_driver(TrainConfig(accumulate_step="noise"), nn.SGD(large.trainable_params(), 0.1))
        'host'
        >>> choose_driver(TrainConfig(batch_size=8, accumulate_step=3, last_micro_batch=4),
        ...               nn.SGD(small.trainable_params(), 0.1))
        'window'
        >>> choose_driver(TrainConfig(accumulate_step=1, micro_batch="auto", memory_budget=2**30),
        ...               nn.SGD(small.trainable_params(), 0.1))
        'host'
    """
    if config.driver != "auto":
        return config.driver
    if config.mode != "graph":
        return "in-graph"
    if config.memory_budget is not None:
        return "host"
    if config.accumulate_step != NOISE and (not config.distributed or whole_on_every_rank(config)):
        return WINDOW_STEP
    return "in-graph" if len(optimizer.parameters) <= FEW_TENSORS else "host"


def build_run(config, task):
    """Network, optimizer, accumulator and their steps, jitted in graph mode.

    Weights start from ``config.seed``. The train step takes the gradient
    of the micro-batch's *summed* loss and passes its count (``Task.count``:
    samples, or a language model's tokens), so the accumulator divides the
    window's sum by what it really held: a short last micro-batch weighs
    what its samples weigh, exactly as in one large batch. Under ``distributed`` the window's sums and counts are
    added across ranks once per window.

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> run = build_run(TrainConfig(mode="pynative", accumulate_step=2), toy_task())
        >>> images, labels = next(iter(toy_task().test_batches(4)))
        >>> float(run.train_step(images, labels, ms.Tensor(4.0))) > 0, int(run.accumulator.micro_step)
        (True, 1)
    """
    ms.set_seed(config.seed)
    net = task.make_net()
    lr = config.lr if task.learning_rate is None else task.learning_rate(config)
    optimizer = make_optimizer(config.optimizer, net.trainable_params(), lr)
    accumulate_step = critical = measured_schedule(config) if config.accumulate_step == AUTO else None
    if config.accumulate_step == NOISE:
        accumulate_step = NoiseScaleSchedule(config.batch_size, *NOISE_STEPS, ranks=config.ranks,
                                             update_cost=config.update_cost)
    accumulator = Accumulator(optimizer, accumulate_step or rank_steps(config), clip_norm=config.clip_norm,
                              track_noise=config.tracks_noise,
                              grad_reducer=WindowAllReduce() if config.distributed else None,
                              policies=[] if config.ema is None else [EMA(optimizer.parameters, config.ema)])
    if critical is not None:
        critical.bind(accumulator)
    scale_rule = None
    if config.scale_rule != "none":
        try:  # --lr is tuned for one micro-batch: κ = N
            scale_rule = ScaleRule(accumulator, config.scale_rule, tuned_step=1)
        except ValueError as error:
            raise TrainingError(f"--scale-rule {config.scale_rule} with --optimizer {config.optimizer}: {error}") \
                from None
    lr_scheduler = make_lr_scheduler(optimizer, lr, scale_rule)
    loss_fn = task.make_loss()

    def forward(inputs, labels):
        return loss_fn(net(inputs), labels)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    def train_step(inputs, labels, count):
        loss_sum, grads = grad_fn(inputs, labels)
        accumulator(grads, count)
        return loss_sum

    def add_step(inputs, labels, count):
        loss_sum, grads = grad_fn(inputs, labels)
        accumulator.accumulate(grads, count)
        return loss_sum

    def flush():
        return accumulator.flush()

    # No net.set_train(False): the networks trained here have neither dropout nor batch norm.
    def eval_step(inputs, labels):
        logits = net(inputs)
        return loss_fn(logits, labels), task.correct(logits, labels)

    driver = choose_driver(config, optimizer)
    # make_window_step compiles its loop in either mode: a loop run op by op would gain nothing.
    window_step = finishing(make_window_step(grad_fn, accumulator)) if driver == WINDOW_STEP else None
    parts = dict(driver=driver, net=net, optimizer=optimizer, accumulator=accumulator, grad_fn=grad_fn,
                 window_step=window_step, eager_step=add_step if config.distributed else train_step,
                 lr_scheduler=lr_scheduler, scale_rule=scale_rule,
                 critical=critical)
    if config.mode != "graph":
        return Run(train_step=train_step, flush=flush, eval_step=eval_step, **parts)
    # Signals wait for the end of a compiled call: one during the compile would log a long MindSpore error.
    eval_step = finishing(ms.jit(eval_step))
    if driver == "in-graph":
        step, flush = InGraphStep(grad_fn, accumulator), _Flush(accumulator)
        return Run(train_step=finishing(step), flush=finishing(flush), eval_step=eval_step,
                   compiled_step=step, compile_window=flush.compile, **parts)
    step = MicroStep(grad_fn, accumulator)
    return Run(train_step=finishing(_applied_on_the_host(step, accumulator)),
               flush=finishing(functools.partial(accumulator.step, flush=True)), eval_step=eval_step,
               compiled_step=step, compile_window=accumulator.host.compile, **parts)


def _last(accumulator):
    """``accumulate``'s ``last`` for the next micro-batch: None, or a bool Tensor from ``step()``'s count on the host.

    Only a policy that samples the window's last micro-batch needs it. A
    Tensor makes that sample a small branch in the graph where Python bools
    would compile a second graph
    (docs/mindspore-behaviours.md#a-branch-on-a-bool-tensor-input-can-cost-less-than-a-second-graph).
    The count is the host's, not read from the device: a micro-step waits for none.
    """
    if not accumulator.samples_last:
        return None
    return ms.Tensor(accumulator.next_ends_window())


def _applied_on_the_host(step, accumulator):
    """``train_step`` from ``step``, which only accumulates: ``Accumulator.step()`` applies full windows."""
    def train_step(inputs, labels, count):
        loss_sum = step(inputs, labels, count, _last(accumulator))
        accumulator.step()
        return loss_sum
    return train_step


def compile_train_step(run, task, config, epoch):
    """Compiles ``run.compiled_step`` for epoch ``epoch``'s micro-batches, and ``Accumulator.step()``'s window update, without running them; returns the seconds taken.

    The weights, the accumulator's buffers and counters stay as they were:
    the graphs are compiled (``Cell.compile``, ``Accumulator.host.compile``),
    not run on data. Returns None in PyNative mode, where nothing compiles
    ahead. The micro-step compiles for each size every window repeats
    (``batch_size``, and ``last_micro_batch`` when the window ends in a
    smaller one), as the first window holds them. The ``window_step``, a
    jitted function, compiles only by running: the first window trains
    once and the state is put back exactly (``snapshot_state``,
    ``restore_state``), so its compile is not in the first epoch's seconds.
    A micro-batch of another size (it runs op by op) compiles nothing.

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> run = build_run(TrainConfig(batch_size=4), toy_task())
        >>> compile_train_step(run, toy_task(), TrainConfig(batch_size=4), epoch=1) > 0, int(run.accumulator.micro_step)
        (True, 0)
    """
    if run.compile_window is None:
        return None
    started = time.perf_counter()
    with deferred():
        run.compile_window()
        window = next(iter(epoch_windows(config, task, epoch)))
        sizes = set(rank_sizes(config))
        # One micro-batch of each size the windows repeat: a Cell keeps a graph per input shape.
        repeated = {labels.shape[0]: (inputs, labels) for inputs, labels in window if labels.shape[0] in sizes}
        for inputs, labels in repeated.values() if run.window_step is None else ():
            count = ms.Tensor(task.count(labels), ms.float32)
            extra = () if run.driver == "in-graph" else (_last(run.accumulator),)
            run.compiled_step.compile(inputs, labels, count, *extra)
        # A jitted function compiles only by running: the first window trains, the state goes back as after a probe
        # (docs/mindspore-behaviours.md#a-cell-compiles-without-running-a-jitted-function-cannot).
        if run.window_step is not None:
            state = training_state(run.net, run.optimizer, run.accumulator, lr_scheduler=run.lr_scheduler)
            saved = snapshot_state(state)
            _train_window(run, window, sizes, rank_steps(config), [task.count(labels) for _, labels in window])
            restore_state(state, saved)
            run.accumulator.host.sync_position()
    return time.perf_counter() - started


def return_freed_memory():
    """Hands the memory a compile freed back to the system (glibc's ``malloc_trim``); True when it could.

    MindSpore compiles on threads whose malloc arenas keep what the compile freed, and later graphs do not reuse
    it (docs/performance.md#a-compile-leaves-freed-memory-in-mallocs-arenas).

    Example:
        >>> return_freed_memory() in (True, False)
        True
    """
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    return bool(trim is not None and trim(0) is not None)


@contextlib.contextmanager
def _op_by_op():
    """Runs the calls inside in PyNative mode, op by op, then puts the mode back."""
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        yield
    finally:
        ms.set_context(mode=mode)


def train_on_windows(run, windows, sizes, accumulate_step, count=count_rows):
    """Trains windows of micro-batches, yielding each window's (summed loss, counted, samples); flushes at the end.

    ``count`` is ``Task.count``: each micro-batch's count goes to the
    accumulator with its gradient and into ``counted``; ``samples`` are rows.
    ``sizes``: the micro-batch sizes a whole window holds (``training.ranks.rank_sizes``), run compiled.

    Whole windows (``accumulate_step`` micro-batches of ``sizes``) go
    through the compiled steps: the window step when the run has one, with
    the micro-batches as the window stacks them (``data.mnist.Window``), or
    ``train_step`` per micro-batch; so does each uneven window's smaller last
    micro-batch of ``last_micro_batch`` (a second shape each driver
    compiles once; the window step takes such a window in one call). What an epoch meets once, its short last
    micro-batch or short last window, runs op by op (``eager_step``, in
    PyNative mode): each new shape would compile a graph for one call an
    epoch, which costs far more than running it op by op
    (docs/mnist-tool.md#flags). A partial last window is applied by
    ``run.flush``: in graph mode the compiled call that applies full
    windows, which takes no input and so no new shape. The arithmetic is
    the same either way. Losses are added on the host: adding Tensors would
    run a MindSpore op per micro-batch outside the compiled step.

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> run = build_run(TrainConfig(mode="pynative", batch_size=3, accumulate_step=2), toy_task())
        >>> windows = toy_task().train_windows(3, 2, shuffle=False, seed=0, drop_remainder=False,
        ...                                    num_shards=None, shard_id=None)  # [3, 3], [2]
        >>> [samples for _, _, samples in train_on_windows(run, windows, {3}, 2)], int(run.accumulator.update_count)
        ([6, 2], 2)
    """
    fixed = run.critical is None and run.accumulator.schedule.fixed_step is not None
    reduced = run.accumulator.grad_reducer is not None
    # While N changes in the graph, the epoch's last window may give the ranks unequal numbers of micro-batches.
    together = reduced and not fixed and run.critical is None
    window = None
    for window, last in _marking_last(windows) if together else ((window, False) for window in windows):
        counts = [count(labels) for _, labels in window]
        if together and last:
            loss_sum, held = _train_last_window(run, window, sizes, counts)
            if held:  # as many on every rank: each applies what is left, some rank's micro-batches
                run.flush()
        else:
            loss_sum = _train_window(run, window, sizes, accumulate_step, counts)
        # Every rank applies each window once, in a compiled call: a rank with fewer micro-batches, or none, or whose
        # window ran op by op (its AllReduce would not meet the others', docs/devices.md), by a flush.
        if fixed and (len(window) < accumulate_step or reduced and int(run.accumulator.micro_step)):
            run.flush()
        _follow_updates(run)
        # A Window knows its samples (a padded one holds rows that are none); a plain list has one per row.
        samples = getattr(window, "samples", None)
        yield loss_sum, sum(counts), sum(labels.shape[0] for _, labels in window) if samples is None else samples
    # While N changes, only a partial last window needs the flush, on every rank (a rank whose last window is empty
    # too): an empty one on every rank would not change a thing.
    if not fixed and not together and (int(run.accumulator.micro_step) or window == []):
        run.flush()
        _follow_updates(run)


def _marking_last(windows):
    """Each of ``windows`` with whether it is the last (the next is drawn before it is trained)."""
    iterator = iter(windows)
    window = next(iterator, _END)
    for following in iterator:
        yield window, False
        window = following
    if window is not _END:
        yield window, True


def _train_last_window(run, window, sizes, counts):
    """The epoch's last window on every rank while N changes: each applies where the rank of most micro-batches does.

    Ranks share it by position, so one may hold a micro-batch more (of one
    row) than another, or a short one run op by op that only adds. Each
    counts the most micro-batches any rank holds; where that count reaches
    N, a rank whose compiled step did not apply (it lacks the micro-batch,
    or only added it) applies by a flush, whose AllReduce meets the others'
    (docs/devices.md#the-batch-is-the-runs). Returns the window's summed
    loss and how many micro-batches of the next window every rank counts.
    """
    lengths = ops.AllGather()(ms.Tensor([len(window)], ms.int32)).asnumpy()
    held, step = int(run.accumulator.micro_step), int(run.accumulator.accumulate_step)
    loss_sum = 0.0
    for index in range(int(lengths.max())):
        compiled = index < len(window) and window[index][1].shape[0] in sizes
        if index < len(window):
            loss_sum += _train_window(run, window[index:index + 1], sizes, 1, counts[index:index + 1])
        held += 1
        if held == step:
            if not compiled:
                run.flush()
            _follow_updates(run)  # before the rest is applied, as in a window of its own
            held, step = 0, int(run.accumulator.accumulate_step)
    return loss_sum, held


def _train_window(run, window, sizes, accumulate_step, counts):
    """One window's micro-batches through ``run``'s steps (see ``train_on_windows``); returns its summed loss.

    ``sizes``: the micro-batch sizes compiled (``_compiled_sizes``); one size, the window step's.
    The measured window's step takes any number of micro-batches up to N in one graph, an epoch's short last window too.
    """
    fits = len(window) == accumulate_step or (run.critical is not None and len(window) < accumulate_step)
    whole = fits and all(labels.shape[0] in sizes for _, labels in window)
    if run.window_step is not None and whole:
        stacked = getattr(window, "stacked", None)
        loss_sum, _ = run.window_step(*(stacked if stacked is not None else (window,)), counts=counts)
        return float(loss_sum.asnumpy())
    losses = []
    for (inputs, labels), micro_count in zip(window, counts):
        micro_count = ms.Tensor(micro_count, ms.float32)
        if run.window_step is None and labels.shape[0] in sizes:
            losses.append(run.train_step(inputs, labels, micro_count))
        else:
            with _op_by_op():
                losses.append(run.eager_step(inputs, labels, micro_count))
            # Added, and maybe applied, outside Accumulator.step(): its count of the window is read back.
            run.accumulator.host.sync_position()
    return sum(float(loss.asnumpy()) for loss in losses)


def _follow_updates(run):
    """Steps ``run.lr_scheduler``, if any, to the updates applied so far, or to the scale rule's ``progress``.

    ``progress`` counts updates, or under AdaScale the sum of their gains:
    the schedule advances by the gain (docs/scale-rules.md#with-a-learning-rate-scheduler).
    """
    if run.lr_scheduler is None:
        return
    position = run.accumulator.update_count if run.scale_rule is None else run.scale_rule.progress
    while int(run.lr_scheduler.last_epoch) < int(position):
        run.lr_scheduler.step()


def train_epoch(run, task, config, epoch, progress=True, seen=0):
    """One epoch: every micro-batch accumulated, every window applied, the last partial one too.

    The samples are visited in the order seeded by ``config.seed + epoch``
    (which does not depend on the batch size), so a resumed run sees the
    same data as an uninterrupted one. Under ``distributed`` each rank
    reads its part of each window. Returns ``{"train_loss" (mean per
    ``Task.count``), "samples", "counted" (the ``Task.count`` total),
    "seconds"}``, the first three over all ranks (added once, at the
    epoch's end), and with ``run.critical`` "probes": the window's probes
    in the epoch (``training.probe``), placed by ``seen``, what the run
    counted before it; with ``--ema`` "ema_windows" (each window's count,
    in order, times the ranks) and "ema_reference" (the average's).

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> config = TrainConfig(mode="pynative", batch_size=4, accumulate_step=2)
        >>> stats = train_epoch(build_run(config, toy_task()), toy_task(), config, epoch=1, progress=False)
        >>> stats["samples"], stats["train_loss"] > 0
        (8, True)
    """
    windows = epoch_windows(config, task, epoch)
    n = _samples_per_rank(config, task)
    kept = window_slices(n, config.batch_size, config.first_step, config.last_micro_batch, drop_short=True)
    total = sum(stop - start for window in kept for start, stop in window) if config.drop_last else n
    loss_sum, counted, samples = 0.0, 0, 0
    weights = []  # each window's count, for the average's horizon (docs/ema.md#in-the-tools)
    trained = functools.partial(train_on_windows, run, sizes=set(rank_sizes(config)),
                                accumulate_step=rank_steps(config), count=task.count)
    probes = []
    if run.critical is not None:
        held_out = held_out_loss(run, task, EVAL_BATCH_SIZE)
        held_out()  # compiled before the epoch's clock starts, as the train step is: a probe's seconds hold no compile
        trained = functools.partial(train_probing, run, train_windows=trained, seen=seen, config=config, probes=probes,
                                    held_out=held_out)
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        # A signal while the bar draws itself would leave it half drawn, the interrupt line glued to it.
        with deferred():
            bar = stack.enter_context(tqdm(total=total, desc=f"epoch {epoch}/{config.epochs}", unit="sample",
                                           unit_scale=True, leave=False, disable=not progress, dynamic_ncols=True))
        for window_loss, window_counted, window_samples in trained(windows):
            loss_sum += window_loss
            counted += window_counted
            samples += window_samples
            weights.append(window_counted * config.ranks)
            bar.set_postfix(loss=f"{loss_sum / counted:.4f}", refresh=False)
            bar.update(window_samples)
    seconds = time.perf_counter() - started
    logged = {"probes": probes} if run.critical is not None else {}
    ema = run.accumulator.find(EMA)
    if ema is not None:
        logged.update(ema_windows=weights, ema_reference=float(ema.reference))
    if config.distributed:  # every rank's share of the epoch, added once: shares may differ by a sample a window
        loss_sum = float(ops.AllReduce()(ms.Tensor([loss_sum], ms.float32)).asnumpy()[0])
        # Gathered, not reduced: the CPU's AllReduce takes floats only, and float32 would round past 2**24.
        shares = ops.AllGather()(ms.Tensor([[samples, counted]], ms.int32)).asnumpy()
        samples, counted = (int(total) for total in shares.sum(axis=0))
    return {"train_loss": loss_sum / max(counted, 1), "samples": samples, "counted": counted, "seconds": seconds,
            **logged}


def epoch_windows(config, task, epoch):
    """Epoch ``epoch``'s micro-batches in the run's windows (``training.ranks.run_steps``); the accumulator applies.

    Seeded by ``config.seed + epoch``; under ``distributed``, this rank's
    part of each window, by position (docs/devices.md#the-batch-is-the-runs).
    An uneven config's ``last_micro_batch`` goes to the task's
    ``train_windows`` (only then: a task of whole windows need not take it).

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> [len(window) for window in epoch_windows(TrainConfig(batch_size=3, accumulate_step=2), toy_task(), 1)]
        [2, 1]
    """
    shard = dict(num_shards=config.ranks, shard_id=config.rank) if config.distributed \
        else dict(num_shards=None, shard_id=None)
    uneven = {} if config.last_micro_batch is None else dict(last_micro_batch=config.last_micro_batch)
    return task.train_windows(config.batch_size, run_steps(config), shuffle=config.shuffle,
                              seed=config.seed + epoch, drop_remainder=config.drop_last, **shard, **uneven)


def check(run, task, config):
    """``check_equivalence`` on the first window of the first epoch, before training; changes nothing.

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> config = TrainConfig(mode="pynative", batch_size=4, accumulate_step=2)
        >>> check(build_run(config, toy_task()), toy_task(), config).equivalent
        True
    """
    window = next(iter(epoch_windows(config, task, 1)))
    counts = [task.count(labels) for _, labels in window]
    return check_equivalence(run.grad_fn, [tuple(batch) for batch in window], run.accumulator, counts=counts,
                             network=run.net)


def evaluate(run, task):
    """Test accuracy (``Task.correct``, argmax against the label by default) and mean loss, per ``Task.count``.

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> result = evaluate(build_run(TrainConfig(mode="pynative"), toy_task()), toy_task())
        >>> sorted(result), 0 <= result["test_accuracy"] <= 1
        (['test_accuracy', 'test_loss'], True)
    """
    loss_sum, correct, counted = 0.0, 0, 0
    for inputs, labels in task.test_batches(EVAL_BATCH_SIZE):
        batch_loss, batch_correct = run.eval_step(inputs, labels)
        loss_sum += float(batch_loss.asnumpy())
        correct += batch_correct.asnumpy().item()
        counted += task.count(labels)
    return {"test_accuracy": correct / counted, "test_loss": loss_sum / counted}


def averaged(run):
    """A context in which ``run``'s weights are its moving average (``--ema``), the trained ones after; without
    ``--ema`` it changes nothing.

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> run = build_run(TrainConfig(mode="pynative", ema=0.9), toy_task())
        >>> with averaged(run):
        ...     pass
        >>> type(run.accumulator.find(EMA)).__name__
        'EMA'
    """
    ema = run.accumulator.find(EMA)
    return contextlib.nullcontext() if ema is None else ema.averaged()


def evaluate_run(run, task):
    """``evaluate`` with the weights evaluation uses: with ``--ema`` the average, and the trained weights' results
    beside them as ``trained_test_accuracy`` and ``trained_test_loss`` (docs/ema.md#in-the-tools).

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> sorted(evaluate_run(build_run(TrainConfig(mode="pynative", ema=0.9), toy_task()), toy_task()))
        ['test_accuracy', 'test_loss', 'trained_test_accuracy', 'trained_test_loss']
    """
    if run.accumulator.find(EMA) is None:
        return evaluate(run, task)
    trained = {f"trained_{name}": value for name, value in evaluate(run, task).items()}
    with averaged(run):
        return {**evaluate(run, task), **trained}


def _samples_per_rank(config, task):
    # Shards differ by at most a sample per window.
    return -(-task.train_samples // config.ranks)


def check_trainable(config, task):
    """Raises ``TrainingError`` if an epoch would train on nothing: ``drop_last`` with a batch above the samples.

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> check_trainable(TrainConfig(batch_size=16, drop_last=True), toy_task(8))
        Traceback (most recent call last):
        ...
        training.errors.TrainingError: --batch-size 16 with --drop-last leaves nothing to train: the training ...
    """
    if config.drop_last and config.batch_size > task.train_samples:
        raise TrainingError(f"--batch-size {config.batch_size} with --drop-last leaves nothing to train: the training "
                            f"split has {task.train_samples} samples")


def _driver_description(run, config):
    """How the first line names the driver: with ``--driver auto``, why it was chosen."""
    if config.driver != "auto" or config.mode != "graph":
        return f"driver {run.driver}"
    if config.memory_budget is not None:
        return "driver host (the leanest: a memory budget was given)"
    if run.driver == WINDOW_STEP:
        why = "N set between windows" if config.accumulate_step == AUTO else "a fixed N"
        uneven = "" if config.last_micro_batch is None else ", a smaller last micro-batch in the same call"
        # The fastest, and not the leanest (BENCHMARKS.md#peak-memory-each-driver-on-both-tools): the line says both.
        return f"driver window ({why}{uneven}: the fastest; --driver host holds less memory)"
    tensors = len(run.optimizer.parameters)
    bound = "at most" if run.driver == "in-graph" else "more than"
    return f"driver {run.driver} (N changes in the graph; {tensors} parameter tensors, {bound} {FEW_TENSORS})"


def _quiet(*_):
    pass


def train(config, task, progress=True):
    """Trains ``config.epochs`` epochs of ``task``; returns ``(summary, run)``.

    Prints what it trains on, a line per epoch and a summary; evaluates
    after every epoch and writes the checkpoint and logs the config asks
    for. Under ``distributed`` every rank trains; only rank 0 prints and
    writes files. ``run`` holds the trained network, for callers that want
    the weights. Call ``training.context.configure_context`` and
    ``training.outputs.check_outputs`` first. A config that would train
    nothing raises ``TrainingError`` before anything is built; with
    ``overwrite``, the old run's checkpoints are removed only then.

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> summary, run = train(TrainConfig(mode="pynative", epochs=1, batch_size=4), toy_task(), progress=False)
        toy: 8 train / 8 test samples; batch 4 x 2 = effective 8; sgd lr 0.01; pynative mode on CPU; driver in-graph
        epoch 1/1: train loss ...
        best test accuracy ...; effective batch 8 (4 x 2), 1 updates
        >>> summary["updates"]
        1
    """
    check_trainable(config, task)
    say = print if config.main_rank else _quiet
    run = build_run(config, task)  # before anything is printed or removed: a refused --scale-rule changes nothing
    rule = "" if config.scale_rule == "none" else f" for one micro-batch, following N by the {config.scale_rule} rule"
    say(f"{task.description}; batch {config.batch_description()}; {config.optimizer} lr {config.lr:g}{rule}; "
        f"{config.mode} mode on {config.device_target}; {_driver_description(run, config)}")
    config = dataclasses.replace(config, driver=run.driver)  # the logs say which driver ran
    if config.overwrite and config.main_rank:
        clear_checkpoints(config.ckpt_dir)
    if config.check:
        say(f"equivalence check: {check(run, task, config)}")
    done, history = resume(run, config, say) if config.resume else (0, [])
    # Before the first epoch, so that its time is that of the epochs after it (docs/language-model-tool.md, Speed).
    compiled = compile_train_step(run, task, config, done + 1) if done < config.epochs else None
    return_freed_memory()
    if compiled is not None:
        say(f"compiled the train step in {compiled:.1f} s")
    for epoch in range(done + 1, config.epochs + 1):
        seen = sum(record["counted"] for record in history)
        record = {"epoch": epoch, **train_epoch(run, task, config, epoch, progress and config.main_rank, seen)}
        return_freed_memory()
        evaluated = time.perf_counter()
        record.update(evaluate_run(run, task))
        record["eval_seconds"] = time.perf_counter() - evaluated
        record["samples_per_second"] = record["samples"] / record["seconds"]
        record["updates"] = int(run.accumulator.update_count)
        record["ranks"] = config.ranks  # a resumed run's log shows where the number of ranks changed
        if config.tracks_noise or run.scale_rule is not None:
            record["accumulate_step"] = int(run.accumulator.accumulate_step)
            record["effective_batch_size"] = config.effective_batch_size or \
                config.batch_size * record["accumulate_step"] * config.ranks
        if config.tracks_noise:
            record["noise_scale"] = run.accumulator.noise_scale
        if run.scale_rule is not None:
            record.update(run.scale_rule.record())
        if task.measure is not None:
            record.update(task.measure(record, history))
        history.append(record)
        say(task.epoch_line(record, config.epochs))
        if config.ckpt_dir and config.main_rank:
            save_epoch_checkpoint(run, config, epoch, history)
        if config.log_json and config.main_rank:
            write_json_log(config.log_json, config, task.description, history)
        if config.plot and config.main_rank:
            write_plot(config.plot, history)
    if done >= config.epochs:
        say(f"the checkpoint already holds {done} epochs (--epochs {config.epochs}): nothing to train")
    summary = summarize(config, history, int(run.accumulator.update_count), int(run.accumulator.skipped_windows))
    if config.log_json and config.main_rank:
        write_json_log(config.log_json, config, task.description, history, summary)
    say(task.summary_line(summary, config))
    return summary, run
