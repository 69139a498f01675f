"""accumulator.memory.plan: the micro-batch chosen by measured memory, the fit that stops before the budget, the errors.

By hand: a step needing 100 MiB + 10 MiB a sample under a budget of 400 MiB, 90% of it usable (360 MiB): 16 needs
260 MiB and 32 needs 420, so a batch of 64 runs as 4 micro-batches of 16.
"""
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from accumulator.memory.plan import (Measurement, MeasuringChild, MemoryPlan, PlanError, choose_micro_batch,
                                     format_size, measure_in_child, parse_size, peak_resident, plan_micro_batch,
                                     touch_memory)
from accumulator.memory._child import failure
from tests import REPO_ROOT

ROOT = Path(REPO_ROOT)
MIB = 2 ** 20
GIB = 2 ** 30


def linear(base, per_sample, speeds=None, calls=None):
    """A ``measure`` whose peak grows by ``per_sample`` bytes a sample; samples/s from ``speeds`` (or the size)."""
    def measure(size):
        if calls is not None:
            calls.append(size)
        return Measurement(size, base + per_sample * size, float(size) if speeds is None else speeds[size])
    return measure


def test_the_largest_size_under_the_budget_with_its_margin_when_speed_grows_with_size():
    # 100 MiB + 10 MiB a sample; 90% of 400 MiB is 360 MiB: 16 needs 260, 32 needs 420.
    calls = []
    plan = choose_micro_batch(linear(100 * MIB, 10 * MIB, calls=calls), 64, budget=400 * MIB,
                              candidates=[4, 8, 16, 32, 64])
    assert (plan.micro_batch, plan.accumulate_step) == (16, 4)
    assert calls == [64, 32, 16, 8]  # from the largest down; 8 for speed, slower: 4 never runs


def test_the_fastest_size_that_fits_not_the_largest():
    # Each size below is faster than the one above until 1: the search follows them down.
    speeds = {1: 10.0, 2: 30.0, 4: 25.0, 8: 20.0}
    plan = choose_micro_batch(linear(0, MIB, speeds), 8, budget=100 * MIB)
    assert plan.micro_batch == 2
    assert [probe.size for probe in plan.probes] == [1, 2, 4, 8]


def test_the_line_through_two_measured_peaks_skips_the_sizes_it_puts_over_the_budget():
    calls = []
    plan = choose_micro_batch(linear(100 * MIB, 10 * MIB, calls=calls), 64, budget=400 * MIB,
                              candidates=[8, 16, 32, 48, 64])
    # 64 and 48 are measured over (a device reports such peaks): the line puts 32 at 420 MiB > 360.
    assert calls == [64, 48, 16, 8] and plan.micro_batch == 16
    skipped = [probe for probe in plan.probes if probe.size == 32]
    assert [(probe.outcome, probe.peak) for probe in skipped] == [("not run", 420 * MIB)]


def test_the_line_never_skips_the_smallest_size_so_the_error_names_a_measured_need():
    calls = []
    with pytest.raises(PlanError, match=r"below the smallest micro-batch's need: micro-batch 1 peaks at 110\.0 MiB, "
                                        r"so it needs a budget of 122\.2 MiB \(10% kept free\)"):
        choose_micro_batch(linear(100 * MIB, 10 * MIB, calls=calls), 8, budget=50 * MIB)
    assert calls == [8, 4, 1]  # the line through 8 and 4 puts 2 over: not run


def test_sizes_within_the_noise_are_tied_and_the_larger_is_taken():
    def speeds(table, spread=None):
        return lambda size: Measurement(size, MIB, table[size], spread=spread)
    assert choose_micro_batch(speeds({1: 5.0, 2: 100.0, 4: 102.0, 8: 100.0}), 8, GIB).micro_batch == 8  # within 3%
    assert choose_micro_batch(speeds({1: 5.0, 2: 100.0, 4: 110.0, 8: 100.0}), 8, GIB).micro_batch == 4
    # The same 10% apart, but each size's calls spread 12 samples/s either way: not told apart, so the larger.
    assert choose_micro_batch(speeds({1: 5.0, 2: 100.0, 4: 110.0, 8: 100.0}, spread=12.0), 8, GIB).micro_batch == 8


