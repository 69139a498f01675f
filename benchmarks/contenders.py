"""What the benchmark compares: one builder per contender, registered by name.

A builder takes the worker's spec (``hidden``, ``batch`` B, ``accumulate`` N,
``mode``) and returns a ``Runner``: a no-argument ``step`` that trains on one
call's worth of fixed synthetic data, how many samples one call consumes, and
the bytes of extra state the contender keeps. To add a row, write a builder
and ``register`` it; nothing else changes. The builders are private: the
registry, ``CONTENDERS[name].build``, is how they are reached.

MindSpore is imported inside the builders so the parent process (which only
schedules workers) never pays for it.
"""
from dataclasses import dataclass
from typing import Callable, Tuple


@dataclass
class Runner:
    """One contender ready to time.

    Example:
        >>> Runner(step=lambda: None, samples_per_call=32, state_bytes=0, param_bytes=4).samples_per_call
        32
    """
    step: Callable
    samples_per_call: int
    state_bytes: int
    param_bytes: int
    sync: Callable = None  # waits until queued device work is done
    weights: Callable = None  # the trained weights as numpy arrays: shows the contender really updates


@dataclass
class Contender:
    """A registered row: its name, what it measures, its builder and the modes it runs in.

    Example:
        >>> contender = CONTENDERS["window"]
        >>> contender.modes, contender.experiment
        (('graph',), False)
    """
    name: str
    doc: str
    build: Callable
    modes: Tuple[str, ...] = ("graph", "pynative")
    experiment: bool = False  # the floors: in the default list only with --experiments


CONTENDERS = {}


def register(name, doc, modes=("graph", "pynative"), experiment=False):
    """Decorator adding a builder to ``CONTENDERS``.

    Example:
        >>> @register("my_row", "what it measures", modes=("graph",))
        ... def build_my_row(spec):
        ...     return Runner(step=lambda: None, samples_per_call=spec["batch"], state_bytes=0, param_bytes=1)
        >>> CONTENDERS["my_row"].build(dict(batch=8)).samples_per_call
        8
        >>> del CONTENDERS["my_row"]  # the example's row is not a real one
    """
    def decorate(build):
        CONTENDERS[name] = Contender(name, doc, build, tuple(modes), experiment)
        return build
    return decorate


def default_contenders(experiments=False):
    """Names of the registered contenders a run times when ``--contenders`` is not given.

    Example:
        >>> default_contenders()[:3]
        ['plain_micro', 'plain_full', 'accumulator']
    """
    return [name for name, contender in CONTENDERS.items() if experiments or not contender.experiment]


OPTIMIZERS = ("sgd", "adam")


def _setup(spec):
    """Net, optimizer (``spec["optimizer"]``, SGD by default), loss and fixed data of ``rows`` samples."""
    import mindspore as ms
    from mindspore import Tensor, nn
    from benchmarks.nets import mindspore_net, numpy_data

    ms.set_seed(0)
    net, loss_fn = mindspore_net(spec)
    # Plain SGD by default: the cheapest update, so any per-micro-step
    # overhead of an accumulator shows at its largest.
    if spec.get("optimizer", "sgd") == "adam":
        optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    else:
        optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)

    def data(rows):
        return tuple(Tensor(array) for array in numpy_data(spec, rows))

    return net, optimizer, loss_fn, data


def _jit(spec, fn):
    import mindspore as ms
    return ms.jit(fn) if spec["mode"] == "graph" else fn


def _nbytes(params):
    return int(sum(p.size * p.itemsize for p in params))


def _ms_sync():
    import mindspore as ms
    ms.runtime.synchronize()


def _ms_weights(optimizer):
    return lambda: [p.asnumpy().copy() for p in optimizer.parameters]


