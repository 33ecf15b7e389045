#!/usr/bin/env python3
"""BENCHMARKS.md's GPT-2 section and its plots, made from the example's own
JSON (`gpt2 --json`, `gpt2 serve --json`, `fleet_first_step.sh`) in benches/results/gpt2/ — no figure
is typed by hand.

Each file is one process: {"meta": {"device", "date", "commit", "command"},
"run": <what the example printed with --json>}. Files of one run share a name
up to their last "-N" (the process number): `train-…` (training steps, with or
without --graphs), `fleet-…` (a writer and readers of one fleet store) and
`serve-…` (requests). A table's cell is the median over a
run's processes, with their range where it matters; each run has plots beside
its files (benches/results/gpt2/NAME-….svg), drawn without a plotting library.

    python3 examples/gpt2/report.py            # rewrite the section and plots
    python3 examples/gpt2/report.py --check    # fail where they differ (CI)

The section lies between <!-- gpt2:begin --> and <!-- gpt2:end --> in
BENCHMARKS.md. Python 3, the standard library only.
"""
import json
import pathlib
import re
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "benches"))
from publish import publish  # noqa: E402  (found through the path above)
RESULTS = ROOT / "benches" / "results" / "gpt2"
BENCHMARKS = ROOT / "BENCHMARKS.md"
BEGIN, END = "<!-- gpt2:begin -->", "<!-- gpt2:end -->"
# The targets (63): the adaptive build's step at most this much of
# the literal build's; no step after the fifth more than this above the median.
LITERAL_BOUND = 1.005
STALL_BOUND = 1.02
BUILDS = ["generic", "emulated", "native", "LTO", "tiered", "adaptive", "literal"]
COLOURS = {
    "generic": "#888", "emulated": "#b9a", "native": "#7a5", "LTO": "#37a",
    "tiered": "#a83", "adaptive": "#c44", "literal": "#222",
}


