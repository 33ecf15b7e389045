#!/usr/bin/env python3
"""BENCHMARKS.md's current tables and their plots, made from the GPU bench's
JSON lines in benches/results/ (no figure is typed by hand).

Each results file is one process of `gpu_bench`: a first line
{"meta": {"device", "driver", "date", "commit", "command", "process"}} and then
the rows the bench writes: kernel time ({"kernel", "variant", "ms", "ratio"}:
the median kernel time and its ratio to the literal kernel's in the same
run), and the figures of the other measures ({"measure", "row", NAME: value,
...}: launch overhead in µs per launch, graph costs in µs per node, ...).
Files of one run share a name up to their last "-N" (their process number);
each measure they hold is a table, a cell the median over the processes
(with the range of a row's first figure), and a plot.

    python3 benches/report.py            # rewrite the section and the plots
    python3 benches/report.py --check    # fail where they differ (CI)

The section lies between the markers <!-- report:begin --> and
<!-- report:end --> of BENCHMARKS.md; each measure's plot is an SVG beside its
results (benches/results/NAME.svg), drawn here without any plotting library.
Python 3 only, the standard library only.
"""
import json
import pathlib
import re
import statistics
import sys

from publish import publish

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benches" / "results"
BENCHMARKS = ROOT / "BENCHMARKS.md"
BEGIN, END = "<!-- report:begin -->", "<!-- report:end -->"


def measures():
    """{measure name: [(meta, rows), ...]} of the results files, by name."""
    out = {}
    for path in sorted(RESULTS.glob("*.jsonl")):
        lines = [json.loads(l) for l in path.read_text(encoding="utf-8").splitlines() if l.strip()]
        if not lines or "meta" not in lines[0]:
            raise SystemExit(f"{path}: the first line must be {{\"meta\": {{...}}}}")
        name = re.sub(r"-\d+$", "", path.stem)
        out.setdefault(name, []).append((lines[0]["meta"], lines[1:]))
    return out


def table(name, runs):
    """The markdown of one measure: where and how it was measured, and per
    kernel and variant the median ratio to the literal over the processes,
    their range, and the median time."""
    metas = [m for m, _ in runs]
    first = {k: metas[0].get(k, "?") for k in ("device", "driver", "date", "command")}
    base = baseline(runs)
    keys = []
    ratios, times = {}, {}
    for _, rows in runs:
        for r in rows:
            key = (r["kernel"], r["variant"])
            if key not in ratios:
                keys.append(key)
                ratios[key], times[key] = [], []
            ratios[key].append(r["ratio"])
            times[key].append(r["ms"])
    commits = ", ".join(sorted({f"`{m.get('commit', '?')}`" for m in metas}))
    out = [
        f"### {name}",
        "",
        f"{first['device']}, driver {first['driver']}, {first['date']}, at {commits}; "
        f"`{first['command']}`, {len(runs)} processes.",
        "",
        f"![{name}: kernel time × the {base} kernel's](benches/results/{name}.svg)",
        "",
        f"| kernel | variant | × {base} (median) | range over processes | ms (median) |",
        "|---|---|---|---|---|",
    ]
    for key in keys:
        r, t = ratios[key], times[key]
        out.append(
            f"| {key[0]} | {key[1]} | {statistics.median(r):.3f} | {min(r):.3f}–{max(r):.3f} | "
            f"{statistics.median(t):.4f} |"
        )
    return "\n".join(out) + "\n"


def baseline(runs):
    """The variant kernel-time rows are ratios to: the rows' "baseline"
    (one for a whole run), else the literal kernel."""
    named = {r.get("baseline", "literal") for _, rows in runs for r in rows}
    if len(named) > 1:
        raise SystemExit(f"one run's kernel-time rows name several baselines: {sorted(named)}")
    return named.pop() if named else "literal"


