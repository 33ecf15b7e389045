// A tiny kernel for launch-overhead measurements: reads one constant.
#include "ptxspec.cuh"

PTXSPEC_SPECIALIZATION_ID(tiny_id, int, 1);

extern "C" __global__ void tiny(int *out, ptxspec::kernel_handler h) {
  if (threadIdx.x == 0)
    out[0] = h.get_specialization_constant<tiny_id>();
}
