// CP015's motivating example: a blocked matrix product C = A * B (n x n,
// row-major) whose block size is a specialization constant. Launch with
// block (bs, bs), grid (n/bs, n/bs) and 2*bs*bs floats of dynamic shared
// memory; n must be a multiple of bs. When bs is a known constant the inner
// loop unrolls completely.
#include "ptxspec.cuh"

PTXSPEC_SPECIALIZATION_ID(block_size_id, int, 16);

// ROLLED: keep the loop over the block rolled (see matmul_rolled below).
template <bool ROLLED>
__device__ void matmul_body(const float *a, const float *b, float *c, int n, int bs) {
  extern __shared__ float tiles[];
  float *ta = tiles;
  float *tb = tiles + bs * bs;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * bs + ty, col = blockIdx.x * bs + tx;
  float acc = 0.f;
  for (int k0 = 0; k0 < n; k0 += bs) {
    ta[ty * bs + tx] = a[row * n + k0 + tx];
    tb[ty * bs + tx] = b[(k0 + ty) * n + col];
    __syncthreads();
    if constexpr (ROLLED) {
#pragma unroll 1
      for (int k = 0; k < bs; ++k)
        acc += ta[ty * bs + k] * tb[k * bs + tx];
    } else {
#pragma unroll
      for (int k = 0; k < bs; ++k)
        acc += ta[ty * bs + k] * tb[k * bs + tx];
    }
    __syncthreads();
  }
  c[row * n + col] = acc;
}

// NVVM unrolls the loop over the block as it sees fit (by 4 with a remainder
// loop, since bs is unknown to it).
extern "C" __global__ void matmul(const float *a, const float *b, float *c, int n,
                                  ptxspec::kernel_handler h) {
  matmul_body<false>(a, b, c, n, h.get_specialization_constant<block_size_id>());
}

// The same with the loop left rolled (`#pragma unroll 1`): once ptxspec's
// native mode makes bs an immediate, ptxas sees a loop with a known trip
// count and unrolls it itself.
extern "C" __global__ void matmul_rolled(const float *a, const float *b, float *c, int n,
                                         ptxspec::kernel_handler h) {
  matmul_body<true>(a, b, c, n, h.get_specialization_constant<block_size_id>());
}
