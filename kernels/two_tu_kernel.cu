// Translation unit 1 of 2: the kernel reads scale_id itself and calls a
// device function of the other unit that reads it too (separate compilation).
#include "two_tu.cuh"

extern "C" __global__ void two_tu(const float *in, float *out, int n,
                                  ptxspec::kernel_handler h) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = scale_and_offset(in[i], h) + h.get_specialization_constant<scale_id>();
}
