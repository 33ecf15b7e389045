// The GPT-2 example's kernels: every operation of the forward pass that is not
// a matmul (cuBLAS does those). FP32, one warp per row for row-wise work, one
// thread per element elsewhere. Written for this example, after the model that
// reference.rs describes.
//
// The model's fixed dimensions are specialization constants; the batch and
// sequence length are ordinary arguments. Compiled with -DGPT2_LITERAL (and
// -DGPT2_C=, _NH=, _V=, _VP=, _B=, _T=), every size is a literal instead: the
// literal build, what a program that knew its sizes when it compiled would
// run. Only add_bias's width stays an argument (three widths share it).
#include "ptxspec.cuh"

#ifdef GPT2_LITERAL
#define CONSTANT(id, literal) (literal)
#define ARGUMENT(arg, literal) (literal)
#else
#define CONSTANT(id, literal) (h.get_specialization_constant<id>())
#define ARGUMENT(arg, literal) (arg)
#endif

constexpr ptxspec::specialization_id<int> channels{768};
constexpr ptxspec::specialization_id<int> heads{12};
// The real vocabulary (the loss's classes) and the padded one (the logits'
// row length).
constexpr ptxspec::specialization_id<int> vocab{50257};
constexpr ptxspec::specialization_id<int> padded_vocab{50304};

// NVRTC has no <cmath>, so no INFINITY.
__device__ __forceinline__ float minus_infinity() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// out[row, c] = wte[token of row, c] + wpe[row % seq, c]
extern "C" __global__ void encoder_forward(float *__restrict__ out, const int *__restrict__ tokens,
                                           const float *__restrict__ wte, const float *__restrict__ wpe,
                                           int rows_arg, int seq_arg, ptxspec::kernel_handler h) {
  const int C = CONSTANT(channels, GPT2_C);
  const int rows = ARGUMENT(rows_arg, GPT2_B * GPT2_T), seq = ARGUMENT(seq_arg, GPT2_T);
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long)rows * C) return;
  const int row = (int)(i / C), c = (int)(i % C);
  out[i] = wte[(long)tokens[row] * C + c] + wpe[(long)(row % seq) * C + c];
}

// Layer norm of each row of C, one warp a row; the row's mean and reciprocal
// standard deviation are kept for the backward pass.
extern "C" __global__ void layernorm_forward(float *__restrict__ out, float *__restrict__ mean,
                                             float *__restrict__ rstd, const float *__restrict__ inp,
                                             const float *__restrict__ weight,
                                             const float *__restrict__ bias, int rows_arg,
                                             ptxspec::kernel_handler h) {
  const int C = CONSTANT(channels, GPT2_C);
  const int rows = ARGUMENT(rows_arg, GPT2_B * GPT2_T);
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float *x = inp + (long)row * C;
  float sum = 0.0f;
  for (int i = lane; i < C; i += 32) sum += x[i];
  const float m = warp_sum(sum) / C;
  float squares = 0.0f;
  for (int i = lane; i < C; i += 32) {
    const float d = x[i] - m;
    squares += d * d;
  }
  const float r = rsqrtf(warp_sum(squares) / C + 1e-5f);
  float *o = out + (long)row * C;
  for (int i = lane; i < C; i += 32) o[i] = (x[i] - m) * r * weight[i] + bias[i];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// out[row, o] += bias[o] over rows of `outputs`.
extern "C" __global__ void add_bias(float *__restrict__ out, const float *__restrict__ bias, int rows_arg,
                                    int outputs) {
  const int rows = ARGUMENT(rows_arg, GPT2_B * GPT2_T);
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long)rows * outputs) return;
  out[i] += bias[i % outputs];
}

// Where flat index i of a (B, NH, T, HS) tensor is: by dividing it by the
// sizes, as transformer code does (what the division rewrite is for).
struct HeadIndex {
  int b, head, t, d;
};

__device__ __forceinline__ HeadIndex head_index(long i, int seq, int NH, int HS) {
  HeadIndex x;
  x.d = (int)(i % HS);
  x.t = (int)((i / HS) % seq);
  x.head = (int)((i / ((long)HS * seq)) % NH);
  x.b = (int)(i / ((long)HS * seq * NH));
  return x;
}

