"""The measured window: N chosen by short branched runs, the critical batch (docs/batch-size.md#the-measured-window).

At the start of training, again at once while N grows, then at doubling gaps of samples (or tokens)
seen, ``CriticalBatchSchedule.probe`` trains the same next samples from the
same state once per candidate window, N and 2N by default, and compares
their losses on a fixed held-out batch: the largest window that loses at
most ``tolerance`` of the smallest one's progress is the critical window,
and training goes on from that branch's state. N only grows, within the
bounds.

A branch starts from a ``snapshot_state`` of the run's state (``training_state``:
weights, optimizer moments, the accumulator and its policies, the scale
rule, the learning-rate scheduler; MindSpore's default generator), with every
Parameter a policy holds without reporting it (``LossScaling``'s scaler), and is put
back with ``restore_state``, exactly: a probe that keeps N leaves the run as if
it had never probed. Random ops that keep a seed state of their own
(``nn.Dropout``, ``ops.randn`` on CPU) are not put back: with dropout, each
branch draws other masks (docs/batch-size.md#the-measured-window).
"""
import math
import numbers
from typing import Callable, Dict, Mapping

import mindspore as ms
from mindspore import Parameter, Tensor, ops

from accumulator._internal.checks import positive_int
from accumulator._internal.constants import state_parameter
from accumulator._internal.deprecation import deprecated


def snapshot_state(state: Mapping[str, Parameter]) -> Dict[str, object]:
    """A copy, on the host, of every Parameter of ``state`` (``training_state``'s dict) and of the default generator.

    Example:
        >>> from mindspore import nn
        >>> net = nn.Dense(3, 1)
        >>> saved = snapshot_state({p.name: p for p in net.get_parameters()})
        >>> sorted(saved), sorted(saved["parameters"])
        (['parameters', 'rng'], ['bias', 'weight'])
    """
    return {"parameters": {name: param.asnumpy().copy() for name, param in state.items()},
            "rng": ms.get_rng_state()}


def restore_state(state: Mapping[str, Parameter], saved: Mapping[str, object]) -> None:
    """Puts ``snapshot_state(state)``'s values back into the Parameters of ``state``, in place, and the generator.

    In place (``ops.assign``), so graphs compiled before keep training the
    restored Parameters. After restoring an accumulator's state, call
    ``accumulator.host.sync_position()``, as ``load_checkpoint`` does.

    Example:
        >>> from mindspore import nn
        >>> net = nn.Dense(3, 1)
        >>> state = {p.name: p for p in net.get_parameters()}
        >>> saved = snapshot_state(state)
        >>> _ = ops.assign(net.bias, Tensor([5.0]))
        >>> restore_state(state, saved)
        >>> bool((net.bias.asnumpy() == saved["parameters"]["bias"]).all())
        True
    """
    for name, param in state.items():
        ops.assign(param, Tensor(saved["parameters"][name]))
    ms.set_rng_state(saved["rng"])


def _accumulate_step(value):
    return not isinstance(value, bool) and isinstance(value, numbers.Integral) and value >= 1


def _loss(value):
    return not isinstance(value, bool) and isinstance(value, numbers.Real)


def held_by_policies(accumulator, state):
    """The Parameters ``accumulator``'s policies hold in an attribute (or a list of them) that ``state`` lacks.

    A policy reports what checkpoints keep (``state_parameters``);
    ``LossScaling`` does not report its scaler, which ``training_state``
    takes as ``loss_scaler=``. A probe puts these back too.

    Example:
        >>> from mindspore import nn
        >>> from accumulator import Accumulator
        >>> optimizer = nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1)
        >>> accumulator = Accumulator(optimizer, 2, loss_scaler=ms.amp.DynamicLossScaler(1024.0, 2, 10))
        >>> sorted(held_by_policies(accumulator, {}))
        ['LossScaling.scaler_state.0', 'LossScaling.scaler_state.1']
    """
    known, found = {id(param) for param in state.values()}, {}
    for policy in accumulator.policies:
        for attribute, value in vars(policy).items():
            for index, param in enumerate(value if isinstance(value, (list, tuple)) else [value]):
                if isinstance(param, Parameter) and id(param) not in known:
                    known.add(id(param))
                    found[f"{type(policy).__name__}.{attribute}.{index}"] = param
    return found


