"""Per-epoch checkpoints of a run and exact resumption from them.

A run with a ``ckpt_dir`` writes ``epoch_NNN.ckpt`` after every epoch:
network, optimizer and accumulator state, the epoch, the settings a resume
must repeat, and the history of per-epoch records.
"""
import contextlib
import json
import os
import re
import shlex
import sys
import tempfile

import mindspore as ms

from accumulator import CheckpointMismatchError, load_checkpoint, save_checkpoint
from accumulator.core.checkpoints import unfinished_writes
from training.arguments import flag
from training.config import ADAPTIVE
from training.errors import TrainingError
from training.interrupts import deferred

CHECKPOINT_NAME = re.compile(r"^epoch_(\d+)\.ckpt$")
# Raised reading a damaged checkpoint (mindspore says ValueError) or a foreign one (no "config"): it is skipped.
UNREADABLE = (ValueError, OSError, KeyError)


def checkpoint_path(ckpt_dir, epoch):
    """Where the checkpoint taken after ``epoch`` goes.

    Example:
        >>> checkpoint_path("runs/a", 3)
        'runs/a/epoch_003.ckpt'
    """
    return os.path.join(ckpt_dir, f"epoch_{epoch:03d}.ckpt")


def find_checkpoints(ckpt_dir):
    """The ``epoch_NNN.ckpt`` files in ``ckpt_dir``, newest epoch first; none if it does not exist.

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> for name in ("epoch_001.ckpt", "epoch_010.ckpt", "notes.txt"):
        ...     open(os.path.join(folder, name), "w").close()
        >>> [os.path.basename(path) for path in find_checkpoints(folder)]
        ['epoch_010.ckpt', 'epoch_001.ckpt']
        >>> find_checkpoints(os.path.join(folder, "missing"))
        []
    """
    if not os.path.isdir(ckpt_dir):
        return []
    found = [(int(match.group(1)), name) for name in os.listdir(ckpt_dir)
             if (match := CHECKPOINT_NAME.match(name))]
    return [os.path.join(ckpt_dir, name) for _, name in sorted(found, reverse=True)]


def check_ckpt_dir(config):
    """Refuses, before any work, a ``config.ckpt_dir`` that would resume nothing or mix two runs.

    With ``resume`` there must be a checkpoint to resume, taken with the
    same settings (``check_settings`` on the newest readable one); without
    it the folder must hold none, unless ``overwrite`` says to replace them
    (``clear_checkpoints`` does, once training starts). Raises
    ``TrainingError`` naming the flag and the folder; changes nothing.

    Example:
        >>> import tempfile
        >>> from training.config import TrainConfig
        >>> folder = tempfile.mkdtemp()
        >>> check_ckpt_dir(TrainConfig(ckpt_dir=folder))
        >>> check_ckpt_dir(TrainConfig(ckpt_dir=folder, resume=True))
        Traceback (most recent call last):
        ...
        training.errors.TrainingError: --resume: no checkpoint (epoch_NNN.ckpt) in --ckpt-dir ...; check the ...
    """
    if not config.ckpt_dir:
        return
    found = find_checkpoints(config.ckpt_dir)
    if config.resume and not found:
        raise TrainingError(f"--resume: no checkpoint (epoch_NNN.ckpt) in --ckpt-dir {config.ckpt_dir}; "
                            "check the folder, or leave out --resume to start afresh")
    if found and not (config.resume or config.overwrite):
        raise TrainingError(f"--ckpt-dir {config.ckpt_dir} holds another run's checkpoints (newest "
                            f"{os.path.basename(found[0])}): add --resume to continue that run, --overwrite to "
                            "replace it, or choose another --ckpt-dir")
    # With --micro-batch auto the micro-batch and N are the checkpoint's (training.memory): resume() checks the rest;
    # under --distributed too, as N x ranks is known once the ranks are (training.context.configure_context).
    for path in found if config.resume and config.micro_batch is None and not config.distributed else []:
        with contextlib.suppress(*UNREADABLE):  # resume() warns as it skips it
            return check_settings(path, config)


