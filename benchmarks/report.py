"""From the workers' runs to what a run prints and writes: rows, the table, the load note, the JSON.

Speed ratios are throughput against throughput, each contender at its best
runtime setting, on medians and on the fastest blocks (the minimum is least
disturbed by other work on the machine).
"""
import json
import os
import statistics

from benchmarks.configs import BLOCKING_ENV, config_key


def summarize(runs):
    """Merges the repeats of each configuration: min and median over all timed blocks.

    A configuration whose every repeat failed keeps its ``error``.

    Example:
        >>> summarize([dict(kind="speed", net="mnist", contender="x", mode="graph", blocking="1",
        ...                 accumulate=4, batch=32, block_ms=[2.0, 1.0], compile_s=1.0,
        ...                 state_bytes=0, param_bytes=8, peak_mb=100.0, baseline_mb=90.0)])[0]["median_ms"]
        1.5
    """
    grouped = {}
    for run in runs:
        grouped.setdefault(config_key(run), []).append(run)
    rows = []
    for group in grouped.values():
        ok = [run for run in group if "error" not in run]
        first = dict(group[0])
        first.pop("block_ms", None)
        if not ok:
            rows.append(first)
            continue
        blocks = [ms for run in ok for ms in run["block_ms"]]
        median = statistics.median(blocks)
        first.pop("error", None)
        first.update(
            repeats=len(ok), min_ms=min(blocks), median_ms=median,
            samples_per_s=1000.0 * first["batch"] / median,
            best_samples_per_s=1000.0 * first["batch"] / min(blocks),
            compile_s=statistics.median(run["compile_s"] for run in ok),
            peak_mb=max(run["peak_mb"] for run in ok),
            baseline_mb=min(run["baseline_mb"] for run in ok),
            state_ratio=ok[0]["state_bytes"] / ok[0]["param_bytes"])
        rows.append(first)
    return rows


def best_rows(rows):
    """Per (net, mode, contender), the runtime setting with the higher median throughput.

    Each chosen row gets ``ratio_vs_plain_micro`` (medians) and
    ``min_ratio_vs_plain_micro`` (fastest blocks) against plain_micro's
    best row in the same mode.

    Example:
        >>> rows = [dict(kind="speed", net="mnist", mode="graph", contender="plain_micro", blocking=b,
        ...              median_ms=1.0, samples_per_s=s, best_samples_per_s=s) for b, s in (("1", 30.0), ("", 10.0))]
        >>> best = best_rows(rows)[("mnist", "graph", "plain_micro")]
        >>> best["blocking"], best["ratio_vs_plain_micro"]
        ('1', 1.0)
    """
    best = {}
    for row in rows:
        if row["kind"] != "speed" or "median_ms" not in row:
            continue
        key = (row["net"], row["mode"], row["contender"])
        if key not in best or row["samples_per_s"] > best[key]["samples_per_s"]:
            best[key] = row
    for (net, mode, _), row in best.items():
        base = best.get((net, mode, "plain_micro"))
        row["ratio_vs_plain_micro"] = row["samples_per_s"] / base["samples_per_s"] if base else None
        row["min_ratio_vs_plain_micro"] = (row["best_samples_per_s"] / base["best_samples_per_s"]
                                           if base else None)
    return best


def ruled(head):
    """A table's first lines: its heading and a rule as wide.

    Example:
        >>> ruled("net  ms")
        ['net  ms', '-------']
    """
    return [head, "-" * len(head)]


