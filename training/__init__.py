"""Training runs with gradient accumulation: the machinery behind ``scripts/train_mnist.py`` and ``train_lm.py``.

Read in this order: ``config`` (``TrainConfig``, every setting checked once),
``task`` (what is trained: the seam to a data set and a network), ``loop``
(``train``: build, train, evaluate; ``probe`` its measured window), ``checkpoints`` (per-epoch saves and
exact resume), ``records`` (printed lines, summary, JSON log, plot);
``outputs`` checks before any work that every output can be written,
``interrupts`` turns Ctrl-C and SIGTERM into an exception that unwinds a
run, ``context`` sets MindSpore's device and mode, ``optimizers`` maps
names to optimizers, ``mnist`` and ``lm`` are the MNIST and language-model
tasks (``lm_command`` the language model's flags), ``command`` the flags, checks and ending the tools share,
``arguments`` the command-line types and flag spelling, ``errors`` the
error a run reports to its user.
"""
