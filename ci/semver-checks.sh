#!/usr/bin/env bash
# The public API of the crates a dependent names in its Cargo.toml
# (`ptxspec`, `ptxspec-build`) against the last release's, so that a
# breaking change needs a new version in Cargo.toml (0.x: a new minor
# number) and says so in the CHANGELOG. The release is api/release's (the
# version and the commit where the CHANGELOG's section for it was written).
#
# Both sides are rustdoc JSON from the nightly toolchain: today's, and the
# release's sources (`git archive`) documented into the same target folder
# (their dependencies are those already built; ptxspec's own crates are
# rebuilt for each side, whose paths in the workspace are the same).
#
# Two checks read them:
# - ci/public_api.py lists both sides' public API (the same lister, so the
#   lists compare), and ci/api_diff.py fails where an item of the release
#   is gone or changed and Cargo.toml's version does not allow a break;
# - cargo-semver-checks, where the pinned version is on PATH
#   (ci/cargo-tools.sh --semver-checks builds it, as CI does), on both
#   crates; ci/semver-fixtures.sh shows it fails on each kind of break.
# Items hidden from the docs are seen by neither: the registration code
# that ptxspec-build generates has its own test (tests/generated_code.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target"
export CARGO_TARGET_DIR
CARGO_TARGET_DIR=$(realpath "$target")
target=$CARGO_TARGET_DIR
python3 ci/api_diff.py --self-test
read -r release_version release_commit < api/release
if ! git cat-file -e "$release_commit^{commit}" 2>/dev/null; then
  echo "semver: the release commit $release_commit (api/release) is not in this clone's history: a shallow clone? (git fetch --unshallow)" >&2
  exit 1
fi
work="$target/semver"
rm -rf "$work"
mkdir -p "$work/release-src" "$work/release" "$work/current"
git archive "$release_commit" | tar -x -C "$work/release-src"

document() { # MANIFEST OUT: rustdoc JSON of the crates into OUT
  local manifest=$1 out=$2
  # The other side's build of ptxspec's crates has the same name and
  # relative paths, and is newer than these sources: cargo would take it
  # for this side's. Without their fingerprints they are built again.
  rm -rf "$target"/debug/.fingerprint/ptxspec-*
  for crate in ptxspec ptxspec-build; do
    cargo +nightly rustdoc --manifest-path "$manifest" -p "$crate" --lib --quiet --locked \
      -- -Z unstable-options --output-format json
  done
  cargo +nightly rustdoc --manifest-path "$manifest" -p ptxspec-core --lib --quiet --locked \
    --features remote,tls -- -Z unstable-options --output-format json
  cp "$target"/doc/{ptxspec,ptxspec_build,ptxspec_core}.json "$out/"
}
document "$work/release-src/Cargo.toml" "$work/release"
document Cargo.toml "$work/current"
rm -rf "$target"/debug/.fingerprint/ptxspec-*

version=$(cargo metadata --no-deps --format-version 1 --locked \
  | python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="ptxspec"))')
status=0
for crate in ptxspec ptxspec_build; do
  for side in release current; do
    python3 ci/public_api.py --list-only "$work/$side/$crate.json" "$work/$side/ptxspec_core.json" > "$work/$side/$crate.txt"
  done
  python3 ci/api_diff.py --crate "$crate" --release "$release_version" --version "$version" \
    "$work/release/$crate.txt" "$work/current/$crate.txt" || status=1
done

pinned=$(sed -n 's/^CARGO_SEMVER_CHECKS_VERSION=//p' ci/cargo-tools.sh)
if have=$(cargo semver-checks --version 2>/dev/null) && [ "$have" = "cargo-semver-checks $pinned" ]; then
  for crate in ptxspec ptxspec_build; do
    if ! cargo semver-checks check-release \
        --baseline-rustdoc "$work/release/$crate.json" \
        --current-rustdoc "$work/current/$crate.json"; then
      echo "semver: cargo-semver-checks: $crate breaks the API of $release_version where its version $version does not allow it (above)" >&2
      status=1
    fi
  done
else
  echo "semver: cargo-semver-checks $pinned is not on PATH (${have:-none}): not run; the API lists were compared (ci/cargo-tools.sh --semver-checks builds it)" >&2
fi
exit "$status"
