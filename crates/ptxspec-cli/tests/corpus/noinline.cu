// Getters in device functions that stay functions: __noinline__ helpers,
// a recursive one, and a call through a function pointer.
#include "ptxspec.cuh"

PTXSPEC_SPECIALIZATION_ID(depth_id, int, 3);
PTXSPEC_SPECIALIZATION_ID(step_id, float, 0.25f);

__device__ __noinline__ float step(ptxspec::kernel_handler h) {
  return h.get_specialization_constant<step_id>();
}

__device__ __noinline__ float climb(int level, ptxspec::kernel_handler h) {
  return level <= 0 ? 0.f : step(h) + climb(level - 1, h);
}

__device__ float twice(float x) { return 2.f * x; }
__device__ float thrice(float x) { return 3.f * x; }

extern "C" __global__ void noinline_calls(float *out, int which, ptxspec::kernel_handler h) {
  float (*f)(float) = which ? twice : thrice;
  out[threadIdx.x] = f(climb(h.get_specialization_constant<depth_id>(), h));
}
