#!/usr/bin/env bash
# The whole CI: NVIDIA tools (wheels), kernel PTX currency, fmt, clippy, tests.
# Works on a machine with no GPU and no CUDA install. Needs cargo (with
# rustfmt and clippy), python3 with venv, and Debian's spirv-tools and
# glslang-tools, redis-server and iproute2 (installed here with apt-get when missing, which
# needs root or sudo); it says what is missing rather than failing halfway. The fleet tests
# (network namespaces) run as root only, and are reported ignored, with why, elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
# A one-shot build: incremental compilation's caches would only take disk
# (Cargo.toml's dev profile says how much debug info the binaries carry).
export CARGO_INCREMENTAL=0
target_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target_dir"
echo "ci: free disk where the build goes: $(df -h --output=avail "$target_dir" | tail -1 | tr -d ' ')" >&2

missing=()
command -v cargo >/dev/null || missing+=("cargo (https://rustup.rs)")
cargo fmt --version >/dev/null 2>&1 || missing+=("rustfmt (rustup component add rustfmt)")
cargo clippy --version >/dev/null 2>&1 || missing+=("clippy (rustup component add clippy)")
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=("python3 with venv (Debian: apt-get install python3-venv)")
# The public API comparison and the fuzz run need nightly: CI without them
# would pass without two of its gates.
if nightly=$(cargo +nightly --version 2>/dev/null); then
  echo "ci: nightly toolchain: $nightly" >&2
else
  missing+=("the nightly toolchain (rustup toolchain install nightly): the public API check and the fuzz run need it")
fi

# SPIR-V tests: spirv-val, spirv-as (spirv-tools) and glslangValidator
# (glslang-tools); the remote cache's tests: redis-server (and redis-cli, which
# it brings); the fleet's: ip and tc (iproute2). Debian's packages.
if ! command -v spirv-val >/dev/null || ! command -v glslangValidator >/dev/null \
    || ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null \
    || ! command -v tc >/dev/null; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO=sudo; else SUDO=none; fi
  fi
  if [ "$SUDO" != none ] && command -v apt-get >/dev/null; then
    echo "ci: installing spirv-tools, glslang-tools, redis-server and iproute2" >&2
    $SUDO apt-get update -qq >/dev/null
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq spirv-tools glslang-tools redis-server iproute2 >/dev/null
    # The package may start a system server; the tests start their own.
  else
    missing+=("spirv-tools, glslang-tools, redis-server and iproute2 (Debian: apt-get install spirv-tools glslang-tools redis-server iproute2, as root)")
  fi
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "ci: cannot run the tests; missing:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 1
fi

source ci/install-nvidia-tools.sh
set -euo pipefail
# Every test that needs NVIDIA's tools runs here: one that finds them
# missing fails the run instead of being reported ignored.
export PTXSPEC_REQUIRE_TOOLS=1

# Each step says how long the one before it took, and the run its total.
ci_started=$SECONDS
step_started=$SECONDS
step_name=""
step() {
  if [ -n "$step_name" ]; then
    echo "ci: $step_name: $((SECONDS - step_started)) s" >&2
  fi
  step_name="$1"
  step_started=$SECONDS
  echo "== $1" >&2
}

step "kernels: committed PTX is what NVRTC makes of kernels/*.cu"
python3 ci/nvrtc_compile.py --check

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --workspace --all-targets -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "ptxspec-core builds with each feature alone (ptxspec-build uses none, the runtime remote and tls, the CLI all)"
for features in "" remote tls spirv; do
  cargo clippy -p ptxspec-core --lib --no-default-features --features "$features" --quiet -- -D warnings
done
step "the remote store without its tls feature: rediss:// is an error naming the feature"
cargo test -p ptxspec-core --lib --no-default-features --features remote --quiet -- lto::remote::tests::rediss_without_tls

