"""Benchmarks of gradient accumulation in MindSpore: speed and memory against the plain step.

Every configuration (net x contender x mode x runtime setting) is timed in a
fresh interpreter, so compile caches, memory pools and peak RSS never leak
from one contender into the next. The modules, in the order a run uses them:

* ``nets`` and ``configs``: the nets, the runtime settings and the list of configurations;
* ``contenders``: what is compared, one registered builder per row
  (``tutorial`` and ``floor`` hold the baselines written here);
* ``runner``: starts ``python -m benchmarks.worker`` per configuration,
  alternating over the repeats; ``worker`` times one configuration;
* ``paired``: the contenders in one process, block by block in turn;
* ``end_to_end``: the training tools' epochs against their own compiled step;
* ``ema``: the tools' weights' average, with and without, and its horizon beside N;
* ``report`` and ``plot``: the rows, the table, the JSON and the PNG.

``scripts/benchmark.py`` is the command line over these.
"""
