// What debugging and counting kernels use: printf (vprintf), assert
// (__assertfail), and 32- and 64-bit atomics; the threshold is a
// specialization constant.
#include "ptxspec.cuh"

PTXSPEC_SPECIALIZATION_ID(threshold_id, unsigned, 100u);

// What CUDA's assert() calls (NVRTC declares __assertfail; it has no
// <cassert>).
#define device_assert(c) ((c) ? (void)0 : __assertfail(#c, __FILE__, __LINE__, __func__, sizeof(char)))

extern "C" __global__ void count_above(const unsigned *x, int n, unsigned *count,
                                       unsigned long long *total, ptxspec::kernel_handler h) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  device_assert(n >= 0);
  if (i < n && x[i] > h.get_specialization_constant<threshold_id>()) {
    atomicAdd(count, 1u);
    atomicAdd(total, (unsigned long long)x[i]);
    if (x[i] == 0xffffffffu)
      printf("thread %d saw the maximum\n", i);
  }
}
