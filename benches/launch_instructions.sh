#!/usr/bin/env bash
# Host instructions per launch of each way (benches/launch_instructions.rs),
# counted by callgrind against a stand-in driver: no GPU needed.
#
#   bash benches/launch_instructions.sh            # print the table
#   bash benches/launch_instructions.sh OUT.jsonl  # and write it as the GPU
#                                                  # bench's results are written
#
# Needs a C compiler, valgrind, and NVIDIA's tools for the kernels' build
# (ci/install-nvidia-tools.sh installs them). A way's count is the
# difference between runs of 2 000 and 1 000 launches, over 1 000: exact,
# the same on every run of one build (another compiler gives other counts);
# its lines of code are the 64-byte lines of instructions every launch runs
# (what the driver's work between launches pushes out of the instruction
# cache). LAUNCH_INSTRUCTIONS_SOURCE names the code measured in the results
# where it is not HEAD's.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
for tool in cc valgrind; do
  command -v "$tool" >/dev/null || { echo "launch_instructions: $tool is not installed" >&2; exit 1; }
done
# shellcheck source=../ci/install-nvidia-tools.sh
source ci/install-nvidia-tools.sh
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cc -O2 -shared -fPIC -o "$work/libcuda.so.1" benches/launch_instructions/stub_libcuda.c
ln -s libcuda.so.1 "$work/libcuda.so"
echo "launch_instructions: building the bench" >&2
# With its symbols (the release profile strips them): callgrind finds
# `launches` by name.
bin="$(CARGO_PROFILE_BENCH_STRIP=none cargo bench --no-run --bench launch_instructions 2>&1 |
  sed -n 's/.*Executable benches\/launch_instructions.rs (\(.*\))/\1/p')"
[ -x "$bin" ] || { echo "launch_instructions: the bench did not build" >&2; exit 1; }
count() { # WAY N: the instructions callgrind counted in `launches`
  LD_LIBRARY_PATH="$work${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" valgrind --tool=callgrind \
    --toggle-collect='launch_instructions::launches' --dump-instr=yes --compress-pos=no \
    --callgrind-out-file="$work/out" "$bin" "$1" "$2" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
lines() { # N: the 64-byte lines of code the last count ran at (nearly) every one of its N
  # launches: at 9 in 10 at least (a bundle's first launch makes its plan)
  awk -v n="$1" '
    function hex(s,  i, v) {
      v = 0
      for (i = 3; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
      return v
    }
    /^calls=/ { call = 1; next }
    /^0x[0-9a-f]+ / { if (call) { call = 0; next } ran[$1] += $3 }
    END {
      for (a in ran) if (ran[a] * 10 >= n * 9) seen[int(hex(a) / 64)] = 1
      for (l in seen) k++
      print k + 0
    }' "$work/out"
}
rows=()
plain=""
for way in plain unchanged changed bundles global "four arguments"; do
  one="$(count "$way" 1000)"
  two="$(count "$way" 2000)"
  [ -n "$one" ] && [ -n "$two" ] || { echo "launch_instructions: way $way did not run" >&2; exit 1; }
  code="$(lines 2000)"
  per=$(( (two - one) / 1000 ))
  plain="${plain:-$per}"
  printf '%-14s %5d instructions per launch (%+d over plain), %3d lines of code\n' \
    "$way" "$per" $(( per - plain )) "$code"
  rows+=("{\"measure\":\"host instructions per launch\",\"row\":\"$way\",\"instructions\":$per,\"over plain\":$(( per - plain )),\"64-byte lines of code\":$code}")
done
if [ $# -ge 1 ]; then
  # The code measured: HEAD's, or what LAUNCH_INSTRUCTIONS_SOURCE says
  # (a run with an earlier commit's src/ and crates/ checked out).
  commit="${LAUNCH_INSTRUCTIONS_SOURCE:-$(git rev-parse --short HEAD)}"
  {
    printf '{"meta": {"device": "CPU (callgrind, a stand-in driver)", "driver": "none", "date": "%s", "commit": "%s", "command": "bash benches/launch_instructions.sh", "process": 1}}\n' "$(date -u +%F)" "$commit"
    printf '%s\n' "${rows[@]}"
  } >"$1"
  echo "launch_instructions: wrote $1" >&2
fi
