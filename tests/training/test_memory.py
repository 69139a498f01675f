"""training.memory and the tools' --micro-batch auto: the flags, the plan, windows equal to the batch, resume.

By hand: ``--micro-batch auto`` with ``--accumulate-step 4`` is one line: the plan chooses N; a batch of 8 planned
as 4 x 2 trains as one process's batch of 8.
"""
import contextlib
import json

import mindspore as ms
import numpy as np
import pytest

import training.lm
import training.memory
from scripts import train_lm, train_mnist  # scripts/ has no __init__.py: a namespace package on pytest's path


BOTH = ("--accumulate-step with --micro-batch auto: --batch-size is then the batch per update and N follows from the "
        "measured micro-batch; pass one")


@pytest.mark.parametrize("argv, message", [
    (["--micro-batch", "auto", "--accumulate-step", "4"], BOTH),
    (["--micro-batch", "auto", "--accumulate-step=auto"], BOTH),
    (["--memory-budget", "1GiB"],
     "--memory-budget is the budget --micro-batch auto plans within: pass --micro-batch auto"),
    (["--micro-batch", "auto", "--memory-budget", "6parsecs"],
     "argument --memory-budget: expected a size such as 512MiB, 6GiB or 6G, got '6parsecs'"),
    (["--micro-batch", "0"], "argument --micro-batch: expected auto or a positive integer, got '0'"),
    (["--micro-batch", "8", "--accumulate-step", "2"],
     "--accumulate-step with --micro-batch 8: --batch-size is then the batch per update and N follows from the "
     "micro-batch; pass one"),
    (["--batch-size", "20", "--micro-batch", "32"],
     "--micro-batch 32 is more than the batch per update: --batch-size 20"),
])
def test_contradictory_or_bad_flags_are_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as caught:
        train_mnist.parse_args(argv)
    assert caught.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"train_mnist.py: error: {message}"


def test_batch_size_is_the_batch_per_update_until_planned():
    config, _ = train_lm.parse_args(["--batch-size", "24", "--micro-batch", "auto", "--memory-budget", "6G"])
    assert (config.batch_size, config.accumulate_step, config.memory_budget) == (24, 1, 6 * 2 ** 30)
    assert config.effective_batch_size == 24
    assert config.batch_description() == "24 per update, micro-batch auto (measured)"


def test_a_batch_that_leaves_a_rank_no_sample_is_refused():
    from training.config import TrainConfig
    from training.errors import TrainingError
    from training.task import toy_task
    config = TrainConfig(batch_size=3, accumulate_step=1, micro_batch="auto", distributed=True, ranks=4)
    with pytest.raises(TrainingError, match="--batch-size 3 per update leaves some of the 4 ranks no sample"):
        training.memory.plan_run(config, toy_task, ())


def test_the_sizes_measured_are_those_a_given_micro_batch_may_be_under_a_rule_of_whole_windows(monkeypatch):
    # 12 per update on 2 ranks under the linear rule: 6 rows each, so 1, 2, 3 and 6 make whole windows, 4 does not.
    from accumulator.memory import PlanError
    from training.config import TrainConfig
    from training.errors import TrainingError
    from training.task import toy_task
    measured = []

    def plan(make_step, batch, budget, candidates, **settings):
        measured.extend(candidates)
        raise PlanError("measured nothing")
    monkeypatch.setattr(training.memory, "plan_micro_batch", plan)
    monkeypatch.setattr(training.memory, "_budget", lambda config: None)
    monkeypatch.setattr(training.memory, "_gathered", lambda value: [value, value])
    monkeypatch.setattr(training.memory, "candidate_sizes", lambda batch: [1, 2, 3, 4, 6])

    def config(batch, micro_batch):
        return TrainConfig(batch_size=batch, accumulate_step=1, micro_batch=micro_batch, scale_rule="linear",
                           distributed=True, ranks=2)
    with pytest.raises(TrainingError, match="measured nothing"):
        training.memory.plan_run(config(12, "auto"), toy_task, ())
    given = []
    for size in (1, 2, 3, 4, 6):
        with contextlib.suppress(TrainingError):
            given.append(training.memory.plan_run(config(12, size), toy_task, ()).batch_size)
    assert measured == given == [1, 2, 3, 6]
    # 11 per update shares 5 and 6 rows: no size makes both whole, one line before anything is measured.
    with pytest.raises(TrainingError, match=r"^--scale-rule linear follows .*no micro-batch makes whole windows of "
                                            r"--batch-size 11 on each of 2 ranks: pass one that divides by 2$"):
        training.memory.plan_run(config(11, "auto"), toy_task, ())
    assert measured == [1, 2, 3, 6]


