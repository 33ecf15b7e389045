// Kernels that take a kernel_handler but read no constant through it (intel
// sycl/test-e2e/SpecConstants/2020/aot_w_kernel_handler_wo_spec_consts.cpp):
// the runtime still passes that parameter. One beside a kernel that does read
// a constant (an image with constants), one in an image of its own.
#include "ptxspec.cuh"

PTXSPEC_SPECIALIZATION_ID(handler_demo_id, int, 40);

__global__ void reads_a_constant(int *out, ptxspec::kernel_handler h) {
  out[threadIdx.x] = h.get_specialization_constant<handler_demo_id>() + threadIdx.x;
}

__global__ void handler_without_constants(int *out, ptxspec::kernel_handler h) {
  out[threadIdx.x] = 2 * threadIdx.x;
}
