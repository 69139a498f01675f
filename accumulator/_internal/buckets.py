"""Contiguous gradient buckets: the window's sums in a few flat buffers.

A kernel launch costs microseconds on CPU whatever its size, so a buffer per
parameter makes every pass over the window (the micro-step's add, the
window's scale, clear, norm and finiteness check, the AllReduce) cost a
kernel per tensor (docs/mindspore-behaviours.md#a-kernel-per-tensor-what-a-micro-step-and-a-window-launch). As DDP, DeepSpeed and
Megatron do, parameters of one buffer dtype are packed, in order, into flat
buckets of at most ``cap`` elements: a micro-step adds its gradients with one
concat and one ``AssignAdd`` per bucket. A parameter of more elements than
``cap`` or ``MAX_PACKED_PARAMETER_ELEMENTS`` keeps a buffer of its own shape, so no concat copies it. The optimizer gets
per-parameter gradients back from ``split``.
"""
from typing import Sequence, Tuple

import numpy as np
import mindspore as ms
from mindspore import Parameter, ParameterTuple, ops
from mindspore.common.initializer import initializer

from accumulator._internal import capabilities
from accumulator._internal.deprecation import deprecated

# SplitWithSize is missing from some releases (docs/mindspore-behaviours.md#versions): then each piece is a Slice.
_split_with_size = None if capabilities.SplitWithSize is None else capabilities.SplitWithSize()
_slice = ops.Slice()
# The most elements one packed bucket holds, so a micro-step's concat copy stays small (docs/how-it-works.md#the-state).
MAX_BUCKET_ELEMENTS = 1 << 20
# The most elements a parameter may have and still be packed with others: a larger one keeps its own buffer, as its
# kernels' launch is small beside their work and packing it would copy it in a concat every micro-step
# (docs/mindspore-behaviours.md#a-kernel-per-tensor-what-a-micro-step-and-a-window-launch).
MAX_PACKED_PARAMETER_ELEMENTS = 1 << 16
_RENAMED = {"CAP": "MAX_BUCKET_ELEMENTS", "ALONE": "MAX_PACKED_PARAMETER_ELEMENTS"}


def __getattr__(name):
    """The old names ``CAP`` and ``ALONE``, deprecated.

    Example:
        >>> import warnings
        >>> from accumulator._internal import buckets
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     buckets.CAP == buckets.MAX_BUCKET_ELEMENTS
        True
    """
    if name not in _RENAMED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    deprecated(f"accumulator._internal.buckets.{name}", f"accumulator._internal.buckets.{_RENAMED[name]}")
    return globals()[_RENAMED[name]]


def _flat(tensor, dtype):
    # Decided when the graph is built: a Cast to the same dtype is still a kernel.
    tensor = tensor.reshape((-1,))
    return tensor if tensor.dtype == dtype else tensor.astype(dtype)


def _sliced(flat, sizes, offsets):
    """``flat`` cut into pieces of ``sizes``, a Slice each: where the release has no SplitWithSize kernel.

    A loop adding to a tuple, not a list comprehension: the comprehension compiles far slower on MindSpore 2.7's
    CPU (docs/mindspore-behaviours.md#versions).
    """
    pieces = ()
    for offset, size in zip(offsets, sizes):
        pieces = pieces + (_slice(flat, (offset,), (size,)),)
    return pieces


def _groups(sizes, dtypes, cap):
    """Parameter indices per bucket: each dtype's parameters in order, packed up to ``cap`` elements."""
    groups, open_group = [], {}
    for index, (size, dtype) in enumerate(zip(sizes, dtypes)):
        if size > min(cap, MAX_PACKED_PARAMETER_ELEMENTS):
            groups.append([index])
            continue
        group = open_group.get(dtype)
        if group is None or sum(sizes[i] for i in group) + size > cap:
            group = open_group[dtype] = []
            groups.append(group)
        group.append(index)
    return tuple(tuple(group) for group in groups)