def _plain(spec, rows):
    import mindspore as ms
    net, optimizer, loss_fn, data = _setup(spec)
    # Named functions only: the graph parser rejects lambdas not on a line of their own.
    def forward(x, y):
        return loss_fn(net, x, y)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    def step(x, y):
        loss, grads = grad_fn(x, y)
        optimizer(grads)
        return loss

    step, (x, y) = _jit(spec, step), data(rows)
    return Runner(lambda: step(x, y), rows, 0, _nbytes(optimizer.parameters), _ms_sync, _ms_weights(optimizer))


@register("plain_micro", "(1) plain step at micro-batch B, no accumulation")
def _build_plain_micro(spec):
    return _plain(spec, spec["batch"])


@register("plain_full", "(2) plain step at the full batch N x B")
def _build_plain_full(spec):
    return _plain(spec, spec["batch"] * spec["accumulate"])


def _accumulating(spec, make_accumulator, divide_loss=False, pass_loss=False):
    """A train step feeding one micro-batch's gradients to an accumulator object."""
    import mindspore as ms
    net, optimizer, loss_fn, data = _setup(spec)
    accumulator = make_accumulator(optimizer, spec["accumulate"])
    scale = 1.0 / spec["accumulate"] if divide_loss else 1.0

    def forward(x, y):
        return loss_fn(net, x, y) * scale

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    def step(x, y):
        loss, grads = grad_fn(x, y)
        if pass_loss:  # a Python constant: the graph keeps one branch
            return accumulator(loss, grads)
        return accumulator(grads)

    step, (x, y) = _jit(spec, step), data(spec["batch"])
    return Runner(lambda: step(x, y), spec["batch"], _nbytes(_state_of(accumulator)),
                  _nbytes(optimizer.parameters), _ms_sync, _ms_weights(optimizer))


def _state_of(accumulator):
    """The accumulator's own Parameters (not the optimizer's or the net's)."""
    from mindspore import Parameter
    if hasattr(accumulator, "state_parameters"):
        return accumulator.state_parameters()
    if hasattr(accumulator, "get_parameters"):  # a Cell: skip its optimizer's
        own = {id(p) for p in accumulator.optimizer.get_parameters()}
        return [p for p in accumulator.get_parameters() if id(p) not in own]
    found = []
    for value in vars(accumulator).values():
        if isinstance(value, Parameter):
            found.append(value)
        elif isinstance(value, (tuple, list)) and all(isinstance(v, Parameter) for v in value):
            found.extend(value)
    return [p for p in found if id(p) not in {id(q) for q in accumulator.optimizer.parameters}]


@register("accumulator", "(3) this project's Accumulator, B x N")
def _build_accumulator(spec):
    from accumulator import Accumulator
    return _accumulating(spec, Accumulator)


@register("tutorial", "(4) the MindSpore tutorial's accumulator: zeros clone, branch on counter % N, loss / N")
def _build_tutorial(spec):
    from benchmarks.tutorial import TutorialAccumulator
    return _accumulating(spec, TutorialAccumulator, divide_loss=True)


@register("tutorial_skip", "the tutorial's design skipping a window of NaN or Inf exactly, as the accumulator does by "
          "default: the check in its branch, the optimizer in an if inside it (benchmarks/tutorial.py)")
def _build_tutorial_skip(spec):
    from benchmarks.tutorial import TutorialSkippingAccumulator
    return _accumulating(spec, TutorialSkippingAccumulator, divide_loss=True)


@register("accumulator_unchecked", "the accumulator(grads) call with skip_nonfinite=False: nothing skips a full window, "
          "so it closes and applies in one branch")
def _build_accumulator_unchecked(spec):
    from accumulator import Accumulator

    def make(optimizer, accumulate_step):
        return Accumulator(optimizer, accumulate_step, skip_nonfinite=False)

    return _accumulating(spec, make)


@register("boost", "(5) mindspore.boost.GradientAccumulation (divides by N itself: loss not divided)")
def _build_boost(spec):
    from mindspore.boost import GradientAccumulation
    # GradientAccumulation(max_accumulation_step, optimizer) is a Cell whose
    # construct(loss, grads) accumulates grads / N and returns the loss.
    def make(optimizer, accumulate_step):
        return GradientAccumulation(accumulate_step, optimizer)

    return _accumulating(spec, make, pass_loss=True)


