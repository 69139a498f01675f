"""The benchmarks' figures: throughput bars and peak memory against effective batch; losses of the scale-rule sweeps."""
import sys

from benchmarks.configs import SWEPT


def _pyplot():
    """matplotlib.pyplot drawing to files only, or None after a line on stderr when it is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib, which is not installed: pip install matplotlib", file=sys.stderr)
        return None
    return plt


def plot(rows, best, path):
    """Writes throughput bars and peak memory against effective batch to ``path`` (PNG).

    Returns False, after a line on stderr, when matplotlib is not installed.

    Example:
        >>> import os, tempfile
        >>> row = dict(kind="speed", net="mnist", mode="graph", contender="plain_micro", samples_per_s=16000.0)
        >>> path = os.path.join(tempfile.mkdtemp(), "bench.png")
        >>> plot([row], {("mnist", "graph", "plain_micro"): row}, path), os.path.getsize(path) > 0
        (True, True)
    """
    plt = _pyplot()
    if plt is None:
        return False
    chosen = sorted(best.values(), key=lambda r: (r["net"], r["mode"], r["contender"]))
    # A fifth of an inch per bar keeps every label readable.
    figure, (bars, lines) = plt.subplots(1, 2, figsize=(14, max(5.0, 0.2 * len(chosen))))
    labels = [f"{r['net']}/{r['mode']} {r['contender']}" for r in chosen]
    bars.barh(range(len(chosen)), [r["samples_per_s"] for r in chosen])
    bars.set_yticks(range(len(chosen)), labels, fontsize=7)
    bars.set_xscale("log")
    bars.set_xlabel("samples/s (median, best runtime setting)")
    swept = False
    for name in SWEPT:
        points = sorted((r["accumulate"] * r["batch"], r["peak_mb"] - r["baseline_mb"])
                        for r in rows if r["kind"] == "memory" and r["contender"] == name and "peak_mb" in r)
        if points:
            lines.plot(*zip(*points), marker="o", label=name)
            swept = True
    lines.set_xscale("log", base=2)
    lines.set_xlabel("effective batch N x B")
    lines.set_ylabel("peak memory above baseline, MB")
    if swept:
        lines.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def plot_end_to_end(rows, path, label):
    """Writes the end-to-end rows as bars of steady samples/s (ceilings in gray) to ``path`` (PNG).

    ``label(row)`` names a row's bar. Returns False, after a line on stderr,
    when matplotlib is not installed.

    Example:
        >>> import os, tempfile
        >>> rows = [dict(step="micro", pipeline=name, samples_per_s=s) for name, s in (("tool", 9.0), ("ceiling", 10.0))]
        >>> path = os.path.join(tempfile.mkdtemp(), "e2e.png")
        >>> plot_end_to_end(rows, path, lambda row: row["pipeline"]), os.path.getsize(path) > 0
        (True, True)
    """
    plt = _pyplot()
    if plt is None:
        return False
    shown = [row for row in rows if "samples_per_s" in row]
    figure, bars = plt.subplots(figsize=(9, 0.45 * len(shown) + 1.5))
    bars.barh(range(len(shown)), [row["samples_per_s"] for row in shown],
              color=["tab:gray" if row["pipeline"] == "ceiling" else "tab:blue" for row in shown])
    bars.set_yticks(range(len(shown)), [label(row) for row in shown], fontsize=8)
    for index, row in enumerate(shown):
        if "vs_ceiling" in row:
            bars.text(row["samples_per_s"], index, f" {row['vs_ceiling']:.2f}x", va="center", fontsize=8)
    bars.invert_yaxis()
    bars.set_xlabel("samples/s, median steady epoch\n(beside the bars: against the same step on Tensors in memory)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def plot_losses(runs, path, target=None):
    """Writes validation loss against epochs (equal samples) and against training seconds, a line per run, to ``path``.

    ``runs``: ``{name: records}``, a record per epoch with ``test_loss`` and
    ``seconds`` (benchmarks.scale_rules' sweeps); ``target``, a loss, is
    drawn dashed. Returns False, after a line on stderr, when matplotlib is
    not installed.

    Example:
        >>> import os, tempfile
        >>> runs = {"N=1": [{"test_loss": 2.0, "seconds": 3.0}, {"test_loss": 1.0, "seconds": 3.0}]}
        >>> path = os.path.join(tempfile.mkdtemp(), "rules.png")
        >>> plot_losses(runs, path, target=1.0), os.path.getsize(path) > 0
        (True, True)
    """
    plt = _pyplot()
    if plt is None:
        return False
    figure, (by_epoch, by_second) = plt.subplots(1, 2, figsize=(13, 5.5), sharey=True)
    for index, (name, records) in enumerate(runs.items()):
        # Adaptive runs dashed; tab20's colours, so that no two of up to 20 runs share one.
        style = dict(linestyle="--" if name.startswith("auto") else "-", marker="o", markersize=3, label=name,
                     color=plt.cm.tab20(index % 20))
        losses = [record["test_loss"] for record in records]
        seconds, elapsed = [], 0.0
        for record in records:
            elapsed += record["seconds"]
            seconds.append(elapsed)
        by_epoch.plot(range(1, len(losses) + 1), losses, **style)
        by_second.plot(seconds, losses, **style)
    for axes, label in ((by_epoch, "epochs (the same samples in every run)"), (by_second, "training seconds")):
        if target is not None:
            axes.axhline(target, color="gray", linestyle=":", linewidth=1)
        axes.set_xlabel(label)
        axes.set_yscale("log")
    by_epoch.set_ylabel("validation loss")
    by_second.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True
