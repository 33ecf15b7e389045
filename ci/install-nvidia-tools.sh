#!/usr/bin/env bash
# Installs NVIDIA's CUDA tools that run without a GPU, from their PyPI wheels,
# into a cached local venv (.ci-cache/nvidia, git-ignored) when missing, and
# exports where they are. Source it:   source ci/install-nvidia-tools.sh
#
#   ptxas              nvidia-cuda-nvcc-cu12     (also libnvvm and crt/ headers)
#   libnvrtc           nvidia-cuda-nvrtc-cu12
#   libnvJitLink       nvidia-nvjitlink-cu12     (same version as NVRTC: LTO-IR
#                                                 must not be newer than the linker)
#   CUDA headers,      nvidia-cuda-runtime-cu12  (cuda_fp16.h, cooperative_groups.h,
#   libcudadevrt.a                                the device runtime library)
#   CCCL headers       nvidia-cuda-cccl-cu12     (<cuda/barrier>, cub, thrust)
#   cuobjdump, nvdisasm nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm (to read SASS;
#                                                 only CUDA 13 builds are on PyPI,
#                                                 they read sm_90 cubins of CUDA 12)
#
# Exports PTXSPEC_PTXAS, PTXSPEC_NVRTC, PTXSPEC_NVJITLINK, PTXSPEC_NVVM,
# PTXSPEC_CUDADEVRT, PTXSPEC_CUDA_INCLUDE (colon-separated include folders) and
# puts the binaries on PATH and the libraries on LD_LIBRARY_PATH. The wheels take
# about 460 MB installed; they are NVIDIA's licence: installed here, never committed.
set -euo pipefail
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_venv="${PTXSPEC_NVIDIA_VENV:-$_root/.ci-cache/nvidia}"
_wheels="nvidia-cuda-nvcc-cu12==12.9.86 nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-nvjitlink-cu12==12.9.86 \
nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-cccl-cu12==12.9.27 \
nvidia-cuda-cuobjdump==13.2.86 nvidia-cuda-nvdisasm==13.2.86"
_stamp="$_venv/.installed-$(echo "$_wheels" | cksum | cut -d' ' -f1)"
if [ ! -f "$_stamp" ]; then
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    echo "ci: python3 with the venv module is needed to install NVIDIA's wheels (Debian: apt-get install python3-venv)" >&2
    return 1 2>/dev/null || exit 1
  fi
  echo "ci: installing NVIDIA's CUDA tool wheels into $_venv: $_wheels" >&2
  rm -rf "$_venv"
  python3 -m venv "$_venv"
  # shellcheck disable=SC2086
  "$_venv/bin/python" -m pip install --quiet --disable-pip-version-check $_wheels
  touch "$_stamp"
fi
_site="$("$_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia"
export PTXSPEC_PTXAS="$_site/cuda_nvcc/bin/ptxas"
PTXSPEC_NVRTC="$(ls "$_site"/cuda_nvrtc/lib/libnvrtc.so.* | grep -v -e builtins -e alt | head -n 1)"
export PTXSPEC_NVRTC
export PTXSPEC_NVJITLINK="$_site/nvjitlink/lib/libnvJitLink.so.12"
export PTXSPEC_NVVM="$_site/cuda_nvcc/nvvm/lib64/libnvvm.so"
export PTXSPEC_CUDADEVRT="$_site/cuda_runtime/lib/libcudadevrt.a"
export PTXSPEC_CUDA_INCLUDE="$_site/cuda_runtime/include:$_site/cuda_cccl/include:$_site/cuda_nvcc/include"
export PATH="$_site/cuda_nvcc/bin:$_site/cu13/bin:$PATH"
export LD_LIBRARY_PATH="$(dirname "$PTXSPEC_NVRTC"):$_site/nvjitlink/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "ci: NVIDIA tools ready, ptxas $("$PTXSPEC_PTXAS" --version | tail -n 1)" >&2
set +euo pipefail