def _host_applied(spec, make_accumulator, apply=True):
    """A branch-free jitted micro-step, ``accumulator.accumulate(grads)``, then ``accumulator.step()``.

    The host call applies the window, compiled, once per window: no branch
    in the micro-step graph for the gradients to cross. Without ``apply``
    no window is ever applied: the micro-step alone.
    """
    import mindspore as ms
    net, optimizer, loss_fn, data = _setup(spec)
    accumulator = make_accumulator(optimizer, spec["accumulate"])

    def forward(x, y):
        return loss_fn(net, x, y)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    def micro_step(x, y):
        loss, grads = grad_fn(x, y)
        accumulator.accumulate(grads)
        return loss

    micro_step, (x, y) = ms.jit(micro_step), data(spec["batch"])

    def step():
        micro_step(x, y)
        if apply:
            accumulator.step()

    # Without apply the weights never move: what changes is the window's sum.
    trained = _ms_weights(optimizer) if apply else (lambda: [b.asnumpy().copy() for b in accumulator.buffers])
    return Runner(step, spec["batch"], _nbytes(_state_of(accumulator)), _nbytes(optimizer.parameters),
                  _ms_sync, trained)


@register("recommended", "the README's recommended step: accumulate(grads) in the jitted micro-step, then "
          "accumulator.step() on the host, which applies each full window by a compiled call of its own",
          modes=("graph",))
def _build_recommended(spec):
    from accumulator import Accumulator
    return _host_applied(spec, Accumulator)


@register("micro_floor", "the least an accumulating micro-step costs: the recommended step's jitted micro-step "
          "(forward, backward, accumulate(grads)) with no window ever applied", modes=("graph",),
          experiment=True)
def _build_micro_floor(spec):
    from accumulator import Accumulator
    return _host_applied(spec, Accumulator, apply=False)


@register("apply_floor", "the least a window's apply costs: the optimizer and a clear over one buffer per "
          "parameter, no checks, no mean, no counters, one compiled call per window (its time is per micro-batch: "
          "a window's over N)", modes=("graph",), experiment=True)
def _build_apply_floor(spec):
    from benchmarks.floor import make_apply_floor
    _, optimizer, _, _ = _setup(spec)
    apply, buffers = make_apply_floor(optimizer)
    return Runner(apply, spec["batch"] * spec["accumulate"], _nbytes(buffers), _nbytes(optimizer.parameters),
                  _ms_sync, _ms_weights(optimizer))


def _two_graph_floor(spec, checked=False):
    import mindspore as ms
    from benchmarks.floor import make_two_graph_floor
    net, optimizer, loss_fn, data = _setup(spec)

    def forward(x, y):
        return loss_fn(net, x, y)

    step, buffers = make_two_graph_floor(ms.value_and_grad(forward, None, optimizer.parameters), optimizer,
                                         spec["accumulate"], checked)
    x, y = data(spec["batch"])
    return Runner(lambda: step(x, y), spec["batch"], _nbytes(buffers), _nbytes(optimizer.parameters), _ms_sync,
                  _ms_weights(optimizer))


@register("two_graph_floor", "the least the recommended step's design can cost: a jitted micro-step adding into one "
          "buffer per parameter, and apply_floor's optimizer and clear as a graph of its own after every N-th (no "
          "mean, no check, no counters, no split)", modes=("graph",), experiment=True)
def _build_two_graph_floor(spec):
    return _two_graph_floor(spec)


@register("checked_floor", "two_graph_floor skipping a window of NaN or Inf exactly, as the Accumulator does by "
          "default: its apply graph runs the optimizer under an if on the buffers being finite "
          "(benchmarks.floor.finite)", modes=("graph",), experiment=True)
def _build_checked_floor(spec):
    return _two_graph_floor(spec, checked=True)


