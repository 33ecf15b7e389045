#!/bin/bash
# On a machine with nvcc (the GPU machine): compile the device header and the
# examples with nvcc (separate compilation), post-link nvcc's PTX in both
# modes with the ptxspec binary given as $1, and assemble every image with
# ptxas (no -c: nothing may stay unresolved).
set -e
PTXSPEC=${1:?usage: ci/nvcc_check.sh PATH/TO/ptxspec}
export PATH=/usr/local/cuda/bin:$PATH
nvcc --version | tail -1
out=$(mktemp -d)
for f in kernels/*.cu; do
  nvcc -rdc=true -std=c++17 --ptx -arch=sm_90 -I crates/ptxspec-core/include -I kernels "$f" -o "$out/$(basename "$f" .cu).ptx"
done
for mode in emulated aot; do
  rm -rf "$out/images"
  "$PTXSPEC" post-link --mode $mode -o "$out/images" "$out"/*.ptx
  for p in "$out"/images/*.ptx; do ptxas -arch=sm_90 "$p" -o "$out/x.cubin" && echo "nvcc $mode $(basename "$p"): ptxas ok"; done
done
