// Transformer-shaped kernels for the GPU bench (`gpu_bench --transformer`),
// written here in the manner of open-source GPT-2 training code (FP32, one
// warp per row for row-wise work, flat index arithmetic for permutes and
// gathers), with their sizes as by-value arguments, as such code takes them.
//
// Compiled with -DLITERAL, each size reads GPT-2 small's value instead (B 8,
// T 1024, C 768, 12 heads of 64): the literal kernel, what a program that
// knew its sizes when it compiled would run. Everything else is the same
// code, so the generic, fixed and literal kernels differ only in what the
// compiler knows.

#ifdef LITERAL
#define FIX(param, value) (value)
#else
#define FIX(param, value) (param)
#endif

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Layer norm over rows of C: one warp per row; the row's mean and reciprocal
// standard deviation are kept for the backward pass.
extern "C" __global__ void layernorm_forward(float *__restrict__ out, float *__restrict__ mean,
                                             float *__restrict__ rstd,
                                             const float *__restrict__ inp,
                                             const float *__restrict__ weight,
                                             const float *__restrict__ bias, int N_, int C_) {
    const int N = FIX(N_, 8 * 1024);
    const int C = FIX(C_, 768);
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const float *x = inp + row * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += x[i];
    const float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int i = lane; i < C; i += 32) {
        const float d = x[i] - m;
        var += d * d;
    }
    const float s = rsqrtf(warp_sum(var) / C + 1e-5f);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
    float *o = out + row * C;
    for (int i = lane; i < C; i += 32) o[i] = s * (x[i] - m) * weight[i] + bias[i];
}

// Causal softmax over the rows of attention scores (B·NH·T rows of T): row r
// attends to positions 0 ..= r % T, scaled by 1/sqrt(head size); one warp
// per row.
extern "C" __global__ void softmax_forward(float *__restrict__ out,
                                           const float *__restrict__ inp, int N_, int T_,
                                           float scale) {
    const int N = FIX(N_, 8 * 12 * 1024);
    const int T = FIX(T_, 1024);
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const int own = row % T;
    const float *x = inp + (size_t)row * T;
    float mx = -__int_as_float(0x7f800000);
    for (int i = lane; i <= own; i += 32) mx = fmaxf(mx, x[i]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int i = lane; i <= own; i += 32) sum += expf((x[i] - mx) * scale);
    sum = warp_sum(sum);
    float *o = out + (size_t)row * T;
    for (int i = lane; i < T; i += 32) o[i] = i <= own ? expf((x[i] - mx) * scale) / sum : 0.0f;
}

// The attention's permute: (B, T, 3, NH, HS) to three (B, NH, T, HS) tensors,
// by dividing a flat index by the sizes.
extern "C" __global__ void attention_permute(float *__restrict__ q, float *__restrict__ k,
                                             float *__restrict__ v,
                                             const float *__restrict__ inp, int B_, int T_,
                                             int NH_, int HS_) {
    const int B = FIX(B_, 8);
    const int T = FIX(T_, 1024);
    const int NH = FIX(NH_, 12);
    const int HS = FIX(HS_, 64);
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * T * HS) return;
    const int b = idx / (NH * T * HS);
    int rest = idx % (NH * T * HS);
    const int h = rest / (T * HS);
    rest = rest % (T * HS);
    const int t = rest / HS;
    const int d = rest % HS;
    const int from = b * T * 3 * NH * HS + t * 3 * NH * HS + h * HS + d;
    q[idx] = inp[from];
    k[idx] = inp[from + NH * HS];
    v[idx] = inp[from + 2 * NH * HS];
}

// The embedding: token and position embeddings summed, one element a thread.
extern "C" __global__ void encoder_forward(float *__restrict__ out, const int *__restrict__ tokens,
                                          const float *__restrict__ wte,
                                          const float *__restrict__ wpe, int B_, int T_,
                                          int C_) {
    const int B = FIX(B_, 8);
    const int T = FIX(T_, 1024);
    const int C = FIX(C_, 768);
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * T * C) return;
    const int bt = idx / C;
    const int t = bt % T;
    const int c = idx % C;
    out[idx] = wte[(size_t)tokens[bt] * C + c] + wpe[t * C + c];
}

// The residual connection.
extern "C" __global__ void residual_forward(float *__restrict__ out,
                                            const float *__restrict__ a,
                                            const float *__restrict__ b, int N_) {
    const int N = FIX(N_, 8 * 1024 * 768);
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = a[i] + b[i];
}

// GELU, tanh's approximation, over the MLP's hidden activations.
extern "C" __global__ void gelu_forward(float *__restrict__ out, const float *__restrict__ inp,
                                        int N_) {
    const int N = FIX(N_, 8 * 1024 * 4 * 768);
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        const float x = inp[i];
        const float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + cube)));
    }
}

// A bias's gradient: each column of (BT, OC) summed over its rows, one block
// a column (a reduction through shared memory).
extern "C" __global__ void bias_backward(float *__restrict__ dbias,
                                         const float *__restrict__ dout, int BT_, int OC_) {
    const int BT = FIX(BT_, 8 * 1024);
    const int OC = FIX(OC_, 3 * 768);
    __shared__ float partial[32];
    const int o = blockIdx.x;
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < BT; i += blockDim.x) sum += dout[(size_t)i * OC + o];
    sum = warp_sum(sum);
    if (lane == 0) partial[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        sum = lane < blockDim.x / 32 ? partial[lane] : 0.0f;
        sum = warp_sum(sum);
        if (lane == 0) dbias[o] = sum;
    }
}