// (B, T, 3, NH, HS) to three (B, NH, T, HS) tensors.
extern "C" __global__ void attention_permute(float *__restrict__ q, float *__restrict__ k,
                                             float *__restrict__ v, const float *__restrict__ inp,
                                             int batch_arg, int seq_arg, ptxspec::kernel_handler h) {
  const int C = CONSTANT(channels, GPT2_C);
  const int batch = ARGUMENT(batch_arg, GPT2_B), seq = ARGUMENT(seq_arg, GPT2_T);
  const int NH = CONSTANT(heads, GPT2_NH);
  const int HS = C / NH;
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long)batch * seq * C) return;
  const HeadIndex x = head_index(i, seq, NH, HS);
  const long from = ((long)x.b * seq + x.t) * 3 * C + x.head * HS + x.d;
  q[i] = inp[from];
  k[i] = inp[from + C];
  v[i] = inp[from + 2 * C];
}

// (B, NH, T, HS) back to (B, T, NH, HS): the heads side by side.
extern "C" __global__ void attention_unpermute(float *__restrict__ out, const float *__restrict__ inp,
                                               int batch_arg, int seq_arg, ptxspec::kernel_handler h) {
  const int C = CONSTANT(channels, GPT2_C);
  const int batch = ARGUMENT(batch_arg, GPT2_B), seq = ARGUMENT(seq_arg, GPT2_T);
  const int NH = CONSTANT(heads, GPT2_NH);
  const int HS = C / NH;
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long)batch * seq * C) return;
  const HeadIndex x = head_index(i, seq, NH, HS);
  out[((long)x.b * seq + x.t) * C + x.head * HS + x.d] = inp[i];
}

// Causal softmax over the rows of attention scores (B·NH·T rows of T): row r
// attends to positions 0 ..= r % T, its scores scaled by 1/sqrt(head size);
// the positions after it get 0. One warp a row.
extern "C" __global__ void softmax_causal(float *__restrict__ att, const float *__restrict__ scores,
                                          int rows_arg, int seq_arg, ptxspec::kernel_handler h) {
  const int C = CONSTANT(channels, GPT2_C);
  const int NH = CONSTANT(heads, GPT2_NH);
  const int rows = ARGUMENT(rows_arg, GPT2_B * GPT2_NH * GPT2_T), seq = ARGUMENT(seq_arg, GPT2_T);
  const float scale = rsqrtf((float)(C / NH));
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = row % seq;
  const float *s = scores + (long)row * seq;
  float *a = att + (long)row * seq;
  float m = minus_infinity();
  for (int i = lane; i <= t; i += 32) m = fmaxf(m, s[i] * scale);
  m = warp_max(m);
  float sum = 0.0f;
  for (int i = lane; i <= t; i += 32) sum += expf(s[i] * scale - m);
  sum = warp_sum(sum);
  for (int i = lane; i < seq; i += 32) a[i] = i <= t ? expf(s[i] * scale - m) / sum : 0.0f;
}

extern "C" __global__ void residual_forward(float *__restrict__ out, const float *__restrict__ a,
                                            const float *__restrict__ b, long n_arg) {
  const long n = ARGUMENT(n_arg, (long)GPT2_B * GPT2_T * GPT2_C);
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

// GELU in GPT-2's tanh form.
extern "C" __global__ void gelu_forward(float *__restrict__ out, const float *__restrict__ inp, long n_arg) {
  const long n = ARGUMENT(n_arg, (long)GPT2_B * GPT2_T * 4 * GPT2_C);
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  const float s = 0.7978845608028654f; // sqrt(2 / pi)
  out[i] = 0.5f * x * (1.0f + tanhf(s * (x + 0.044715f * x * x * x)));
}

// Each row's cross-entropy against its target, over the real vocabulary's
// logits (the padded columns are not classes). One warp a row.
extern "C" __global__ void crossentropy_forward(float *__restrict__ losses,
                                                const float *__restrict__ logits,
                                                const int *__restrict__ targets, int rows_arg,
                                                ptxspec::kernel_handler h) {
  const int rows = ARGUMENT(rows_arg, GPT2_B * GPT2_T);
  const int V = CONSTANT(vocab, GPT2_V);
  const int Vp = CONSTANT(padded_vocab, GPT2_VP);
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float *l = logits + (long)row * Vp;
  float m = minus_infinity();
  for (int i = lane; i < V; i += 32) m = fmaxf(m, l[i]);
  m = warp_max(m);
  float sum = 0.0f;
  for (int i = lane; i < V; i += 32) sum += expf(l[i] - m);
  sum = warp_sum(sum);
  if (lane == 0) losses[row] = logf(sum) + m - l[targets[row]];
}
