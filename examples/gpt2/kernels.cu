// The GPT-2 example's kernels: every operation of the forward pass, the
// backward pass and the AdamW update that is not a matmul (cuBLAS does those). FP32, one warp per row for row-wise work, one
// thread per element elsewhere. Written for this example, after the model that
// reference.rs describes.
//
// The model's fixed dimensions are specialization constants; the batch and
// sequence length are ordinary arguments. Compiled with -DGPT2_LITERAL (and
// -DGPT2_C=, _NH=, _V=, _VP=, _B=, _T=), every size is a literal instead: the
// literal build, what a program that knew its sizes when it compiled would
// run. Compiled with -DGPT2_GENERIC, the dimensions are a by-value argument:
// the generic build, which knows no size. Widths that several tensors share (add_bias's, the column sums', AdamW's
// sizes) and values that change every step stay arguments.
//
// No kernel adds with atomics: every sum runs in one fixed order, so that two
// runs of a build (and builds whose code differs only in where a size comes
// from) give the same bits.
#include "ptxspec.cuh"

#if defined(GPT2_LITERAL)
#define CONSTANT(id, literal) (literal)
#define ARGUMENT(arg, literal) (literal)
#define HANDLER ptxspec::kernel_handler h
#elif defined(GPT2_GENERIC)
// The generic build, what a plain CUDA program runs: the model's dimensions
// passed by value to every kernel that needs them, the last parameter where
// the others take their handler.
struct Dims {
  int channels, heads, vocab, padded_vocab;
};
#define CONSTANT(id, literal) (h.id)
#define ARGUMENT(arg, literal) (arg)
#define HANDLER Dims h
#else
#define CONSTANT(id, literal) (h.get_specialization_constant<id>())
#define ARGUMENT(arg, literal) (arg)
#define HANDLER ptxspec::kernel_handler h
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
                                           int rows_arg, int seq_arg, HANDLER) {
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
                                             HANDLER) {
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
                                             int batch_arg, int seq_arg, HANDLER) {
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
                                               int batch_arg, int seq_arg, HANDLER) {
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
                                          int rows_arg, int seq_arg, HANDLER) {
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
                                                HANDLER) {
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

// ---------------------------------------------------------------------------
// The backward pass. Each gradient is written (not added to) by the one
// operation that makes it, except where the text says "adds".

// The classifier's softmax and cross-entropy, backward: `dlogits` holds the
// logits on entry and their gradient of the mean loss on return ((softmax -
// one-hot) / rows over the real vocabulary, 0 in the padded columns); each
// row's loss is written too. One warp a row; each lane reads an element
// before it overwrites it.
extern "C" __global__ void crossentropy_backward(float *__restrict__ dlogits, float *__restrict__ losses,
                                                 const int *__restrict__ targets, int rows_arg,
                                                 HANDLER) {
  const int rows = ARGUMENT(rows_arg, GPT2_B * GPT2_T);
  const int V = CONSTANT(vocab, GPT2_V);
  const int Vp = CONSTANT(padded_vocab, GPT2_VP);
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float *l = dlogits + (long)row * Vp;
  float m = minus_infinity();
  for (int i = lane; i < V; i += 32) m = fmaxf(m, l[i]);
  m = warp_max(m);
  float sum = 0.0f;
  for (int i = lane; i < V; i += 32) sum += expf(l[i] - m);
  sum = warp_sum(sum);
  const int target = targets[row];
  if (lane == 0) losses[row] = logf(sum) + m - l[target];
  __syncwarp();
  const float per_row = 1.0f / rows;
  for (int i = lane; i < Vp; i += 32) {
    const float p = i < V ? expf(l[i] - m) / sum : 0.0f;
    l[i] = (p - (i == target ? 1.0f : 0.0f)) * per_row;
  }
}

// Partial sums of the columns of a rows × cols matrix: block row y sums rows
// y·chunk .. (y+1)·chunk into partial[y][col]. With column_sum_finish, a bias's
// gradient (and a layer norm's) in a fixed order, without atomics.
extern "C" __global__ void column_sum_partial(float *__restrict__ partial, const float *__restrict__ x,
                                              int rows_arg, int cols, int chunk) {
  const int rows = ARGUMENT(rows_arg, GPT2_B * GPT2_T);
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  const int first = blockIdx.y * chunk;
  const int last = min(first + chunk, rows);
  float sum = 0.0f;
  for (int r = first; r < last; ++r) sum += x[(long)r * cols + col];
  partial[(long)blockIdx.y * cols + col] = sum;
}

// out[col] = the sum of `chunks` rows of partial sums, in order.
extern "C" __global__ void column_sum_finish(float *__restrict__ out, const float *__restrict__ partial,
                                             int chunks, int cols) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  float sum = 0.0f;
  for (int y = 0; y < chunks; ++y) sum += partial[(long)y * cols + col];
  out[col] = sum;
}

