"""The benchmarks' figures: throughput and memory against effective batch; end-to-end bars; the average's horizon."""
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
    """Writes the end-to-end rows as bars of steady samples/s (the drivers on Tensors in gray) to ``path`` (PNG).

    ``label(row)`` names a row's bar. Returns False, after a line on stderr,
    when matplotlib is not installed.

    Example:
        >>> import os, tempfile
        >>> rows = [dict(step="mnist", pipeline=name, samples_per_s=s) for name, s in (("tool", 9.0), ("host", 10.0))]
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
              color=["tab:blue" if row["pipeline"] == "tool" else "tab:gray" for row in shown])
    bars.set_yticks(range(len(shown)), [label(row) for row in shown], fontsize=8)
    for index, row in enumerate(shown):
        if "vs_ceiling" in row:
            bars.text(row["samples_per_s"], index, f" {row['vs_ceiling']:.2f}x", va="center", fontsize=8)
    bars.invert_yaxis()
    bars.set_xlabel("samples/s, median steady epoch\n(beside the bars: against the fastest driver on Tensors in memory)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def plot_ema(windows, path, names):
    """Writes the moving average's horizon beside N per tool (``benchmarks.ema``) to ``path`` (PNG).

    ``windows``: ``{(tool, seed): benchmarks.ema.horizons(log)}``; ``names``: each tool's title. One column per
    tool: above, each window over the first (kappa: N over the first N, for whole windows); below, the average's
    horizon after each window and, dashed, a fixed decay per update's. Returns False, after a line on stderr, when
    matplotlib is not installed.

    Example:
        >>> import os, tempfile
        >>> window = dict(seen=32, kappa=1.0, horizon=3200.0, fixed_horizon=3200.0)
        >>> path = os.path.join(tempfile.mkdtemp(), "ema.png")
        >>> plot_ema({("mnist", 0): [window, dict(window, seen=96)]}, path, {"mnist": "MNIST"})
        True
        >>> os.path.getsize(path) > 0
        True
    """
    plt = _pyplot()
    if plt is None:
        return False
    tools = list(dict.fromkeys(tool for tool, _ in windows))
    figure, axes = plt.subplots(2, len(tools), figsize=(6 * len(tools), 7), sharex="col", squeeze=False)
    for column, tool in enumerate(tools):
        above, below = axes[0][column], axes[1][column]
        for (name, seed), run in windows.items():
            if name != tool:
                continue
            seen = [window["seen"] for window in run]
            above.step(seen, [window["kappa"] for window in run], where="post", label=f"seed {seed}")
            line, = below.plot(seen, [window["horizon"] for window in run], label=f"seed {seed}: decay ** kappa")
            below.plot(seen, [window["fixed_horizon"] for window in run], linestyle="--", color=line.get_color(),
                       label=f"seed {seed}: a fixed decay")
        above.set_title(names[tool])
        above.set_ylabel("kappa: window / first window")
        above.legend(fontsize=8)
        below.set_yscale("log")
        below.set_ylabel("horizon: window / (1 - rho)")
        below.set_xlabel("trained so far (samples or tokens)")
        below.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True
