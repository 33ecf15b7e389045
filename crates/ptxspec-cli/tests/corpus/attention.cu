// One tiled attention step in the style of flash-attention-minimal's
// forward kernel: Q, K, V tiles in shared memory, a running maximum and
// sum; the tile width is a specialization constant.
#include "ptxspec.cuh"

PTXSPEC_SPECIALIZATION_ID(tile_id, int, 32);

extern "C" __global__ void attention_forward(const float *q, const float *k, const float *v, float *o,
                                             int n, int d, float scale, ptxspec::kernel_handler h) {
  extern __shared__ float smem[];
  const int tile = h.get_specialization_constant<tile_id>();
  float *kt = smem;
  float *vt = smem + tile * d;
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  float m = -__int_as_float(0x7f800000), l = 0.f;
  float acc[64];
  for (int x = 0; x < d && x < 64; x++)
    acc[x] = 0.f;
  for (int j0 = 0; j0 < n; j0 += tile) {
    for (int t = threadIdx.x; t < tile * d; t += blockDim.x) {
      int j = j0 + t / d;
      kt[t] = j < n ? k[j * d + t % d] : 0.f;
      vt[t] = j < n ? v[j * d + t % d] : 0.f;
    }
    __syncthreads();
    if (row < n) {
      for (int j = 0; j < tile && j0 + j < n; j++) {
        float s = 0.f;
        for (int x = 0; x < d; x++)
          s += q[row * d + x] * kt[j * d + x];
        s *= scale;
        float m2 = fmaxf(m, s);
        float c = expf(m - m2), p = expf(s - m2);
        l = l * c + p;
        for (int x = 0; x < d && x < 64; x++)
          acc[x] = acc[x] * c + p * vt[j * d + x];
        m = m2;
      }
    }
    __syncthreads();
  }
  if (row < n)
    for (int x = 0; x < d && x < 64; x++)
      o[row * d + x] = acc[x] / l;
}