def _fraction(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < 1:
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    return float(value)


@ms.jit_class
class CriticalBatchSchedule:
    """N for the next window from the losses of short branched runs, never shrinking; pass it as ``accumulate_step``.

    ``interval``: where the probes fall, in samples (or tokens: whatever
    the caller counts). A probe that grew N is followed by the next at once;
    the k-th probe that kept N moves the next to ``interval`` x (2^k - 1):
    0, ``interval``, 3 ``interval``, 7 ``interval``, ... (the critical batch
    rises fast early and then levels off: N climbs while the larger window
    keeps pace, then the probes thin out). ``min_step`` and
    ``max_step`` bound N; ``first_step`` (default ``min_step``) is where it
    starts. A probe reads the held-out loss, then trains ``branches``
    windows, N, 2N, 4N, ... up to ``max_step``, for ``branch_windows``
    windows of the largest each (``branch_length()`` micro-batches, the same
    ones for every branch), and keeps the largest window that ``keeps_pace``
    with the smallest, every window below it passing too.

    Its state (N and the probes that kept it) is the accumulator's after ``bind``,
    so checkpoints hold it; before ``load_checkpoint``, call
    ``load_window(path)``: the load checks the window against the schedule.
    On the host, between windows: ``should_probe``, ``choose``, ``probe``.

    Example:
        >>> from mindspore import nn
        >>> from accumulator import Accumulator
        >>> schedule = CriticalBatchSchedule(interval=1000, max_step=16, tolerance=0.1)
        >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), schedule)
        >>> schedule.bind(accumulator)
        >>> schedule.should_probe(0), schedule.windows()
        (True, [1, 2])
        >>> schedule.choose({1: 0.50, 2: 0.51}, start_loss=0.70)   # 2 lost 5% of 1's progress: N = 2
        2
        >>> int(accumulator.accumulate_step), schedule.should_probe(0)   # N grew: the next probe at once
        (2, True)
        >>> schedule.choose({2: 0.40, 4: 0.45}, start_loss=0.50)   # 4 lost half of 2's progress: N stays
        2
        >>> schedule.should_probe(999), schedule.should_probe(1000)
        (False, True)
        >>> CriticalBatchSchedule(interval=1000, tolerance=1.5)
        Traceback (most recent call last):
        ...
        ValueError: tolerance must be a number in (0, 1), got 1.5
    """

    def __init__(self, interval: int, min_step: int = 1, max_step: int = 64, tolerance: float = 0.1,
                 branches: int = 2, branch_windows: int = 4, first_step=None) -> None:
        self.interval = positive_int(interval, "interval")
        self.min_step = positive_int(min_step, "min_step")
        self.max_step = positive_int(max_step, "max_step")
        if self.max_step < self.min_step:
            raise ValueError(f"max_step must be at least min_step={min_step}, got {max_step!r}")
        self.tolerance = _fraction(tolerance, "tolerance")
        if isinstance(branches, bool) or not isinstance(branches, numbers.Integral) or branches < 2:
            raise ValueError(f"branches must be an int of at least 2 (N and 2N), got {branches!r}")
        self.branches = int(branches)
        self.branch_windows = positive_int(branch_windows, "branch_windows")
        first = self.min_step if first_step is None else positive_int(first_step, "first_step")
        if not self.min_step <= first <= self.max_step:
            raise ValueError(f"first_step must be within [{min_step}, {max_step}], got {first_step!r}")
        self.accumulate_step = state_parameter(first, ms.int32, "critical_batch.step")  # N: checkpoints keep the name
        self.kept = state_parameter(0, ms.int32, "critical_batch.kept")
        self.accumulator = None

    def __call__(self, update_count):
        """N for the next window: the one chosen last, inside the compiled step (``as_schedule`` wraps it)."""
        return self.accumulate_step * 1

    @property
    def step(self):
        """N's Parameter under its 0.2.0 name: use ``accumulate_step``."""
        deprecated("CriticalBatchSchedule.step", "CriticalBatchSchedule.accumulate_step")
        return self.accumulate_step

    def bind(self, accumulator) -> None:
        """Makes this schedule's state part of ``accumulator``'s (checkpoints) and lets it set N; once, before training.

        Example: the class's.
        """
        if self.accumulator is not None:
            raise ValueError("this CriticalBatchSchedule is bound already: one accumulator per schedule")
        if int(accumulator.accumulate_step) != int(self.accumulate_step):
            raise ValueError(f"bind an Accumulator built with this schedule as accumulate_step: its N is "
                             f"{int(accumulator.accumulate_step)}, the schedule's {int(self.accumulate_step)}")
        accumulator.attach(self)
        self.accumulator = accumulator

    def state_parameters(self):
        """N and the number of probes that kept it, for checkpoints (``training_state``)."""
        return [self.accumulate_step, self.kept]

    def window_tensors(self):
        """Nothing to sum across devices: the decision is taken on the host."""
        return ()

    @property
    def current(self) -> int:
        """N now, read on the host.

        Example:
            >>> CriticalBatchSchedule(interval=10, min_step=2).current
            2
        """
        return int(self.accumulate_step)

    def windows(self):
        """The Ns the next probe compares: N, 2N, 4N, ... (``branches`` of them), up to ``max_step``.

        Example:
            >>> CriticalBatchSchedule(interval=10, first_step=16, max_step=40, branches=3).windows()
            [16, 32, 40]
        """
        found = []
        for index in range(self.branches):
            accumulate_step = min(self.current * 2 ** index, self.max_step)
            if accumulate_step not in found:
                found.append(accumulate_step)
        return found

    def branch_length(self) -> int:
        """Micro-batches each branch of the next probe trains: ``branch_windows`` windows of the largest.

        A multiple of every N compared, so every branch ends on a whole window.

        Example:
            >>> CriticalBatchSchedule(interval=10, branch_windows=4).branch_length()   # N = 1, 2
            8
        """
        steps = self.windows()
        length = self.branch_windows * steps[-1]
        while any(length % accumulate_step for accumulate_step in steps):
            length += steps[-1]
        return length

    def should_probe(self, samples_seen) -> bool:
        """True when a probe is due at ``samples_seen`` (``next_probe()``).

        Example:
            >>> schedule = CriticalBatchSchedule(interval=100)
            >>> schedule.should_probe(0), schedule.should_probe(-1)
            (True, False)
        """
        due = self.next_probe()
        return due is not None and samples_seen >= due

    def next_probe(self):
        """The samples seen at which the next probe is due; None at ``max_step``.

        ``interval`` x (2^k - 1) after k probes kept N: a probe that grew N
        leaves it where it was, so the next follows at once. Read on the
        host: a loop can compare its count with it and read no device value per micro-batch.

        Example:
            >>> schedule = CriticalBatchSchedule(interval=100)
            >>> _ = schedule.choose({1: 1.0, 2: 1.0}, start_loss=2.0)   # grew to 2
            >>> schedule.next_probe()
            0
            >>> _ = schedule.choose({2: 1.0, 4: 1.5}, start_loss=2.0)   # kept 2
            >>> schedule.next_probe()
            100
        """
        if self.current >= self.max_step:
            return None
        return self.interval * (2 ** int(self.kept) - 1)

    def keeps_pace(self, start_loss: float, smallest_loss: float, loss: float) -> bool:
        """True when an N whose held-out loss is ``loss`` lost at most ``tolerance`` of the smallest N's progress.

        The progress is how far the smallest N's branch brought the
        held-out loss down from ``start_loss``, the probe's start: with the
        same samples seen, a larger N keeps pace while those samples buy
        at least ``1 - tolerance`` of it (docs/batch-size.md#the-measured-window).
        Where the smallest made no progress, the larger must do no worse.
        A loss that is not finite (a branch that diverged), or no finite
        start or smallest to measure progress from, does not keep pace.

        Example:
            >>> schedule = CriticalBatchSchedule(interval=10, tolerance=0.1)
            >>> schedule.keeps_pace(2.0, 1.0, 1.1), schedule.keeps_pace(2.0, 1.0, 1.11)
            (True, False)
            >>> schedule.keeps_pace(1.0, 1.2, 1.2), schedule.keeps_pace(1.0, 1.2, 1.21)
            (True, False)
            >>> schedule.keeps_pace(2.0, 1.0, float("nan")), schedule.keeps_pace(float("inf"), 1.0, 1.0)
            (False, False)
        """
        if not all(math.isfinite(value) for value in (start_loss, smallest_loss, loss)):
            return False
        return loss <= smallest_loss + self.tolerance * max(start_loss - smallest_loss, 0.0)

    def choose(self, losses_by_step: Mapping[int, float], start_loss: float) -> int:
        """Sets N from a probe's held-out losses ``{N: loss}`` and ``start_loss``; returns N.

        ``start_loss``: the held-out loss at the probe's start. The Ns
        are compared in increasing order with the smallest (``keeps_pace``),
        and the largest of the run of passing Ns from the smallest up is
        chosen: one whose loss is NaN or infinite ends the run. N never
        shrinks and stays within the bounds. Under data parallel, give every
        rank the same losses (averaged over ranks) and each takes the same decision.

        Example:
            >>> schedule = CriticalBatchSchedule(interval=10, tolerance=0.1)
            >>> schedule.choose({1: 2.0, 2: 2.1, 4: 2.3, 8: 2.1}, start_loss=3.0)    # 4 fails: 8 is not reached
            2
            >>> schedule.choose({2: 1.0, 4: float("nan")}, start_loss=3.0)           # 4 diverged
            2
            >>> schedule.choose({4: "low"}, start_loss=3.0)
            Traceback (most recent call last):
            ...
            ValueError: losses_by_step must map Ns (ints >= 1) to losses (numbers), got {4: 'low'}
        """
        steps = sorted(losses_by_step)
        if not steps or not all(_accumulate_step(n) and _loss(losses_by_step[n]) for n in steps):
            raise ValueError(f"losses_by_step must map Ns (ints >= 1) to losses (numbers), "
                             f"got {dict(losses_by_step)!r}")
        if not _loss(start_loss):
            raise ValueError(f"start_loss must be a loss (a number), got {start_loss!r}")
        smallest, chosen = float(losses_by_step[steps[0]]), steps[0]
        for accumulate_step in steps[1:]:
            if not self.keeps_pace(float(start_loss), smallest, float(losses_by_step[accumulate_step])):
                break
            chosen = accumulate_step
        chosen = min(max(chosen, self.current, self.min_step), self.max_step)
        if chosen == self.current:
            ops.assign(self.kept, self.kept + 1)
        self.set_window(chosen)
        return chosen

    def set_window(self, accumulate_step: int) -> None:
        """Makes ``accumulate_step`` the N of the current and next windows, between windows (a branch's, or the chosen).

        Example:
            >>> from mindspore import nn
            >>> from accumulator import Accumulator
            >>> schedule = CriticalBatchSchedule(interval=10)
            >>> accumulator = Accumulator(nn.SGD(nn.Dense(3, 1).trainable_params(), 0.1), schedule)
            >>> schedule.bind(accumulator)
            >>> schedule.set_window(8)
            >>> int(accumulator.accumulate_step), schedule.current
            (8, 8)
        """
        accumulate_step = positive_int(accumulate_step, "accumulate_step")
        ops.assign(self.accumulate_step, Tensor(accumulate_step, ms.int32))
        if self.accumulator is not None:
            ops.assign(self.accumulator.accumulate_step, Tensor(accumulate_step, ms.int32))
            self.accumulator.host.sync_position()

    def probe(self, state: Mapping[str, Parameter], train_branch: Callable[[int], object],
              held_out_loss: Callable[[], float], read=None) -> Dict[str, object]:
        """Runs the branches from the same state, goes on from the chosen one's; returns the losses it compared.

        ``state``: ``training_state(...)`` of the run, the bound accumulator
        included (with ``held_by_policies``). Reads ``held_out_loss()``, the loss on a fixed held-out
        batch (averaged over ranks under data parallel); then for each
        N of ``windows()``, in increasing order: restores the state as
        it was, sets N, calls ``train_branch(N)``, which must train the
        same next ``branch_length()`` micro-batches (its data position is the
        caller's), and reads ``held_out_loss()`` again. An N past the
        first that fails ``keeps_pace`` (a loss that is NaN or infinite
        included) ends the probe: the ones above it cannot be chosen; where
        the start's loss is not finite, only the smallest N's branch trains.
        The run then holds the chosen branch's state
        exactly, and N is ``choose``'s. Returns ``{"start_loss", "branches":
        {N: record}}``; each record holds ``"loss"`` and, with ``read``,
        whatever ``read()`` returns at the branch's end (the noise scale,
        say). Needs a window boundary: the accumulator's window empty.

        Example: a branch that trains nothing leaves every loss equal, so the largest N wins.
            >>> from mindspore import nn
            >>> from accumulator import Accumulator, training_state
            >>> net = nn.Dense(3, 1)
            >>> optimizer = nn.SGD(net.trainable_params(), 0.1)
            >>> schedule = CriticalBatchSchedule(interval=10, max_step=8)
            >>> accumulator = Accumulator(optimizer, schedule)
            >>> schedule.bind(accumulator)
            >>> probed = schedule.probe(training_state(net, optimizer, accumulator), lambda n: None,
            ...                         lambda: 1.0)
            >>> probed, schedule.current
            ({'start_loss': 1.0, 'branches': {1: {'loss': 1.0}, 2: {'loss': 1.0}}}, 2)
        """
        if self.accumulator is None:
            raise ValueError("probe needs the accumulator: call bind(accumulator) first")
        if int(self.accumulator.micro_step):
            raise ValueError(f"probe needs a window boundary: the window holds {int(self.accumulator.micro_step)} "
                             "micro-batches")
        own = {param.name for param in self.state_parameters()}
        state = {name: param for name, param in state.items() if name not in own}  # choose() sets these
        state.update(held_by_policies(self.accumulator, state))
        start_loss, start, kept, records = float(held_out_loss()), snapshot_state(state), None, {}
        steps = self.windows() if math.isfinite(start_loss) else self.windows()[:1]  # no progress to measure
        for accumulate_step in steps:
            restore_state(state, start)
            self.set_window(accumulate_step)
            train_branch(accumulate_step)
            loss = float(held_out_loss())
            records[accumulate_step] = {"loss": loss, **(read() if read is not None else {})}
            if accumulate_step != steps[0] and not self.keeps_pace(start_loss, records[steps[0]]["loss"], loss):
                break
            kept = snapshot_state(state)
        restore_state(state, kept)
        self.set_window(steps[0])  # N as before the probe, for choose() to grow from
        self.choose({n: record["loss"] for n, record in records.items()}, start_loss)
        return {"start_loss": start_loss, "branches": records}

    def load_window(self, path: str) -> None:
        """Sets N and the probes that kept it from the checkpoint at ``path``, before ``load_checkpoint`` checks N.

        A checkpoint of a run without this schedule leaves them as they are.

        Example:
            >>> import os, tempfile
            >>> from mindspore import nn
            >>> from accumulator import Accumulator, save_checkpoint, load_checkpoint
            >>> net = nn.Dense(3, 1)
            >>> optimizer = nn.SGD(net.trainable_params(), 0.1)
            >>> schedule = CriticalBatchSchedule(interval=10)
            >>> accumulator = Accumulator(optimizer, schedule)
            >>> schedule.bind(accumulator)
            >>> _ = schedule.choose({1: 1.0, 2: 1.0}, start_loss=2.0)
            >>> _ = schedule.choose({2: 1.0, 4: 1.5}, start_loss=2.0)
            >>> path = os.path.join(tempfile.mkdtemp(), "last.ckpt")
            >>> save_checkpoint(path, net, optimizer, accumulator)
            >>> fresh = CriticalBatchSchedule(interval=10)
            >>> resumed = Accumulator(optimizer, fresh)
            >>> fresh.bind(resumed)
            >>> fresh.load_window(path)
            >>> _ = load_checkpoint(path, net, optimizer, resumed)
            >>> fresh.current, int(fresh.kept), int(resumed.accumulate_step)
            (2, 1, 2)
        """
        names = {param.name: param for param in self.state_parameters()}
        saved = ms.load_checkpoint(path, choice_func=lambda name: name in names)
        if self.kept.name in saved:
            ops.assign(self.kept, Tensor(saved[self.kept.name].asnumpy()))
        if self.accumulate_step.name in saved:
            self.set_window(int(saved[self.accumulate_step.name].asnumpy()))
