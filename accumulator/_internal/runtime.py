"""The MindSpore runtime setting the library needs on CPU, made by the first ``Accumulator``.

MindSpore 2.10 launches kernels asynchronously by default. On a CPU that
makes graphs without control flow, such as the micro-step that
``accumulate(grads)`` builds, slower, and ``MS_DEV_HOST_BLOCKING_RUN=1``
avoids it; MindSpore reads the variable when its first operation runs, not
when it is imported. The library decides it when an ``Accumulator`` is
made, not at import: by then a script has chosen its device, and none of
the library's graphs has run
(docs/mindspore-behaviours.md#asynchronous-launch-slows-small-graphs-on-cpu).
"""
import logging
import os

import mindspore as ms

BLOCKING_RUN = "MS_DEV_HOST_BLOCKING_RUN"

logger = logging.getLogger("accumulator")


def block_on_cpu(environ=os.environ):
    """Sets ``MS_DEV_HOST_BLOCKING_RUN=1`` in ``environ`` on a CPU when it is not set; True when it set it.

    Every ``Accumulator`` calls it as it is made; it logs one line (level
    INFO) when it sets the variable, so once a process. A value you set yourself is kept: ``0`` keeps the
    asynchronous launch. On GPU and Ascend, where the asynchronous launch
    is what overlaps the host with the device, nothing is set.

    Example:
        >>> block_on_cpu({}) == (ms.get_context("device_target") == "CPU")
        True
        >>> block_on_cpu({BLOCKING_RUN: "0"})
        False
    """
    if BLOCKING_RUN in environ or ms.get_context("device_target") != "CPU":
        return False
    environ[BLOCKING_RUN] = "1"
    logger.info("accumulator: set %s=1: MindSpore's asynchronous launch slows graphs on CPU "
                "(docs/mindspore-behaviours.md#asynchronous-launch-slows-small-graphs-on-cpu); set it to 0 to keep that launch",
                BLOCKING_RUN)
    return True
