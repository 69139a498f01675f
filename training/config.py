"""What one training run is asked to do, checked once and never changed.

``TrainConfig`` is built once from the command line (or by hand) and read by
everything below; nothing there sees argparse. Values found only at run
time (the rank and the number of ranks under ``distributed``) come in as a
new config from ``dataclasses.replace``, never by mutation.
"""
import dataclasses
import math
import numbers
from typing import Optional, Union

from common.checks import boolean, non_negative_int, positive_int
from training.optimizers import OPTIMIZERS

DEVICES = ("CPU", "GPU", "Ascend")
# accumulate_step="auto": N measured by short branched runs within these bounds, from the window --lr is tuned
# for (accumulator.batch_size.CriticalBatchSchedule, docs/batch-size.md#the-measured-window); a probe at the start, again at
# once while N grows, then after PROBE_INTERVAL samples (tokens for a language model), each gap twice the one before.
AUTO = "auto"
AUTO_STEPS = (1, 64)
PROBE_INTERVAL = 16384
PROBE_TOLERANCE = 0.1
# The probes' held-out batch: the first test samples, at most this many (docs/batch-size.md#in-the-tools). The
# branches are compared on the same samples, so a small batch tells them apart; each probe reads it three times.
PROBE_HELD_OUT = 32
# accumulate_step="noise": N follows the measured gradient noise scale within these bounds
# (at least 2, so that every window still measures the noise; accumulator.batch_size.NoiseScaleSchedule).
NOISE = "noise"
NOISE_STEPS = (2, 64)
ADAPTIVE = (AUTO, NOISE)
MODES = ("graph", "pynative")
# How a window is driven (docs/performance.md#which-driver): "auto" runs the window step at a fixed N; while N
# changes, the in-graph call for nets of few parameter tensors (at most FEW_TENSORS) and the host step above it.
# The window step's name is "window" on the command line (--driver window) and WINDOW_STEP here.
WINDOW_STEP = "window"
DRIVERS = ("auto", "in-graph", "host", WINDOW_STEP)
# A branch in the graph costs more with every tensor that crosses it (docs/performance.md#which-driver).
FEW_TENSORS = 8
# How the optimizer follows the window (accumulator.batch_size.ScaleRule); --lr is the learning rate for one micro-batch.
SCALE_RULES = ("none", "linear", "sqrt", "adascale")
# Settings that change the arithmetic or the data order: a resumed run must use the same.
RESUME_FIELDS = ("batch_size", "accumulate_step", "last_micro_batch", "lr", "optimizer", "seed", "shuffle",
                 "drop_last", "ranks", "scale_rule", "update_cost", "probe_interval", "probe_tolerance", "clip_norm",
                 "ema")