def clear_checkpoints(ckpt_dir):
    """Removes the ``epoch_NNN.ckpt`` files of ``ckpt_dir`` (a run started with ``--overwrite``); other files stay.

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> for name in ("epoch_001.ckpt", "notes.txt"):
        ...     open(os.path.join(folder, name), "w").close()
        >>> clear_checkpoints(folder)
        >>> os.listdir(folder)
        ['notes.txt']
    """
    for path in find_checkpoints(ckpt_dir):
        os.remove(path)


def resume_hint(config, command, since):
    """What an interrupted run can resume from, as the end of a line for its user.

    ``command`` is the run's command line as a list: interpreter, script,
    arguments. ``since`` is the ``time.time()`` at which the run started:
    with ``overwrite``, only checkpoints written since then are this run's
    (those of the run it replaces stay until training starts). Otherwise
    every checkpoint is: the folder held none, or ``resume`` continued them.
    The command to resume is ``command`` with ``--resume`` (and without
    ``--overwrite``), shell-quoted; under ``distributed``, as msrun's script.

    Example:
        >>> import tempfile, time
        >>> from training.config import TrainConfig
        >>> folder = tempfile.mkdtemp()
        >>> config = TrainConfig(ckpt_dir=folder, overwrite=True)
        >>> resume_hint(config, ["python", "train.py", "--ckpt-dir", folder, "--overwrite"], since=time.time())
        'no checkpoint was written yet: nothing to resume'
        >>> open(checkpoint_path(folder, 1), "w").close()
        >>> print(resume_hint(config, ["python", "train.py", "--ckpt-dir", "my runs", "--overwrite"], since=0))
        epoch 1 is saved in .../epoch_001.ckpt; resume with: python train.py --ckpt-dir 'my runs' --resume
    """
    if not config.ckpt_dir:
        return "nothing was saved (no --ckpt-dir)"
    saved = [path for path in find_checkpoints(config.ckpt_dir)
             if not config.overwrite or os.path.getmtime(path) >= since]
    if not saved:
        return "no checkpoint was written yet: nothing to resume"
    words = [word for word in command if word != "--overwrite"] + ([] if config.resume else ["--resume"])
    # msrun starts the interpreter itself: it takes the script and its arguments.
    resume_with = "msrun <its options> " + shlex.join(words[1:]) if config.distributed else shlex.join(words)
    epoch = int(CHECKPOINT_NAME.match(os.path.basename(saved[0])).group(1))
    return f"epoch {epoch} is saved in {saved[0]}; resume with: {resume_with}"


def save_epoch_checkpoint(run, config, epoch, history):
    """Writes ``config.ckpt_dir/epoch_NNN.ckpt`` atomically; returns its path.

    ``run`` is a ``training.loop.Run`` (its ``net``, ``optimizer``, ``lr_scheduler`` and
    ``accumulator`` are saved). A failed write raises ``TrainingError`` and
    leaves older checkpoints as they were. Ctrl-C or SIGTERM during the
    write (``training.interrupts``) takes effect once it is done. A write
    killed outright (SIGKILL) leaves a hidden temporary file; the next
    save of that epoch, the first after resuming, removes it. With
    ``config.keep_checkpoints`` K, all but the newest K are removed then.

    Example:
        >>> import tempfile
        >>> from training.config import TrainConfig
        >>> from training.loop import build_run
        >>> from training.task import toy_task
        >>> config = TrainConfig(mode="pynative", ckpt_dir=tempfile.mkdtemp())
        >>> path = save_epoch_checkpoint(build_run(config, toy_task()), config, 1, [{"epoch": 1}])
        >>> os.path.basename(path)
        'epoch_001.ckpt'
    """
    path = checkpoint_path(config.ckpt_dir, epoch)
    settings = {**config.resume_settings(), RUN_WINDOWS: True}
    extra = {"epoch": epoch, "config": json.dumps(settings), "history": json.dumps(history)}
    if config.memory_plan is not None:  # a resumed --micro-batch auto run keeps it (training.memory)
        extra["memory_plan"] = json.dumps(config.memory_plan)
    try:
        with deferred():
            save_checkpoint(path, run.net, run.optimizer, run.accumulator, extra=extra,
                            lr_scheduler=run.lr_scheduler)
    except OSError as error:
        previous = f"; {os.path.basename(checkpoint_path(config.ckpt_dir, epoch - 1))} is intact" if epoch > 1 else ""
        raise TrainingError(f"could not write checkpoint {path}: {error}{previous}") from error
    # Only this run writes here (check_ckpt_dir), so any other is a killed run's.
    for leftover in unfinished_writes(path):
        os.remove(leftover)
    if config.keep_checkpoints:
        for older in find_checkpoints(config.ckpt_dir)[config.keep_checkpoints:]:
            os.remove(older)
    return path


