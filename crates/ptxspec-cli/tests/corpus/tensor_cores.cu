// A 16x16x16 tile product on tensor cores with wmma, in the style of the
// CUDA samples' cudaTensorCoreGemm (sm_80 and later); alpha is a
// specialization constant.
#include <mma.h>
#include "ptxspec.cuh"

PTXSPEC_SPECIALIZATION_ID(alpha_id, float, 1.0f);

using namespace nvcuda;

extern "C" __global__ void wmma_tile(const __half *a, const __half *b, float *c, ptxspec::kernel_handler h) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  const float alpha = h.get_specialization_constant<alpha_id>();
  for (int i = 0; i < fc.num_elements; i++)
    fc.x[i] *= alpha;
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}
