"""One msrun rank of scripts/train_lm.py on the small synthetic text the tests use (3,000 bytes)."""
import sys

import training.lm
from scripts import train_lm

if __name__ == "__main__":
    training.lm.SYNTHETIC_BYTES = 3000
    train_lm.main(sys.argv[1:])
