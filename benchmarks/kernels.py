"""Single kernels behind the accumulators' times, in MindSpore and (if installed) PyTorch.

The whole-step table says *that* one design is slower; this one says which
kernel makes it so on the machine at hand: the MatMuls of the MNIST net's
first layer, the gradient sum (``AssignAdd``) and the reductions a
finiteness check needs. Run it with ``python scripts/benchmark.py --kernels``.

``report_kernels`` times and prints them all.
"""
import os
import time

import numpy as np

from benchmarks.configs import BLOCKING_ENV
from benchmarks.report import write_json
from benchmarks.worker import use_mindspore

BIG = (4096, 4096)  # the wide net's middle weight


def _time(call, calls, sync):
    call()
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    sync()
    return 1000.0 * (time.perf_counter() - start) / calls


def kernel_inputs():
    """The same numpy inputs for both frameworks: x, W, dy of the first layer and a big matrix.

    Example:
        >>> [a.shape for a in kernel_inputs()]
        [(32, 784), (512, 784), (32, 512), (4096, 4096)]
    """
    rng = np.random.default_rng(0)
    return [rng.random(s, np.float32) for s in ((32, 784), (512, 784), (32, 512), BIG)]


def mindspore_kernels(arrays):
    """MindSpore's jitted call of each kernel of ``KERNELS`` on ``arrays``, and a sync function.

    Returns ``({key: no-argument call}, sync)``; each call returns its result.

    Example:
        >>> calls, sync = mindspore_kernels(kernel_inputs())
        >>> calls["relu"]().shape
        (32, 512)
    """
    import mindspore as ms
    from mindspore import Parameter, Tensor, ops

    x, w, dy, big = (Tensor(a) for a in arrays)
    buffer = Parameter(Tensor(np.zeros(BIG, np.float32)), name="kernels.buffer")
    ones = Tensor(np.ones((BIG[1], 1), np.float32))
    matmul_tb, matmul_ta = ops.MatMul(transpose_b=True), ops.MatMul(transpose_a=True)

    # Inputs go in as arguments: a Tensor the function closes over is a
    # constant to the compiler, which folds sums of it away. Named functions:
    # the graph parser rejects lambdas.
    def forward(a, b): return matmul_tb(a, b)
    def weight_grad(a, b): return matmul_ta(a, b)
    def input_grad(a, b): return ops.matmul(a, b)
    def relu(a): return ops.relu(a)
    def assign_add(a): return ops.assign_add(buffer, a)
    def reduce_sum(a): return a.sum()
    def matmul_sum(a, b): return ops.matmul(a, b).sum()
    def scale(a): return a * 0.5

    calls = (("forward", forward, (x, w)), ("weight_grad", weight_grad, (dy, x)), ("input_grad", input_grad, (dy, w)),
             ("relu", relu, (dy,)), ("assign_add", assign_add, (big,)), ("reduce_sum", reduce_sum, (big,)),
             ("matmul_sum", matmul_sum, (big, ones)), ("scale", scale, (big,)))
    return {name: _bound(ms.jit(fn), args) for name, fn, args in calls}, ms.runtime.synchronize


def _bound(function, args):
    return lambda: function(*args)


def torch_kernels(arrays):
    """PyTorch's call of each kernel of ``KERNELS`` on ``arrays``, and a sync function.

    Raises ImportError without PyTorch.

    Example:
        >>> try:
        ...     calls, sync = torch_kernels(kernel_inputs())
        ... except ImportError:  # no PyTorch here
        ...     calls = None
        >>> calls is None or sorted(calls) == sorted(key for key, _ in KERNELS)
        True
    """
    import torch
    torch.set_num_threads(2)
    x, w, dy, big = (torch.from_numpy(a) for a in arrays)
    buffer = torch.zeros(BIG)
    return {
        "forward": lambda: x @ w.T, "weight_grad": lambda: dy.T @ x, "input_grad": lambda: dy @ w,
        "relu": lambda: torch.relu(dy), "assign_add": lambda: buffer.add_(big),
        "reduce_sum": lambda: big.sum(), "matmul_sum": lambda: (big @ torch.ones(BIG[1], 1)).sum(),
        "scale": lambda: big * 0.5}, (lambda: None)


KERNELS = (
    ("forward", "matmul x @ W.T  [32,784] x [512,784]"),
    ("weight_grad", "matmul dy.T @ x [32,512] x [32,784]"),
    ("input_grad", "matmul dy @ W   [32,512] x [512,784]"),
    ("relu", "relu [32,512] (the cost of one call)"),
    ("assign_add", "buffer += grad  [4096,4096]"),
    ("reduce_sum", "sum             [4096,4096]"),
    ("matmul_sum", "sum as matmul with ones [4096,4096]"),
    ("scale", "grad * 0.5      [4096,4096]"),
)


def time_kernels(calls=50):
    """Milliseconds per call of each kernel, in graph mode, for MindSpore and PyTorch.

    Returns one dict per kernel: ``kernel``, ``mindspore_ms``, ``torch_ms``
    (None without PyTorch).

    Example:
        >>> rows = time_kernels(calls=1)
        >>> rows[0]["kernel"], rows[0]["mindspore_ms"] > 0
        ('matmul x @ W.T  [32,784] x [512,784]', True)
    """
    arrays = kernel_inputs()
    mindspore_cases, mindspore_sync = mindspore_kernels(arrays)
    try:
        torch_cases, torch_sync = torch_kernels(arrays)
    except ImportError:
        torch_cases = None
    rows = []
    for key, label in KERNELS:
        rows.append(dict(kernel=label, mindspore_ms=_time(mindspore_cases[key], calls, mindspore_sync),
                         torch_ms=_time(torch_cases[key], calls, torch_sync) if torch_cases else None))
    return rows


def format_kernels(rows):
    """The kernel table as text.

    Example:
        >>> print(format_kernels([dict(kernel="k", mindspore_ms=2.0, torch_ms=1.0)]))
        kernel                                   MindSpore ms   PyTorch ms   ratio
        k                                               2.000        1.000    2.00
    """
    lines = [f"{'kernel':40} {'MindSpore ms':>13} {'PyTorch ms':>12} {'ratio':>7}"]
    for row in rows:
        torch_ms = row["torch_ms"]
        tail = f"{torch_ms:12.3f} {row['mindspore_ms'] / torch_ms:7.2f}" if torch_ms else f"{'n/a':>12} {'':>7}"
        lines.append(f"{row['kernel']:40} {row['mindspore_ms']:13.3f} {tail}")
    return "\n".join(lines)


def report_kernels(device_target="CPU", json_path=None, calls=50):
    """Times the kernels in this process (graph mode, blocking run on) and prints the table.

    Sets ``MS_DEV_HOST_BLOCKING_RUN=1`` (read when MindSpore starts, so only
    when it has not started yet in this process), graph mode and the device.
    Writes ``{"kernels": rows}`` to ``json_path`` when given; returns 0.

    Example:
        >>> report_kernels(calls=1)  # doctest: +ELLIPSIS
        kernel                                   MindSpore ms   PyTorch ms   ratio
        matmul x @ W.T  [32,784] x [512,784]  ...
        0
    """
    os.environ[BLOCKING_ENV] = "1"
    use_mindspore("graph", device_target)
    rows = time_kernels(calls)
    print(format_kernels(rows))
    if json_path:
        write_json(json_path, kernels=rows)
    return 0
