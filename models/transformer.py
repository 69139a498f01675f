"""A small GPT-style causal language model and its summed token loss.

Token and position embeddings, pre-LayerNorm blocks (causal self-attention
that ignores PAD keys, then an MLP), a final LayerNorm and an output layer
tied to the input embedding. ``TokenLoss`` returns the summed cross-entropy
over non-PAD targets and their count: what ``Accumulator(..., reduction="mean")``
takes as ``accumulator(grads, count)`` to equal the large batch exactly.
"""
import mindspore as ms
from mindspore import mint, nn, ops

from accumulator.checks import non_negative_int, positive_int

# Added to the scores of masked keys; finite, so an all-PAD row stays finite.
MASKED_SCORE = -1e9


class Attention(nn.Cell):
    """Multi-head causal self-attention; keys at PAD positions get no weight.

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

    def construct(self, x, keep):
        batch, length, width = x.shape
        qkv = self.qkv(x).reshape(batch, length, 3, self.heads, width // self.heads).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        # Scores and softmax in float32 whatever the compute dtype (amp O2):
        # a float16 -1e9 is -inf, and an all-masked row would be NaN.
        scores = ops.matmul(q, k.swapaxes(-1, -2)).astype(ms.float32) * self.scale
        positions = ops.cumsum(ops.ones_like(keep[0]).astype(ms.int32), 0)
        causal = positions.expand_dims(0) <= positions.expand_dims(1)          # [query, key]
        allowed = ops.logical_and(causal.expand_dims(0), keep.expand_dims(1))  # [batch, query, key]
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
        self.mlp = nn.SequentialCell(nn.Dense(width, 4 * width), nn.GELU(), nn.Dense(4 * width, width))
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

    def construct(self, tokens):
        keep = tokens != self.pad_id
        positions = ops.cumsum(ops.ones_like(tokens[0]), 0) - 1
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
