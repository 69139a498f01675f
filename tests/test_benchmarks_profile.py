"""benchmarks/profile.py: MindSpore's profiler reads the kernels inside each step."""
import json
import os
import subprocess
import sys

import pytest

from benchmarks.profile import format_profile, read_op_types

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "benchmark.py")


@pytest.mark.slow
def test_profile_flag_reads_the_optimizer_in_the_plain_step_and_the_window_only(tmp_path):
    path = tmp_path / "profile.json"
    done = subprocess.run([sys.executable, SCRIPT, "--profile", "--nets", "mnist", "-B", "4", "-N", "2",
                           "--optimizer", "adam", "--json", str(path)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    calls = json.loads(path.read_text())["profiles"][0]["calls"]
    # MNIST's net holds 6 tensors: one fused Adam each per plain step, per window in the recommended step.
    assert calls["plain"]["ops"]["Adam"][0] == 6
    assert "Adam" not in calls["micro"]["ops"] and calls["window"]["ops"]["Adam"][0] == 3
    # The micro-step adds its gradients into the window's buffers; the plain step keeps none.
    assert "AssignAdd" in calls["micro"]["ops"] and calls["micro"]["ops"]["MatMul"][0] == calls["plain"]["ops"]["MatMul"][0]
    assert all(call["wall_ms"] > 0 for call in calls.values())
    # Every kernel but a call's first has a launch gap before it.
    assert set(calls["plain"]["gap_us"]) == set(calls["plain"]["ops"]) and calls["plain"]["gap_us"]["Adam"] > 0
    assert "wall ms" in done.stdout


def test_a_folder_without_the_profilers_table_is_named(tmp_path):
    with pytest.raises(RuntimeError, match=str(tmp_path)):
        read_op_types(str(tmp_path), 1)


def test_the_table_orders_kernels_by_their_largest_compute_time():
    calls = {"plain": dict(ops={"Adam": (6.0, 0.3), "MatMul": (4.0, 0.9)}, gap_us={}, wall_ms=2.0),
             "micro": dict(ops={"MatMul": (4.0, 0.9), "AssignAdd": (1.0, 0.1)}, gap_us={}, wall_ms=1.5),
             "window": dict(ops={"MatMul": (4.0, 0.9)}, gap_us={}, wall_ms=1.7)}
    lines = format_profile(dict(net="n", batch=1, accumulate=2, optimizer="adam", calls=calls)).splitlines()
    assert [line.split()[0] for line in lines[2:5]] == ["MatMul", "Adam", "AssignAdd"]