def test_an_uneven_batch_ends_on_a_smaller_micro_batch_that_completes_it():
    plan = choose_micro_batch(linear(0, MIB), 20, budget=10 * MIB, candidates=[4, 8, 16])
    assert plan.micro_batch == 8 and plan.micro_batches == [8, 8, 4] and sum(plan.micro_batches) == 20
    assert "8 + 8 + 4 = 20 per update" in plan.table()


def test_a_batch_smaller_than_one_micro_batch_says_so():
    with pytest.raises(PlanError, match="batch per update of 3 is smaller than one micro-batch: the smallest "
                                        "candidate is 4"):
        choose_micro_batch(linear(0, MIB), 3, budget=MIB, candidates=[4, 8])


def test_a_failure_that_is_not_memory_reports_its_reason():
    def measure(size):
        return Measurement(size, outcome="ValueError: shapes (4, 3) and (2,) not aligned") if size == 4 \
            else linear(0, MIB)(size)
    with pytest.raises(PlanError, match=r"micro-batch 4 failed, not for memory: ValueError: shapes"):
        choose_micro_batch(measure, 8, budget=GIB)


@pytest.mark.parametrize("outcome", ["out of memory (killed by SIGKILL)", "over the budget (stopped at 1.00 GiB)"])
def test_out_of_memory_or_stopped_over_the_budget_steps_down_to_the_sizes_that_fit(outcome):
    calls = []

    def measure(size):
        calls.append(size)
        return Measurement(size, None if outcome.startswith("out") else GIB, outcome=outcome) if size >= 4 \
            else linear(0, MIB)(size)
    plan = choose_micro_batch(measure, 16, budget=GIB)
    assert plan.micro_batch == 2 and calls == [16, 8, 4, 2, 1]
    assert outcome in plan.table()


def test_a_smallest_size_stopped_over_the_budget_names_how_far_it_got():
    def stopped(size):
        return Measurement(size, 100 * MIB, outcome="over the budget (stopped at 100.0 MiB)")
    with pytest.raises(PlanError, match=r"micro-batch 1 passed 100\.0 MiB when it was stopped, so it needs a budget "
                                        r"of more than 111\.1 MiB"):
        choose_micro_batch(stopped, 4, budget=100 * MIB)


def test_sizes_parse_in_binary_units_and_read_back():
    assert parse_size("6GiB") == parse_size("6G") == parse_size("6gb") == parse_size("6Gi") == 6 * 2 ** 30
    assert format_size(parse_size("512MiB")) == "512.0 MiB"
    for bad in ("", "6 parsecs", "-1G", "6iB"):
        with pytest.raises(ValueError, match="expected a size such as 512MiB"):
            parse_size(bad)


@pytest.mark.parametrize("text, message", [
    ("0.5", "a size must be at least 1 byte, got '0.5' (0 bytes)"),
    ("0G", "a size must be at least 1 byte, got '0G' (0 bytes)"),
    ("9" * 400, "a size must be at most 1 EiB, got '99999999999999999999...'"),
])
def test_a_size_of_no_byte_or_past_any_machine_is_one_line(text, message):
    with pytest.raises(ValueError) as error:
        parse_size(text)
    assert str(error.value) == message


@pytest.mark.parametrize("error", [MemoryError("std::bad_alloc"), RuntimeError("Out of memory on device 0"),
                                   RuntimeError("Malloc device memory failed, size[1024]"),
                                   RuntimeError("Device(id:0) memory isn't enough and alloc failed")])
def test_a_memory_error_in_the_step_is_out_of_memory_and_the_search_steps_down(error):
    outcome = failure(error)
    assert outcome.startswith("out of memory (") and type(error).__name__ in outcome

    def measure(size):
        return Measurement(size, outcome=outcome) if size > 2 else Measurement(size, MIB, 1.0)
    assert choose_micro_batch(measure, 8, budget=GIB).micro_batch == 2


def exits(size):
    os._exit(1)  # as a child whose unguarded script's top level failed does, before any answer


def hangs(size):
    time.sleep(3600)