def distributed_plan(monkeypatch, others, plans=True):
    """``plan_run`` on rank 0 of 3 on one host, the other ranks' chosen sizes ``others``; the budget it planned in."""
    from accumulator.memory import MemoryPlan, Measurement, PlanError
    from training.config import TrainConfig
    from training.task import toy_task
    budgets = []

    def plan(make_step, batch, budget, **settings):
        budgets.append(budget)
        if not plans:
            raise PlanError("a memory budget of 1.0 MiB is below the smallest micro-batch's need: ...")
        return MemoryPlan(batch, 4, budget, 0.1, (Measurement(4, 2 ** 20, 1.0),))
    monkeypatch.setattr(training.memory, "plan_micro_batch", plan)
    monkeypatch.setattr(training.memory, "default_budget", lambda device: 3 * 2 ** 30)
    monkeypatch.setattr(training.memory, "_gathered", lambda value: [value] * 3 if value > 4 else [value, *others])
    config = TrainConfig(batch_size=24, accumulate_step=1, micro_batch="auto", distributed=True, ranks=3)
    return training.memory.plan_run(config, toy_task, ()), budgets


def test_ranks_on_one_host_share_its_default_budget_and_take_the_smallest_size(monkeypatch):
    from training.ranks import rank_steps
    config, budgets = distributed_plan(monkeypatch, [4, 2])
    # The run's window of 24 in micro-batches of 2: 12 in one process's window, 4 on each of the 3 ranks.
    assert budgets == [2 ** 30] and (config.batch_size, config.accumulate_step, rank_steps(config)) == (2, 12, 4)


def test_a_rank_that_cannot_plan_ends_every_rank_in_one_line(monkeypatch):
    from training.errors import TrainingError
    with pytest.raises(TrainingError, match=r"^--micro-batch auto: rank 2 found no micro-batch: see its error$"):
        distributed_plan(monkeypatch, [4, 0])
    with pytest.raises(TrainingError, match=r"^--micro-batch auto: a memory budget of 1\.0 MiB is below"):
        distributed_plan(monkeypatch, [4, 4], plans=False)


@pytest.mark.parametrize("flags, why", [
    ({"scale_rule": "linear"}, "--scale-rule linear follows N micro-batches of batch_size"),
])
def test_resuming_an_uneven_window_with_a_setting_that_needs_whole_ones_is_one_line(tmp_path, flags, why):
    from training.config import TrainConfig
    from training.errors import TrainingError
    from training.task import toy_task
    saved = {"batch_size": 8, "accumulate_step": 3, "last_micro_batch": 4}   # 8 + 8 + 4, planned for 20
    ms.save_checkpoint([{"name": "weight", "data": ms.Tensor([0.0])}], str(tmp_path / "epoch_001.ckpt"),
                       append_dict={"config": json.dumps(saved)})
    config = TrainConfig(batch_size=20, accumulate_step=1, micro_batch="auto", resume=True, ckpt_dir=str(tmp_path),
                         **flags)
    with pytest.raises(TrainingError) as error:
        training.memory.plan_run(config, toy_task, ())
    assert str(error.value) == (f"{why}; {tmp_path / 'epoch_001.ckpt'} was trained with 8 + 8 + 4 per update: "
                                f"resume without it")


