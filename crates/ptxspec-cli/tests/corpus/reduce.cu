// A block sum in the style of the CUDA samples' reduction: shared memory,
// then warp shuffles; the block size is a specialization constant.
#include "ptxspec.cuh"

PTXSPEC_SPECIALIZATION_ID(reduce_block_id, int, 256);

__device__ float warp_sum(float v) {
  for (int d = 16; d > 0; d /= 2)
    v += __shfl_down_sync(0xffffffffu, v, d);
  return v;
}

extern "C" __global__ void block_sum(const float *in, float *out, int n, ptxspec::kernel_handler h) {
  __shared__ float partial[32];
  const int bs = h.get_specialization_constant<reduce_block_id>();
  float v = 0.f;
  for (int i = blockIdx.x * bs + threadIdx.x; i < n; i += gridDim.x * bs)
    v += in[i];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0)
    partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < bs / 32 ? partial[threadIdx.x] : 0.f;
    v = warp_sum(v);
    if (threadIdx.x == 0)
      atomicAdd(out, v);
  }
}
