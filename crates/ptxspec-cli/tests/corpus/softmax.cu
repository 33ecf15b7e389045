// A row softmax in the style of llm.c's softmax_forward_kernel: one warp a
// row, warp reductions for the maximum and the sum; the temperature is a
// specialization constant read in a device function.
#include "ptxspec.cuh"

PTXSPEC_SPECIALIZATION_ID(inv_temperature_id, float, 1.0f);

__device__ float warp_max(float v) {
  for (int d = 16; d > 0; d /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}

__device__ float warp_add(float v) {
  for (int d = 16; d > 0; d /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

__device__ float scaled(float x, ptxspec::kernel_handler h) {
  return x * h.get_specialization_constant<inv_temperature_id>();
}

extern "C" __global__ void softmax_rows(float *out, const float *in, int rows, int cols,
                                        ptxspec::kernel_handler h) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows)
    return;
  const float *x = in + row * cols;
  float m = -__int_as_float(0x7f800000);
  for (int i = lane; i < cols; i += 32)
    m = fmaxf(m, scaled(x[i], h));
  m = warp_max(m);
  float s = 0.f;
  for (int i = lane; i < cols; i += 32)
    s += expf(scaled(x[i], h) - m);
  s = warp_add(s);
  for (int i = lane; i < cols; i += 32)
    out[row * cols + i] = expf(scaled(x[i], h) - m) / s;
}
