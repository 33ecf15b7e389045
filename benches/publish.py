"""Writing a generated section of BENCHMARKS.md and its plots, or checking
that they are what the results give (CI): shared by benches/report.py (the GPU
bench's tables) and examples/gpt2/report.py (the application's).

Python 3, the standard library only.
"""
import pathlib


def publish(tool, root, benchmarks, markers, section, plots, plot_dir, check, insert):
    """Puts `section` (which starts with markers[0] and ends with markers[1])
    in `benchmarks` in place of the text between the markers (where they are
    not there yet, `insert(text, section)` places it) and writes `plots`
    ({path: SVG text}); plots of `plot_dir` that no longer come from the
    results are removed. With `check`, writes nothing and fails naming what
    differs."""
    begin, end = markers
    text = benchmarks.read_text(encoding="utf-8")
    if begin in text and end in text:
        new = text[: text.index(begin)] + section + text[text.index(end) + len(end):]
    else:
        new = insert(text, section)
    rel = lambda p: str(pathlib.Path(p).relative_to(root))
    stale = [rel(benchmarks)] if new != text else []
    stale += [rel(p) for p, body in plots.items() if not p.exists() or p.read_text(encoding="utf-8") != body]
    unplotted = [rel(p) for p in plot_dir.glob("*.svg") if p not in plots]
    if check:
        if stale or unplotted:
            raise SystemExit(f"{tool}: not what the results give: " + ", ".join(stale + unplotted)
                             + f" (run python3 {tool} and commit)")
        print(f"{tool}: {rel(benchmarks)} and {len(plots)} plot(s) as the results give")
        return
    benchmarks.write_text(new, encoding="utf-8")
    for p, body in plots.items():
        p.write_text(body, encoding="utf-8")
    for p in unplotted:
        (root / p).unlink()
    print(f"{tool}: wrote {', '.join(stale) or 'nothing (up to date)'}"
          + (f"; removed {', '.join(unplotted)}" if unplotted else ""))
