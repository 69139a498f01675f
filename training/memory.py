"""``--micro-batch auto``: the tools' micro-batch measured within a memory budget, and kept when a run resumes.

``plan_run`` turns a config whose ``batch_size`` is the batch per update
into one with the measured micro-batch and its N, by
``accumulator.memory.plan_micro_batch`` over ``tool_step`` (the tool's own train
step, built in a child process per size), or with the micro-batch M of
``--micro-batch M``; where it does not divide the batch, each window's
last micro-batch is smaller (docs/mnist-tool.md#uneven-windows).
docs/memory-plan.md#the-tools.
"""
import dataclasses
import json
import socket
import zlib

import mindspore as ms
from mindspore import ops

from accumulator.memory import PlanError, plan_micro_batch
from accumulator.memory.plan import default_budget, default_candidates
from training.arguments import in_flags
from training.checkpoints import UNREADABLE, find_checkpoints
from training.config import ADAPTIVE, AUTO, TrainConfig
from training.context import configure_context
from training.errors import TrainingError
from training.loop import EVAL_BATCH_SIZE, build_run, compile_train_step, epoch_windows, train_on_windows
from training.ranks import rank_sizes, rank_steps, whole_on_every_rank

# Windows timed per size measured, each on its own, after the one that compiles: a window is the run's unit, and
# several give the spread within which two sizes' speeds are tied (docs/memory-plan.md#planning-cost).
TIMED_WINDOWS = 3


def candidate_sizes(batch):
    """The powers of two below ``batch``, and ``batch`` (``accumulator.memory.plan.default_candidates``).

    A size that does not divide the batch makes each window end in a
    smaller micro-batch (``TrainConfig.last_micro_batch``), which the
    host-stepped drivers compile as a second shape (docs/memory-plan.md#the-tools).

    Example:
        >>> candidate_sizes(40), candidate_sizes(7)
        ([1, 2, 4, 8, 16, 32, 40], [1, 2, 4, 7])
    """
    return default_candidates(batch)


def whole_windows(config, size):
    """True when micro-batches of ``size`` leave every rank's windows whole, or ``config``'s run may have uneven ones.

    Whole: ``size`` divides the batch per update and every rank's part of it
    (``training.ranks.whole_on_every_rank``); needed when
    ``TrainConfig.whole_window_reason`` says why. Both the sizes measured
    and a size given or kept are held to it.

    Example: a batch of 16 per update on 2 ranks, under the linear rule.
        >>> from training.config import TrainConfig
        >>> config = TrainConfig(batch_size=16, accumulate_step=1, micro_batch="auto", scale_rule="linear",
        ...                      distributed=True, ranks=2)
        >>> [size for size in (2, 4, 6, 8, 16) if whole_windows(config, size)]
        [2, 4, 8]
    """
    if not config.whole_window_reason:
        return True
    return config.batch_size % size == 0 and whole_on_every_rank(planned(config, size, config.batch_size))


def tool_step(size, config, batch, make_task, task_args):
    """``accumulator.memory.plan``'s ``make_step`` for the tools (``window=True``): one window of the run ``size`` plans.

    Runs in the measuring child: sets the device and mode, builds
    ``make_task(*task_args)`` (once per child: the sizes after the first
    reuse it) and ``training.loop.build_run`` for the config
    the run will train with (``planned``: micro-batches of ``size``, N =
    ``ceil(batch / size)``, the last smaller when ``size`` does not divide
    ``batch``, so ``--driver auto`` picks the run's driver), compiles
    as the run does, runs one evaluation batch (the run's peak may be
    there), and returns a step that trains the first window of epoch 1
    through ``training.loop.train_on_windows``, the loop's own code: the
    window step with its stacked window, or N micro-steps, and the update.

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> step = tool_step(4, TrainConfig(mode="pynative"), 8, toy_task, ())
        >>> [(loss_sum > 0, counted, samples) for loss_sum, counted, samples in step()]
        [(True, 8, 8)]
    """
    config = configure_context(planned(config, size, batch))
    task = _task(make_task, task_args)
    run = build_run(config, task)
    compile_train_step(run, task, config, 1)  # as train() does before its first epoch: a measurement times no compile
    # The run's evaluation batch is larger than a micro-batch: its peak counts (docs/memory-plan.md#the-tools).
    run.eval_step(*next(iter(task.test_batches(EVAL_BATCH_SIZE))))
    window = next(iter(epoch_windows(config, task, 1)))
    return lambda: list(train_on_windows(run, [window], set(rank_sizes(config)), rank_steps(config), task.count))


