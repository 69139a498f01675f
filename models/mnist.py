"""A small dense classifier for MNIST and the loss it is trained with."""
from mindspore import nn

from common.checks import positive_int

LOSS_REDUCTIONS = ("mean", "sum", "none")


class MnistDenseNet(nn.Cell):
    """Flatten, then Dense-ReLU-Dense-ReLU-Dense: the MindSpore quick-start network.

    Args:
        hidden: width of both hidden layers (512 in the tutorial; 4096 makes
            a wider variant whose gradients are large enough to matter).
        num_classes: number of output logits.

    Example:
        >>> import numpy as np, mindspore as ms
        >>> net = MnistDenseNet()
        >>> net(ms.Tensor(np.zeros((2, 1, 28, 28), np.float32))).shape
        (2, 10)
    """

    def __init__(self, hidden=512, num_classes=10):
        super().__init__()
        hidden = positive_int(hidden, "hidden")
        num_classes = positive_int(num_classes, "num_classes")
        self.flatten = nn.Flatten()
        # Same attribute name as the tutorial, so its checkpoints load as they are.
        self.dense_relu_sequential = nn.SequentialCell(
            nn.Dense(28 * 28, hidden),
            nn.ReLU(),
            nn.Dense(hidden, hidden),
            nn.ReLU(),
            nn.Dense(hidden, num_classes),
        )

    def construct(self, x):
        return self.dense_relu_sequential(self.flatten(x))


def mnist_loss(reduction="mean"):
    """Cross-entropy of logits against int32 class labels.

    Args:
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Example:
        >>> import numpy as np, mindspore as ms
        >>> loss = mnist_loss()
        >>> logits = ms.Tensor(np.zeros((2, 10), np.float32))
        >>> round(float(loss(logits, ms.Tensor([3, 7], ms.int32))), 4)
        2.3026
    """
    if reduction not in LOSS_REDUCTIONS:
        raise ValueError(f"reduction must be one of {LOSS_REDUCTIONS}, got {reduction!r}")
    # Not nn.CrossEntropyLoss: same values to float32 rounding, but it compiles to many more kernels, and
    # launches dominate small steps:
    # docs/mindspore-behaviours.md#a-kernel-per-tensor-what-a-micro-step-and-a-window-launch
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction=reduction)
