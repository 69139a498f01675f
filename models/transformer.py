"""A small GPT-style causal language model and its summed token loss.

Token and position embeddings, pre-LayerNorm blocks (causal self-attention
that ignores PAD keys, then an MLP), a final LayerNorm and an output layer
tied to the input embedding. Given document ids (rows packed by
``data.packing``) attention stays within each document and positions
restart at each (``document_mask``, ``document_positions``), so a packed
row computes what its documents compute one by one. ``TokenLoss`` returns the summed cross-entropy
over non-PAD targets and their count: what ``Accumulator(..., reduction="mean")``
takes as ``accumulator(grads, count)`` to equal the large batch exactly.
"""
import math

import mindspore as ms
from mindspore import mint, nn, ops

from common.checks import non_negative_int, positive_int

# Added to the scores of masked keys; finite, so an all-PAD row stays finite.
MASKED_SCORE = -1e9


def causal_mask(keep):
    """Which keys each query attends to, ``[B, T, T]`` bool: those at or before it that ``keep`` ``[B, T]`` holds.

    Example:
        >>> causal_mask(ms.Tensor([[True, True, False]])).astype(ms.int32).asnumpy().tolist()
        [[[1, 0, 0], [1, 1, 0], [1, 1, 0]]]
    """
    positions = ops.cumsum(ops.ones_like(keep[0]).astype(ms.int32), 0)
    causal = positions.expand_dims(0) <= positions.expand_dims(1)          # [query, key]
    return ops.logical_and(causal.expand_dims(0), keep.expand_dims(1))     # [batch, query, key]


def document_mask(documents):
    """The block-diagonal causal mask of packed rows, ``[B, T, T]`` bool, from document ids ``[B, T]``.

    A query attends to the keys at or before it in its own document; id 0
    (``data.packing.NO_DOCUMENT``, a row's padding) is no document, and no
    query attends to it. Pass the ids as a Tensor: a new tuple would be a
    new compiled graph.

    Example:
        >>> mask = document_mask(ms.Tensor([[1, 1, 2, 0]], ms.int32))
        >>> mask.astype(ms.int32).asnumpy()[0].tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]
    """
    same = documents.expand_dims(2) == documents.expand_dims(1)            # [batch, query, key]
    return ops.logical_and(causal_mask(documents != 0), same)


def document_positions(mask):
    """Each token's position within its document, ``[B, T]`` int32, from ``document_mask``'s mask (0 at padding).

    Example:
        >>> document_positions(document_mask(ms.Tensor([[1, 1, 2, 2, 2, 0]], ms.int32))).asnumpy().tolist()
        [[0, 1, 0, 1, 2, 0]]
    """
    return ops.maximum(mask.astype(ms.int32).sum(-1) - 1, 0)


class TanhGELU(nn.Cell):
    """GELU's tanh form, ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``, as ``nn.GELU()`` computes it, in float32.

    Composed of elementwise ops: MindSpore 2.10's CPU GeLU kernel and its
    gradient are slower (docs/language-model-tool.md#speed). Float32
    whatever the compute dtype, so that ``x^3`` cannot overflow float16.

    Example:
        >>> import numpy as np
        >>> x = ms.Tensor(np.linspace(-4, 4, 9, dtype=np.float32))
        >>> bool(np.allclose(TanhGELU()(x).asnumpy(), nn.GELU()(x).asnumpy(), atol=1e-3))
        True
    """

    def __init__(self):
        super().__init__()
        self.slope = math.sqrt(2.0 / math.pi)

    def construct(self, x):
        y = x.astype(ms.float32)
        return (0.5 * y * (1.0 + ops.tanh(self.slope * (y + 0.044715 * y * y * y)))).astype(x.dtype)


