"""Networks and losses used by the examples and tests."""
from .mnist import LOSS_REDUCTIONS, MnistDenseNet, mnist_loss

__all__ = ["LOSS_REDUCTIONS", "MnistDenseNet", "mnist_loss"]
