// Loads and stores with cache qualifiers, as CUTLASS-style code writes
// them with inline PTX: ld.global.L1::no_allocate, ld.global.nc.L2::128B,
// st.global.cs; the stride is a specialization constant.
#include "ptxspec.cuh"

PTXSPEC_SPECIALIZATION_ID(stride_id, int, 1);

__device__ float load_no_allocate(const float *p) {
  float v;
  asm volatile("ld.global.L1::no_allocate.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

__device__ float load_l2_prefetch(const float *p) {
  float v;
  asm volatile("ld.global.nc.L2::128B.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

extern "C" __global__ void strided_copy(const float *in, float *out, int n, ptxspec::kernel_handler h) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int s = h.get_specialization_constant<stride_id>();
  if (i * s < n) {
    float v = load_no_allocate(in + i * s) + load_l2_prefetch(in + i);
    __stcs(out + i, v);
  }
}