def _one_of(value, name, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def _optional_path(value, name):
    if value is not None and not (isinstance(value, str) and value):
        raise ValueError(f"{name} must be None or a non-empty path string, got {value!r}")
    return value


def _check_micro_batch(config):
    """The checks of ``micro_batch``, ``memory_budget``, ``last_micro_batch`` and ``memory_plan``.

    docs/memory-plan.md#the-tools.
    """
    if config.micro_batch not in (None, AUTO):
        positive_int(config.micro_batch, "micro_batch")
        if config.micro_batch > config.batch_size:
            raise ValueError(f"micro_batch={config.micro_batch} is more than the batch per update: "
                             f"batch_size={config.batch_size}")
    if config.memory_budget is not None:
        positive_int(config.memory_budget, "memory_budget")
        if config.micro_batch != AUTO:
            raise ValueError("memory_budget is the budget micro_batch='auto' plans within: pass micro_batch='auto'")
    if config.micro_batch is not None and config.accumulate_step != 1:
        measured = " measured" if config.micro_batch == AUTO else ""
        raise ValueError(f"accumulate_step={config.accumulate_step} with micro_batch={config.micro_batch!r}: "
                         f"batch_size is then the batch per update and N follows from the{measured} micro-batch: "
                         f"pass one")
    if config.last_micro_batch is not None:
        positive_int(config.last_micro_batch, "last_micro_batch")
        if config.accumulate_step in ADAPTIVE or config.accumulate_step < 2 \
                or config.last_micro_batch >= config.batch_size or config.micro_batch is not None:
            raise ValueError(f"last_micro_batch={config.last_micro_batch} ends each window in a smaller micro-batch: "
                             f"it needs a fixed accumulate_step of at least 2 and a smaller size than batch_size, got "
                             f"batch_size={config.batch_size}, accumulate_step={config.accumulate_step!r}"
                             + (f", micro_batch={config.micro_batch!r}" if config.micro_batch is not None else ""))
        if config.whole_window_reason:
            raise ValueError(f"{config.whole_window_reason}; last_micro_batch={config.last_micro_batch} makes the last "
                             f"smaller")
    if config.memory_plan is not None and not isinstance(config.memory_plan, dict):
        raise ValueError(f"memory_plan must be None or a MemoryPlan.record() dict, got {config.memory_plan!r}")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Settings of one run; every field is checked when the config is made.

    Fields mirror the flags of ``scripts/train_mnist.py`` (``--batch-size``
    is ``batch_size``, and so on). ``rank`` and ``ranks`` are 0 and 1 until
    ``training.context.configure_context`` reads the real ones.
    ``accumulate_step`` is an int, ``"auto"`` (N measured by short branched
    runs, every ``probe_interval`` samples or tokens at first, the gaps
    doubling, within ``probe_tolerance``; None: ``PROBE_INTERVAL``,
    ``PROBE_TOLERANCE``) or ``"noise"`` (N follows the measured noise scale);
    either implies ``track_noise``; ``scale_rule`` one of
    ``SCALE_RULES``: the learning rate (and for ``"sqrt"`` AdamW's betas) follows
    N, ``lr`` being tuned for one micro-batch (``"adascale"`` implies
    ``track_noise``; ``"sqrt"`` needs ``optimizer="adamw"``); ``update_cost``,
    with ``"noise"`` only: an update's seconds over a micro-step's, and N is
    then the window fastest in seconds (``NoiseScaleSchedule``); ``clip_norm``: each
    window's mean gradient clipped to this global norm (the large batch's, ``Accumulator(clip_norm=...)``),
    None: not clipped; ``ema``: the decay per update at the first window of a moving average of the weights that
    evaluation uses (``accumulator.policies.EMA``, docs/ema.md#in-the-tools), None: none; ``keep_checkpoints``
    K keeps only the newest K in ``ckpt_dir`` (None: all); ``check`` runs the
    equivalence self-check before training; ``driver`` how windows are driven (``DRIVERS``:
    ``"auto"`` becomes the one ``training.loop.choose_driver`` picks for the net). ``micro_batch="auto"`` makes
    ``batch_size`` the batch per update (all ranks; ``accumulate_step`` 1)
    until ``training.memory.plan_run`` measures the micro-batch within
    ``memory_budget`` bytes (None: the default; an int ``micro_batch`` is taken as it is) and sets ``batch_size``,
    ``accumulate_step`` and ``memory_plan`` (what was measured, for the
    log), and ``last_micro_batch`` when the micro-batch does not divide the
    batch: each window's last micro-batch is then that size, smaller than
    ``batch_size`` (docs/mnist-tool.md#uneven-windows). ``tool_settings`` holds a tool's own flags that define its run
    (``{"width": 64}`` for ``--width 64``): checkpoints record them and a resumed run must repeat them, as it must
    ``RESUME_FIELDS``. Bad values raise ``ValueError`` naming the field and the value.

    Example:
        >>> config = TrainConfig(batch_size=32, accumulate_step=4)
        >>> config.effective_batch_size
        128
        >>> TrainConfig(lr=0.0)
        Traceback (most recent call last):
        ...
        ValueError: lr must be a positive finite number, got 0.0
    """
    # Where and how it runs: the "run" flags of --help.
    device_target: str = "CPU"
    mode: str = "graph"
    seed: int = 0
    driver: str = "auto"
    distributed: bool = False
    # How it trains: the "training" flags.
    batch_size: int = 32
    accumulate_step: int = 2
    epochs: int = 3
    lr: float = 1e-2
    optimizer: str = "sgd"
    scale_rule: str = "none"
    update_cost: Optional[float] = None
    probe_interval: Optional[int] = None
    probe_tolerance: Optional[float] = None
    clip_norm: Optional[float] = None
    ema: Optional[float] = None
    shuffle: bool = True
    track_noise: bool = False
    check: bool = False
    drop_last: bool = False
    # An uneven window: its last micro-batch is this size, the others batch_size (training.memory.planned sets it).
    last_micro_batch: Optional[int] = None
    # --micro-batch auto or M: batch_size is the batch per update until training.memory.plan_run sets the micro-batch.
    micro_batch: Optional[Union[str, int]] = None
    memory_budget: Optional[int] = None
    memory_plan: Optional[dict] = None
    # What it writes: the "checkpoints and logs" flags.
    ckpt_dir: Optional[str] = None
    keep_checkpoints: Optional[int] = None
    resume: bool = False
    overwrite: bool = False
    log_json: Optional[str] = None
    plot: Optional[str] = None
    # A tool's own run-defining flags; this process's rank and the number of ranks, found at run time.
    tool_settings: dict = dataclasses.field(default_factory=dict)
    rank: int = 0
    ranks: int = 1

    def __post_init__(self):
        _one_of(self.device_target, "device_target", DEVICES)
        _one_of(self.mode, "mode", MODES)
        _one_of(self.driver, "driver", DRIVERS)
        _one_of(self.optimizer, "optimizer", OPTIMIZERS)
        _one_of(self.scale_rule, "scale_rule", SCALE_RULES)
        if self.scale_rule == "sqrt" and self.optimizer != "adamw":
            raise ValueError(f"scale_rule='sqrt' sets Adam's betas, which only optimizer='adamw' keeps where it can "
                             f"(docs/scale-rules.md), got optimizer={self.optimizer!r}")
        non_negative_int(self.seed, "seed")
        for name in ("batch_size", "epochs", "ranks"):
            positive_int(getattr(self, name), name)
        if self.accumulate_step not in ADAPTIVE:
            positive_int(self.accumulate_step, "accumulate_step")
        elif self.driver == WINDOW_STEP and self.accumulate_step == NOISE:
            raise ValueError(f"accumulate_step={self.accumulate_step!r} changes N in the graph; driver='window' "
                             "needs N on the host")
        if self.clip_norm is not None and (isinstance(self.clip_norm, bool) or not isinstance(
                self.clip_norm, numbers.Real) or not 0 < self.clip_norm < math.inf):
            raise ValueError(f"clip_norm must be a positive finite number, got {self.clip_norm!r}")
        if self.ema is not None and (isinstance(self.ema, bool) or not isinstance(self.ema, numbers.Real)
                                     or not 0 < self.ema < 1):
            raise ValueError(f"ema must be a number in (0, 1), got {self.ema!r}")
        if self.update_cost is not None:
            if isinstance(self.update_cost, bool) or not isinstance(self.update_cost, numbers.Real) \
                    or not 0 < self.update_cost < math.inf:
                raise ValueError(f"update_cost must be a positive finite number, got {self.update_cost!r}")
            if self.accumulate_step != NOISE:
                raise ValueError(f"update_cost sets how the noise-scale window chooses N, got accumulate_step="
                                 f"{self.accumulate_step!r}: pass accumulate_step='noise'")
        self._check_probe()
        _check_micro_batch(self)
        for name in ("distributed", "shuffle", "drop_last", "resume", "overwrite", "track_noise",
                     "check"):
            boolean(getattr(self, name), name)
        if isinstance(self.lr, bool) or not isinstance(self.lr, numbers.Real) or not math.isfinite(self.lr) \
                or self.lr <= 0:
            raise ValueError(f"lr must be a positive finite number, got {self.lr!r}")
        for name in ("ckpt_dir", "log_json", "plot"):
            _optional_path(getattr(self, name), name)
        if not isinstance(self.tool_settings, dict) or not all(
                isinstance(name, str) and name not in RESUME_FIELDS for name in self.tool_settings):
            raise ValueError(f"tool_settings must be a dict of flag names other than {RESUME_FIELDS}, "
                             f"got {self.tool_settings!r}")
        if self.keep_checkpoints is not None:
            positive_int(self.keep_checkpoints, "keep_checkpoints")
        for name in ("resume", "overwrite", "keep_checkpoints"):
            if getattr(self, name) and self.ckpt_dir is None:
                raise ValueError(f"{name}={getattr(self, name)!r} needs a ckpt_dir")
        if self.resume and self.overwrite:
            raise ValueError("resume=True continues the run in ckpt_dir, overwrite=True replaces it: pass one")
        if not 0 <= non_negative_int(self.rank, "rank") < self.ranks:
            raise ValueError(f"rank must be in [0, {self.ranks}), got {self.rank!r}")
        if self.ranks > 1 and not self.distributed:
            raise ValueError(f"ranks > 1 needs distributed=True, got ranks={self.ranks!r}")

    def _check_probe(self):
        if self.probe_interval is not None:
            positive_int(self.probe_interval, "probe_interval")
        if self.probe_tolerance is not None and (
                isinstance(self.probe_tolerance, bool) or not isinstance(self.probe_tolerance, numbers.Real)
                or not 0 < self.probe_tolerance < 1):
            raise ValueError(f"probe_tolerance must be a number in (0, 1), got {self.probe_tolerance!r}")
        given = [name for name in ("probe_interval", "probe_tolerance") if getattr(self, name) is not None]
        if given and self.accumulate_step != AUTO:
            raise ValueError(f"{given[0]} sets how the measured window probes, got accumulate_step="
                             f"{self.accumulate_step!r}: pass accumulate_step='auto'")

    @property
    def effective_batch_size(self):
        """Samples per optimizer update, all ranks together: the window's (None when N changes).

        Under ``distributed`` a fixed ``accumulate_step`` counts the run's micro-batches, over all ranks
        (``training.context.configure_context`` multiplies a rank's by the ranks; docs/devices.md).

        Example:
            >>> TrainConfig(batch_size=16, accumulate_step=8, distributed=True, ranks=4).effective_batch_size
            128
        """
        if self.accumulate_step in ADAPTIVE:
            return None
        if self.micro_batch is not None:  # not planned yet: batch_size is the batch per update
            return self.batch_size
        return self.window_samples

    @property
    def whole_window_reason(self):
        """Why every window must be whole micro-batches of ``batch_size`` (a phrase), or None: an uneven one may do.

        Example:
            >>> TrainConfig(scale_rule="linear").whole_window_reason
            "scale_rule='linear' follows N micro-batches of batch_size"
            >>> TrainConfig(driver="window").whole_window_reason is None
            True
        """
        if self.scale_rule != "none":
            return f"scale_rule={self.scale_rule!r} follows N micro-batches of batch_size"
        return None

    @property
    def window_samples(self):
        """Samples (rows) of one rank's whole window: ``accumulate_step`` micro-batches, the last ``last_micro_batch``.

        Example:
            >>> TrainConfig(batch_size=8, accumulate_step=3).window_samples
            24
            >>> TrainConfig(batch_size=8, accumulate_step=3, last_micro_batch=4).window_samples
            20
        """
        return self.batch_size * (self.first_step - 1) + (self.last_micro_batch or self.batch_size)

    @property
    def tracks_noise(self):
        """True when the run measures the gradient noise scale (``track_noise``, N adaptive or ``"adascale"``).

        Example:
            >>> TrainConfig(accumulate_step="auto").tracks_noise, TrainConfig(scale_rule="adascale").tracks_noise
            (True, True)
        """
        return self.track_noise or self.accumulate_step in ADAPTIVE or self.scale_rule == "adascale"

    @property
    def first_step(self):
        """N of the first window: ``accumulate_step``, or the least an adaptive window allows.

        Example:
            >>> TrainConfig(accumulate_step="auto").first_step, TrainConfig(accumulate_step="noise").first_step
            (1, 2)
        """
        return {AUTO: AUTO_STEPS[0], NOISE: NOISE_STEPS[0]}.get(self.accumulate_step, self.accumulate_step)

    def batch_description(self):
        """How a window's batch is made, as the run's first and last lines say it.

        Example:
            >>> TrainConfig(batch_size=32, accumulate_step=4).batch_description()
            '32 x 4 = effective 128'
            >>> TrainConfig(batch_size=8, accumulate_step=3, last_micro_batch=4).batch_description()
            '8 + 8 + 4 = effective 20'
            >>> TrainConfig(batch_size=32, accumulate_step="auto").batch_description()
            '32 x auto (N from 1 to 64, measured by branched runs)'
            >>> TrainConfig(batch_size=32, accumulate_step="noise", update_cost=1.5).batch_description()
            '32 x noise (N from 2 to 64, following sqrt(1.5 x the gradient noise scale))'
        """
        ranks = f" x {self.ranks} ranks" if self.distributed else ""
        if self.micro_batch is not None:
            return f"{self.batch_size} per update, micro-batch " + \
                ("auto (measured)" if self.micro_batch == AUTO else str(self.micro_batch))
        if self.accumulate_step == AUTO:
            return (f"{self.batch_size} x auto{ranks} (N from {AUTO_STEPS[0]} to {AUTO_STEPS[1]}, "
                    "measured by branched runs)")
        if self.accumulate_step == NOISE:
            aim = "the gradient noise scale" if self.update_cost is None else \
                f"sqrt({self.update_cost:g} x the gradient noise scale)"
            return f"{self.batch_size} x noise{ranks} (N from {NOISE_STEPS[0]} to {NOISE_STEPS[1]}, following {aim})"
        return f"{self.window_description()} = effective {self.effective_batch_size}"

    def window_description(self):
        """How a fixed window makes the batch per update: micro-batch x N, or its sizes when the last is smaller.

        Example:
            >>> TrainConfig(batch_size=32, accumulate_step=4).window_description()
            '32 x 4'
            >>> TrainConfig(batch_size=8, accumulate_step=3, last_micro_batch=4, distributed=True,
            ...             ranks=2).window_description()
            '8 + 8 + 4 over 2 ranks'
        """
        ranks = f" over {self.ranks} ranks" if self.distributed else ""
        if self.last_micro_batch is None:
            return f"{self.batch_size} x {self.accumulate_step}{ranks}"
        sizes = " + ".join(map(str, [self.batch_size] * (self.accumulate_step - 1) + [self.last_micro_batch]))
        return sizes + ranks

    @property
    def main_rank(self):
        """True on the process that prints and writes files (rank 0; the only one without ``distributed``).

        Example:
            >>> TrainConfig(distributed=True, rank=1, ranks=2).main_rank
            False
        """
        return self.rank == 0

    def resume_settings(self):
        """The settings a checkpoint records and a resumed run must repeat exactly: ``RESUME_FIELDS`` and ``tool_settings``.

        Example:
            >>> settings = TrainConfig(tool_settings={"width": 64}).resume_settings()
            >>> settings["accumulate_step"], settings["width"]
            (2, 64)
        """
        return {**{name: getattr(self, name) for name in RESUME_FIELDS}, **self.tool_settings}
