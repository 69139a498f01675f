"""Trains the MNIST dense net on one fixed micro-batch and prints its memory as it goes (for test_soak).

Run as ``python tests/models/soak_worker.py MICRO_STEPS KIND...`` (kinds ``micro``, ``unchecked``, ``window``): trains each kind
in turn in this one process and prints a JSON object of each kind's ``[micro_step, rss_mb, malloc_mb]`` samples.
"""
import ctypes
import json
import os
import sys

os.environ.setdefault("MS_DEV_HOST_BLOCKING_RUN", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import mindspore as ms  # noqa: E402
from mindspore import Tensor, nn, ops  # noqa: E402

from accumulator import Accumulator, make_window_step  # noqa: E402
from models.mnist import MnistDenseNet  # noqa: E402

ACCUMULATE_STEP = 4
SAMPLES = 20
# A leak grows per call, not per sample: a small micro-batch makes the calls quick.
MICRO_BATCH = 4


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def memory_mb():
    """Resident memory, and the bytes glibc's malloc holds in use over every arena (mallinfo2), in MB.

    A leak through malloc shows in the second at once; in the first only once
    the free chunks the compiles left behind are used up.
    """
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return [round(rss / 2 ** 20, 2), round((info.uordblks + info.hblkhd) / 2 ** 20, 2)]


def soak(kind, micro_steps):
    """Trains ``kind`` for ``micro_steps`` micro-steps on a fresh net: its memory samples."""
    net = MnistDenseNet()
    optimizer = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    # Clipping and the non-finite check (an `if` inside the in-graph call's branch); unchecked: no gate, one branch.
    accumulator = Accumulator(optimizer, ACCUMULATE_STEP, clip_norm=1.0, skip_nonfinite=kind != "unchecked")
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def forward(x, y):
        return loss_fn(net(x), y)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    rng = np.random.default_rng(0)
    x = rng.random((MICRO_BATCH, 1, 28, 28), np.float32)
    y = rng.integers(0, 10, MICRO_BATCH).astype(np.int32)
    if kind in ("micro", "unchecked"):
        @ms.jit
        def step(images, labels):
            loss, grads = grad_fn(images, labels)
            return loss, accumulator(grads)
        args, per_call = (Tensor(x), Tensor(y)), 1
    else:
        step = make_window_step(grad_fn, accumulator)
        args, per_call = (ops.stack([Tensor(x)] * ACCUMULATE_STEP), ops.stack([Tensor(y)] * ACCUMULATE_STEP)), \
            ACCUMULATE_STEP
    calls = micro_steps // per_call
    samples = []
    for call in range(1, calls + 1):
        step(*args)
        if call % (calls // SAMPLES) == 0:
            samples.append([call * per_call, *memory_mb()])
    return samples


def main(micro_steps, *kinds):
    ms.set_context(mode=ms.GRAPH_MODE)
    print(json.dumps({kind: soak(kind, int(micro_steps)) for kind in kinds}))


if __name__ == "__main__":
    main(*sys.argv[1:])
