// A kernel without specialization constants: post-linked as one image, its
// PTX must come out byte for byte.
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = a * x[i] + y[i];
}

__device__ float square(float v) { return v * v; }

extern "C" __global__ void squares(float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = square(y[i]);
}