def svg(name, runs):
    """A horizontal bar per kernel and variant from 1 to its median ratio to
    the baseline (left: faster; right: slower), on an axis that spans the
    ratios, so that a 3 % difference is as visible as it is worth."""
    base = baseline(runs)
    keys, ratios = [], {}
    for _, rows in runs:
        for r in rows:
            key = (r["kernel"], r["variant"])
            if key not in ratios:
                keys.append(key)
                ratios[key] = []
            ratios[key].append(r["ratio"])
    bar, gap, left, width = 14, 4, 470, 360
    medians = [statistics.median(v) for v in ratios.values()]
    lo, hi = min(min(medians), 1.0), max(max(medians), 1.0)
    pad = max(hi - lo, 0.02) * 0.08
    lo, hi = lo - pad, hi + pad
    height = 40 + len(keys) * (bar + gap) + 30
    x = lambda ratio: left + width * (ratio - lo) / (hi - lo)
    esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 70}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="10" y="20" font-size="13">{esc(name)}: kernel time × the {esc(base)} kernel\'s '
        f"(median of {len(runs)} processes; left of 1: faster)</text>",
    ]
    y = 40
    for key in keys:
        kernel, variant = key
        m = statistics.median(ratios[key])
        label = f"{kernel} · {variant}"
        colour = "#888" if variant == base or abs(m - 1.0) < 5e-4 else ("#c44" if m > 1.0 else "#37a")
        start, end = sorted((x(1.0), x(m)))
        parts.append(f'<text x="{left - 6}" y="{y + bar - 3}" text-anchor="end">{esc(label)}</text>')
        parts.append(
            f'<rect x="{start:.1f}" y="{y}" width="{max(end - start, 1.0):.1f}" height="{bar}" fill="{colour}"/>'
        )
        parts.append(f'<text x="{max(x(m), x(1.0)) + 4:.1f}" y="{y + bar - 3}">{m:.3f}</text>')
        y += bar + gap
    parts.append(
        f'<line x1="{x(1.0):.1f}" y1="32" x2="{x(1.0):.1f}" y2="{y}" stroke="black" stroke-dasharray="3,2"/>'
    )
    parts.append(f'<text x="{x(1.0):.1f}" y="{y + 14}" text-anchor="middle">1.000</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def figures(runs):
    """{measure: (rows in first-seen order, figure names in first-seen
    order, {(row, figure): [value per process]})} of the rows that are not
    kernel time."""
    out = {}
    for _, rows in runs:
        for r in rows:
            if "measure" not in r:
                continue
            order, names, values = out.setdefault(r["measure"], ([], [], {}))
            if r["row"] not in order:
                order.append(r["row"])
            for k, v in r.items():
                if k in ("measure", "row"):
                    continue
                if k not in names:
                    names.append(k)
                values.setdefault((r["row"], k), []).append(v)
    return out


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower().replace("µs", "us").replace("×", "x")).strip("-")


def num(v):
    """Four significant digits: host microseconds and tens of milliseconds
    alike."""
    return f"{v:.4g}"


# The order of the section: kernel time, then the costs around a launch.
ORDER = ["kernel-time", "launch-overhead", "launch-instructions", "graphs", "new-value", "first-launch", "sweep"]


def rank(name):
    return next((i for i, p in enumerate(ORDER) if name.startswith(p)), len(ORDER)), name