// Layer norm, backward, one warp a row: dinp gets the input's gradient (adds
// to it when `accumulate`: the residual stream's gradient), and `dweight_rows`
// each row's dout · normalized input, whose column sums are the gain's
// gradient (the bias's are dout's).
extern "C" __global__ void layernorm_backward(float *__restrict__ dinp, float *__restrict__ dweight_rows,
                                              const float *__restrict__ dout, const float *__restrict__ inp,
                                              const float *__restrict__ weight,
                                              const float *__restrict__ mean,
                                              const float *__restrict__ rstd, int rows_arg, int accumulate,
                                              HANDLER) {
  const int C = CONSTANT(channels, GPT2_C);
  const int rows = ARGUMENT(rows_arg, GPT2_B * GPT2_T);
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const long at = (long)row * C;
  const float m = mean[row], r = rstd[row];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int i = lane; i < C; i += 32) {
    const float norm = (inp[at + i] - m) * r;
    const float dnorm = dout[at + i] * weight[i];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * norm;
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / C;
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / C;
  for (int i = lane; i < C; i += 32) {
    const float norm = (inp[at + i] - m) * r;
    const float d = dout[at + i];
    const float g = r * (d * weight[i] - dnorm_mean - norm * dnorm_norm_mean);
    dinp[at + i] = accumulate ? dinp[at + i] + g : g;
    dweight_rows[at + i] = d * norm;
  }
}

extern "C" __global__ void gelu_backward(float *__restrict__ dinp, const float *__restrict__ inp,
                                         const float *__restrict__ dout, long n_arg) {
  const long n = ARGUMENT(n_arg, (long)GPT2_B * GPT2_T * 4 * GPT2_C);
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  const float s = 0.7978845608028654f; // sqrt(2 / pi)
  const float t = tanhf(s * (x + 0.044715f * x * x * x));
  const float grad = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * s * (1.0f + 3.0f * 0.044715f * x * x);
  dinp[i] = dout[i] * grad;
}

// attention_unpermute, backward: (B, T, NH, HS) to (B, NH, T, HS).
extern "C" __global__ void attention_unpermute_backward(float *__restrict__ dinp,
                                                        const float *__restrict__ dout, int batch_arg,
                                                        int seq_arg, HANDLER) {
  const int C = CONSTANT(channels, GPT2_C);
  const int batch = ARGUMENT(batch_arg, GPT2_B), seq = ARGUMENT(seq_arg, GPT2_T);
  const int NH = CONSTANT(heads, GPT2_NH);
  const int HS = C / NH;
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long)batch * seq * C) return;
  const HeadIndex x = head_index(i, seq, NH, HS);
  dinp[i] = dout[((long)x.b * seq + x.t) * C + x.head * HS + x.d];
}

// softmax_causal, backward, one warp a row: the scores' gradient from the
// weights' (att) and their gradient (datt), scaled as the forward pass scaled
// the scores; 0 after the row's position.
extern "C" __global__ void softmax_causal_backward(float *__restrict__ dscores,
                                                   const float *__restrict__ datt,
                                                   const float *__restrict__ att, int rows_arg,
                                                   int seq_arg, HANDLER) {
  const int C = CONSTANT(channels, GPT2_C);
  const int NH = CONSTANT(heads, GPT2_NH);
  const int rows = ARGUMENT(rows_arg, GPT2_B * GPT2_NH * GPT2_T), seq = ARGUMENT(seq_arg, GPT2_T);
  const float scale = rsqrtf((float)(C / NH));
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = row % seq;
  const long at = (long)row * seq;
  float weighted = 0.0f;
  for (int i = lane; i <= t; i += 32) weighted += att[at + i] * datt[at + i];
  weighted = warp_sum(weighted);
  for (int i = lane; i < seq; i += 32)
    dscores[at + i] = i <= t ? att[at + i] * (datt[at + i] - weighted) * scale : 0.0f;
}

