"""What a run reports: its printed lines, the end-of-run summary, the JSON log and the plot.

A run keeps a *history*, one record per epoch: ``{"epoch", "train_loss",
"samples", "seconds", "test_accuracy", "test_loss", "eval_seconds",
"samples_per_second", "counted" (what the loss is per: samples, or a
language model's tokens), "updates" (so far), "ranks" (that trained the epoch)}``, and
``"noise_scale"``, ``"accumulate_step"`` (N at the epoch's end) and ``"effective_batch_size"`` when the run tracks the
gradient noise scale; ``"probes"`` with ``--accumulate-step auto`` (``training.probe``); with ``--ema`` the test
results are the weights' moving average's, ``"trained_test_accuracy"``, ``"trained_test_loss"`` the trained
weights', ``"ema_windows"`` each window's count and ``"ema_reference"`` the average's (docs/ema.md#in-the-tools).
Everything here is computed from it.
"""
import json

from accumulator.core.checkpoints import write_atomically


def epoch_line(record, epochs):
    """The line printed after an epoch.

    Example:
        >>> epoch_line({"epoch": 2, "train_loss": 0.5, "test_accuracy": 0.9, "test_loss": 0.3,
        ...             "samples_per_second": 5000.0, "seconds": 1.2}, epochs=3)
        'epoch 2/3: train loss 0.5000, test accuracy 90.00%, test loss 0.3000, 5,000 samples/s, 1.2 s'
        >>> epoch_line({"epoch": 2, "train_loss": 0.5, "test_accuracy": 0.9, "test_loss": 0.3,
        ...             "samples_per_second": 5000.0, "seconds": 1.2, "noise_scale": 1234.5,
        ...             "accumulate_step": 8}, epochs=3)[-29:]
        '1.2 s; noise scale 1,234, N 8'
    """
    line = (f"epoch {record['epoch']}/{epochs}: train loss {record['train_loss']:.4f}, "
            f"test accuracy {record['test_accuracy']:.2%}, test loss {record['test_loss']:.4f}, "
            f"{record['samples_per_second']:,.0f} samples/s, {record['seconds']:.1f} s")
    return line + noise_suffix(record) + average_suffix(record)


def average_suffix(record):
    """What an epoch line ends with under ``--ema`` (its test results are the average's): the trained weights' loss.

    Example:
        >>> average_suffix({"test_loss": 0.3, "trained_test_loss": 0.35}), average_suffix({"test_loss": 0.3})
        ('; without the average: loss 0.3500', '')
    """
    if "trained_test_loss" not in record:
        return ""
    return f"; without the average: loss {record['trained_test_loss']:.4f}"


def noise_suffix(record):
    """What an epoch line ends with when the run tracks the noise scale or follows N by a rule; empty otherwise.

    With a rule: the learning rate (and betas) the next window runs with;
    with the measured window, the N each of the epoch's probes chose.

    Example:
        >>> noise_suffix({"noise_scale": None, "accumulate_step": 2}), noise_suffix({})
        ('; noise scale not yet measured, N 2', '')
        >>> noise_suffix({"accumulate_step": 8, "lr": 0.02, "beta1": 0.6, "beta2": 0.996, "eps": 5e-9})
        '; N 8, lr 0.02, betas (0.6, 0.996)'
        >>> noise_suffix({"noise_scale": 40.0, "accumulate_step": 4, "probes": [{"accumulate_step": 4}]})
        '; noise scale 40, N 4, probes chose 4'
    """
    line = ""
    if "noise_scale" in record:
        noise = "not yet measured" if record["noise_scale"] is None else f"{record['noise_scale']:,.0f}"
        line = f"; noise scale {noise}, N {record['accumulate_step']}"
    elif "lr" in record:
        line = f"; N {record['accumulate_step']}"
    if record.get("probes"):
        line += ", probes chose " + ", ".join(str(probe["accumulate_step"]) for probe in record["probes"])
    if "lr" in record:
        line += f", lr {record['lr']:.4g}"
    if "beta1" in record:
        line += f", betas ({record['beta1']:.4g}, {record['beta2']:.4g})"
    return line


def summarize(config, history, updates, skipped_windows):
    """The end-of-run summary: best and final accuracy, throughput, effective batch.

    ``updates`` and ``skipped_windows`` are the accumulator's counts, read
    on the host (``int(accumulator.update_count)``).

    Example:
        >>> from training.config import TrainConfig
        >>> history = [{"epoch": 1, "train_loss": 0.9, "samples": 600, "seconds": 2.0,
        ...             "test_accuracy": 0.8, "test_loss": 0.7}]
        >>> summary = summarize(TrainConfig(), history, updates=10, skipped_windows=0)
        >>> summary["effective_batch_size"], summary["samples_per_second"], summary["best_epoch"]
        (64, 300.0, 1)
    """
    best = max(history, key=lambda record: record["test_accuracy"])
    final = history[-1]
    seconds = sum(record["seconds"] for record in history)
    return {
        "epochs": final["epoch"],
        "best_accuracy": best["test_accuracy"],
        "best_epoch": best["epoch"],
        "final_accuracy": final["test_accuracy"],
        "final_test_loss": final["test_loss"],
        "final_train_loss": final["train_loss"],
        "samples_per_second": sum(record["samples"] for record in history) / seconds if seconds else 0.0,
        "train_seconds": seconds,
        "batch_size": config.batch_size,
        "accumulate_step": config.accumulate_step,
        "effective_batch_size": config.effective_batch_size,
        "updates": updates,
        "skipped_windows": skipped_windows,
    }


