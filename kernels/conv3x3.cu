// DPC++'s SYCL 2020 spec-constant design's example: a 3x3 convolution whose coefficients are a
// specialization constant (float[3][3]), so a specialized build sees them as
// literals. Out-of-range neighbours count as zero.
#include "ptxspec.cuh"

typedef ptxspec::array<ptxspec::array<float, 3>, 3> coeff_t;

// Default: a box blur.
PTXSPEC_SPECIALIZATION_ID(coeff_id, coeff_t,
                          coeff_t{{{{1.f / 9, 1.f / 9, 1.f / 9}},
                                   {{1.f / 9, 1.f / 9, 1.f / 9}},
                                   {{1.f / 9, 1.f / 9, 1.f / 9}}}});

extern "C" __global__ void conv3x3(const float *in, float *out, int height, int width,
                                   ptxspec::kernel_handler h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= width || y >= height)
    return;
  coeff_t coeff = h.get_specialization_constant<coeff_id>();
  float acc = 0.f;
#pragma unroll
  for (int i = -1; i <= 1; i++) {
#pragma unroll
    for (int j = -1; j <= 1; j++) {
      int yy = y + i, xx = x + j;
      if (yy >= 0 && yy < height && xx >= 0 && xx < width)
        acc += coeff[i + 1][j + 1] * in[yy * width + xx];
    }
  }
  out[y * width + x] = acc;
}