step "BENCHMARKS.md's current tables and plots are what benches/results/ gives"
python3 benches/report.py --check
python3 examples/gpt2/report.py --check

step "published crates hold what users need: sources, the device header, README, LICENSE"
for crate in ptxspec ptxspec-build ptxspec-cli ptxspec-core; do
  extra=$(cargo package --list --allow-dirty -p "$crate" 2>/dev/null \
    | grep -vE '^(src/.*\.(rs|yaml)|include/ptxspec\.cuh|Cargo\.toml(\.orig)?|Cargo\.lock|README\.md|LICENSE|\.cargo_vcs_info\.json)$' || true)
  if [ -n "$extra" ]; then
    echo "ci: the $crate package would ship files users do not need:" >&2
    echo "$extra" >&2
    exit 1
  fi
done

step "cargo publish --dry-run: each published crate packaged and built from its package, in dependency order"
# --workspace publishes in dependency order through a local registry, so a
# crate is verified against the packages of the crates it depends on, not
# their folders. The minimum Rust version the crates declare (rust-version)
# is checked by clippy's incompatible_msrv lint above (a std API newer than
# it is an error) and by the resolver, which locks dependencies that build
# with it; this machine has no older toolchain to build with.
# A package of the same version left by an earlier run would be verified in
# place of this one's (on a machine that ran CI before): start from none —
# neither the packages nor what cargo unpacked of them (its local registry has no host name: registry/src/-HASH;
# cargo does not unpack a version again).
rm -rf "$target_dir/package"
# That copy is under ~/.cargo: only CI (CI set) removes it; elsewhere the
# developer's ~/.cargo is left alone, and said so.
if [ -n "${CI:-}" ]; then
  rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/ptxspec-*
else
  echo "ci: CI is not set: ~/.cargo left alone (an earlier run's unpacked ptxspec packages of this version, if any, stand in for these; CI=1 removes them)" >&2
fi
# Nor what was built of them: cargo takes a registry package's version for
# its identity, and would link an earlier run's build of the same version.
rm -rf "$target_dir"/debug/.fingerprint/ptxspec-*
cargo publish --workspace --dry-run --allow-dirty --quiet

step "the public API is the checked-in list api/ptxspec.txt (ci/public-api.sh; nightly rustdoc JSON)"
bash ci/public-api.sh

step "cargo-deny and cargo-semver-checks, built from crates.io at their pinned versions once a machine (ci/cargo-tools.sh)"
source ci/cargo-tools.sh --semver-checks
set -euo pipefail

step "cargo semver-checks: ptxspec and ptxspec-build against the release api/release names (ci/semver-checks.sh)"
bash ci/semver-checks.sh

step "the semver gate fails on each kind of break: fixture crates before and after (ci/semver-fixtures.sh)"
bash ci/semver-fixtures.sh

step "cargo deny check licenses bans sources: every license allowed, every crate from crates.io or this workspace (deny.toml)"
cargo deny --log-level error check licenses bans sources

step "cargo doc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

step "cargo test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# --no-fail-fast and no early exit: every test binary and the doc tests run,
# so one failure never hides another; the script fails at the end.
status=0
cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee "$log" || status=1
cargo test --workspace --doc --no-fail-fast 2>&1 | tee -a "$log" || status=1
step "fuzz targets, a few seconds each from their seeds (fuzz/run.sh; nightly toolchain)"
bash fuzz/run.sh 5 || status=1
echo "ci: $step_name: $((SECONDS - step_started)) s; the whole run: $((SECONDS - ci_started)) s" >&2
# One closing line for the whole workspace (cargo's last line is the last
# crate's, which may hold no doc test).
echo "ci: disk the build took: $(du -sh "$target_dir" | cut -f1) in $target_dir, $(du -sh fuzz/target 2>/dev/null | cut -f1) in fuzz/target" >&2
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "total: %d passed, %d failed, %d skipped\n", p, f, i }' "$log"
exit "$status"