def test_a_probe_trains_one_window_of_the_planned_run_with_its_driver(monkeypatch):
    from training.config import TrainConfig
    from training.loop import build_run
    from training.task import toy_task
    built = []
    monkeypatch.setattr(training.memory, "build_run", lambda config, task: built.append(build_run(config, task))
                        or built[-1])
    config = TrainConfig(batch_size=8, accumulate_step=1, micro_batch="auto")  # graph mode, --driver auto
    step = training.memory.tool_step(4, config, 8, toy_task, ())
    probe = built[0]
    run = build_run(training.memory.planned(config, 4, 8), toy_task())  # what train() builds for the plan
    assert probe.driver == run.driver == "window"
    assert int(probe.accumulator.accumulate_step) == 2
    step()  # one call: the window's two micro-batches and their update, through the window step
    assert (int(probe.accumulator.update_count), int(probe.accumulator.micro_step)) == (1, 0)


@pytest.mark.slow  # end to end: probes in child processes, then trains and resumes
def test_the_planned_run_equals_the_large_batch_logs_its_plan_and_keeps_it_on_resume(
        synthetic_mnist_dir, tmp_path, capsys, monkeypatch, train_mnist_run):
    monkeypatch.setattr(training.memory, "candidate_sizes", lambda batch: [4, 8])  # two sizes in one child
    ckpt_dir, log = str(tmp_path / "ckpt"), tmp_path / "run.json"
    # PyNative, which compiles nothing, in the children as in the run: the plan and its windows are the same in either
    # mode (the probe's driver in graph mode: test_a_probe_trains_one_window_of_the_planned_run_with_its_driver).
    data = ["--data-dir", synthetic_mnist_dir, "--lr", "0.1", "--no-shuffle", "--ckpt-dir", ckpt_dir,
            "--mode", "pynative"]
    common = [*data, "--batch-size", "16", "--micro-batch", "auto"]
    summary = train_mnist.main([*common, "--epochs", "1", "--memory-budget", "8GiB", "--log-json", str(log)])
    out = capsys.readouterr().out
    assert "micro-batch measured for a batch of 16 per update:\nmicro-batch  peak memory        samples/s  probe s  " \
           "chosen\n" in out
    plan = json.loads(log.read_text())["memory_plan"]
    size = plan["micro_batch"]
    assert size in (4, 8) and [probe["size"] for probe in plan["probes"]] == [4, 8]
    assert f"<- {size} x {16 // size} = 16 per update" in out and plan["budget"] == 8 * 2 ** 30
    assert all(0 < probe["peak"] < 8 * 2 ** 30 and probe["samples_per_second"] > 0 and probe["seconds"] > 0
               for probe in plan["probes"])
    assert summary["effective_batch_size"] == 16 and summary["accumulate_step"] == 16 // size

    # Every window holds the 16 samples one large batch would: the same weights, from the same start.
    _, expected = train_mnist_run(synthetic_mnist_dir, epochs=1, lr=0.1, shuffle=False, batch_size=16,
                                  accumulate_step=1, mode="pynative")
    saved = ms.load_checkpoint(str(tmp_path / "ckpt" / "epoch_001.ckpt"))
    assert int(saved["accumulator.update_count"].asnumpy()) == summary["updates"] == 200 // 16 + 1
    for name, value in expected.items():
        np.testing.assert_allclose(saved[name].asnumpy(), value, rtol=1e-5, atol=1e-6, err_msg=name)

    # A resume measures nothing again: the checkpoint's micro-batch and N, and its plan in the log (its epochs done,
    # it trains nothing).
    monkeypatch.setattr(training.memory, "plan_micro_batch", lambda *args, **kwargs: pytest.fail("planned again"))
    resumed = train_mnist.main([*common, "--epochs", "1", "--resume", "--log-json", str(log)])
    assert f"micro-batch kept from {ckpt_dir}/epoch_001.ckpt: {size} x {16 // size} = 16 per update" \
        in capsys.readouterr().out
    assert resumed["accumulate_step"] == 16 // size and json.loads(log.read_text())["memory_plan"] == plan

    with pytest.raises(SystemExit):
        train_mnist.main([*data, "--batch-size", "32", "--micro-batch", "auto", "--epochs", "2", "--resume"])
    assert capsys.readouterr().err == (f"error: cannot resume with --batch-size 32 --micro-batch auto: "
                                       f"{ckpt_dir}/epoch_001.ckpt was trained with {size} x {16 // size} per update\n")


