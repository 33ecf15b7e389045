// Optional kernel features (the optional kernel features design (DPC++)): kernels whose PTX uses fp64, 64-bit
// atomics and half precision, and declarations with PTXSPEC_DEVICE_HAS.
// Helpers in features_helper.cu (a second translation unit) add a second
// level of calls.
#include "ptxspec.cuh"

// Defined in features_helper.cu: double arithmetic two calls deep.
__device__ double scale_f64(double x);

// Defined in features_helper.cu: calls mul_f64, which does the arithmetic.
__device__ double twice(double x);

// fp64 only two calls deep, in the other translation unit: nothing in this
// kernel's own PTX uses it.
extern "C" __global__ void fp64_two_levels(const double *x, double *y) {
  y[threadIdx.x] = twice(x[threadIdx.x]);
}

// fp64 through two levels of calls in another translation unit.
extern "C" __global__ void fp64_axpy(const double *x, double *y, int n) {
  PTXSPEC_DEVICE_HAS(fp64);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = scale_f64(x[i]) + y[i];
}

// 64-bit atomics.
extern "C" __global__ void count64(unsigned long long *counter) {
  atomicAdd(counter, 1ull);
}

// Half precision through inline PTX (no cuda_fp16.h needed).
extern "C" __global__ void half_add(unsigned short *x) {
  unsigned short r;
  asm("add.f16 %0, %1, %2;" : "=h"(r) : "h"(x[0]), "h"(x[1]));
  x[2] = r;
}

// Declares only fp16 but calls double arithmetic: the post-link warns, with
// the call chain, and the kernel requires both.
extern "C" __global__ void declares_too_little(const double *x, double *y) {
  PTXSPEC_DEVICE_HAS(fp16);
  y[0] = scale_f64(x[0]);
}

// A warp reduction: code that relies on the sub-group (warp) size of 32,
// which the image then requires (reqd_sub_group_size).
extern "C" __global__ void warp_sum(const int *x, int *out) {
  int v = x[threadIdx.x];
  for (int d = 16; d > 0; d /= 2)
    v += __shfl_down_sync(0xffffffffu, v, d);
  if (threadIdx.x == 0)
    *out = v;
}