class Attention(nn.Cell):
    """Multi-head causal self-attention; keys at PAD positions get no weight.

    ``keep`` is ``[B, T]``, the keys that are not padding (attention is
    causal among them), or ``[B, T, T]``, which keys each query attends to
    (``document_mask`` for packed rows).

    Example:
        >>> import numpy as np
        >>> attention = Attention(8, 2)
        >>> x = ms.Tensor(np.ones((1, 3, 8), np.float32))
        >>> attention(x, ms.Tensor([[True, True, False]])).shape
        (1, 3, 8)
    """

    def __init__(self, width, heads, dropout=0.0):
        super().__init__()
        if width % heads:
            raise ValueError(f"width must be a multiple of heads, got width={width} and heads={heads}")
        self.heads = heads
        self.scale = (width // heads) ** -0.5
        self.qkv = nn.Dense(width, 3 * width)
        self.out = nn.Dense(width, width)
        self.dropout = nn.Dropout(p=dropout)
        # An attribute, not the module constant: amp O1 recompiles construct without this module's globals.
        self.masked_score = MASKED_SCORE
        # Split, not qkv[0], qkv[1], qkv[2]: one kernel where CPU StridedSlice and its gradient are dear
        # (docs/language-model-tool.md#speed).
        self.split = ops.Split(2, 3)

    def construct(self, x, keep):
        batch, length, width = x.shape
        head = width // self.heads
        q, k, v = self.split(self.qkv(x).reshape(batch, length, 3, self.heads, head))
        q = q.reshape(batch, length, self.heads, head).transpose(0, 2, 1, 3)
        k = k.reshape(batch, length, self.heads, head).transpose(0, 2, 1, 3)
        v = v.reshape(batch, length, self.heads, head).transpose(0, 2, 1, 3)
        # Scores and softmax in float32 whatever the compute dtype (amp O2):
        # a float16 -1e9 is -inf, and an all-masked row would be NaN.
        scores = ops.matmul(q, k.swapaxes(-1, -2)).astype(ms.float32) * self.scale
        allowed = causal_mask(keep) if keep.ndim == 2 else keep
        scores = ops.where(allowed.expand_dims(1), scores, self.masked_score)
        weights = self.dropout(ops.softmax(scores, -1)).astype(v.dtype)
        mixed = ops.matmul(weights, v).transpose(0, 2, 1, 3).reshape(batch, length, width)
        return self.out(mixed)


class Block(nn.Cell):
    """Pre-LayerNorm transformer block: ``x + attention(ln(x))``, then ``x + mlp(ln(x))``.

    Example:
        >>> import numpy as np
        >>> block = Block(8, 2)
        >>> block(ms.Tensor(np.ones((2, 3, 8), np.float32)), ms.Tensor(np.ones((2, 3), np.bool_))).shape
        (2, 3, 8)
    """

    def __init__(self, width, heads, dropout=0.0):
        super().__init__()
        self.attention_norm = nn.LayerNorm((width,))
        self.attention = Attention(width, heads, dropout)
        self.mlp_norm = nn.LayerNorm((width,))
        self.mlp = nn.SequentialCell(nn.Dense(width, 4 * width), TanhGELU(), nn.Dense(4 * width, width))
        self.dropout = nn.Dropout(p=dropout)

    def construct(self, x, keep):
        x = x + self.dropout(self.attention(self.attention_norm(x), keep))
        return x + self.dropout(self.mlp(self.mlp_norm(x)))


class CausalLM(nn.Cell):
    """GPT-style causal language model: int32 tokens ``[B, T]`` -> float32 logits ``[B, T, vocab_size]``.

    The output layer is the input embedding's table (one Parameter used
    twice), so its gradient is the sum of both uses. ``pad_id`` keys are
    ignored by attention, so a sequence's logits do not depend on the padding
    after it.

    Packed rows (``data.packing.pack_rows``) come with their document ids:
    ``net(tokens, documents)``, both ``[B, T]``, or ``net(inputs)`` with
    ``inputs`` ``[B, 2, T]`` (tokens, then ids: one Tensor, as a step that
    takes ``(inputs, targets)`` passes it). Attention then stays within each
    document (``document_mask``) and positions restart at each
    (``document_positions``): every document's logits are those it has alone.

    Args:
        vocab_size: number of token ids (``pad_id`` included).
        width: embedding width; a multiple of ``heads``.
        depth: number of blocks.
        heads: attention heads.
        max_length: longest sequence (position embeddings); T must not exceed it.
        dropout: dropout rate of attention weights and residual branches.
        pad_id: the padding token id.

    Example:
        >>> import numpy as np
        >>> net = CausalLM(vocab_size=100)
        >>> net(ms.Tensor(np.ones((2, 5), np.int32))).shape
        (2, 5, 100)
        >>> len(net.trainable_params())          # the tied table counts once
        28
        >>> packed = ms.Tensor([[[5, 6, 7, 8, 0], [1, 1, 2, 2, 0]]], ms.int32)   # two documents, then padding
        >>> alone = net(ms.Tensor([[7, 8]], ms.int32))
        >>> bool(np.allclose(net(packed)[0, 2:4].asnumpy(), alone[0].asnumpy(), atol=1e-5))
        True
    """

    def __init__(self, vocab_size, width=64, depth=2, heads=4, max_length=256, dropout=0.0, pad_id=0):
        super().__init__()
        positive_int(vocab_size, "vocab_size")
        positive_int(width, "width")
        positive_int(max_length, "max_length")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        self.pad_id = non_negative_int(pad_id, "pad_id")
        self.embedding = nn.Embedding(vocab_size, width)
        self.position = nn.Embedding(max_length, width)
        self.blocks = nn.CellList([Block(width, positive_int(heads, "heads"), dropout)
                                   for _ in range(positive_int(depth, "depth"))])
        self.norm = nn.LayerNorm((width,))
        self.dropout = nn.Dropout(p=dropout)

    def construct(self, tokens, documents=None):
        if documents is None and tokens.ndim == 3:  # packed rows as one Tensor: tokens, then document ids
            documents = tokens[:, 1]
            tokens = tokens[:, 0]
        if documents is None:
            keep = tokens != self.pad_id
            positions = ops.cumsum(ops.ones_like(tokens[0]), 0) - 1
        else:
            keep = document_mask(documents)   # [B, T, T], once for every block
            positions = document_positions(keep)
        x = self.dropout(self.embedding(tokens) + self.position(positions))
        for block in self.blocks:
            x = block(x, keep)
        table = self.embedding.embedding_table
        return mint.matmul(self.norm(x), table.astype(x.dtype).T).astype(ms.float32)


def token_loss(logits, targets, pad_id=0):
    """``(loss_sum, token_count)`` from logits ``[B, T, V]``: what ``TokenLoss`` returns, for a loop that has the logits.

    Example:
        >>> import numpy as np
        >>> logits = ms.Tensor(np.zeros((1, 3, 4), np.float32))
        >>> loss_sum, count = token_loss(logits, ms.Tensor([[1, 2, 0]], ms.int32))
        >>> round(float(loss_sum), 4), float(count)   # two targets at log(4) each
        (2.7726, 2.0)
    """
    log_probs = ops.log_softmax(logits, -1)
    picked = ops.gather_elements(log_probs, 2, targets.expand_dims(-1)).squeeze(-1)
    mask = (targets != pad_id).astype(ms.float32)
    return -(picked * mask).sum(), mask.sum()


class TokenLoss(nn.Cell):
    """``(loss_sum, token_count)``: summed cross-entropy over non-PAD targets and their float32 count.

    Pass the count to the accumulator with the gradient of the sum, so a
    window's update is ``sum(grads) / sum(counts)``, the large batch's mean
    over tokens. For ``value_and_grad`` use ``has_aux=True`` (the count is
    returned beside the loss, not differentiated), or take ``[0]`` in your
    own forward when the step wants the loss alone (``make_window_step``),
    with the counts from ``data.tokens.token_count``.

    Example:
        >>> import numpy as np
        >>> from data.tokens import pad_batch
        >>> loss_fn = TokenLoss(CausalLM(vocab_size=20))
        >>> inputs, targets = (ms.Tensor(a) for a in pad_batch([[3, 4, 5], [6, 7]]))
        >>> loss_sum, count = loss_fn(inputs, targets)
        >>> float(count), loss_sum.dtype
        (3.0, mindspore.float32)
        >>> grad_fn = ms.value_and_grad(loss_fn, None, loss_fn.trainable_params(), has_aux=True)
        >>> (loss_sum, count), grads = grad_fn(inputs, targets)
        >>> len(grads) == len(loss_fn.trainable_params())
        True
    """

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.pad_id = net.pad_id

    def construct(self, inputs, targets):
        return token_loss(self.net(inputs), targets, self.pad_id)