def format_table(rows, best):
    """The speed table as text: one line per configuration, ratios on the best setting.

    ``rows`` come from ``summarize``, ``best`` from ``best_rows``; memory
    rows, if any, follow the table.

    Example:
        >>> row = dict(kind="speed", net="mnist", mode="graph", contender="plain_micro", blocking="1",
        ...            median_ms=2.0, min_ms=1.5, samples_per_s=16000.0, compile_s=0.4, state_ratio=0.0,
        ...            peak_mb=447.0, ratio_vs_plain_micro=1.0, min_ratio_vs_plain_micro=1.0)
        >>> print(format_table([row], {("mnist", "graph", "plain_micro"): row}).splitlines()[2])
        mnist  graph    plain_micro        on        2.000    1.500      16000   1.00    1.00      0.40        0.00      447 *
    """
    # As wide as the longest name, so every row's columns line up.
    width = max([18] + [len(row["contender"]) for row in rows if row["kind"] == "speed"])
    head = (f"{'net':6} {'mode':8} {'contender':{width}} {'block':5} {'ms/micro':>9} {'min':>8} "
            f"{'samples/s':>10} {'x(1)':>6} {'x(1)min':>7} {'compile s':>9} {'state/param':>11} {'peak MB':>8}")
    lines = ruled(head)
    for row in rows:
        if row["kind"] != "speed":
            continue
        block = {"1": "on", "": "off"}.get(row["blocking"], row["blocking"])
        if "error" in row:
            lines.append(f"{row['net']:6} {row['mode']:8} {row['contender']:{width}} {block:5} "
                         f"ERROR {row['error'].splitlines()[-1][:60]}")
            continue
        chosen = best[(row["net"], row["mode"], row["contender"])] is row
        ratio = f"{row['ratio_vs_plain_micro']:.2f}" if chosen and row.get("ratio_vs_plain_micro") else ""
        min_ratio = f"{row['min_ratio_vs_plain_micro']:.2f}" if chosen and row.get("min_ratio_vs_plain_micro") else ""
        lines.append(f"{row['net']:6} {row['mode']:8} {row['contender']:{width}} {block:5} "
                     f"{row['median_ms']:9.3f} {row['min_ms']:8.3f} {row['samples_per_s']:10.0f} "
                     f"{ratio:>6} {min_ratio:>7} {row['compile_s']:9.2f} {row['state_ratio']:11.2f} {row['peak_mb']:8.0f}"
                     + (" *" if chosen else ""))
    lines.append("ms/micro: median time per micro-batch of B samples; x(1): samples/s against "
                 "plain_micro, both at their best setting (marked *); x(1)min: the same from the "
                 "fastest blocks; block: "
                 f"{BLOCKING_ENV}=1 on/off.")
    memory = [row for row in rows if row["kind"] == "memory" and "peak_mb" in row]
    if memory:
        lines += ["", "peak memory (MB above the process baseline) against effective batch N x B:"]
        for row in sorted(memory, key=lambda r: (r["contender"], r["accumulate"])):
            lines.append(f"  {row['contender']:12} N={row['accumulate']:<3} N*B={row['accumulate'] * row['batch']:<5} "
                         f"{row['peak_mb'] - row['baseline_mb']:8.1f} (peak {row['peak_mb']:.0f})")
    return "\n".join(lines)


def note_load(runs, cores=None):
    """A warning line when the machine was busy with other work during the runs, else ''.

    ``cores`` defaults to this machine's count.

    Example:
        >>> note_load([dict(load_before=0.5)], cores=2)
        ''
        >>> note_load([dict(load_before=2.0), dict(load_before=3.0)], cores=2)
        'note: median 1-minute load 2.5 on 2 cores (max 3.0): other processes shared the CPU; trust min over median.'
    """
    loads = [run["load_before"] for run in runs if "load_before" in run]
    cores = cores or os.cpu_count() or 1
    if loads and statistics.median(loads) > 0.75 * cores:
        return (f"note: median 1-minute load {statistics.median(loads):.1f} on {cores} cores "
                f"(max {max(loads):.1f}): other processes shared the CPU; trust min over median.")
    return ""


def write_json(path, **sections):
    """Writes ``sections`` (settings, runs, rows) as one JSON object.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "bench.json")
        >>> write_json(path, rows=[])
        >>> open(path).read()
        '{\\n "rows": []\\n}'
    """
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(sections, handle, indent=1)


def finish(measured, json_path=None, plot_path=None, draw=None, **sections):
    """After the tables: the load note of the ``measured`` runs printed, ``sections`` written to ``json_path``, the plot.

    The plot is ``draw(plot_path)``. Returns the exit status: 2 when the plot
    could not be written, 1 when a run failed, else 0. Nothing is written
    when a path is None.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "bench.json")
        >>> finish([dict(load_before=0.0, error="boom")], path, rows=[])
        1
        >>> sorted(json.load(open(path)))
        ['rows']
    """
    load = note_load(measured)
    if load:
        print(load)
    if json_path:
        write_json(json_path, **sections)
    if plot_path and not draw(plot_path):
        return 2
    return 1 if any("error" in run for run in measured) else 0
