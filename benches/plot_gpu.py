#!/usr/bin/env python3
"""Plots a GPU bench run (the JSON lines benches/gpu.rs writes) as the ratio
of each variant's time to the literal's, per kernel.

    python3 benches/plot_gpu.py target/gpu-bench.jsonl OUT.png

(the GPU bench writes `target/gpu-bench.jsonl`, or `$PTXSPEC_BENCH_OUT`).

Needs matplotlib (pip install matplotlib).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main():
    src, dest = sys.argv[1], sys.argv[2]
    rows = [json.loads(line) for line in open(src) if line.strip()]
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    ratio = {(r["kernel"], r["variant"]): r["ratio"] for r in rows}
    fig, ax = plt.subplots(figsize=(11, 5))
    width = 0.8 / len(variants)
    for i, v in enumerate(variants):
        xs = [k + i * width for k in range(len(kernels))]
        ys = [ratio.get((k, v), float("nan")) for k in kernels]
        bars = ax.bar(xs, ys, width, label=v)
        for x, y in zip(xs, ys):
            if y == y:
                ax.text(x, y + 0.01, f"{y:.2f}", ha="center", va="bottom", fontsize=7, rotation=90)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(kernels))])
    ax.set_xticklabels(kernels)
    ax.set_ylabel("time / literal constant (lower is better)")
    ax.set_ylim(0.9, max(v for v in ratio.values()) + 0.15)
    ax.set_title("ptxspec on NVIDIA H100: specialization constants vs a literal, median of 7x20 launches")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(dest, dpi=110)


if __name__ == "__main__":
    main()
