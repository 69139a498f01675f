"""``--accumulate-step auto``: the tools' window measured by short branched runs between an epoch's windows.

The run's ``accumulator.batch_size.CriticalBatchSchedule`` says when a probe is due,
in what the task counts (samples, or a language model's tokens, over all
ranks). The epoch's micro-batches, which come one a window (N = 1, where
the schedule starts), are trained in windows of the current N up to the
first window boundary at or past that point; then the held-out loss is read (the first
test samples, at most ``PROBE_HELD_OUT``), the next ``branch_length()``
micro-batches are trained once per candidate window from the same state,
each branch's held-out loss is read, and the epoch goes
on from the chosen branch's state with the data position past those
micro-batches: the chosen branch's work is kept, only the others' is spent
(docs/batch-size.md#the-measured-window). A probe that would reach past the
epoch's end waits for the next epoch's start.

Every rank holds the same weights and reads the same held-out batch, so each
takes the same decision. Epoch checkpoints fall between probes, and the
probes' points follow from the samples seen, so a resumed run probes where
the uninterrupted one did.
"""
import itertools
import time

import mindspore as ms
import numpy as np

from accumulator import training_state
from accumulator.batch_size import CriticalBatchSchedule
from data.mnist import Window
from training.config import AUTO_STEPS, PROBE_HELD_OUT, PROBE_INTERVAL, PROBE_TOLERANCE


def measured_schedule(config):
    """The schedule ``--accumulate-step auto`` trains with: ``config``'s probe settings, or the tools' defaults.

    Example:
        >>> from training.config import TrainConfig
        >>> schedule = measured_schedule(TrainConfig(accumulate_step="auto", probe_interval=512))
        >>> schedule.interval, schedule.tolerance, schedule.windows()
        (512, 0.1, [1, 2])
    """
    interval = PROBE_INTERVAL if config.probe_interval is None else config.probe_interval
    tolerance = PROBE_TOLERANCE if config.probe_tolerance is None else config.probe_tolerance
    return CriticalBatchSchedule(interval, *AUTO_STEPS, tolerance=tolerance)


class _Until:
    """Windows of ``step`` micro-batches (``_joined``) from ``micro_batches`` until ``due`` samples are seen.

    ``micro_batches``: windows of one micro-batch each. ``seen`` is advanced
    by the caller as each window is trained (before the next is drawn);
    ``exhausted`` tells whether the epoch's micro-batches ran out.
    """

    def __init__(self, micro_batches, due, step, seen):
        self.micro_batches, self.due, self.step, self.seen = micro_batches, due, step, seen
        self.exhausted = False

    def __iter__(self):
        while self.due is None or self.seen < self.due:
            group = list(itertools.islice(self.micro_batches, self.step))
            self.exhausted = len(group) < self.step
            if group:
                yield _joined(group)
            if self.exhausted:
                return


def _joined(windows):
    """Windows of one micro-batch each as one window: a ``Window`` whose ``stacked`` joins theirs, or a list."""
    if len(windows) == 1:
        return windows[0]
    micro_batches = [micro_batch for window in windows for micro_batch in window]
    stacked = [getattr(window, "stacked", None) for window in windows]
    if any(pair is None for pair in stacked):
        return micro_batches
    if len({tuple(tuple(t.shape) for t in pair) for pair in stacked}) > 1:  # the epoch's short last micro-batch
        return Window(micro_batches, None, sum(window.samples for window in windows))
    # One copy on the host: the window step takes the stacked pair as it is, no MindSpore op per column.
    joined = tuple(ms.Tensor(np.concatenate([pair[column].asnumpy() for pair in stacked]))
                   for column in range(len(stacked[0])))
    return Window(micro_batches, joined, sum(window.samples for window in windows))


def held_out_loss(run, task, batch_size):
    """``() -> float``: the loss per count (``Task.count``) on the first test batch, a fixed one.

    The batch holds ``batch_size`` samples, at most ``PROBE_HELD_OUT``.

    Example:
        >>> from training.config import TrainConfig
        >>> from training.loop import build_run
        >>> from training.task import toy_task
        >>> loss = held_out_loss(build_run(TrainConfig(mode="pynative"), toy_task()), toy_task(), 4)
        >>> loss() == loss() > 0
        True
    """
    inputs, labels = next(iter(task.test_batches(min(batch_size, PROBE_HELD_OUT))))
    count = task.count(labels)

    def loss():
        return float(run.eval_step(inputs, labels)[0].asnumpy()) / count
    return loss


