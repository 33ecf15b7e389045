#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer's coverage instrumentation (the
# flags cargo-fuzz passes, without AddressSanitizer: the readers are safe
# Rust) on the nightly toolchain, and runs each for SECONDS (default 60)
# from a seed corpus: the filetests' and example kernels' files, and what
# `seeds` writes. Prints each target's executions and coverage; a crash or
# a failed assertion stops its target, leaves the input in
# fuzz/artifacts/<target>/ and fails the script.
#
#   fuzz/run.sh [SECONDS] [TARGET...]
#   FUZZ_ASAN=1 fuzz/run.sh [SECONDS] [TARGET...]   # with AddressSanitizer too
#
# FUZZ_ASAN=1 adds AddressSanitizer (what cargo-fuzz builds by default): the
# readers are safe Rust, but the crates below them (memchr, rspirv, the
# hashers) have unsafe code, and a fault there would not show otherwise.
# It builds into target/asan and runs about half as fast.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(ptx_postlink ptx_loops prop_text file_table device_config ltoir remote_entry resp_reply spirv set_value tier_profile)
fi
# The fuzz workspace's own target folder, whatever CARGO_TARGET_DIR the
# caller has (CI sets one for the main workspace).
export CARGO_TARGET_DIR="$PWD/target"
asan=""
if [ "${FUZZ_ASAN:-0}" = 1 ]; then
  export CARGO_TARGET_DIR="$PWD/target/asan"
  asan="-Zsanitizer=address"
fi
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
if ! cargo +nightly --version > /dev/null 2>&1; then
  echo "fuzz: no nightly toolchain (rustup toolchain install nightly): the fuzz targets need it" >&2
  exit 2
fi
# The seed writer is an ordinary program: built without the instrumentation
# or optimization (into target/debug: it writes a few small files, and an
# optimized build of core took CI minutes), before the targets (into
# target/<triple>/release).
cargo +nightly build --quiet --bin seeds
"$CARGO_TARGET_DIR/debug/seeds" "$corpus"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks $asan"
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')
# --target: build scripts stay uninstrumented, as cargo-fuzz builds them.
cargo +nightly build --quiet --release --target "$triple" "${targets[@]/#/--bin=}"
bin="$CARGO_TARGET_DIR/$triple/release"

seed() { # TARGET FILE...: copies the files in, each under a name of its own
  local t=$1 n=0
  shift
  mkdir -p "$corpus/$t"
  for f in "$@"; do
    n=$((n + 1))
    cp "$f" "$corpus/$t/$n-$(basename "$f")"
  done
}
seed ptx_postlink ../filetests/*/*.ptx ../kernels/ptx/*.ptx
seed ptx_loops ../filetests/*/*.ptx ../filetests/*/expected/*.ptx ../kernels/ptx/*.ptx ../kernels/ptx/bench/*.ptx
seed prop_text ../filetests/*/expected/*.prop
seed file_table ../filetests/*/expected/table.txt
seed device_config ../crates/ptxspec-core/src/features/nvidia.yaml

status=0
for t in "${targets[@]}"; do
  mkdir -p "artifacts/$t"
  log="$corpus/$t.log"
  if "$bin/$t" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
      -artifact_prefix="artifacts/$t/" "$corpus/$t" > "$log" 2>&1; then
    outcome=ok
  else
    outcome=FAILED
    status=1
    tail -40 "$log" >&2
  fi
  # libFuzzer's last status line: #EXECS ... cov: EDGES ft: FEATURES corp: N
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  # Where coverage last grew (a NEW input): long before the end, a plateau.
  new=$(grep -E '^#[0-9]+[[:space:]]+NEW' "$log" | tail -1 | cut -d' ' -f1 | cut -f1 || true)
  echo "fuzz $t: $outcome; ${secs} s; ${last:-no status line}; last new coverage at ${new:-none}"
done
exit "$status"
