#!/usr/bin/env bash
# Installs NVIDIA's ptxas and NVRTC from their PyPI wheels into a cached local
# venv (.ci-cache/nvidia, git-ignored) when missing, and exports where they are.
# Source it:   source ci/install-nvidia-tools.sh
# Exports PTXSPEC_PTXAS (the ptxas binary), PTXSPEC_NVRTC (libnvrtc.so.*),
# and puts both on PATH / LD_LIBRARY_PATH. The wheels are NVIDIA's licence:
# installed here, never committed.
set -euo pipefail
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_venv="${PTXSPEC_NVIDIA_VENV:-$_root/.ci-cache/nvidia}"
_nvcc_wheel="nvidia-cuda-nvcc-cu12==12.9.86"
_nvrtc_wheel="nvidia-cuda-nvrtc-cu12==12.9.86"
_stamp="$_venv/.installed-$(echo "$_nvcc_wheel $_nvrtc_wheel" | cksum | cut -d' ' -f1)"
if [ ! -f "$_stamp" ]; then
  echo "ci: installing $_nvcc_wheel and $_nvrtc_wheel into $_venv" >&2
  rm -rf "$_venv"
  python3 -m venv "$_venv"
  "$_venv/bin/python" -m pip install --quiet --disable-pip-version-check "$_nvcc_wheel" "$_nvrtc_wheel"
  touch "$_stamp"
fi
_site="$("$_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
export PTXSPEC_PTXAS="$_site/nvidia/cuda_nvcc/bin/ptxas"
PTXSPEC_NVRTC="$(ls "$_site"/nvidia/cuda_nvrtc/lib/libnvrtc.so.* | grep -v builtins | head -n 1)"
export PTXSPEC_NVRTC
export PATH="$(dirname "$PTXSPEC_PTXAS"):$PATH"
export LD_LIBRARY_PATH="$(dirname "$PTXSPEC_NVRTC")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$PTXSPEC_PTXAS" --version | tail -n 1 >&2
set +euo pipefail
