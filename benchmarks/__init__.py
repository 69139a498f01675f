"""Benchmarks of gradient accumulation in MindSpore: speed, memory and single kernels.

Every configuration (net x contender x mode x runtime setting) is timed in a
fresh interpreter, so compile caches, memory pools and peak RSS never leak
from one contender into the next. The modules, in the order a run uses them:

* ``configs``: the nets, the runtime settings and the list of configurations;
* ``contenders``: what is compared, one registered builder per row
  (``tutorial`` and ``floor`` hold the two baselines written here);
* ``runner``: starts ``python -m benchmarks.worker`` per configuration,
  alternating over the repeats; ``worker`` times one configuration;
* ``analysis``: merges repeats, picks each contender's best setting and
  checks the issues' targets;
* ``report`` and ``plot``: the table, the target lines, the JSON and the PNG;
* ``kernels``: single kernels, MindSpore against PyTorch, in-process.

``scripts/benchmark.py`` is the command line over these.
"""
