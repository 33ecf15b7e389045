#!/usr/bin/env bash
# The whole CI: NVIDIA tools (wheels), kernel PTX currency, fmt, clippy, tests.
# Works on a machine with no GPU and no CUDA install; needs python3 and cargo.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/install-nvidia-tools.sh
set -euo pipefail

# SPIR-V tests: spirv-val, spirv-as (spirv-tools) and glslangValidator
# (glslang-tools), from Debian's packages.
if ! command -v spirv-val >/dev/null || ! command -v glslangValidator >/dev/null; then
  echo "ci: installing spirv-tools and glslang-tools" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq >/dev/null
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq spirv-tools glslang-tools >/dev/null
fi

echo "== kernels: committed PTX is what NVRTC makes of kernels/*.cu" >&2
python3 ci/nvrtc_compile.py --check

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check

echo "== cargo clippy --all-targets -D warnings" >&2
cargo clippy --all-targets --quiet -- -D warnings

echo "== cargo test" >&2
cargo test --all-targets 2>&1
cargo test --doc 2>&1
