"""What a benchmark run prints and writes: the table, the target lines, the load note, the JSON."""
import json
import os
import statistics

from benchmarks.configs import BLOCKING_ENV


def format_table(rows, best):
    """The speed table as text: one line per configuration, ratios on the best setting.

    ``rows`` come from ``analysis.summarize``, ``best`` from
    ``analysis.best_rows``; memory rows, if any, follow the table.

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
    lines = [head, "-" * len(head)]
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


def format_targets(checks):
    """The target checks of ``analysis.check_targets`` as text lines.

    Example:
        >>> print(format_targets([dict(target="t", value="v", met=True),
        ...                       dict(target="u", median_ratio=0.9, min_ratio=0.8, met=False)]))
        targets:
          met      t: v
          NOT MET  u: 0.90x median, 0.80x min
    """
    lines = ["targets:"]
    for check in checks:
        value = check.get("value") or f"{check['median_ratio']:.2f}x median, {check['min_ratio']:.2f}x min"
        lines.append(f"  {'met' if check['met'] else 'NOT MET':8} {check['target']}: {value}")
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
    """Writes ``sections`` (settings, runs, rows, targets; or kernels) as one JSON object.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "bench.json")
        >>> write_json(path, rows=[], targets=[])
        >>> open(path).read()
        '{\\n "rows": [],\\n "targets": []\\n}'
    """
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(sections, handle, indent=1)


def close_report(checks, runs, json_path=None, /, **sections):
    """After the tables: the targets and the load note of ``runs`` printed; ``sections`` and the targets written to ``json_path``.

    Nothing is written when ``json_path`` is None.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "bench.json")
        >>> close_report([dict(target="t", value="v", met=True)], [dict(load_before=0.0)], path, rows=[])
        targets:
          met      t: v
        >>> sorted(json.load(open(path)))
        ['rows', 'targets']
    """
    if checks:
        print(format_targets(checks))
    load = note_load(runs)
    if load:
        print(load)
    if json_path:
        write_json(json_path, **sections, targets=checks)


def finish(runs, rows, checks, json_path=None, settings=None, plot_path=None, draw=None):
    """After the table: ``close_report``, then ``draw(path)`` for the plot.

    Returns the exit status: 2 when the plot could not be written, 1 when a
    row failed, else 0.

    Example:
        >>> finish(runs=[], rows=[dict(error="boom")], checks=[])
        1
    """
    close_report(checks, runs, json_path, settings=settings, runs=runs, rows=rows)
    if plot_path and not draw(plot_path):
        return 2
    return 1 if any("error" in row for row in rows) else 0