@pytest.mark.slow  # three children
def test_a_child_killed_is_out_of_memory_one_that_dies_names_the_unguarded_script_one_that_hangs_is_stopped(
        monkeypatch):
    assert measure_in_child(killed, 1).outcome == "out of memory (killed by SIGKILL)"
    assert peak_resident() > 0  # and the run is still here
    with pytest.raises(PlanError, match=r"micro-batch 4 failed, not for memory: the child exited with status 1 "
                                        r"before answering: did the script that plans lack `if __name__ == "):
        plan_micro_batch(exits, 4, "1GiB", candidates=[4], device="CPU")
    monkeypatch.setattr("accumulator.memory._child.TIMEOUT", 1.0)
    with MeasuringChild(hangs) as child:
        assert child.measure(2).outcome == "no answer in 1 s: the child was stopped as hung"
        assert not child.alive


def test_peak_memory_is_read_without_proc_in_kib_on_linux_and_bytes_on_macos(monkeypatch):
    def no_proc(path, *args, **kwargs):
        raise OSError(path)
    monkeypatch.setattr("builtins.open", no_proc)
    monkeypatch.setitem(sys.modules, "resource", types.SimpleNamespace(
        RUSAGE_SELF=0, getrusage=lambda who: types.SimpleNamespace(ru_maxrss=1000)))
    monkeypatch.setattr(sys, "platform", "linux")
    assert peak_resident() == 1000 * 1024
    monkeypatch.setattr(sys, "platform", "darwin")
    assert peak_resident() == 1000
    monkeypatch.setitem(sys.modules, "resource", None)  # Windows: no resource module
    assert peak_resident() is None
    with pytest.raises(PlanError, match="this system gives no peak memory to read"):
        plan_micro_batch(touch_memory, 8, "1GiB", device="CPU")