// attention_permute, backward: three (B, NH, T, HS) gradients into one
// (B, T, 3, NH, HS).
extern "C" __global__ void attention_permute_backward(float *__restrict__ dinp, const float *__restrict__ dq,
                                                      const float *__restrict__ dk,
                                                      const float *__restrict__ dv, int batch_arg,
                                                      int seq_arg, HANDLER) {
  const int C = CONSTANT(channels, GPT2_C);
  const int batch = ARGUMENT(batch_arg, GPT2_B), seq = ARGUMENT(seq_arg, GPT2_T);
  const int NH = CONSTANT(heads, GPT2_NH);
  const int HS = C / NH;
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long)batch * seq * C) return;
  const HeadIndex x = head_index(i, seq, NH, HS);
  const long to = ((long)x.b * seq + x.t) * 3 * C + x.head * HS + x.d;
  dinp[to] = dq[i];
  dinp[to + C] = dk[i];
  dinp[to + 2 * C] = dv[i];
}

// The position embedding's gradient: row t of `positions` rows is the sum
// over the batch of the residual gradient at position t (0 past the
// sequence).
extern "C" __global__ void wpe_backward(float *__restrict__ dwpe, const float *__restrict__ dres,
                                        int batch_arg, int seq_arg, int positions,
                                        HANDLER) {
  const int C = CONSTANT(channels, GPT2_C);
  const int batch = ARGUMENT(batch_arg, GPT2_B), seq = ARGUMENT(seq_arg, GPT2_T);
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long)positions * C) return;
  const int t = (int)(i / C), c = (int)(i % C);
  float sum = 0.0f;
  if (t < seq)
    for (int b = 0; b < batch; ++b) sum += dres[((long)b * seq + t) * C + c];
  dwpe[i] = sum;
}

// The token embedding's gradient from the inputs (adds to the classifier's):
// the rows of each distinct token are listed together (`rows_by_token`, the
// rows of distinct_tokens[u] from starts[u] to starts[u + 1]), so that one
// thread sums one token's rows for one channel in a fixed order. How many
// tokens are distinct is read from memory (`distinct`), not passed: it
// changes every step, and a graph replays its launches' arguments as they
// were captured. Launched for as many tokens as there are rows.
extern "C" __global__ void wte_backward(float *__restrict__ dwte, const float *__restrict__ dres,
                                        const int *__restrict__ distinct_tokens, const int *__restrict__ starts,
                                        const int *__restrict__ rows_by_token, const int *__restrict__ distinct,
                                        HANDLER) {
  const int C = CONSTANT(channels, GPT2_C);
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long)*distinct * C) return;
  const int u = (int)(i / C), c = (int)(i % C);
  float sum = 0.0f;
  for (int j = starts[u]; j < starts[u + 1]; ++j) sum += dres[(long)rows_by_token[j] * C + c];
  dwte[(long)distinct_tokens[u] * C + c] += sum;
}

// One AdamW step of n parameters: the moments, then the parameter. The bias
// corrections 1 - beta^step change every step and are read from memory
// (corrections[0] for the first moment, [1] for the second), as a graph
// needs.
extern "C" __global__ void adamw_update(float *__restrict__ param, float *__restrict__ m,
                                        float *__restrict__ v, const float *__restrict__ grad,
                                        const float *__restrict__ corrections, long n, float learning_rate,
                                        float beta1, float beta2, float eps, float weight_decay) {
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = grad[i];
  const float mi = beta1 * m[i] + (1.0f - beta1) * g;
  const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  const float step = (mi / corrections[0]) / (sqrtf(vi / corrections[1]) + eps);
  param[i] -= learning_rate * (step + weight_decay * param[i]);
}
