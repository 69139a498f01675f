"""The layers that make two forward passes of one batch differ: dropout and BatchNorm in training mode.

``check_equivalence`` names them as reasons a window differs from the large
batch; ``make_whole_batch_step`` refuses them, since it runs every micro-batch
forward twice.
"""
from mindspore import nn

BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)
# mint.nn's Dropout and Dropout2d are DropoutExt and Dropout2dExt.
DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.DropoutExt, nn.Dropout2dExt)


def dropout_rate(cell):
    """The probability of dropping an element: ``p`` or ``prob`` where the layer has one, else 1 - ``keep_prob``.

    Example:
        >>> dropout_rate(nn.Dropout(p=0.25))
        0.25
    """
    for attribute in ("p", "prob"):
        if getattr(cell, attribute, None) is not None:
            return float(getattr(cell, attribute))
    return 1.0 - float(cell.keep_prob)


def active_dropouts(network):
    """``(name, cell, rate)`` of each dropout layer in ``network`` that drops elements in training mode.

    Example:
        >>> net = nn.SequentialCell(nn.Dense(3, 4), nn.Dropout(p=0.1), nn.Dropout(p=0.0))
        >>> active_dropouts(net)
        []
        >>> [(name, rate) for name, _, rate in active_dropouts(net.set_train())]
        [('1', 0.1)]
    """
    return [(name, cell, dropout_rate(cell)) for name, cell in network.cells_and_names()
            if isinstance(cell, DROPOUTS) and cell.training and dropout_rate(cell) > 0]


def batch_statistics_norms(network):
    """``(name, cell)`` of each BatchNorm in ``network`` that normalises by the batch's own statistics.

    Example:
        >>> net = nn.SequentialCell(nn.Dense(3, 4), nn.BatchNorm1d(4))
        >>> batch_statistics_norms(net)
        []
        >>> [name for name, _ in batch_statistics_norms(net.set_train())]
        ['1']
    """
    return [(name, cell) for name, cell in network.cells_and_names() if isinstance(cell, BATCH_NORMS)
            and (cell.use_batch_statistics or (cell.use_batch_statistics is None and cell.training))]
