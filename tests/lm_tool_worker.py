"""msrun ranks of scripts/train_lm.py on the small synthetic text the tests use (3,000 bytes).

    lm_tool_worker.py FLAGS... [--next-run FLAGS...]...

Each ``--next-run`` starts another run of the tool in the same ranks, one after the other: starting msrun
costs more than training, so a test compares several configurations from one launch.
"""
import sys

import training.lm
from scripts import train_lm

NEXT_RUN = "--next-run"


def runs(argv):
    """``argv`` cut at each ``--next-run``: one list of flags per run."""
    cut = [[]]
    for token in argv:
        if token == NEXT_RUN:
            cut.append([])
        else:
            cut[-1].append(token)
    return cut


if __name__ == "__main__":
    training.lm.SYNTHETIC_BYTES = 3000
    for flags in runs(sys.argv[1:]):
        train_lm.main(flags)
