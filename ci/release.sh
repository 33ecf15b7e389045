#!/usr/bin/env bash
# Makes a release of the crates at the version Cargo.toml says: checks that
# the work tree is clean and the version is new, writes api/release (the
# version and the commit it releases, what ci/semver-checks.sh compares
# every later change with), commits it, and tags the commit `vVERSION`.
# Publishing to crates.io stays a separate, deliberate step.
#
#   bash ci/release.sh            # the release named in Cargo.toml
#   bash ci/release.sh --dry-run  # say what it would do, change nothing
set -euo pipefail
cd "$(dirname "$0")/.."
dry=${1:-}
if [ -n "$(git status --porcelain)" ]; then
  echo "release: the work tree has changes; commit or stash them first" >&2
  exit 1
fi
version=$(cargo metadata --no-deps --format-version 1 --locked \
  | python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="ptxspec"))')
read -r released _ < api/release
if [ "$version" = "$released" ]; then
  echo "release: $version is api/release's already: raise the version in Cargo.toml first" >&2
  exit 1
fi
if git rev-parse -q --verify "refs/tags/v$version" >/dev/null; then
  echo "release: tag v$version exists" >&2
  exit 1
fi
commit=$(git rev-parse HEAD)
if [ "$dry" = "--dry-run" ]; then
  echo "release: would write api/release = $version $commit, commit it and tag v$version" >&2
  exit 0
fi
printf '%s %s\n' "$version" "$commit" > api/release
git add api/release
git commit -q -m "Release $version: api/release names $commit, what semver checks compare with from now on"
git tag -a "v$version" -m "ptxspec $version" "$commit"
echo "release: v$version tagged at $commit; api/release committed" >&2
