#!/usr/bin/env python3
"""`ptxspec cache warm` of N new value sets with K workers against one worker,
in one run: how many value sets a second each linked, and the ratio. Every
run links the same value sets into a fresh disk cache (no remote store), so
each worker count does the same work; counts are interleaved round by round
(a machine that warms up or gets busy meets every count alike) and the median
of the rounds is kept.

The kernel is kernels/matmul.cu's `matmul` (block size a specialization
constant: the link unrolls the inner loop by the value, a link of realistic
size), compiled once with `ptxspec compile --lto`.

    python3 benches/warm_workers.py [--ptxspec BIN] [--workers 1,2] [--sets 16]
        [--rounds 3] [--arch sm_90] [--out benches/results/NAME-1.jsonl]
        [--device WORDS]

Needs NVIDIA's tools as ptxspec finds them (source ci/install-nvidia-tools.sh,
or a CUDA toolkit); no GPU. With --out it writes the JSON lines that
benches/report.py makes BENCHMARKS.md's table and plot from.
"""
import argparse
import datetime
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run(cmd, env):
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"warm_workers: {' '.join(map(str, cmd))} failed:\n{done.stderr}")
    return done.stderr


def main():
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--ptxspec", default=str(ROOT / "target" / "release" / "ptxspec"))
    a.add_argument("--workers", default="1,2")
    a.add_argument("--sets", type=int, default=16)
    a.add_argument("--rounds", type=int, default=3)
    a.add_argument("--arch", default="sm_90")
    a.add_argument("--out")
    a.add_argument("--device", default=f"CPU host ({os.cpu_count()} cores), no GPU")
    args = a.parse_args()
    workers = [int(k) for k in args.workers.split(",")]
    if 1 not in workers:
        workers.insert(0, 1)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="warm-workers-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTXSPEC_REMOTE")}
    env.pop("PTXSPEC_CACHE_SIGNING_KEY", None)
    env.pop("PTXSPEC_CACHE_TRUSTED_KEYS", None)
    env["CUDA_CACHE_DISABLE"] = "1"
    run([args.ptxspec, "compile", "--lto", "-o", tmp / "out", ROOT / "kernels" / "matmul.cu"], env)
    listing = tmp / "sets.txt"
    # Block sizes 1..N: each a new link; the unroll (and the link) grows
    # with the size, and every worker count links the same sizes.
    listing.write_text(
        "".join(f"out/matmul.prop {args.arch} kernel=matmul block_size_id={b}\n" for b in range(1, args.sets + 1))
    )
    wall = {k: [] for k in workers}
    for r in range(args.rounds):
        for k in workers if r % 2 == 0 else reversed(workers):
            cache = tmp / f"cache-{r}-{k}"
            e = dict(env, PTXSPEC_CACHE_DIR=str(cache), PTXSPEC_TIER_WORKERS=str(k))
            t = time.perf_counter()
            said = run([args.ptxspec, "cache", "warm", listing], e)
            wall[k].append(time.perf_counter() - t)
            linked = said.count("cubin: linked")
            if linked != args.sets:
                sys.exit(f"warm_workers: {k} workers linked {linked} of {args.sets}:\n{said}")
            shutil.rmtree(cache, ignore_errors=True)
    base = statistics.median(wall[1])
    measure = f"cache warm: {args.sets} new value sets, K link workers ({args.arch}, matmul)"
    rows = []
    for k in workers:
        m = statistics.median(wall[k])
        rows.append(
            {
                "measure": measure,
                "row": f"{k} worker{'s' if k > 1 else ''}",
                "value sets per s": args.sets / m,
                "× one worker's rate": base / m,
                "wall s": m,
            }
        )
    for k, row in zip(workers, rows):
        print(f"{row['row']:>11}: {row['value sets per s']:7.2f} value sets/s, "
              f"x{base / row['wall s']:.2f} of one worker's rate "
              f"(wall {row['wall s']:.2f} s; rounds {[round(w, 2) for w in wall[k]]})")
    if args.out:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                stdout=subprocess.PIPE, text=True).stdout.strip()
        meta = {
            "device": args.device,
            "driver": "none (no GPU needed)",
            "date": datetime.date.today().isoformat(),
            "commit": commit,
            "command": "python3 benches/warm_workers.py " + " ".join(sys.argv[1:]),
            "process": 1,
        }
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(json.dumps({"meta": meta}, ensure_ascii=False) + "\n")
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