# What a run saved before a setting existed ran with: train_lm.py padded every sample before --packing,
# no learning rate followed the window before --scale-rule, and the adaptive window aimed at the noise scale
# before --update-cost, no window was probed before --probe-interval and --probe-tolerance, and every window was
# whole micro-batches before last_micro_batch, and no gradient was clipped before --clip-norm.
SETTINGS_BEFORE_THEY_EXISTED = {"packing": False, "pack_within_windows": False, "scale_rule": "none",
                                "update_cost": None, "probe_interval": None, "probe_tolerance": None,
                                "last_micro_batch": None, "clip_norm": None}


# Recorded since the windows are the run's (docs/devices.md#the-batch-is-the-runs): N counts all ranks' micro-batches.
RUN_WINDOWS = "run_windows"


def check_settings(path, config):
    """Raises ``TrainingError`` if the checkpoint at ``path`` was taken with other resume settings than ``config``'s.

    Reads the settings alone, so a changed ``--optimizer`` is named as such,
    not as the optimizer state it leaves missing. The message names each flag,
    the value the run was started with and the value given now.

    Example: a run of one epoch saved its checkpoint; a resume with other flags is refused.
        >>> import tempfile
        >>> from training.config import TrainConfig
        >>> from training.loop import train
        >>> from training.task import toy_task
        >>> folder = tempfile.mkdtemp()
        >>> _ = train(TrainConfig(mode="pynative", epochs=1, ckpt_dir=folder), toy_task(), progress=False)
        toy: ...
        >>> check_settings(checkpoint_path(folder, 1), TrainConfig(optimizer="adam", accumulate_step=4))
        Traceback (most recent call last):
        ...
        training.errors.TrainingError: cannot resume exactly from .../epoch_001.ckpt: --accumulate-step was 2, now 4; --optimizer was sgd, now adam. Pass the same flags, or another --ckpt-dir.
    """
    saved = recorded_settings(path)
    # A fixed window is the run's, whatever the number of ranks: they may change
    # (docs/devices.md#resuming-on-another-number-of-ranks).
    free = ("ranks",) if saved["accumulate_step"] not in ADAPTIVE else ()
    changed = [f"{_named(name)} was {saved.get(name)}, now {value}"
               for name, value in config.resume_settings().items() if saved.get(name) != value and name not in free]
    if changed:
        raise TrainingError(f"cannot resume exactly from {path}: " + "; ".join(changed) + ". "
                            + _per_rank_hint(saved, config) + "Pass the same flags, or another --ckpt-dir.")


def recorded_settings(path):
    """The resume settings the checkpoint at ``path`` recorded, with the defaults of those it predates.

    Example:
        >>> import tempfile
        >>> from training.config import TrainConfig
        >>> from training.loop import build_run
        >>> from training.task import toy_task
        >>> config = TrainConfig(mode="pynative", ckpt_dir=tempfile.mkdtemp())
        >>> recorded_settings(save_epoch_checkpoint(build_run(config, toy_task()), config, 1, []))["ranks"]
        1
    """
    recorded = json.loads(ms.load_checkpoint(path, choice_func=lambda name: name == "config")["config"])
    saved = {**SETTINGS_BEFORE_THEY_EXISTED, **recorded}
    if "probe_interval" not in recorded and saved["accumulate_step"] == "auto":
        saved["accumulate_step"] = "noise"  # before the measured window, auto followed the noise scale
    if RUN_WINDOWS not in recorded and saved["accumulate_step"] not in ADAPTIVE:
        saved["accumulate_step"] *= saved["ranks"]  # before the run's windows, a fixed N was one rank's
    return saved


