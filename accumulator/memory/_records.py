"""What a memory plan measured and chose: each size's ``Measurement``, the ``MemoryPlan``, and how they read.

Private to ``accumulator.memory``, which exports both: plan.py measures and chooses, this module holds the
results and their table and log record, so that the search reads on its own (docs/memory-plan.md#planning).
"""
import dataclasses
from typing import Optional

from accumulator.memory._sizes import format_size

# A measurement's outcome when the line through the measured peaks put it over the budget: ``peak`` is the prediction.
NOT_RUN = "not run"


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One candidate micro-batch: its measured peak memory (bytes) and samples per second, or why it has none.

    ``outcome`` is ``"measured"``, ``"out of memory (...)"`` (killed by a
    signal, as the OOM killer does, a ``MemoryError``, or a device's error
    saying so), ``"over the budget (stopped at ...)"`` (``peak`` is what it
    held then, less than its need), ``"not run"`` (the line put it over the
    budget: ``peak`` is the prediction) or another failure's text.
    ``samples_per_second`` is the median over the timed calls, ``spread``
    half their range; ``seconds`` is what it cost, a child's start included,
    and ``phases`` where it went: ``"start"`` (the child's start and imports,
    freeing memory after the size), ``"build"`` (``make_step``), ``"first
    call"`` (its compile) and ``"timed"``.

    Example:
        >>> Measurement(8, peak=2 ** 30, samples_per_second=100.0).outcome
        'measured'
    """
    size: int
    peak: Optional[int] = None
    samples_per_second: Optional[float] = None
    outcome: str = "measured"
    spread: Optional[float] = None
    seconds: Optional[float] = None
    phases: Optional[dict] = None


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """The chosen micro-batch for a batch per update, and the probes it was chosen from.

    ``accumulate_step`` N is ``ceil(batch / micro_batch)``; ``micro_batches``
    lists the sizes of one window's micro-batches: all ``micro_batch`` but
    the last, which is smaller when the two do not divide (pass each one's
    count to the accumulator: every update then equals the whole batch).

    Example:
        >>> plan = MemoryPlan(batch=20, micro_batch=8, budget=2 ** 30, margin=0.1,
        ...                   probes=(Measurement(8, 2 ** 28, 50.0),))
        >>> plan.accumulate_step, plan.micro_batches
        (3, [8, 8, 4])
    """
    batch: int
    micro_batch: int
    budget: int
    margin: float
    probes: tuple

    @property
    def accumulate_step(self):
        """N: micro-batches per update, ``ceil(batch / micro_batch)``."""
        return -(-self.batch // self.micro_batch)

    @property
    def micro_batches(self):
        """One window's micro-batch sizes, in order; they add up to ``batch``."""
        return [self.micro_batch] * (self.accumulate_step - 1) + [self.batch - self.micro_batch
                                                                   * (self.accumulate_step - 1)]

    def table(self):
        """The probes as a small table: size, peak memory, samples/s and its spread, the probe's seconds, the choice.

        Example:
            >>> plan = MemoryPlan(batch=16, micro_batch=8, budget=2 ** 30, margin=0.1,
            ...                   probes=(Measurement(8, 2 ** 28, 50.0, spread=2.0, seconds=1.5),
            ...                           Measurement(16, 2 ** 30, None, "not run")))
            >>> print(plan.table())
            micro-batch  peak memory        samples/s  probe s  chosen
                      8    256.0 MiB           50 ± 2      1.5  <- 8 x 2 = 16 per update
                     16     1.00 GiB                -        -  not run (the line's prediction)
            budget 1.00 GiB, 10% kept free; the probes took 1.5 s
        """
        lines = [f"{'micro-batch':>11}  {'peak memory':>11}  {'samples/s':>15}  {'probe s':>7}  chosen"]
        for probe in self.probes:
            peak = "-" if probe.peak is None else format_size(probe.peak)
            speed = "-" if probe.samples_per_second is None else f"{probe.samples_per_second:,.0f}" + (
                "" if probe.spread is None else f" ± {probe.spread:,.0f}")
            seconds = "-" if probe.seconds is None else f"{probe.seconds:.1f}"
            if probe.size == self.micro_batch:
                note = f"<- {' + '.join(map(str, self.micro_batches))} = {self.batch} per update" \
                    if self.batch % self.micro_batch else f"<- {self.micro_batch} x {self.accumulate_step} = " \
                                                            f"{self.batch} per update"
            elif probe.outcome == NOT_RUN:
                note = f"{NOT_RUN} (the line's prediction)"
            else:
                note = "" if probe.outcome == "measured" else probe.outcome
            lines.append(f"{probe.size:>11}  {peak:>11}  {speed:>15}  {seconds:>7}  {note}".rstrip())
        took = sum(probe.seconds for probe in self.probes if probe.seconds is not None)
        lines.append(f"budget {format_size(self.budget)}, {self.margin:.0%} kept free"
                     + (f"; the probes took {took:.1f} s" if took else ""))
        return "\n".join(lines)

    def record(self):
        """The plan as JSON-ready values, for a log.

        Example:
            >>> plan = MemoryPlan(batch=16, micro_batch=8, budget=2 ** 30, margin=0.1,
            ...                   probes=(Measurement(8, 2 ** 28, 50.0),))
            >>> record = plan.record()
            >>> record["micro_batch"], record["accumulate_step"], record["probes"][0]["peak"]
            (8, 2, 268435456)
        """
        return {"batch": self.batch, "micro_batch": self.micro_batch, "accumulate_step": self.accumulate_step,
                "budget": self.budget, "margin": self.margin,
                "probes": [dataclasses.asdict(probe) for probe in self.probes]}
