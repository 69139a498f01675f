"""Per-epoch checkpoints of a run and exact resumption from them.

A run with a ``ckpt_dir`` writes ``epoch_NNN.ckpt`` after every epoch:
network, optimizer and accumulator state, the epoch, the settings a resume
must repeat, and the history of per-epoch records.
"""
import json
import os
import re
import sys

from accumulator import CheckpointMismatchError, load_checkpoint, save_checkpoint
from training.errors import TrainingError

CHECKPOINT_NAME = re.compile(r"^epoch_(\d+)\.ckpt$")


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


def save_epoch_checkpoint(run, config, epoch, history):
    """Writes ``config.ckpt_dir/epoch_NNN.ckpt`` atomically; returns its path.

    ``run`` is a ``training.loop.Run`` (its ``net``, ``optimizer`` and
    ``accumulator`` are saved). A failed write raises ``TrainingError`` and
    leaves older checkpoints as they were.

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
    extra = {"epoch": epoch, "config": json.dumps(config.resume_settings()), "history": json.dumps(history)}
    try:
        save_checkpoint(path, run.net, run.optimizer, run.accumulator, extra=extra)
    except OSError as error:
        previous = f"; {os.path.basename(checkpoint_path(config.ckpt_dir, epoch - 1))} is intact" if epoch > 1 else ""
        raise TrainingError(f"could not write checkpoint {path}: {error}{previous}") from error
    return path


def _changed_settings(saved, config):
    return [f"--{name.replace('_', '-')} was {saved[name]!r}, now {value!r}"
            for name, value in config.resume_settings().items() if saved.get(name) != value]


def resume(run, config, say=print):
    """Loads the newest readable checkpoint of ``config.ckpt_dir`` into ``run``.

    Returns ``(epochs_done, history)``, ``(0, [])`` when there is none.
    Unreadable files are skipped with a warning on stderr; a checkpoint
    taken with other settings raises ``TrainingError`` rather than resume
    inexactly. ``say`` prints where it resumed from.

    Example:
        >>> import tempfile
        >>> from training.config import TrainConfig
        >>> from training.loop import build_run
        >>> from training.task import toy_task
        >>> config = TrainConfig(mode="pynative", ckpt_dir=tempfile.mkdtemp(), resume=True)
        >>> resume(build_run(config, toy_task()), config, say=lambda line: None)
        (0, [])
        >>> _ = save_epoch_checkpoint(build_run(config, toy_task()), config, 1, [{"epoch": 1}])
        >>> resume(build_run(config, toy_task()), config, say=lambda line: None)
        (1, [{'epoch': 1}])
    """
    for path in find_checkpoints(config.ckpt_dir):
        try:
            extra = load_checkpoint(path, run.net, run.optimizer, run.accumulator)
        except CheckpointMismatchError as error:
            raise TrainingError(f"cannot resume: {error}") from error
        except (ValueError, RuntimeError, OSError) as error:
            print(f"warning: skipping unreadable checkpoint {path}: {error}", file=sys.stderr)
            continue
        changed = _changed_settings(json.loads(extra["config"]), config)
        if changed:
            raise TrainingError(f"cannot resume exactly from {path}: " + "; ".join(changed)
                                + ". Pass the same flags, or another --ckpt-dir.")
        say(f"resumed from {path} (epoch {extra['epoch']})")
        return int(extra["epoch"]), json.loads(extra["history"])
    say(f"no checkpoint in {config.ckpt_dir}: starting from epoch 1")
    return 0, []
