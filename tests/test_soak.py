"""Long runs hold memory flat: RSS after warm-up grows by less than 2% over 20k micro-steps."""
import json
import os
import subprocess
import sys

import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "soak_worker.py")
MICRO_STEPS = 20_000


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["micro", "window"])
def test_memory_stays_flat_over_20k_micro_steps(kind):
    result = subprocess.run([sys.executable, WORKER, kind, str(MICRO_STEPS)], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    samples = json.loads(result.stdout.strip().splitlines()[-1])
    # The first tenth warms up: compile caches and memory pools fill there.
    warm = [rss for step, rss in samples if step >= MICRO_STEPS // 10]
    growth = (warm[-1] - warm[0]) / warm[0]
    assert growth < 0.02, f"RSS grew {growth:.1%} after warm-up: {samples}"
