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
# the same on every run of one build (another compiler gives other counts).
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
    --toggle-collect='launch_instructions::launches' --callgrind-out-file="$work/out" \
    "$bin" "$1" "$2" 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
rows=()
plain=""
for way in plain unchanged changed bundles global; do
  one="$(count "$way" 1000)"
  two="$(count "$way" 2000)"
  [ -n "$one" ] && [ -n "$two" ] || { echo "launch_instructions: way $way did not run" >&2; exit 1; }
  per=$(( (two - one) / 1000 ))
  plain="${plain:-$per}"
  printf '%-10s %5d instructions per launch (%+d over plain)\n' "$way" "$per" $(( per - plain ))
  rows+=("{\"measure\":\"host instructions per launch\",\"row\":\"$way\",\"instructions\":$per,\"over plain\":$(( per - plain ))}")
done
if [ $# -ge 1 ]; then
  commit="$(git rev-parse --short HEAD)"
  {
    printf '{"meta": {"device": "CPU (callgrind, a stand-in driver)", "driver": "none", "date": "%s", "commit": "%s", "command": "bash benches/launch_instructions.sh", "process": 1}}\n' "$(date -u +%F)" "$commit"
    printf '%s\n' "${rows[@]}"
  } >"$1"
  echo "launch_instructions: wrote $1" >&2
fi