def summary_line(summary, config):
    """The last line a run prints.

    Example:
        >>> from training.config import TrainConfig
        >>> summary_line({"best_accuracy": 0.95, "best_epoch": 2, "final_accuracy": 0.94,
        ...               "samples_per_second": 3000.0, "effective_batch_size": 64, "updates": 282}, TrainConfig())
        'best test accuracy 95.00% (epoch 2), final 94.00%; 3,000 samples/s; effective batch 64 (32 x 2), 282 updates'
    """
    batch = (f"effective batch {summary['effective_batch_size']} ({config.window_description()})"
             if summary["effective_batch_size"] else f"batch {config.batch_description()}")
    return (f"best test accuracy {summary['best_accuracy']:.2%} (epoch {summary['best_epoch']}), "
            f"final {summary['final_accuracy']:.2%}; {summary['samples_per_second']:,.0f} samples/s; "
            f"{batch}, {summary['updates']} updates")


def write_json_log(path, config, data, history, summary=None):
    """``{"config", "data", "epochs": [records], "summary"}`` to ``path``, atomically (summary None until the end).

    ``data`` says what the run trained on (``Task.description``: whether it
    was the synthetic look-alike, where from, how many samples).

    Example:
        >>> import os, tempfile
        >>> from training.config import TrainConfig
        >>> path = os.path.join(tempfile.mkdtemp(), "logs", "run.json")
        >>> write_json_log(path, TrainConfig(), "synthetic MNIST look-alike", [{"epoch": 1, "test_accuracy": 0.8}])
        >>> logged = json.load(open(path))
        >>> logged["config"]["batch_size"], logged["data"]
        (32, 'synthetic MNIST look-alike')
    """
    content = {"config": {**config.resume_settings(), "device_target": config.device_target, "mode": config.mode,
                          "driver": config.driver},
               "data": data, "epochs": history, "summary": summary}
    if config.memory_plan is not None:  # --micro-batch auto: what was measured (docs/memory-plan.md)
        content["memory_plan"] = config.memory_plan

    def write(temporary):
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(content, f, indent=2)

    write_atomically(path, write)


def probe_points(history):
    """Each probe of the measured window, placed in epochs: ``{"epoch", "critical_batch", "noise_scale"}``.

    A probe after ``seen`` counted is at the fraction of its epoch's count
    then seen; a noise scale not yet measured is NaN, which a plot leaves out.

    Example:
        >>> points = probe_points([{"epoch": 1, "counted": 100, "probes": [
        ...     {"seen": 0, "critical_batch": 32.0, "noise_scale": None},
        ...     {"seen": 50, "critical_batch": 64.0, "noise_scale": 640.0}]}])
        >>> [tuple(point.values()) for point in points]
        [(0.0, 32.0, nan), (0.5, 64.0, 640.0)]
    """
    points, before = [], 0
    for record in history:
        for probe in record.get("probes", ()):
            noise = probe["noise_scale"]
            points.append({"epoch": record["epoch"] - 1 + (probe["seen"] - before) / max(record["counted"], 1),
                           "critical_batch": probe["critical_batch"],
                           "noise_scale": float("nan") if noise is None else noise})
        before += record.get("counted", 0)
    return points


def write_plot(path, history):
    """A PNG of training and test loss and of test accuracy per epoch, written atomically (needs matplotlib).

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "run.png")
        >>> write_plot(path, [{"epoch": 1, "train_loss": 0.9, "test_loss": 0.7, "test_accuracy": 0.8}])
        >>> open(path, "rb").read(4)
        b'\\x89PNG'
    """
    import matplotlib
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    epochs = [record["epoch"] for record in history]
    noise = [record for record in history if record.get("noise_scale") is not None]
    probes = probe_points(history)
    figure, axes = plt.subplots(1, 3 if noise or probes else 2, figsize=(13.5 if noise or probes else 9, 3.5))
    loss_axes, accuracy_axes = axes[:2]
    loss_axes.plot(epochs, [record["train_loss"] for record in history], "o-", label="train")
    loss_axes.plot(epochs, [record["test_loss"] for record in history], "s--", label="test")
    loss_axes.set(xlabel="epoch", ylabel="loss per sample", title="Loss")
    loss_axes.legend()
    accuracy_axes.plot(epochs, [100 * record["test_accuracy"] for record in history], "o-")
    accuracy_axes.set(xlabel="epoch", ylabel="%", title="Test accuracy")
    accuracy_axes.set_ylim(top=min(accuracy_axes.get_ylim()[1], 100))  # the margin above 100% means nothing
    if noise or probes:
        # The noise scale is a batch size: compare it with the effective batch micro-batch x N.
        noise_axes = axes[2]
        noise_axes.plot([r["epoch"] for r in noise], [r["noise_scale"] for r in noise], "o-", label="noise scale")
        noise_axes.plot([r["epoch"] for r in noise], [r["effective_batch_size"] for r in noise], "s--",
                        label="effective batch")
        if probes:  # each probe's window, and B_simple read beside it: its overshoot (docs/batch-size.md)
            at = [point["epoch"] for point in probes]
            noise_axes.step(at, [point["critical_batch"] for point in probes], "^-", where="post",
                            label="critical batch (probed)")
            noise_axes.plot(at, [point["noise_scale"] for point in probes], "x", label="noise scale at the probe")
        noise_axes.set(xlabel="epoch", ylabel="samples", title="Gradient noise scale", yscale="log")
        noise_axes.legend()
    for each in axes:
        each.xaxis.get_major_locator().set_params(integer=True)
    figure.tight_layout()
    try:
        write_atomically(path, lambda temporary: figure.savefig(temporary, format="png", dpi=100))
    finally:
        plt.close(figure)
