#!/bin/bash
# Disk-cache hits of several `cache_hit` bench binaries (built at different
# commits), in new processes taken in turns so that each binary meets the
# same host: `benches/cache_hit_ab.sh ROUNDS BINARY...` (each binary gets its
# own cache folder, which one untimed process links first). Prints, per
# binary, the medians over ROUNDS processes of its steps (µs: bundle, build,
# cubin) and of their sum. Used for BENCHMARKS.md's A/B figures (round 9,
# fourth session).
set -euo pipefail
rounds=${1:?usage: cache_hit_ab.sh ROUNDS BINARY...}
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for b in "$@"; do
  dir="$work/cache-$(basename "$b")"
  mkdir -p "$dir"
  PTXSPEC_CACHE_DIR="$dir" "$b" --disk-hit >/dev/null 2>&1 || true
done
for _ in $(seq "$rounds"); do
  for b in "$@"; do
    PTXSPEC_CACHE_DIR="$work/cache-$(basename "$b")" "$b" --disk-hit |
      sed -n "s|^disk hit us |$(basename "$b") |p"
  done
done >"$work/runs"
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for b in "$@"; do
  name=$(basename "$b")
  rows=$(grep "^$name " "$work/runs" || true)
  [ -n "$rows" ] || { echo "$name: no disk hit measured"; continue; }
  bundle=$(echo "$rows" | awk '{print $2}' | median)
  build=$(echo "$rows" | awk '{print $3}' | median)
  cubin=$(echo "$rows" | awk '{print $4}' | median)
  total=$(echo "$rows" | awk '{print $2+$3+$4}' | median)
  echo "$name bundle $bundle build $build cubin $cubin total(median of sums) $total"
done
