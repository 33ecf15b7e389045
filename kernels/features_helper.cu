// Second translation unit of features.cu: double arithmetic two calls deep.
#include "ptxspec.cuh"

__device__ __noinline__ double mul_f64(double a, double b) { return a * b; }

__device__ double scale_f64(double x) { return mul_f64(x, 2.5) + 1.0; }

// No double arithmetic of its own: its fp64 comes from mul_f64, one more
// call down.
__device__ double twice(double x) { return mul_f64(x, 2.0); }
