#!/usr/bin/env bash
# The whole CI: NVIDIA tools (wheels), kernel PTX currency, fmt, clippy, tests.
# Works on a machine with no GPU and no CUDA install; needs python3 and cargo.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/install-nvidia-tools.sh
set -euo pipefail

echo "== kernels: committed PTX is what NVRTC makes of kernels/*.cu" >&2
python3 ci/nvrtc_compile.py --check

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check

echo "== cargo clippy --all-targets -D warnings" >&2
cargo clippy --all-targets --quiet -- -D warnings

echo "== cargo test" >&2
cargo test --all-targets 2>&1
cargo test --doc 2>&1
