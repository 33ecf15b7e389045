#!/usr/bin/env bash
# Installs NVIDIA's CUDA tools that run without a GPU, from their PyPI wheels,
# into a cached local venv (.ci-cache/nvidia, git-ignored) when missing, and
# exports where they are. Source it:   source ci/install-nvidia-tools.sh
# (or run it, which installs and says where they are, exporting nothing).
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
#
# Sourced, it never exits the caller's shell and never changes its options
# (no `set -e` in it): a failure returns 1, saying why. The install itself
# runs in a child process of its own (ci/install-nvidia-wheels.sh), under a
# lock, into a temporary folder renamed into place only once every wheel is
# installed: two first uses at once install once, and a failed pip leaves
# nothing that looks installed.
_ptxspec_nvidia_tools() {
  local root venv site nvrtc
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" || return 1
  venv="${PTXSPEC_NVIDIA_VENV:-$root/.ci-cache/nvidia}"
  bash "$root/ci/install-nvidia-wheels.sh" "$venv" || {
    echo "ci: NVIDIA's CUDA tool wheels are not installed (see above)" >&2
    return 1
  }
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia" || return 1
  nvrtc="$(ls "$site"/cuda_nvrtc/lib/libnvrtc.so.* 2>/dev/null | grep -v -e builtins -e alt | head -n 1)"
  if [ -z "$nvrtc" ] || [ ! -x "$site/cuda_nvcc/bin/ptxas" ]; then
    echo "ci: $venv holds no NVRTC or ptxas: remove it and try again" >&2
    return 1
  fi
  export PTXSPEC_PTXAS="$site/cuda_nvcc/bin/ptxas"
  export PTXSPEC_NVRTC="$nvrtc"
  export PTXSPEC_NVJITLINK="$site/nvjitlink/lib/libnvJitLink.so.12"
  export PTXSPEC_NVVM="$site/cuda_nvcc/nvvm/lib64/libnvvm.so"
  export PTXSPEC_CUDADEVRT="$site/cuda_runtime/lib/libcudadevrt.a"
  export PTXSPEC_CUDA_INCLUDE="$site/cuda_runtime/include:$site/cuda_cccl/include:$site/cuda_nvcc/include"
  export PATH="$site/cuda_nvcc/bin:$site/cu13/bin:$PATH"
  export LD_LIBRARY_PATH="$(dirname "$nvrtc"):$site/nvjitlink/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "ci: NVIDIA tools ready, ptxas $("$PTXSPEC_PTXAS" --version | tail -n 1)" >&2
}
if (return 0 2>/dev/null); then
  _ptxspec_nvidia_tools
  _ptxspec_status=$?
  unset -f _ptxspec_nvidia_tools
  return "$_ptxspec_status"
else
  _ptxspec_nvidia_tools
fi