# The task a measuring child loaded for its first size, kept for the sizes after it (docs/memory-plan.md#planning-cost).
_loaded = []


def _task(make_task, task_args):
    """``make_task(*task_args)``, loaded once per process for the same arguments."""
    if not _loaded or _loaded[0][:2] != (make_task, task_args):
        _loaded[:] = [(make_task, task_args, make_task(*task_args))]
    return _loaded[0][2]


def plan_run(config, make_task, task_args):
    """``config`` with its micro-batch and N: measured for ``micro_batch="auto"``, M for an int; else ``config``.

    Prints the plan's table (on rank 0); the plan goes into ``memory_plan``,
    which the JSON log and the checkpoints keep. With ``resume`` the newest
    checkpoint's micro-batch and N are kept, not measured again. Under
    ``distributed`` each rank measures its share of the batch and all take
    the smallest size chosen (an AllGather), the default budget shared among
    the ranks on each host; a rank that cannot plan ends every rank. Raises
    ``TrainingError`` in one line when nothing fits, naming what the smallest size needs, and when
    M is more than one rank's batch or, for a run that needs whole windows,
    does not divide it.

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> plan_run(TrainConfig(batch_size=8), toy_task, ()).batch_size
        8
        >>> plan_run(TrainConfig(batch_size=20, accumulate_step=1, micro_batch=8), toy_task, ()).batch_description()
        '8 + 8 + 4 = effective 20'
    """
    if config.micro_batch is None:
        return config
    if config.batch_size < config.ranks:
        raise TrainingError(f"--batch-size {config.batch_size} per update leaves some of the {config.ranks} ranks "
                            "no sample: pass at least one per rank")
    batch = -(-config.batch_size // config.ranks)  # the largest rank's part (docs/devices.md#the-batch-is-the-runs)
    if config.micro_batch != AUTO:
        return _given(config, config.micro_batch, batch)
    say = print if config.main_rank else _quiet
    if config.resume:
        return _kept(config, say)
    measured_config = dataclasses.replace(config, micro_batch=None, memory_budget=None, distributed=False, rank=0,
                                       ranks=1, resume=False, overwrite=False, ckpt_dir=None, keep_checkpoints=None,
                                       log_json=None, plot=None, check=False)
    candidates = [size for size in candidate_sizes(batch) if whole_windows(config, size)]
    if not candidates:
        raise TrainingError(in_flags(f"{config.whole_window_reason}; no micro-batch makes whole windows of "
                                     f"--batch-size {config.batch_size} on each of {config.ranks} ranks: pass one "
                                     f"that divides by {config.ranks}", ("driver", "scale_rule")))
    try:
        plan, failed = plan_micro_batch(tool_step, batch, _budget(config), candidates=candidates,
                                        args=(measured_config, batch, make_task, task_args),
                                        device=config.device_target, steps=TIMED_WINDOWS, window=True), None
    except PlanError as error:
        plan, failed = None, f"--micro-batch auto: {error}"
    chosen = _gathered(plan.micro_batch if plan else 0) if config.distributed else [plan.micro_batch if plan else 0]
    if failed or 0 in chosen:  # every rank ends, in one line, rather than wait for the one that failed
        raise TrainingError(failed or f"--micro-batch auto: rank {chosen.index(0)} found no micro-batch: see its error")
    size = min(chosen)  # all ranks take the smallest any chose: none passes its budget, all agree on N
    ranks = f" (up to {batch} on each of {config.ranks} ranks)" if config.distributed else ""
    say(f"micro-batch measured for a batch of {config.batch_size} per update{ranks}:\n{plan.table()}"
        + (f"\nall ranks take micro-batch {size}, the smallest any chose" if size != plan.micro_batch else ""))
    return planned(config, size, config.batch_size,
                   {**plan.record(), "micro_batch": size, "accumulate_step": -(-config.batch_size // size)})


def _budget(config):
    """``--memory-budget``, each rank's; by default each rank's share of its host's (docs/memory-plan.md#the-tools)."""
    if config.memory_budget is not None or not config.distributed:
        return config.memory_budget
    host = zlib.crc32(socket.gethostname().encode()) & 0x7FFFFFFF  # one int per host, the same in every process
    on_this_host = _gathered(host).count(host)  # before anything that may raise: every rank gathers
    return default_budget(config.device_target) // on_this_host


def _given(config, size, batch):
    """``planned`` for ``--micro-batch M``, refused in one line when M does not make every rank's windows whole and
    the run needs them so. M may exceed a rank's share of the batch (as it does when a run moves to more ranks)."""
    ranks = f" on each of {config.ranks} ranks" if config.distributed else ""
    _refuse_uneven(config, size, f"--micro-batch {size} does not divide the batch per update of {batch}{ranks}: "
                                  "pass one that does")
    return planned(config, size, config.batch_size)


def _refuse_uneven(config, size, why):
    """A ``TrainingError`` in one line when ``size`` leaves some rank's windows uneven and the run needs whole ones."""
    if not whole_windows(config, size):
        raise TrainingError(in_flags(f"{config.whole_window_reason}; {why}", ("driver", "scale_rule")))


def planned(config, size, batch, plan=None):
    """``config`` as the run trains it: windows of ``batch`` (all ranks'), micro-batches of ``size``; and ``plan``.

    N is ``ceil(batch / size)``; where ``size`` does not divide ``batch``
    the last micro-batch is smaller (``last_micro_batch``), so every window
    still holds ``batch``: a single process's window, which the ranks share
    (``training.ranks``). The measurements build their run from it too (one
    rank's part), so they hold the driver and window the run will.

    Example:
        >>> from training.config import TrainConfig
        >>> config = planned(TrainConfig(batch_size=32, accumulate_step=1, micro_batch="auto"), 8, 32)
        >>> config.batch_size, config.accumulate_step, config.effective_batch_size, config.micro_batch
        (8, 4, 32, None)
        >>> planned(TrainConfig(batch_size=20, accumulate_step=1, micro_batch="auto"), 8, 20).batch_description()
        '8 + 8 + 4 = effective 20'
    """
    steps = -(-batch // size)
    last = batch - size * (steps - 1)
    return dataclasses.replace(config, batch_size=size, accumulate_step=steps, micro_batch=None, memory_budget=None,
                               memory_plan=plan, last_micro_batch=None if last == size else last)


def _kept(config, say):
    """The newest readable checkpoint's micro-batch and N, checked against the batch per update asked for now."""
    batch = config.batch_size
    for path in find_checkpoints(config.ckpt_dir):
        try:
            saved = ms.load_checkpoint(path, choice_func=lambda name: name in ("config", "memory_plan"))
            settings = json.loads(saved["config"])
        except UNREADABLE:
            continue  # resume() warns as it skips it
        size, steps, last = settings["batch_size"], settings["accumulate_step"], settings.get("last_micro_batch")
        window = f"{size} x {steps}" if steps in ADAPTIVE else \
            TrainConfig(batch_size=size, accumulate_step=steps, last_micro_batch=last).window_description()
        if steps in ADAPTIVE or size * (steps - 1) + (last or size) != batch:  # the batch per update, uneven or not
            raise TrainingError(f"cannot resume with --batch-size {config.batch_size} --micro-batch auto: {path} "
                                f"was trained with {window} per update")
        _refuse_uneven(config, size, f"{path} was trained with {window} per update: resume without it")
        say(f"micro-batch kept from {path}: {window} = {batch} per update")
        return planned(config, size, batch, json.loads(saved["memory_plan"]) if "memory_plan" in saved else None)
    raise TrainingError(f"cannot resume: no readable checkpoint in --ckpt-dir {config.ckpt_dir}")


def _quiet(*_):
    pass


def _gathered(value):
    """Every rank's int ``value``, in rank order (an AllGather, which runs on CPU too)."""
    return [int(one) for one in ops.AllGather()(ms.Tensor([value], ms.int32)).asnumpy()]
