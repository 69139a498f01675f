"""``--micro-batch auto``: the tools' micro-batch measured within a memory budget, and kept when a run resumes.

``plan_run`` turns a config whose ``batch_size`` is the batch per update
into one with the measured micro-batch and its N, by
``accumulator.plan_micro_batch`` over ``tool_step`` (the tool's own train
step, built in a child process per size). docs/memory-plan.md#the-tools.
"""
import dataclasses
import json

import mindspore as ms
from mindspore import ops

from accumulator import PlanError, plan_micro_batch
from training.checkpoints import UNREADABLE, find_checkpoints
from training.config import AUTO
from training.context import configure_context
from training.errors import TrainingError
from training.loop import EVAL_BATCH_SIZE, build_run, compile_train_step, epoch_windows

# The probe's window: longer than any probe runs, so no timed micro-step applies an update.
UNFILLED = 2 ** 30


def candidate_sizes(batch):
    """The divisors of ``batch``, each at least twice the one before, and ``batch``: whole windows of one shape.

    A size that divides the batch makes every window N micro-batches of one
    shape, so the tool compiles one train step (docs/memory-plan.md#the-tools).

    Example:
        >>> candidate_sizes(96), candidate_sizes(100), candidate_sizes(7)
        ([1, 2, 4, 8, 16, 32, 96], [1, 2, 4, 10, 20, 50, 100], [1, 7])
    """
    sizes = [1]
    for size in range(2, batch + 1):
        if batch % size == 0 and (size >= 2 * sizes[-1] or size == batch):
            sizes.append(size)
    return sizes


def tool_step(size, config, batch, make_task, task_args):
    """``accumulator.plan``'s ``make_step`` for the tools: ``config``'s train step on micro-batches of ``size``.

    Runs in the probe's child: sets the device and mode, builds
    ``make_task(*task_args)`` and ``training.loop.build_run`` for ``size``,
    compiles its steps, runs one evaluation batch and one update (the run's
    peak may be in either), and returns a step that adds the first
    micro-batch of epoch 1 to a window it never fills: an update per N
    micro-steps would slow the timed steps of small N more than of large,
    while per sample it costs every size the same.

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> step = tool_step(4, TrainConfig(mode="pynative"), 8, toy_task, ())
        >>> float(step().asnumpy()) > 0
        True
    """
    config = configure_context(dataclasses.replace(config, batch_size=size, accumulate_step=batch // size))
    task = make_task(*task_args)
    # The learning rate cannot follow a window this long: the probe's weights do not matter, its finite numbers do.
    run = build_run(dataclasses.replace(config, accumulate_step=UNFILLED, scale_rule="none"), task)
    compile_train_step(run, task, config, 1)  # the update too: a probe times no compile
    # The run's evaluation batch is larger than a micro-batch: its peak counts (docs/memory-plan.md#the-tools).
    run.eval_step(*next(iter(task.test_batches(EVAL_BATCH_SIZE))))
    inputs, labels = next(iter(epoch_windows(config, task, 1)))[0]
    count = ms.Tensor(task.count(labels), ms.float32)
    run.train_step(inputs, labels, count)
    run.flush()  # one update, for its memory
    return lambda: run.train_step(inputs, labels, count)


def plan_run(config, make_task, task_args):
    """``config`` with the measured micro-batch and N when it asks for ``micro_batch="auto"``; else ``config``.

    Prints the plan's table (on rank 0); the plan goes into ``memory_plan``,
    which the JSON log and the checkpoints keep. With ``resume`` the newest
    checkpoint's micro-batch and N are kept, not measured again. Under
    ``distributed`` each rank measures its share of the batch and all take
    the smallest size chosen (an AllGather). Raises ``TrainingError`` in one
    line when nothing fits, naming what the smallest size needs.

    Example:
        >>> from training.config import TrainConfig
        >>> from training.task import toy_task
        >>> plan_run(TrainConfig(batch_size=8), toy_task, ()).batch_size
        8
    """
    if config.micro_batch != AUTO:
        return config
    if config.batch_size % config.ranks:
        raise TrainingError(f"--batch-size {config.batch_size} per update does not split evenly over the "
                            f"{config.ranks} ranks")
    batch = config.batch_size // config.ranks
    say = print if config.main_rank else _quiet
    if config.resume:
        return _kept(config, batch, say)
    probe_config = dataclasses.replace(config, micro_batch=None, memory_budget=None, distributed=False, rank=0,
                                       ranks=1, resume=False, overwrite=False, ckpt_dir=None, keep_checkpoints=None,
                                       log_json=None, plot=None, check=False)
    try:
        plan = plan_micro_batch(tool_step, batch, config.memory_budget, candidates=candidate_sizes(batch),
                                args=(probe_config, batch, make_task, task_args), device=config.device_target)
    except PlanError as error:
        raise TrainingError(f"--micro-batch auto: {error}") from None
    size = _smallest_across_ranks(plan.micro_batch) if config.distributed else plan.micro_batch
    ranks = f" ({batch} on each of {config.ranks} ranks)" if config.distributed else ""
    say(f"micro-batch measured for a batch of {config.batch_size} per update{ranks}:\n{plan.table()}"
        + (f"\nall ranks take micro-batch {size}, the smallest any chose" if size != plan.micro_batch else ""))
    return _planned(config, size, batch // size, {**plan.record(), "micro_batch": size,
                                                  "accumulate_step": batch // size})


def _planned(config, size, steps, plan):
    return dataclasses.replace(config, batch_size=size, accumulate_step=steps, micro_batch=None, memory_budget=None,
                               memory_plan=plan)


def _kept(config, batch, say):
    """The newest readable checkpoint's micro-batch and N, checked against the batch per update asked for now."""
    for path in find_checkpoints(config.ckpt_dir):
        try:
            saved = ms.load_checkpoint(path, choice_func=lambda name: name in ("config", "memory_plan"))
            settings = json.loads(saved["config"])
        except UNREADABLE:
            continue  # resume() warns as it skips it
        size, steps = settings["batch_size"], settings["accumulate_step"]
        if steps == AUTO or size * steps != batch:
            raise TrainingError(f"cannot resume with --batch-size {config.batch_size} --micro-batch auto: {path} "
                                f"was trained with {size} x {steps} per rank")
        say(f"micro-batch kept from {path}: {size} x {steps} = {batch} per update{' per rank' * config.distributed}")
        return _planned(config, size, steps, json.loads(saved["memory_plan"]) if "memory_plan" in saved else None)
    raise TrainingError(f"cannot resume: no readable checkpoint in --ckpt-dir {config.ckpt_dir}")


def _quiet(*_):
    pass


def _smallest_across_ranks(size):
    """The smallest of every rank's ``size`` (an AllGather, which runs on CPU too)."""
    return int(ops.AllGather()(ms.Tensor([size], ms.int32)).asnumpy().min())