@pytest.mark.slow  # a process of its own
def test_the_library_imports_without_the_resource_module():
    code = ("import sys, mindspore\n"  # MindSpore needs it on Linux: the library must not
            "sys.modules['resource'] = None\n"
            "import accumulator, accumulator.memory.plan\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_step_that_is_not_importable_is_refused_before_any_child():
    with pytest.raises(PlanError, match="make_step must be a top-level function"):
        plan_micro_batch(lambda size: None, 8, "1GiB", device="CPU")


def test_the_plan_records_what_it_measured():
    plan = MemoryPlan(8, 4, 2 ** 30, 0.1, (Measurement(4, 5 * MIB, 9.0, spread=0.5, seconds=2.0),))
    assert plan.record()["probes"] == [{"size": 4, "peak": 5 * MIB, "samples_per_second": 9.0, "outcome": "measured",
                                        "spread": 0.5, "seconds": 2.0, "phases": None}]


def killed(size):
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.fixture
def children_started(monkeypatch):
    """A list that gains an entry for each ``MeasuringChild`` the planner starts."""
    started = []

    class CountedChild(MeasuringChild):
        def __init__(self, *args, **kwargs):
            started.append(True)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr("accumulator.memory.plan.MeasuringChild", CountedChild)
    return started


def test_the_sizes_that_fit_are_measured_in_one_child_and_planned(children_started):
    # The fast suite's one probe child (CI's oldest release runs it too); the plan module's child examples are slow.
    plan = plan_micro_batch(touch_memory, 6, peak_resident() + GIB, args=(MIB,), candidates=[2, 3], steps=1)
    assert [(probe.size, probe.outcome) for probe in plan.probes] == [(2, "measured"), (3, "measured")]
    assert all(probe.peak > probe.size * MIB and probe.samples_per_second > 0 and probe.spread >= 0
               and probe.seconds > 0 for probe in plan.probes)
    assert all(list(probe.phases) == ["start", "build", "first call", "timed"] for probe in plan.probes)
    assert (plan.micro_batch, plan.accumulate_step) in [(2, 3), (3, 2)]
    assert len(children_started) == 1


@pytest.mark.slow
def test_a_child_measures_the_memory_its_step_holds_per_sample_and_a_reused_one_resets_its_peak(children_started):
    with MeasuringChild(touch_memory, args=(64 * MIB,), steps=1) as child:  # this module's name: not counted
        small, large, reused = child.measure(1), child.measure(4), child.measure(1)
        assert child.alive
    # 64 MiB a sample: 4's peak is 1's, its child's first, and the 3 samples' 192 MiB, give or take the import's noise.
    assert abs((large.peak - small.peak) - 192 * MIB) < 32 * MIB
    assert large.peak - reused.peak > 150 * MIB  # reset: the 4 samples' block is no longer the peak
    assert reused.peak >= small.peak - 8 * MIB, (reused.peak, small.peak)  # what it still holds counts: conservative
    budget = int((small.peak + 130 * MIB) / 0.9)  # room for 1 and 2, not 4
    plan = plan_micro_batch(touch_memory, 8, budget, args=(64 * MIB,), candidates=[1, 2, 4], steps=1)
    assert plan.micro_batch in (1, 2)
    assert all(probe.peak <= budget * 0.9 for probe in plan.probes if probe.size == plan.micro_batch)
    # 4, the first tried, passed the budget: its child was stopped there, and the search went on down.
    over = plan.probes[-1]
    assert over.size == 4 and over.outcome.startswith("over the budget (stopped at ") and over.peak > budget * 0.9
    assert len(children_started) == 2  # 4's, then one for 2 and 1


@pytest.mark.slow  # the page's planning example, saved and run as a script: a child per size
def test_the_docs_planning_example_runs_as_a_saved_script(tmp_path):
    page = (ROOT / "docs" / "memory-plan.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", page, flags=re.MULTILINE | re.DOTALL)
    writes_steps, plans = blocks[0], next(block for block in blocks if "def main():" in block)
    (tmp_path / "plan_it.py").write_text(writes_steps + plans, encoding="utf-8")
    done = subprocess.run([sys.executable, "plan_it.py"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and "per update" in done.stdout, done.stderr[-2000:]


def measuring_children(pid):
    """The pids of ``pid``'s spawned children (Linux's /proc/<pid>/task/<pid>/children, and their command lines)."""
    with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as children:
        pids = [int(child) for child in children.read().split()]
    found = []
    for child in pids:
        try:
            with open(f"/proc/{child}/cmdline", "rb") as cmdline:
                if b"spawn_main" in cmdline.read():
                    found.append(child)
        except OSError:  # ended meanwhile
            pass
    return found


@pytest.mark.slow  # a planner in a process of its own, and its child
def test_a_planner_ended_by_sigterm_leaves_no_child_behind():
    code = ("import time\n"
            "from accumulator.memory.plan import plan_micro_batch\n"
            "plan_micro_batch(time.sleep, 3600, '1GiB', candidates=[3600], device='CPU')\n")  # make_step sleeps an hour
    planner = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 120
        while not measuring_children(planner.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        [child] = measuring_children(planner.pid)
        planner.send_signal(signal.SIGTERM)  # its default action: no handler, no cleanup runs
        planner.wait(timeout=30)
        deadline = time.monotonic() + 60  # a child still importing MindSpore ends once it has
        while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{child}")
    finally:
        planner.kill()


def test_the_old_names_of_a_measurement_and_its_child_still_work_and_warn(monkeypatch):
    import accumulator.memory
    from accumulator._internal import deprecation
    monkeypatch.setattr(deprecation, "warned", set())  # once per process: another test may have warned already
    import accumulator.memory.plan as plan
    with pytest.warns(DeprecationWarning, match="memory.Probe is deprecated.*accumulator.memory.Measurement"):
        assert accumulator.memory.Probe is Measurement
    with pytest.warns(DeprecationWarning, match="plan.ProbeChild is deprecated.*plan.MeasuringChild"):
        assert plan.ProbeChild is MeasuringChild


def test_an_interrupt_while_a_size_runs_closes_its_child(monkeypatch):
    closed = []

    class Interrupted:
        alive = True

        def __init__(self, *args):
            pass

        def measure(self, size, samples, limit):
            raise KeyboardInterrupt  # Ctrl-C, or the tools' SIGTERM, while the child runs the size

        def close(self):
            closed.append(True)
    monkeypatch.setattr("accumulator.memory.plan.MeasuringChild", Interrupted)
    with pytest.raises(KeyboardInterrupt):
        plan_micro_batch(touch_memory, 8, "1GiB", args=(MIB,), device="CPU")
    assert closed == [True]  # MeasuringChild.close() kills a child that is running a size
