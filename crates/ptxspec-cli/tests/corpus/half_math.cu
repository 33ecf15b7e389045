// Half and bfloat16 arithmetic through cuda_fp16.h and cuda_bf16.h, as
// cuDNN-style kernels do; the scale is a specialization constant.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "ptxspec.cuh"

PTXSPEC_SPECIALIZATION_ID(half_scale_id, float, 2.0f);

extern "C" __global__ void axpy_half(const __half *x, __half *y, int n, ptxspec::kernel_handler h) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = __hfma(__float2half(h.get_specialization_constant<half_scale_id>()), x[i], y[i]);
}

extern "C" __global__ void scale_bf16(__nv_bfloat16 *x, int n, ptxspec::kernel_handler h) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] = __hmul(x[i], __float2bfloat16(h.get_specialization_constant<half_scale_id>()));
}