def figure_table(name, runs, measure, found):
    """The markdown of one measure of figures: where and how, then a row per
    row, a column per figure (the median over processes; the row's first
    figure with its range)."""
    order, names, values = found
    metas = [m for m, _ in runs]
    first = {k: metas[0].get(k, "?") for k in ("device", "driver", "date", "command")}
    commits = ", ".join(sorted({f"`{m.get('commit', '?')}`" for m in metas}))
    plot = f"benches/results/{name}-{slug(measure)}.svg"
    out = [
        f"### {measure}",
        "",
        f"{first['device']}, driver {first['driver']}, {first['date']}, at {commits}; "
        f"`{first['command']}`, {len(runs)} processes.",
        "",
        f"![{measure}]({plot})",
        "",
        "| | " + " | ".join(n.replace("_", " ") for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for row in order:
        cells = []
        present = [n for n in names if (row, n) in values]
        for n in names:
            v = values.get((row, n))
            if not v:
                cells.append("")
            elif present and n == present[0] and len(v) > 1:
                cells.append(f"{num(statistics.median(v))} ({num(min(v))}…{num(max(v))})")
            else:
                cells.append(num(statistics.median(v)))
        out.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def figure_svg(measure, runs, found):
    """A horizontal bar per row: its first figure's median (named beside
    it), with the range over the processes as a line. Where every row has
    the same figures and they are ways of doing one thing (a sweep's
    emulated, LTO, tiered, NVRTC), a bar per row and figure."""
    order, names, values = found
    parallel = (
        len(names) > 1
        and not {"min", "max", "allocations"} & set(names)
        and all((row, n) in values for row in order for n in names)
    )
    bars = []
    for row in order:
        shown = names if parallel else [n for n in names if (row, n) in values][:1]
        for n in shown:
            v = values[(row, n)]
            bars.append((f"{row} · {n.replace('_', ' ')}", statistics.median(v), min(v), max(v)))
    bar, gap, left, width = 14, 4, 520, 300
    top = max(max(abs(b[3]) for b in bars), 1e-9) * 1.1
    positive = [b[1] for b in bars if b[1] > 0]
    # Values over orders of magnitude: a log axis, on which a 56 and an 80
    # beside a 2 400 are still told apart.
    logarithmic = bool(positive) and len(positive) == len(bars) and top / min(positive) > 30
    if logarithmic:
        import math

        floor = min(min(b[2] for b in bars), min(positive)) / 2
        span = math.log10(top / floor)
        x = lambda v: left + width * math.log10(max(v, floor) / floor) / span
    else:
        x = lambda v: left + width * max(v, 0) / top
    esc = lambda t: t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    height = 40 + len(bars) * (bar + gap) + 20
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 90}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="10" y="20" font-size="13">{esc(measure)}: '
        f"{'each figure' if parallel else 'each row' + chr(39) + 's first figure'} "
        f"(median of {len(runs)} processes; the line: their range"
        f"{'; a logarithmic axis' if logarithmic else ''})</text>",
    ]
    y = 40
    for label, m, lo, hi in bars:
        parts.append(f'<text x="{left - 6}" y="{y + bar - 3}" text-anchor="end">{esc(label)}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{x(m) - left:.1f}" height="{bar}" fill="#37a"/>')
        parts.append(
            f'<line x1="{x(lo):.1f}" y1="{y + bar / 2}" x2="{x(hi):.1f}" y2="{y + bar / 2}" stroke="black"/>'
        )
        parts.append(f'<text x="{x(max(m, hi)) + 4:.1f}" y="{y + bar - 3}">{num(m)}</text>')
        y += bar + gap
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    check = "--check" in sys.argv[1:]
    all_measures = measures()
    tables, plots = [], {}
    for name, runs in sorted(all_measures.items(), key=lambda item: rank(item[0])):
        kernel_runs = [(m, [r for r in rows if "kernel" in r]) for m, rows in runs]
        if any(rows for _, rows in kernel_runs):
            tables.append(table(name, kernel_runs))
            plots[RESULTS / f"{name}.svg"] = svg(name, kernel_runs)
        for measure, found in figures(runs).items():
            tables.append(figure_table(name, runs, measure, found))
            plots[RESULTS / f"{name}-{slug(measure)}.svg"] = figure_svg(measure, runs, found)
    section = (
        f"{BEGIN}\n"
        "## Current results\n\n"
        "Made by `python3 benches/report.py` from the GPU bench's JSON lines in `benches/results/` (CI checks that "
        "this section and the plots are what the files give). The sessions' records below keep every other "
        "figure with its device, date and command; older records are in git history.\n\n"
        + "\n".join(tables)
        + f"{END}"
    )
    def before_the_first_section(text, section):
        head, _, rest = text.partition("\n## ")
        return head + "\n" + section + "\n\n## " + rest

    publish("benches/report.py", ROOT, BENCHMARKS, (BEGIN, END), section, plots, RESULTS, check,
            before_the_first_section)


if __name__ == "__main__":
    main()
