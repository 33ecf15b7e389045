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

echo "== kernels: committed PTX is what NVRTC makes of kernels/*.cu" >&2
python3 ci/nvrtc_compile.py --check

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check

echo "== cargo clippy --workspace --all-targets -D warnings" >&2
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "== ptxspec-core builds with each feature alone (ptxspec-build uses none, the runtime remote and tls, the CLI all)" >&2
for features in "" remote tls spirv; do
  cargo clippy -p ptxspec-core --lib --no-default-features --features "$features" --quiet -- -D warnings
done
echo "== the remote store without its tls feature: rediss:// is an error naming the feature" >&2
cargo test -p ptxspec-core --lib --no-default-features --features remote --quiet -- lto::remote::tests::rediss_without_tls

echo "== BENCHMARKS.md's current tables and plots are what benches/results/ gives" >&2
python3 benches/report.py --check

echo "== published crates hold what users need: sources, the device header, README, LICENSE" >&2
for crate in ptxspec ptxspec-build ptxspec-cli ptxspec-core; do
  extra=$(cargo package --list --allow-dirty -p "$crate" 2>/dev/null \
    | grep -vE '^(src/.*\.(rs|yaml)|include/ptxspec\.cuh|Cargo\.toml(\.orig)?|Cargo\.lock|README\.md|LICENSE|\.cargo_vcs_info\.json)$' || true)
  if [ -n "$extra" ]; then
    echo "ci: the $crate package would ship files users do not need:" >&2
    echo "$extra" >&2
    exit 1
  fi
done

echo "== cargo publish --dry-run: each published crate packaged and built from its package, in dependency order" >&2
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
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/ptxspec-*
# Nor what was built of them: cargo takes a registry package's version for
# its identity, and would link an earlier run's build of the same version.
rm -rf "$target_dir"/debug/.fingerprint/ptxspec-*
cargo publish --workspace --dry-run --allow-dirty --quiet

echo "== the public API is the checked-in list api/ptxspec.txt (ci/public-api.sh; nightly rustdoc JSON)" >&2
if cargo +nightly --version > /dev/null 2>&1; then
  bash ci/public-api.sh
else
  echo "ci: no nightly toolchain here: the public API was not compared with api/ptxspec.txt" >&2
fi

echo "== cargo doc -D warnings" >&2
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

echo "== cargo test" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# --no-fail-fast and no early exit: every test binary and the doc tests run,
# so one failure never hides another; the script fails at the end.
status=0
cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee "$log" || status=1
cargo test --workspace --doc --no-fail-fast 2>&1 | tee -a "$log" || status=1
echo "== fuzz targets, a few seconds each from their seeds (fuzz/run.sh; nightly toolchain)" >&2
if cargo +nightly --version > /dev/null 2>&1; then
  bash fuzz/run.sh 5 || status=1
else
  echo "ci: no nightly toolchain here: the fuzz targets did not run (fuzz/README.md)" >&2
fi
# One closing line for the whole workspace (cargo's last line is the last
# crate's, which may hold no doc test).
echo "ci: disk the build took: $(du -sh "$target_dir" | cut -f1) in $target_dir, $(du -sh fuzz/target 2>/dev/null | cut -f1) in fuzz/target" >&2
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "total: %d passed, %d failed, %d skipped\n", p, f, i }' "$log"
exit "$status"