def _window_floor(spec, checked=False):
    import mindspore as ms
    from benchmarks.floor import make_window_floor
    optimizer, grad_fn, x, y = _stacked_window(spec)
    window, buffers = make_window_floor(grad_fn, optimizer, checked)
    n = ms.Tensor(x.shape[0], ms.int32)
    return Runner(lambda: window(x, y, n), x.shape[0] * x.shape[1], _nbytes(buffers), _nbytes(optimizer.parameters),
                  _ms_sync, _ms_weights(optimizer))


@register("window_floor", "the least the window step's design can cost: the two-graph floor's micro-steps in a "
          "while loop, then its optimizer and clear under an if, one graph a window", modes=("graph",), experiment=True)
def _build_window_floor(spec):
    return _window_floor(spec)


@register("checked_window_floor", "window_floor skipping a window of NaN or Inf exactly, as the window step does by "
          "default: its if on the buffers being finite (benchmarks.floor.finite)", modes=("graph",), experiment=True)
def _build_checked_window_floor(spec):
    return _window_floor(spec, checked=True)


def _stacked_window(spec):
    """Optimizer, grad function and one window of stacked ``[N, B, ...]`` data, for the window-step rows."""
    import mindspore as ms
    from mindspore import ops
    net, optimizer, loss_fn, data = _setup(spec)

    def forward(x, y):
        return loss_fn(net, x, y)

    n, b = spec["accumulate"], spec["batch"]
    x, y = data(n * b)
    return (optimizer, ms.value_and_grad(forward, None, optimizer.parameters),
            ops.reshape(x, (n, b) + x.shape[1:]), ops.reshape(y, (n, b) + y.shape[1:]))


def _window(spec, average=False):
    """The window step over one stacked window; ``average``: with the weights' moving average (decay 0.99)."""
    from accumulator import Accumulator
    from accumulator import make_window_step
    from accumulator.policies import EMA
    optimizer, grad_fn, x, y = _stacked_window(spec)
    accumulator = Accumulator(optimizer, spec["accumulate"],
                              policies=[EMA(optimizer.parameters, 0.99)] if average else [])
    window_step = make_window_step(grad_fn, accumulator)
    return Runner(lambda: window_step(x, y), x.shape[0] * x.shape[1], _nbytes(accumulator.state_parameters()),
                  _nbytes(optimizer.parameters), _ms_sync, _ms_weights(optimizer))


@register("window", "accumulator.drivers.window.make_window_step: a whole window per jitted call (while loop)",
          modes=("graph",))
def _build_window(spec):
    return _window(spec)


@register("window_ema", "the window step with the weights' moving average, accumulator.policies.EMA (decay 0.99), "
          "moved once a window: its cost beside window's (docs/ema.md#what-it-costs)", modes=("graph",))
def _build_window_ema(spec):
    return _window(spec, average=True)


@register("first_example", "docs/window-step.md's first example: each window as the pipeline yields it (numpy), cut "
          "into micro-batches on the host, make_window_step over them with their counts", modes=("graph",))
def _build_first_example(spec):
    import mindspore as ms
    from accumulator import Accumulator, make_window_step
    from benchmarks.nets import numpy_data
    net, optimizer, loss_fn, _ = _setup(spec)

    def forward(x, y):
        return loss_fn(net, x, y) * x.shape[0]  # summed, as the example's loss

    accumulator = Accumulator(optimizer, spec["accumulate"])
    window_step = make_window_step(ms.value_and_grad(forward, None, optimizer.parameters), accumulator)
    b, x, y = spec["batch"], *numpy_data(spec, spec["batch"] * spec["accumulate"])

    def step():
        micro = [(x[i:i + b], y[i:i + b]) for i in range(0, len(y), b)]
        window_step(micro, counts=[len(labels) for _, labels in micro])

    return Runner(step, len(y), _nbytes(accumulator.state_parameters()), _nbytes(optimizer.parameters), _ms_sync,
                  _ms_weights(optimizer))