def train_probing(run, windows, train_windows, held_out, seen, config, probes):
    """Trains ``windows`` as ``train_windows(windows)`` does, yielding the same, with the probes that fall due.

    ``train_windows``: ``training.loop.train_on_windows`` bound to the run;
    ``held_out()``: the held-out loss per count (``held_out_loss``);
    ``seen``: what was counted before these windows, over all ranks. Each
    probe's record (what had been seen, each branch's held-out loss, noise
    scale and training seconds, the window chosen, the micro-batches each
    branch trained, the probe's seconds with its snapshots and held-out
    losses) is appended to ``probes``.

    Example: 32 micro-batches of 2 samples; the probe at the start trains 8 of them at N = 1, then at N = 2,
    which loses more than the tolerance of N = 1's progress: N stays 1, and the next probe would be at 64.
        >>> from training.config import TrainConfig
        >>> from training.loop import build_run, train_epoch
        >>> from training.task import toy_task
        >>> config = TrainConfig(mode="pynative", batch_size=2, accumulate_step="auto", probe_interval=64)
        >>> stats = train_epoch(build_run(config, toy_task(64)), toy_task(64), config, epoch=1, progress=False)
        >>> [(probe["seen"], sorted(probe["losses"]), probe["accumulate_step"]) for probe in stats["probes"]]
        [(0, ['1', '2'], 1)]
        >>> stats["probes"][0]["micro_batches"]
        8
        >>> stats["samples"]
        64
    """
    schedule, ranks = run.critical, config.ranks
    windows = iter(windows)
    while True:
        step = schedule.current
        segment = _Until(windows, schedule.next_probe(), step, seen)
        for trained in train_windows(segment, accumulate_step=step):
            segment.seen += trained[1] * ranks
            yield trained
        seen = segment.seen
        if segment.exhausted:
            return
        length = schedule.branch_length()
        taken = list(itertools.islice(windows, length))  # fewer at the epoch's end
        if not _whole(taken, length, config.batch_size):
            yield from train_windows(_Until(itertools.chain(taken, windows), None, step, seen), accumulate_step=step)
            return  # the epoch's end: the probe waits
        trained = {}

        def branch(window):
            started = time.perf_counter()
            trained[window] = list(train_windows(_Until(iter(taken), None, window, seen), accumulate_step=window))
            return time.perf_counter() - started

        started = time.perf_counter()
        seconds = {}
        probed = schedule.probe(training_state(run.net, run.optimizer, run.accumulator,
                                               lr_scheduler=run.lr_scheduler),
                                lambda window: seconds.setdefault(window, branch(window)), held_out,
                                read=lambda: {"noise_scale": _noise_scale(run)})
        kept = trained[schedule.current]
        probes.append({**_record(seen, probed, schedule.current, sum(output[1] for output in kept) / length, ranks),
                       "micro_batches": length,
                       "branch_seconds": {str(window): value for window, value in seconds.items()},
                       "seconds": time.perf_counter() - started})
        for output in kept:
            seen += output[1] * ranks
            yield output


def _whole(taken, length, batch_size):
    """True when ``taken`` holds exactly ``length`` micro-batches, each of ``batch_size``."""
    sizes = [labels.shape[0] for window in taken for _, labels in window]
    return len(sizes) == length and set(sizes) == {batch_size}


def _noise_scale(run):
    return run.accumulator.noise_scale if run.accumulator.noise is not None else None


def _record(seen, probed, window, per_micro_batch, ranks):
    """A probe as the JSON log keeps it: what it compared, what it chose, and B_simple beside it.

    ``start_loss`` is the held-out loss the branches started from,
    ``losses`` theirs; ``critical_batch`` is the chosen window in what the
    task counts (samples or tokens, over ranks); ``noise_scale`` B_simple as
    the largest branch read it at its end, in the same unit;
    ``noise_over_critical`` their ratio.
    """
    records = probed["branches"]
    largest = max(records)
    noise = records[largest].get("noise_scale")
    critical = window * ranks * per_micro_batch
    return {"seen": seen, "start_loss": probed["start_loss"], "losses": {str(w): r["loss"] for w, r in records.items()},
            "noise_scales": {str(w): r.get("noise_scale") for w, r in records.items()},
            "accumulate_step": window, "critical_batch": critical, "noise_scale": noise,
            "noise_over_critical": None if noise is None else noise / critical}
