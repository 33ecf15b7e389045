// Baselines for the GPU benchmark, without ptxspec: what the physical
// limit is (the constant as a literal) and what a CUDA user writes by hand
// (the constant as a by-value kernel parameter). Same code as the examples.

struct coeff_t {
  float c[3][3];
};

template <typename Coeff>
__device__ void conv3x3_body(const float *in, float *out, int height, int width, const Coeff &coeff) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= width || y >= height)
    return;
  float acc = 0.f;
#pragma unroll
  for (int i = -1; i <= 1; i++) {
#pragma unroll
    for (int j = -1; j <= 1; j++) {
      int yy = y + i, xx = x + j;
      if (yy >= 0 && yy < height && xx >= 0 && xx < width)
        acc += coeff.c[i + 1][j + 1] * in[yy * width + xx];
    }
  }
  out[y * width + x] = acc;
}

// Sobel, the coefficients the benchmark sets.
extern "C" __global__ void conv3x3_literal(const float *in, float *out, int height, int width) {
  constexpr coeff_t sobel{{{1.f, 0.f, -1.f}, {2.f, 0.f, -2.f}, {1.f, 0.f, -1.f}}};
  conv3x3_body(in, out, height, width, sobel);
}

// A blur with nothing to fold (no zeros, no ±1s): the same values as the
// benchmark's BLUR.
extern "C" __global__ void conv3x3_literal_blur(const float *in, float *out, int height, int width) {
  constexpr coeff_t blur{{{0.0625f, 0.125f, 0.0625f}, {0.125f, 0.25f, 0.125f}, {0.0625f, 0.125f, 0.0625f}}};
  conv3x3_body(in, out, height, width, blur);
}

extern "C" __global__ void conv3x3_param(const float *in, float *out, int height, int width, coeff_t coeff) {
  conv3x3_body(in, out, height, width, coeff);
}

template <int BS>
__device__ void matmul_body(const float *a, const float *b, float *c, int n, int bs) {
  extern __shared__ float tiles[];
  const int b_s = BS > 0 ? BS : bs;
  float *ta = tiles;
  float *tb = tiles + b_s * b_s;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * b_s + ty, col = blockIdx.x * b_s + tx;
  float acc = 0.f;
  for (int k0 = 0; k0 < n; k0 += b_s) {
    ta[ty * b_s + tx] = a[row * n + k0 + tx];
    tb[ty * b_s + tx] = b[(k0 + ty) * n + col];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < b_s; ++k)
      acc += ta[ty * b_s + k] * tb[k * b_s + tx];
    __syncthreads();
  }
  c[row * n + col] = acc;
}

extern "C" __global__ void matmul_literal_8(const float *a, const float *b, float *c, int n) { matmul_body<8>(a, b, c, n, 8); }
extern "C" __global__ void matmul_literal_16(const float *a, const float *b, float *c, int n) { matmul_body<16>(a, b, c, n, 16); }
extern "C" __global__ void matmul_literal_32(const float *a, const float *b, float *c, int n) { matmul_body<32>(a, b, c, n, 32); }
extern "C" __global__ void matmul_param(const float *a, const float *b, float *c, int n, int bs) { matmul_body<0>(a, b, c, n, bs); }

// Launch overhead without ptxspec.
extern "C" __global__ void tiny_plain(int *out, int v) {
  if (threadIdx.x == 0)
    out[0] = v;
}
