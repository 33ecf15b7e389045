#!/usr/bin/env bash
# The public API of the `ptxspec` crate against the checked-in list
# api/ptxspec.txt (ci/public_api.py reads it from rustdoc's JSON, which
# needs the nightly toolchain). A change to the API must change the list on
# purpose: `ci/public-api.sh --bless` writes it, and the diff is reviewed.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
cargo +nightly rustdoc -p ptxspec --lib --quiet -- -Z unstable-options --output-format json
# Core with the features the facade turns on: the types it re-exports are
# listed with their members.
cargo +nightly rustdoc -p ptxspec-core --lib --quiet --features remote,tls -- -Z unstable-options --output-format json
now=$(python3 ci/public_api.py "$target/doc/ptxspec.json" "$target/doc/ptxspec_core.json")
if [ "${1:-}" = "--bless" ]; then
  printf '%s\n' "$now" > api/ptxspec.txt
  echo "public API: api/ptxspec.txt written ($(printf '%s\n' "$now" | wc -l) items)" >&2
  exit 0
fi
if ! diff -u api/ptxspec.txt <(printf '%s\n' "$now") >&2; then
  echo "public API: it differs from api/ptxspec.txt (above: - the list, + the code); if the change is meant, run ci/public-api.sh --bless and commit the list" >&2
  exit 1
fi
echo "public API: as api/ptxspec.txt says ($(printf '%s\n' "$now" | wc -l) items)" >&2