def _named(name):
    return "the number of ranks" if name == "ranks" else flag(name)


def _per_rank_hint(saved, config):
    """Why ``--accumulate-step`` differs on another number of ranks, and what keeps the batch, or nothing."""
    steps, ranks = saved["accumulate_step"], saved["ranks"]
    if ranks == config.ranks or steps in ADAPTIVE or config.accumulate_step in ADAPTIVE \
            or config.batch_size != saved["batch_size"]:
        return ""
    keep = (f"--accumulate-step {steps // config.ranks}" if steps % config.ranks == 0 else
            f"--batch-size {saved['batch_size'] * steps} --micro-batch {saved['batch_size']}")
    return (f"Under --distributed, --accumulate-step counts one rank's micro-batches: the checkpoint's run took "
            f"{steps} per update over {ranks} ranks; on {config.ranks} ranks pass {keep}. ")


@contextlib.contextmanager
def _on_these_ranks(path, ranks, config, accumulator):
    """``path``, or when its run had other ``ranks`` than ``config``, a copy whose N is this rank's.

    Between windows a rank's N carries nothing: the windows to come are cut
    anew (docs/devices.md#resuming-on-another-number-of-ranks). A window
    begun on other ranks was shared otherwise, and is refused.
    """
    if ranks == config.ranks:
        yield path
        return
    saved = ms.load_checkpoint(path)
    if int(saved["accumulator.micro_step"].asnumpy()):
        raise TrainingError(f"cannot resume {path} on {config.ranks} ranks: it was written within a window that its "
                            f"{ranks} ranks shared otherwise; resume it on {ranks} ranks")
    saved["accumulator.accumulate_step"] = ms.Parameter(accumulator.accumulate_step.value(), name="accumulate_step")
    with tempfile.TemporaryDirectory() as folder:
        fitted = os.path.join(folder, os.path.basename(path))
        ms.save_checkpoint(saved, fitted)
        yield fitted


def resume(run, config, say=print):
    """Loads the newest readable checkpoint of ``config.ckpt_dir`` into ``run``.

    Returns ``(epochs_done, history)``. Unreadable files are skipped with
    a warning on stderr; no readable one, or one taken with other settings,
    raises ``TrainingError`` rather than start afresh or resume inexactly.
    ``say`` prints where it resumed from.

    Example: a damaged checkpoint is skipped (with a warning on stderr), and then nothing is left to resume.
        >>> import tempfile
        >>> from training.config import TrainConfig
        >>> from training.loop import build_run
        >>> from training.task import toy_task
        >>> config = TrainConfig(mode="pynative", ckpt_dir=tempfile.mkdtemp(), resume=True)
        >>> with open(checkpoint_path(config.ckpt_dir, 1), "w") as damaged:
        ...     _ = damaged.write("not a checkpoint")
        >>> resume(build_run(config, toy_task()), config)
        Traceback (most recent call last):
        ...
        training.errors.TrainingError: cannot resume: no readable checkpoint in --ckpt-dir ...
    """
    for path in find_checkpoints(config.ckpt_dir):
        try:
            check_settings(path, config)
            if run.critical is not None:  # its N first: load_checkpoint checks the window against it
                run.critical.load_window(path)
            ranks = recorded_settings(path)["ranks"]
            with _on_these_ranks(path, ranks, config, run.accumulator) as fitted:
                extra = load_checkpoint(fitted, run.net, run.optimizer, run.accumulator,
                                        lr_scheduler=run.lr_scheduler)
        except CheckpointMismatchError as error:
            raise TrainingError(f"cannot resume: {error}") from error
        except UNREADABLE as error:
            print(f"warning: skipping unreadable checkpoint {path}: {error}", file=sys.stderr)
            continue
        moved = f"; its run had {ranks} ranks, this one {config.ranks}" if ranks != config.ranks else ""
        say(f"resumed from {path} (epoch {extra['epoch']}){moved}")
        return int(extra["epoch"]), json.loads(extra["history"])
    raise TrainingError(f"cannot resume: no readable checkpoint in --ckpt-dir {config.ckpt_dir}")
