// Dynamic parallelism: a kernel that launches another, which the driver can
// load only after linking CUDA's device runtime (libcudadevrt.a). The child
// reads a specialization constant through the handler its parent passes.
#include "ptxspec.cuh"

PTXSPEC_SPECIALIZATION_ID(child_scale_id, int, 3);

__global__ void child(int *out, ptxspec::kernel_handler h) {
  out[threadIdx.x] = threadIdx.x * h.get_specialization_constant<child_scale_id>();
}

extern "C" __global__ void parent(int *out, ptxspec::kernel_handler h) {
  child<<<1, 64>>>(out, h);
}