@pytest.mark.slow
@pytest.mark.msrun("tests.tools.train_mnist_worker:memory")
def test_ranks_agree_on_one_plan_the_smallest_any_chose(msrun_folder):
    # tests/tools/train_mnist_worker.memory: 16 per update, 8 rows on each rank; rank 0 chose 8, rank 1 4.
    rank0, rank1 = ((msrun_folder / f"rank_{rank}.log").read_text() for rank in (0, 1))
    assert "micro-batch measured for a batch of 16 per update (up to 8 on each of 2 ranks):" in rank0
    assert "all ranks take micro-batch 4, the smallest any chose" in rank0 and "micro-batch measured" not in rank1
    for rank, log in enumerate((rank0, rank1)):
        assert f"rank {rank} trains 4 x 4 over 2 ranks = effective 16" in log, log[-2000:]


def test_a_budget_below_the_smallest_need_is_one_line_naming_it(synthetic_mnist_dir, capsys, monkeypatch):
    # plan_micro_batch's refusal (its need measured: tests/accumulator/memory/test_plan.py), as the tool ends with it.
    from accumulator.memory import PlanError
    need = "a memory budget of 64.0 MiB is below the smallest micro-batch's need: micro-batch 2 peaks at 300.0 MiB"
    budgets = []

    def plan(make_step, batch, budget, **settings):
        budgets.append(budget)
        raise PlanError(need)
    monkeypatch.setattr(training.memory, "plan_micro_batch", plan)
    with pytest.raises(SystemExit) as caught:
        train_mnist.main(["--data-dir", synthetic_mnist_dir, "--batch-size", "4", "--micro-batch", "auto",
                          "--memory-budget", "64MiB"])
    out, err = capsys.readouterr()
    assert caught.value.code == 1 and "epoch" not in out and budgets == [64 * 2 ** 20]
    assert err == f"error: --micro-batch auto: {need}\n"


@pytest.mark.slow  # end to end: a probe in a child process, then two runs
def test_the_language_model_plans_rows_and_its_windows_equal_the_large_batch(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(training.lm, "SYNTHETIC_BYTES", 3000)  # about 40 samples
    monkeypatch.setattr(training.memory, "candidate_sizes", lambda batch: [4])
    tiny = ["--synthetic", "--data-dir", str(tmp_path / "text"), "--mode", "pynative", "--epochs", "1", "--width", "32",
            "--depth", "1", "--max-length", "64", "--sample-tokens", "0", "--no-shuffle"]
    planned = train_lm.main([*tiny, "--batch-size", "8", "--micro-batch", "auto", "--memory-budget", "8GiB"])
    assert "<- 4 x 2 = 8 per update" in capsys.readouterr().out
    large = train_lm.main([*tiny, "--batch-size", "8", "--accumulate-step", "1"])
    assert (planned["batch_size"], planned["accumulate_step"], planned["updates"]) == (4, 2, large["updates"])
    assert planned["final_test_loss"] == pytest.approx(large["final_test_loss"], rel=1e-5)


def test_drop_last_leaves_no_short_micro_batch_in_uneven_windows():
    from training.task import toy_task
    windows = toy_task(50).train_windows(16, 2, shuffle=False, seed=0, drop_remainder=True, num_shards=None,
                                         shard_id=None, last_micro_batch=4)   # B 20 as 16 + 4 over 50 samples
    assert [[labels.shape[0] for _, labels in window] for window in windows] == [[16, 4], [16, 4]]


def test_the_help_says_whose_budget_it_is(capsys):
    with pytest.raises(SystemExit):
        train_mnist.parse_args(["--help"])
    assert "under msrun each rank's (default: 80% of the available memory, shared among the ranks on the host)" \
        in " ".join(capsys.readouterr().out.split())