@ms.jit_class
class Buckets:
    """The window's layout in buckets: ``flatten`` gradients to buckets, ``split`` buckets to gradients.

    Args:
        parameters: the optimizer's parameters, whose gradients are summed.
        dtypes: each parameter's buffer dtype.
        cap: the most elements packed into one bucket.

    Example:
        >>> from mindspore import Tensor, nn
        >>> net = nn.Dense(3, 2)
        >>> buckets = Buckets(net.trainable_params(), (ms.float32, ms.float32))
        >>> [(b.name, tuple(b.shape)) for b in buckets.zeros(net.trainable_params(), "sum")]
        [('sum.weight..bias', (8,))]
        >>> grads = (Tensor(np.ones((2, 3), np.float32)), Tensor(np.full(2, 2.0, np.float32)))
        >>> buckets.flatten(grads)[0].asnumpy().tolist()
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0]
        >>> [tuple(g.shape) for g in buckets.split(buckets.flatten(grads))]
        [(2, 3), (2,)]
    """

    def __init__(self, parameters: Sequence[Parameter], dtypes: Sequence[ms.dtype.Type],
                 cap: int = MAX_BUCKET_ELEMENTS) -> None:
        shapes = [tuple(p.shape) for p in parameters]
        sizes = [int(np.prod(shape)) for shape in shapes]
        self.groups = _groups(sizes, list(dtypes), cap)
        self.shapes = tuple(shapes)
        self.sizes = tuple(tuple(sizes[i] for i in group) for group in self.groups)
        # Where each parameter lies: (bucket, index within the bucket).
        places = {i: (b, k) for b, group in enumerate(self.groups) for k, i in enumerate(group)}
        self.places = tuple(places[i] for i in range(len(shapes)))
        self.dtypes = tuple(dtypes[group[0]] for group in self.groups)
        # One SplitWithSize kernel per bucket where the release has it, else a Slice per piece; asked once, here,
        # not at import (docs/mindspore-behaviours.md#versions).
        self.one_kernel_split = capabilities.split_with_size()
        self.offsets = tuple(tuple(int(o) for o in np.cumsum((0,) + sizes[:-1])) for sizes in self.sizes)

    def zeros(self, parameters: Sequence[Parameter], prefix: str) -> ParameterTuple:
        """Zero-initialised buffers, one per bucket: flat, or of its parameter's shape when it holds one.

        Named ``prefix.first`` for a bucket of one parameter ``first``, ``prefix.first..last`` otherwise.
        """
        buffers = []
        for group, sizes, dtype in zip(self.groups, self.sizes, self.dtypes):
            first, last = parameters[group[0]], parameters[group[-1]]
            shape = first.shape if len(group) == 1 else (sum(sizes),)
            name = f"{prefix}.{first.name}" if len(group) == 1 else f"{prefix}.{first.name}..{last.name}"
            buffers.append(Parameter(initializer("zeros", shape, dtype), name=name, requires_grad=False))
        return ParameterTuple(buffers)

    def flatten(self, grads) -> Tuple:
        """One Tensor per bucket, in its dtype: the bucket's gradients concatenated (or the one, as it is)."""
        return tuple([self._join(grads, group, dtype) for group, dtype in zip(self.groups, self.dtypes)])

    @staticmethod
    def _join(grads, group, dtype):
        if len(group) == 1:
            grad = grads[group[0]]
            return grad if grad.dtype == dtype else grad.astype(dtype)
        return ops.concat([_flat(grads[i], dtype) for i in group])

    def split(self, flats) -> Tuple:
        """The per-parameter gradients, in the parameters' order and shapes, of one Tensor per bucket."""
        pieces = [flat if len(sizes) == 1 else self._split_bucket(flat, sizes, offsets)
                  for flat, sizes, offsets in zip(flats, self.sizes, self.offsets)]
        return tuple([self._piece(pieces, bucket, index, shape) for (bucket, index), shape
                      in zip(self.places, self.shapes)])

    def _split_bucket(self, flat, sizes, offsets):
        # SplitWithSize, one kernel: ops.split slices piece by piece in a Python
        # loop that exceeds the graph's call depth at 128 tensors
        # (docs/mindspore-behaviours.md#a-kernel-per-tensor-what-a-micro-step-and-a-window-launch).
        if self.one_kernel_split:
            return _split_with_size(flat, sizes, 0)
        return _sliced(flat, sizes, offsets)

    def _piece(self, pieces, bucket, index, shape):
        if len(self.sizes[bucket]) == 1:
            return pieces[bucket]
        return pieces[bucket][index].reshape(shape)
