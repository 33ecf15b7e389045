#!/usr/bin/env bash
# The semver gate can fail: for each kind of break a dependent meets — an
# item removed, a public field added to a struct built with a literal, a
# variant added to an exhaustive enum, a required trait method added,
# `#[non_exhaustive]` added, an auto trait lost, a signature changed — a
# tiny crate before and after, at the same version, is documented as
# nightly rustdoc JSON, and cargo-semver-checks (the pinned version that
# ci/cargo-tools.sh --semver-checks puts on PATH) must fail on it; an added
# item, which breaks nothing, must pass. Run by ci/test.sh after
# ci/semver-checks.sh, which compares the real crates the same way.
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

document() { # NAME SOURCE: rustdoc JSON of a crate of SOURCE at $work/NAME.json
  local dir="$work/$1"
  mkdir -p "$dir/src"
  printf '[package]\nname = "fixture"\nversion = "0.1.0"\nedition = "2021"\n\n[workspace]\n' > "$dir/Cargo.toml"
  printf '%s\n' "$2" > "$dir/src/lib.rs"
  cargo +nightly rustdoc --quiet --manifest-path "$dir/Cargo.toml" --target-dir "$dir/target" --lib \
    -- -Z unstable-options --output-format json
  cp "$dir/target/doc/fixture.json" "$work/$1.json"
}

base='pub fn kept() {}
pub fn removed() {}
pub struct Open { pub a: u32 }
pub enum Kind { A, B }
pub trait Visit { fn visit(&self); }
pub struct Shared(pub std::sync::Arc<u32>);
pub fn takes(x: u32) -> u32 { x }'
document base "$base"

# NAME|SED EXPRESSION applied to the base|whether the gate must fail
cases='removed|/pub fn removed/d|fail
field added|s/pub struct Open { pub a: u32 }/pub struct Open { pub a: u32, pub b: u32 }/|fail
variant added|s/pub enum Kind { A, B }/pub enum Kind { A, B, C }/|fail
trait method added|s/fn visit(\&self); }/fn visit(\&self); fn more(\&self); }/|fail
non_exhaustive added|s/pub enum Kind/#[non_exhaustive] pub enum Kind/|fail
auto trait lost|s/std::sync::Arc<u32>/std::rc::Rc<u32>/|fail
signature changed|s/takes(x: u32)/takes(x: u32, y: u32)/|fail
item added|$a pub fn added() {}|pass'
status=0
n=0
while IFS='|' read -r name expr want; do
  n=$((n + 1))
  changed=$(printf '%s\n' "$base" | sed -e "$expr")
  if [ "$changed" = "$base" ]; then
    echo "semver fixtures: '$name' changed nothing (its sed expression no longer matches the base)" >&2
    status=1
    continue
  fi
  document "case$n" "$changed"
  # A failure is a lint's (its summary says a new major version is
  # needed), not the tool failing to read what it was given.
  if cargo semver-checks check-release --baseline-rustdoc "$work/base.json" \
      --current-rustdoc "$work/case$n.json" --release-type minor > "$work/case$n.log" 2>&1; then
    got=pass
  elif grep -q "semver requires new major version" "$work/case$n.log"; then
    got=fail
  else
    got="an error (not a lint)"
  fi
  if [ "$got" != "$want" ]; then
    echo "semver fixtures: '$name': cargo-semver-checks should $want and did $got:" >&2
    cat "$work/case$n.log" >&2
    status=1
  else
    echo "semver fixtures: '$name': $got, as it should" >&2
  fi
done <<< "$cases"
exit $status