def runs():
    """{run name: [(meta, run), ...]} by name, processes in order."""
    out = {}
    for path in sorted(RESULTS.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if "meta" not in doc or "run" not in doc:
            raise SystemExit(f"{path}: needs \"meta\" and \"run\"")
        out.setdefault(re.sub(r"-\d+$", "", path.stem), []).append((doc["meta"], doc["run"]))
    return out


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def span(values, fmt="{:.4f}"):
    """'a' or 'a–b' of the values' range."""
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"


def after_fifth(each):
    later = sorted(each[5:] or each)
    return later[len(later) // 2], later[-1]


def firsts(rs):
    """Each process's first step, in whole milliseconds."""
    return ["{:.0f}".format(r["each_step_ms"][0]) for r in rs]


def where(metas):
    """Where and how a run's processes were measured."""
    m = metas[0]
    commits = sorted({x.get("commit", "?") for x in metas})
    commands = []
    for x in metas:
        # Said once, in the section's opening.
        c = x["command"].replace("LD_LIBRARY_PATH=/usr/local/cuda/lib64 ", "")
        if c not in commands:
            commands.append(c)
    # The commands' common start said once, at a word's end.
    common = commands[0]
    for c in commands[1:]:
        while not c.startswith(common):
            common = common[: max(common.rfind(" "), 0)]
    if len(commands) > 1 and len(common) > 20:
        said = f"`{common}` + " + ", ".join(f"`{c[len(common):].strip() or '(nothing)'}`" for c in commands)
    else:
        said = "; ".join(f"`{c}`" for c in commands)
    return f"{m['device']}, {m['date']}, commit {', '.join(commits)}; {len(metas)} process(es): {said}."


def train_section(name, procs):
    metas = [m for m, _ in procs]
    gpus = [r["gpu"] for _, r in procs]
    small = [g["gpt2_small"] for g in gpus]
    by = {b: [next((x for x in s["builds"] if x["build"] == b), None) for s in small] for b in BUILDS}
    by = {b: v for b, v in by.items() if all(v)}
    lines = [f"### {name}: training steps of GPT-2 small (B {small[0]['batch']}, T {small[0]['seq']}"
             f"{', each step one CUDA graph' if gpus[0].get('graphs') else ''})", "", where(metas), ""]
    # Correct before fast: the tiny configuration against the f64 reference.
    tiny = [t for g in gpus for t in g["tiny"]]
    worst = max(tiny, key=lambda t: t["worst_gradient_error"])
    ref = [r["cpu_reference"]["losses"] for _, r in procs]
    loss_err = max(abs(a - b) / abs(b) for t, g_ref in
                   ((t, ref[i]) for i, g in enumerate(gpus) for t in g["tiny"])
                   for a, b in zip(t["losses"], g_ref))
    same = all(t["losses"] == g["tiny"][0]["losses"] for g in gpus for t in g["tiny"])
    lines.append(
        f"Tiny configuration, every build and process, against the `f64` reference: gradients within "
        f"{worst['worst_gradient_error']:.1e} (relative L2, worst `{worst['worst_gradient']}`), "
        f"{len(tiny[0]['losses'])} steps' losses within {loss_err:.1e} (bounds 1e-3); the builds' losses "
        f"{'the same bit for bit' if same else 'differ in the last bits'}.")
    lines.append("")
    lines.append("| build | ms a step | × generic | × literal | untimed steps | first step ms | slowest after the 5th / median |")
    lines.append("|---|---|---|---|---|---|---|")
    for b, rs in by.items():
        ms = [r["step_ms"] for r in rs]
        gen = [r["step_ms"] / g["step_ms"] for r, g in zip(rs, by["generic"])] if "generic" in by else None
        lit = [r["step_ms"] / l["step_ms"] for r, l in zip(rs, by["literal"])] if "literal" in by else None
        stall = [after_fifth(r["each_step_ms"]) for r in rs]
        lines.append(
            f"| {b} | {statistics.median(ms):.2f} | {span(gen) if gen else '-'} | {span(lit) if lit else '-'} | "
            f"{' / '.join(str(r['warmup_steps']) for r in rs)} | "
            f"{' / '.join(firsts(rs))} | "
            f"{span([w / m for m, w in stall], '{:.3f}')} |")
    lines.append("")
    if "adaptive" in by and "literal" in by and "generic" in by:
        a, l, g = by["adaptive"], by["literal"], by["generic"]
        to_lit = [x["step_ms"] / y["step_ms"] for x, y in zip(a, l)]
        to_gen = [x["step_ms"] / y["step_ms"] for x, y in zip(a, g)]
        stalls = [after_fifth(x["each_step_ms"]) for x in a]
        stall = [w / m for m, w in stalls]
        ok = lambda c: "met" if c else "**missed**"
        lines.append(
            f"Targets (issue 63), adaptive in every process: ≤ ×{LITERAL_BOUND} of literal — "
            f"{ok(max(to_lit) <= LITERAL_BOUND)} (×{span(to_lit)}); never slower than generic — "
            f"{ok(max(to_gen) <= 1.0)} (×{span(to_gen)}); no step after the fifth "
            f"{(STALL_BOUND - 1) * 100:.0f} % above the median — {ok(max(stall) <= STALL_BOUND)} "
            f"(×{span(stall, '{:.3f}')}, untimed steps included).")
        lines.append("")
    plot = f"benches/results/gpt2/{name}-first-steps.svg"
    lines.append(f"![{name}: each step's time over the first 150 steps, process 1]({plot})")
    if not gpus[0].get("graphs"):
        lines.append(f"![{name}: each kernel's share of one profiled step, process 1]"
                     f"(benches/results/gpt2/{name}-kernels.svg)")
    lines.append("")
    return "\n".join(lines), by


def curve_svg(name, by):
    """Each step's ms over the first 150 steps of process 1, per build."""
    left, width, top, height = 60, 560, 40, 260
    series = {b: rs[0]["each_step_ms"][:150] for b, rs in by.items()}
    values = [v for s in series.values() for v in s[1:]]
    lo, hi = min(values), max(values)
    hi = min(hi, statistics.median(values) * 1.15)
    pad = (hi - lo) * 0.05 or 1.0
    lo, hi = lo - pad, hi + pad
    x = lambda i: left + width * i / 149
    y = lambda v: top + height * (1 - (min(v, hi) - lo) / (hi - lo))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 130}" height="{top + height + 40}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="10" y="20" font-size="13">{esc(name)}: ms of each step, process 1 (first step left out of '
        'the axis; clipped at 1.15 × the median)</text>',
        f'<line x1="{left}" y1="{top + height}" x2="{left + width}" y2="{top + height}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + height}" stroke="black"/>',
    ]
    for t in range(5):
        v = lo + (hi - lo) * t / 4
        parts.append(f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
    for i in range(0, 150, 25):
        parts.append(f'<text x="{x(i):.1f}" y="{top + height + 14}" text-anchor="middle">{i + 1}</text>')
    for n, (b, s) in enumerate(series.items()):
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(s) if i > 0)
        parts.append(f'<polyline fill="none" stroke="{COLOURS.get(b, "#000")}" stroke-width="1.2" points="{points}"/>')
        parts.append(f'<text x="{left + width + 10}" y="{top + 12 + 14 * n}" fill="{COLOURS.get(b, "#000")}">{esc(b)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def kernel_group(name):
    if name.startswith("matmul"):
        return name
    for prefix, group in (("adamw", "AdamW"), ("column_sum", "column sums (bias, gain gradients)"),
                          ("crossentropy", "cross-entropy"), ("layernorm", "layer norm"),
                          ("attention", "attention permutes"), ("softmax", "causal softmax")):
        if name.startswith(prefix):
            return group
    return "the rest (GELU, residual, bias, embeddings)"


def kernels_svg(name, by):
    """A stacked bar per build: each group of kernels' ms in one profiled step."""
    groups, order = {}, []
    for b, rs in by.items():
        for k in rs[0]["kernels"]:
            g = kernel_group(k["name"])
            if g not in order:
                order.append(g)
            groups.setdefault(b, {}).setdefault(g, 0.0)
            groups[b][g] += k["ms"]
    palette = ["#37a", "#59c", "#8bd", "#c44", "#a83", "#7a5", "#b9a", "#888", "#444", "#dc6", "#6cb"]
    total = max(sum(v.values()) for v in groups.values())
    left, width, bar, gap = 80, 560, 18, 6
    height = 40 + len(groups) * (bar + gap) + 20 + 14 * len(order)
    x = lambda ms: width * ms / total
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 80}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="10" y="20" font-size="13">{esc(name)}: ms of each group of kernels in one profiled step '
        '(CUDA events around each launch), process 1</text>',
    ]
    yy = 40
    for b, g in groups.items():
        parts.append(f'<text x="{left - 6}" y="{yy + bar - 5}" text-anchor="end">{esc(b)}</text>')
        at = left
        for i, name_g in enumerate(order):
            w = x(g.get(name_g, 0.0))
            parts.append(f'<rect x="{at:.1f}" y="{yy}" width="{w:.1f}" height="{bar}" fill="{palette[i % len(palette)]}"/>')
            at += w
        parts.append(f'<text x="{at + 4:.1f}" y="{yy + bar - 5}">{sum(g.values()):.1f} ms</text>')
        yy += bar + gap
    yy += 10
    for i, name_g in enumerate(order):
        parts.append(f'<rect x="{left}" y="{yy + 14 * i - 9}" width="10" height="10" fill="{palette[i % len(palette)]}"/>')
        parts.append(f'<text x="{left + 14}" y="{yy + 14 * i}">{esc(name_g)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def fleet_section(name, procs):
    """A fleet's writer and its readers: each process's first steps."""
    lines = [f"### {name}: a fresh process's first training step from a warm fleet", "",
             where([m for m, _ in procs]), "",
             "Each process's builds in order (the generic build first): its first steps' ms, the untimed steps "
             "until it settled, its step, and what the guard did in the timed steps (a trial shows as timed "
             "launches, or replays: r).", "",
             "| process | build | first three steps (ms) | untimed steps | ms a step | timed launches |",
             "|---|---|---|---|---|---|"]
    for i, (meta, run) in enumerate(procs):
        role = "writer" if "(its writer" in meta["command"] else "reader"
        for b in run["gpu"]["gpt2_small"]["builds"]:
            first = " / ".join(f"{x:.1f}" for x in b["each_step_ms"][:3])
            phase = b.get("timed_phase", {})
            timed = f"{phase.get('timed_launches', '-')}"
            if phase.get("timed_replays"):
                timed += f" + {phase['timed_replays']}r"
            lines.append(f"| {i + 1} ({role}) | {b['build']} | {first} | {b['warmup_steps']} | {b['step_ms']:.2f} | "
                         f"{timed} |")
    lines.append("")
    return "\n".join(lines)


def serve_section(name, procs):
    """One table of a serving run: per build, ranges over the processes that ran it."""
    metas = [m for m, _ in procs]
    lines = [f"### {name}: serving GPT-2 small (one row a request{', each a CUDA graph' if procs[0][1].get('graphs') else ''})",
             "", where(metas), "",
             "Per build, over the processes that ran it: p50 and p99 of the timed requests (ms); each length's median "
             "(ms), and where measured its median on the GPU (CUDA events from the tokens' upload to the losses); "
             "where recorded, the median time from a request's start until its work was all submitted (its launches: "
             "without graphs a short request is mostly that); "
             "the slowest request × its length's median; the untimed requests; launches and replays (r) timed in the "
             "timed phase; "
             "where recorded, the run's verdicts: variants kept + graph nodes switched (n) / not faster.",
             ""]
    lengths = [x["length"] for x in procs[0][1]["builds"][0]["per_length"]]
    lines.append("| build | p50 | p99 | " + " | ".join(f"T {l}" for l in lengths)
                 + " | submitted in | slowest × median | untimed | timed in the timed phase | kept |")
    lines.append("|---|---|---|" + "---|" * len(lengths) + "---|---|---|---|---|")
    names = []
    for _, run in procs:
        for b in run["builds"]:
            if b["build"] not in names:
                names.append(b["build"])
    for name_b in names:
        rs = [b for _, run in procs for b in run["builds"] if b["build"] == name_b]
        cells = []
        for i in range(len(lengths)):
            wall = span([r["per_length"][i]["p50_ms"] for r in rs], "{:.3f}")
            gpu = [r["per_length"][i]["gpu_p50_ms"] for r in rs if r["per_length"][i].get("gpu_p50_ms")]
            cells.append(wall + (f" (GPU {span(gpu, '{:.3f}')})" if gpu else ""))
        worst = [x["max_ms"] / x["p50_ms"] for r in rs for x in r["per_length"]]
        submitted = [statistics.median(r["each_submit_ms"]) for r in rs if r.get("each_submit_ms")]
        timed = [f"{r['timed_phase']['timed_launches']}+{r['timed_phase']['timed_replays']}r"
                 for r in rs if "timed_phase" in r]
        kept = [f"{r['verdicts']['adapted_variants']}+{r['verdicts']['adapted_graph_nodes']}n"
                f"/{r['verdicts']['variants_not_faster']}" for r in rs if "verdicts" in r]
        lines.append(f"| {name_b} | {span([r['p50_ms'] for r in rs], '{:.3f}')} | "
                     f"{span([r['p99_ms'] for r in rs], '{:.3f}')} | " + " | ".join(cells)
                     + f" | {span(submitted, '{:.2f}') if submitted else '-'}"
                     + f" | {max(worst):.2f} | {' / '.join(str(r['warmup_requests']) for r in rs)} | "
                     + f"{' / '.join(timed) or '-'} | {' / '.join(kept) or '-'} |")
    lines.append("")
    return "\n".join(lines)


def main():
    check = "--check" in sys.argv[1:]
    parts, plots = [], {}
    # Training first, then serving; each without graphs, then with.
    kinds = ["train", "fleet", "serve"]
    order = lambda item: (next((i for i, k in enumerate(kinds) if item[0].startswith(k)), 3),
                          "graphs" in item[0], item[0])
    for name, procs in sorted(runs().items(), key=order):
        if name.startswith("train"):
            text, by = train_section(name, procs)
            parts.append(text)
            plots[RESULTS / f"{name}-first-steps.svg"] = curve_svg(name, by)
            if not procs[0][1]["gpu"].get("graphs"):
                plots[RESULTS / f"{name}-kernels.svg"] = kernels_svg(name, by)
        elif name.startswith("serve"):
            parts.append(serve_section(name, procs))
        elif name.startswith("fleet"):
            parts.append(fleet_section(name, procs))
    section = (
        f"{BEGIN}\n## GPT-2 through ptxspec: the application (issue 63)\n\n"
        "Made by `python3 examples/gpt2/report.py` from the example's `--json` in `benches/results/gpt2/` "
        "(CI checks it). The model: 12 layers, 12 heads, "
        "C 768, vocabulary 50 257 padded to 50 304, FP32; every non-matmul operation a kernel of "
        "`examples/gpt2/kernels.cu` through a ptxspec bundle, matmuls through cuBLAS. Builds: generic (sizes "
        "by value, as plain CUDA), emulated, native, LTO, tiered, adaptive (on LTO), literal (sizes as literals). A step's time is its wall "
        "time (the loss read back ends it); processes after the first share the first's disk cache and tier "
        "profile. Every command ran from the GPU machine's copy of the tree, the binary in `.gpu/`, with "
        "`LD_LIBRARY_PATH=/usr/local/cuda/lib64`.\n\n"
        + "\n".join(parts) + f"{END}"
    )
    publish("examples/gpt2/report.py", ROOT, BENCHMARKS, (BEGIN, END), section, plots, RESULTS, check,
            lambda text, section: text.rstrip("\n") + "\n\n" + section + "\n")


if __name__ == "__main__":
    main()
