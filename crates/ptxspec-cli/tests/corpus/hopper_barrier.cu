// Hopper's asynchronous barriers and bulk copies through CCCL, in the style
// of <cuda/barrier>'s examples (sm_90 only): the PTX has mbarrier.*.shared::cta,
// fence.proxy.async.shared::cta and cp.async.bulk...shared::cluster.
#include <cuda/barrier>
#include <cuda/ptx>
#include "ptxspec.cuh"

PTXSPEC_SPECIALIZATION_ID(bias_id, float, 0.5f);

using barrier = cuda::barrier<cuda::thread_scope_block>;

extern "C" __global__ void bulk_add(const float *in, float *out, ptxspec::kernel_handler h) {
  __shared__ alignas(128) float tile[256];
  #pragma nv_diag_suppress static_var_with_dynamic_init
  __shared__ barrier bar;
  if (threadIdx.x == 0) {
    init(&bar, blockDim.x);
    cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
  }
  __syncthreads();
  barrier::arrival_token token;
  if (threadIdx.x == 0) {
    cuda::memcpy_async(tile, in + blockIdx.x * 256, cuda::aligned_size_t<16>(sizeof(tile)), bar);
  }
  token = bar.arrive();
  bar.wait(std::move(token));
  out[blockIdx.x * 256 + threadIdx.x] = tile[threadIdx.x] + h.get_specialization_constant<bias_id>();
}
