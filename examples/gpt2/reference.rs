//! The CPU reference: a GPT-2–shaped model's forward pass, backward pass and
//! AdamW update in plain Rust, every value an `f64`, for the tiny
//! configurations that the GPU program is checked against.
//!
//! The design is GPT-2's as its paper and released model describe it
//! (Radford et al., "Language Models are Unsupervised Multitask Learners",
//! 2019): learned token and position embeddings; pre-norm blocks of causal
//! multi-head attention and a 4×C MLP with GELU (tanh form), each added to the
//! residual stream; a final layer norm; a classifier that shares the token
//! embedding's weights; mean cross-entropy over the real vocabulary (the
//! padded rows are never a class). AdamW is Loshchilov and Hutter's
//! ("Decoupled Weight Decay Regularization", 2019). The code is ours.
//!
//! Shapes: `N = B × T` rows; a matrix `[R × K]` is row-major; a linear
//! layer's weight is `[out × in]`, as GPT-2's checkpoints store it transposed
//! from `Conv1D`.

use crate::data::Rng;

/// The model's fixed dimensions (the GPU program's specialization
/// constants).
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub layers: usize,
    pub heads: usize,
    pub channels: usize,
    /// The vocabulary's real size: the classes of the loss.
    pub vocab: usize,
    /// The longest sequence the position embedding holds.
    pub max_seq: usize,
}

impl Config {
    /// The configuration the CPU reference and the GPU are compared on.
    pub const TINY: Config = Config {
        layers: 2,
        heads: 4,
        channels: 64,
        vocab: 97,
        max_seq: 16,
    };

    /// GPT-2 small's shape.
    pub const GPT2_SMALL: Config = Config {
        layers: 12,
        heads: 12,
        channels: 768,
        vocab: 50_257,
        max_seq: 1024,
    };

    /// The vocabulary padded to a multiple of 64 (the embedding's rows; the
    /// classifier's matmul runs on whole tiles).
    pub fn padded_vocab(&self) -> usize {
        self.vocab.div_ceil(64) * 64
    }

    pub fn head_size(&self) -> usize {
        self.channels / self.heads
    }
}

/// One block's parameters.
#[derive(Clone)]
pub struct Block {
    pub ln1_w: Vec<f64>,
    pub ln1_b: Vec<f64>,
    /// `[3C × C]`: rows of the queries', keys' and values' outputs.
    pub qkv_w: Vec<f64>,
    pub qkv_b: Vec<f64>,
    pub proj_w: Vec<f64>,
    pub proj_b: Vec<f64>,
    pub ln2_w: Vec<f64>,
    pub ln2_b: Vec<f64>,
    /// `[4C × C]`
    pub fc_w: Vec<f64>,
    pub fc_b: Vec<f64>,
    /// `[C × 4C]`
    pub fc_proj_w: Vec<f64>,
    pub fc_proj_b: Vec<f64>,
}

/// Every parameter (or every gradient: the same shapes).
#[derive(Clone)]
pub struct Params {
    /// `[Vp × C]`: the token embedding and the classifier.
    pub wte: Vec<f64>,
    /// `[max_seq × C]`
    pub wpe: Vec<f64>,
    pub blocks: Vec<Block>,
    pub lnf_w: Vec<f64>,
    pub lnf_b: Vec<f64>,
}

impl Params {
    /// All zeros: a gradient to accumulate into, or AdamW's moments.
    pub fn zeros(config: &Config) -> Self {
        let c = config.channels;
        let block = Block {
            ln1_w: vec![0.0; c],
            ln1_b: vec![0.0; c],
            qkv_w: vec![0.0; 3 * c * c],
            qkv_b: vec![0.0; 3 * c],
            proj_w: vec![0.0; c * c],
            proj_b: vec![0.0; c],
            ln2_w: vec![0.0; c],
            ln2_b: vec![0.0; c],
            fc_w: vec![0.0; 4 * c * c],
            fc_b: vec![0.0; 4 * c],
            fc_proj_w: vec![0.0; 4 * c * c],
            fc_proj_b: vec![0.0; c],
        };
        Params {
            wte: vec![0.0; config.padded_vocab() * c],
            wpe: vec![0.0; config.max_seq * c],
            blocks: vec![block; config.layers],
            lnf_w: vec![0.0; c],
            lnf_b: vec![0.0; c],
        }
    }

    /// GPT-2's initialization: weights normal with standard deviation 0.02
    /// (the projections into the residual stream scaled by `1/sqrt(2L)`),
    /// biases zero, layer norms' gains one — except that `biases` draws
    /// the biases and gains too (small, around their usual values), so that
    /// a gradient check sees every term of the backward pass.
    pub fn init(config: &Config, seed: u64, biases: bool) -> Self {
        let mut rng = Rng::new(seed);
        let mut p = Params::zeros(config);
        let residual_scale = 1.0 / ((2 * config.layers) as f64).sqrt();
        let mut normal = |v: &mut Vec<f64>, std: f64, mean: f64| {
            for x in v.iter_mut() {
                *x = mean + std * rng.normal();
            }
        };
        let bias_std = if biases { 0.02 } else { 0.0 };
        normal(&mut p.wte, 0.02, 0.0);
        normal(&mut p.wpe, 0.01, 0.0);
        for b in &mut p.blocks {
            normal(&mut b.ln1_w, bias_std, 1.0);
            normal(&mut b.ln1_b, bias_std, 0.0);
            normal(&mut b.qkv_w, 0.02, 0.0);
            normal(&mut b.qkv_b, bias_std, 0.0);
            normal(&mut b.proj_w, 0.02 * residual_scale, 0.0);
            normal(&mut b.proj_b, bias_std, 0.0);
            normal(&mut b.ln2_w, bias_std, 1.0);
            normal(&mut b.ln2_b, bias_std, 0.0);
            normal(&mut b.fc_w, 0.02, 0.0);
            normal(&mut b.fc_b, bias_std, 0.0);
            normal(&mut b.fc_proj_w, 0.02 * residual_scale, 0.0);
            normal(&mut b.fc_proj_b, bias_std, 0.0);
        }
        normal(&mut p.lnf_w, bias_std, 1.0);
        normal(&mut p.lnf_b, bias_std, 0.0);
        p
    }

    /// Every tensor with its name, in one fixed order.
    pub fn tensors_mut(&mut self) -> Vec<(String, &mut Vec<f64>)> {
        let mut out: Vec<(String, &mut Vec<f64>)> =
            vec![("wte".into(), &mut self.wte), ("wpe".into(), &mut self.wpe)];
        for (l, b) in self.blocks.iter_mut().enumerate() {
            out.extend([
                (format!("h{l}.ln1_w"), &mut b.ln1_w),
                (format!("h{l}.ln1_b"), &mut b.ln1_b),
                (format!("h{l}.qkv_w"), &mut b.qkv_w),
                (format!("h{l}.qkv_b"), &mut b.qkv_b),
                (format!("h{l}.proj_w"), &mut b.proj_w),
                (format!("h{l}.proj_b"), &mut b.proj_b),
                (format!("h{l}.ln2_w"), &mut b.ln2_w),
                (format!("h{l}.ln2_b"), &mut b.ln2_b),
                (format!("h{l}.fc_w"), &mut b.fc_w),
                (format!("h{l}.fc_b"), &mut b.fc_b),
                (format!("h{l}.fc_proj_w"), &mut b.fc_proj_w),
                (format!("h{l}.fc_proj_b"), &mut b.fc_proj_b),
            ]);
        }
        out.push(("lnf_w".into(), &mut self.lnf_w));
        out.push(("lnf_b".into(), &mut self.lnf_b));
        out
    }

    pub fn count(&mut self) -> usize {
        self.tensors_mut().iter().map(|(_, t)| t.len()).sum()
    }
}

/// What one block's forward pass keeps for the backward pass.
struct BlockActs {
    input: Vec<f64>,
    ln1: Vec<f64>,
    ln1_mean: Vec<f64>,
    ln1_rstd: Vec<f64>,
    qkv: Vec<f64>,
    /// `[B × H × T × T]`: the softmax's output (zero above the diagonal).
    att: Vec<f64>,
    atty: Vec<f64>,
    /// The residual stream after attention.
    mid: Vec<f64>,
    ln2: Vec<f64>,
    ln2_mean: Vec<f64>,
    ln2_rstd: Vec<f64>,
    fc: Vec<f64>,
    gelu: Vec<f64>,
}

/// A forward pass's result and what its backward pass needs.
pub struct Forward {
    pub loss: f64,
    /// `[N × V]`: the softmax over the real vocabulary.
    pub probs: Vec<f64>,
    blocks: Vec<BlockActs>,
    residual: Vec<f64>,
    lnf: Vec<f64>,
    lnf_mean: Vec<f64>,
    lnf_rstd: Vec<f64>,
    batch: usize,
    seq: usize,
}

/// The model's loss on `inputs` (`B × T` token IDs) against `targets`.
///
/// # Panics
///
/// Where `T` exceeds `max_seq`, a token is outside the vocabulary or the
/// lengths disagree: the reference is called by our own code only.
pub fn forward(
    config: &Config,
    p: &Params,
    inputs: &[usize],
    targets: &[usize],
    batch: usize,
) -> Forward {
    let c = config.channels;
    let n = inputs.len();
    let seq = n / batch;
    assert!(n == batch * seq && targets.len() == n && seq <= config.max_seq);
    let mut x = vec![0.0; n * c];
    for (row, &token) in inputs.iter().enumerate() {
        assert!(token < config.vocab, "token {token} outside the vocabulary");
        let t = row % seq;
        for i in 0..c {
            x[row * c + i] = p.wte[token * c + i] + p.wpe[t * c + i];
        }
    }
    let mut blocks = Vec::with_capacity(config.layers);
    for b in &p.blocks {
        let input = x.clone();
        let (ln1, ln1_mean, ln1_rstd) = layer_norm(&x, &b.ln1_w, &b.ln1_b, c);
        let qkv = linear(&ln1, &b.qkv_w, &b.qkv_b, c, 3 * c);
        let (atty, att) = attention(config, &qkv, batch, seq);
        let proj = linear(&atty, &b.proj_w, &b.proj_b, c, c);
        let mid: Vec<f64> = x.iter().zip(&proj).map(|(a, b)| a + b).collect();
        let (ln2, ln2_mean, ln2_rstd) = layer_norm(&mid, &b.ln2_w, &b.ln2_b, c);
        let fc = linear(&ln2, &b.fc_w, &b.fc_b, c, 4 * c);
        let gelu: Vec<f64> = fc.iter().map(|&v| gelu(v)).collect();
        let fc_proj = linear(&gelu, &b.fc_proj_w, &b.fc_proj_b, 4 * c, c);
        x = mid.iter().zip(&fc_proj).map(|(a, b)| a + b).collect();
        blocks.push(BlockActs {
            input,
            ln1,
            ln1_mean,
            ln1_rstd,
            qkv,
            att,
            atty,
            mid,
            ln2,
            ln2_mean,
            ln2_rstd,
            fc,
            gelu,
        });
    }
    let (lnf, lnf_mean, lnf_rstd) = layer_norm(&x, &p.lnf_w, &p.lnf_b, c);
    let v = config.vocab;
    let mut probs = vec![0.0; n * v];
    let mut loss = 0.0;
    for row in 0..n {
        let h = &lnf[row * c..(row + 1) * c];
        let logits: Vec<f64> = (0..v).map(|k| dot(h, &p.wte[k * c..(k + 1) * c])).collect();
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = logits.iter().map(|l| (l - max).exp()).sum();
        for k in 0..v {
            probs[row * v + k] = (logits[k] - max).exp() / sum;
        }
        let target = targets[row];
        assert!(target < v, "target {target} outside the vocabulary");
        loss -= probs[row * v + target].ln();
    }
    Forward {
        loss: loss / n as f64,
        probs,
        blocks,
        residual: x,
        lnf,
        lnf_mean,
        lnf_rstd,
        batch,
        seq,
    }
}

/// The gradient of the mean loss with respect to every parameter.
pub fn backward(
    config: &Config,
    p: &Params,
    f: &Forward,
    inputs: &[usize],
    targets: &[usize],
) -> Params {
    let c = config.channels;
    let v = config.vocab;
    let n = inputs.len();
    let mut g = Params::zeros(config);
    // The classifier: dlogits = (probs - onehot) / N, over the real classes.
    let mut dlnf = vec![0.0; n * c];
    for row in 0..n {
        for k in 0..v {
            let mut d = f.probs[row * v + k];
            if k == targets[row] {
                d -= 1.0;
            }
            let d = d / n as f64;
            for i in 0..c {
                dlnf[row * c + i] += d * p.wte[k * c + i];
                g.wte[k * c + i] += d * f.lnf[row * c + i];
            }
        }
    }
    let mut dx = layer_norm_backward(
        &dlnf,
        &f.residual,
        &p.lnf_w,
        &f.lnf_mean,
        &f.lnf_rstd,
        c,
        &mut g.lnf_w,
        &mut g.lnf_b,
    );
    for (l, (b, a)) in p.blocks.iter().zip(&f.blocks).enumerate().rev() {
        let gb = &mut g.blocks[l];
        // x = mid + fc_proj(gelu(fc(ln2(mid))))
        let dgelu = linear_backward(
            &dx,
            &a.gelu,
            &b.fc_proj_w,
            4 * c,
            c,
            &mut gb.fc_proj_w,
            &mut gb.fc_proj_b,
        );
        let dfc: Vec<f64> = dgelu
            .iter()
            .zip(&a.fc)
            .map(|(d, &x)| d * gelu_grad(x))
            .collect();
        let dln2 = linear_backward(&dfc, &a.ln2, &b.fc_w, c, 4 * c, &mut gb.fc_w, &mut gb.fc_b);
        let dmid_norm = layer_norm_backward(
            &dln2,
            &a.mid,
            &b.ln2_w,
            &a.ln2_mean,
            &a.ln2_rstd,
            c,
            &mut gb.ln2_w,
            &mut gb.ln2_b,
        );
        let dmid: Vec<f64> = dx.iter().zip(&dmid_norm).map(|(a, b)| a + b).collect();
        // mid = input + proj(attention(qkv(ln1(input))))
        let datty = linear_backward(
            &dmid,
            &a.atty,
            &b.proj_w,
            c,
            c,
            &mut gb.proj_w,
            &mut gb.proj_b,
        );
        let dqkv = attention_backward(config, &datty, &a.qkv, &a.att, f.batch, f.seq);
        let dln1 = linear_backward(
            &dqkv,
            &a.ln1,
            &b.qkv_w,
            c,
            3 * c,
            &mut gb.qkv_w,
            &mut gb.qkv_b,
        );
        let dinput_norm = layer_norm_backward(
            &dln1,
            &a.input,
            &b.ln1_w,
            &a.ln1_mean,
            &a.ln1_rstd,
            c,
            &mut gb.ln1_w,
            &mut gb.ln1_b,
        );
        dx = dmid.iter().zip(&dinput_norm).map(|(a, b)| a + b).collect();
    }
    for (row, &token) in inputs.iter().enumerate() {
        let t = row % f.seq;
        for i in 0..c {
            g.wte[token * c + i] += dx[row * c + i];
            g.wpe[t * c + i] += dx[row * c + i];
        }
    }
    g
}

/// AdamW's hyperparameters.
#[derive(Clone, Copy, Debug)]
pub struct AdamW {
    pub learning_rate: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamW {
    fn default() -> Self {
        AdamW {
            learning_rate: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

/// The optimizer's state: both moments and the step count.
pub struct AdamState {
    m: Params,
    v: Params,
    step: i32,
}

impl AdamState {
    pub fn new(config: &Config) -> Self {
        AdamState {
            m: Params::zeros(config),
            v: Params::zeros(config),
            step: 0,
        }
    }
}

/// One AdamW step of `p` along `g`.
pub fn adamw_update(h: &AdamW, state: &mut AdamState, p: &mut Params, g: &mut Params) {
    state.step += 1;
    let c1 = 1.0 - h.beta1.powi(state.step);
    let c2 = 1.0 - h.beta2.powi(state.step);
    let mut ps = p.tensors_mut();
    let mut gs = g.tensors_mut();
    let mut ms = state.m.tensors_mut();
    let mut vs = state.v.tensors_mut();
    for (((pt, gt), mt), vt) in ps
        .iter_mut()
        .zip(gs.iter_mut())
        .zip(ms.iter_mut())
        .zip(vs.iter_mut())
    {
        for i in 0..pt.1.len() {
            let grad = gt.1[i];
            let m = h.beta1 * mt.1[i] + (1.0 - h.beta1) * grad;
            let v = h.beta2 * vt.1[i] + (1.0 - h.beta2) * grad * grad;
            mt.1[i] = m;
            vt.1[i] = v;
            let step = (m / c1) / ((v / c2).sqrt() + h.eps);
            pt.1[i] -= h.learning_rate * (step + h.weight_decay * pt.1[i]);
        }
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `out[r × O] = inp[r × I] · w[O × I]ᵀ + bias`
fn linear(inp: &[f64], w: &[f64], bias: &[f64], inputs: usize, outputs: usize) -> Vec<f64> {
    let rows = inp.len() / inputs;
    let mut out = vec![0.0; rows * outputs];
    for r in 0..rows {
        let x = &inp[r * inputs..(r + 1) * inputs];
        for o in 0..outputs {
            out[r * outputs + o] = bias[o] + dot(x, &w[o * inputs..(o + 1) * inputs]);
        }
    }
    out
}

/// Accumulates `linear`'s weight and bias gradients; returns the input's.
fn linear_backward(
    dout: &[f64],
    inp: &[f64],
    w: &[f64],
    inputs: usize,
    outputs: usize,
    dw: &mut [f64],
    db: &mut [f64],
) -> Vec<f64> {
    let rows = inp.len() / inputs;
    let mut dinp = vec![0.0; rows * inputs];
    for r in 0..rows {
        for o in 0..outputs {
            let d = dout[r * outputs + o];
            db[o] += d;
            for i in 0..inputs {
                dinp[r * inputs + i] += d * w[o * inputs + i];
                dw[o * inputs + i] += d * inp[r * inputs + i];
            }
        }
    }
    dinp
}

const LN_EPS: f64 = 1e-5;

/// Each row normalized to mean 0 and variance 1, then scaled and shifted;
/// also each row's mean and reciprocal standard deviation.
fn layer_norm(inp: &[f64], w: &[f64], b: &[f64], c: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let rows = inp.len() / c;
    let mut out = vec![0.0; inp.len()];
    let mut means = vec![0.0; rows];
    let mut rstds = vec![0.0; rows];
    for r in 0..rows {
        let x = &inp[r * c..(r + 1) * c];
        let mean = x.iter().sum::<f64>() / c as f64;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / c as f64;
        let rstd = 1.0 / (var + LN_EPS).sqrt();
        for i in 0..c {
            out[r * c + i] = (x[i] - mean) * rstd * w[i] + b[i];
        }
        means[r] = mean;
        rstds[r] = rstd;
    }
    (out, means, rstds)
}

#[allow(clippy::too_many_arguments)]
fn layer_norm_backward(
    dout: &[f64],
    inp: &[f64],
    w: &[f64],
    means: &[f64],
    rstds: &[f64],
    c: usize,
    dw: &mut [f64],
    db: &mut [f64],
) -> Vec<f64> {
    let rows = inp.len() / c;
    let mut dinp = vec![0.0; inp.len()];
    for r in 0..rows {
        let (mean, rstd) = (means[r], rstds[r]);
        let norm: Vec<f64> = (0..c).map(|i| (inp[r * c + i] - mean) * rstd).collect();
        let dnorm: Vec<f64> = (0..c).map(|i| dout[r * c + i] * w[i]).collect();
        let dnorm_mean = dnorm.iter().sum::<f64>() / c as f64;
        let dnorm_norm_mean = dot(&dnorm, &norm) / c as f64;
        for i in 0..c {
            dw[i] += dout[r * c + i] * norm[i];
            db[i] += dout[r * c + i];
            dinp[r * c + i] = rstd * (dnorm[i] - dnorm_mean - norm[i] * dnorm_norm_mean);
        }
    }
    dinp
}

/// Causal multi-head attention over `qkv` (`[N × 3C]`: each row's query,
/// key and value, head after head within each); returns the heads' outputs
/// side by side (`[N × C]`) and the softmax's weights.
fn attention(config: &Config, qkv: &[f64], batch: usize, seq: usize) -> (Vec<f64>, Vec<f64>) {
    let c = config.channels;
    let (heads, hs) = (config.heads, config.head_size());
    let scale = 1.0 / (hs as f64).sqrt();
    let mut out = vec![0.0; batch * seq * c];
    let mut att = vec![0.0; batch * heads * seq * seq];
    for b in 0..batch {
        for h in 0..heads {
            for t in 0..seq {
                let q = &qkv[(b * seq + t) * 3 * c + h * hs..][..hs];
                let weights = &mut att[((b * heads + h) * seq + t) * seq..][..seq];
                for t2 in 0..=t {
                    let k = &qkv[(b * seq + t2) * 3 * c + c + h * hs..][..hs];
                    weights[t2] = dot(q, k) * scale;
                }
                let max = weights[..=t]
                    .iter()
                    .copied()
                    .fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for w in &mut weights[..=t] {
                    *w = (*w - max).exp();
                    sum += *w;
                }
                for w in &mut weights[..=t] {
                    *w /= sum;
                }
                let o = &mut out[(b * seq + t) * c + h * hs..][..hs];
                for t2 in 0..=t {
                    let v = &qkv[(b * seq + t2) * 3 * c + 2 * c + h * hs..][..hs];
                    for i in 0..hs {
                        o[i] += weights[t2] * v[i];
                    }
                }
            }
        }
    }
    (out, att)
}

fn attention_backward(
    config: &Config,
    dout: &[f64],
    qkv: &[f64],
    att: &[f64],
    batch: usize,
    seq: usize,
) -> Vec<f64> {
    let c = config.channels;
    let (heads, hs) = (config.heads, config.head_size());
    let scale = 1.0 / (hs as f64).sqrt();
    let mut dqkv = vec![0.0; qkv.len()];
    for b in 0..batch {
        for h in 0..heads {
            for t in 0..seq {
                let weights = &att[((b * heads + h) * seq + t) * seq..][..seq];
                let d = &dout[(b * seq + t) * c + h * hs..][..hs];
                // Through the weighted sum: the weights' and the values' gradients.
                let mut dweights = vec![0.0; t + 1];
                for t2 in 0..=t {
                    let v_at = (b * seq + t2) * 3 * c + 2 * c + h * hs;
                    dweights[t2] = dot(d, &qkv[v_at..v_at + hs]);
                    for i in 0..hs {
                        dqkv[v_at + i] += weights[t2] * d[i];
                    }
                }
                // Through the softmax, then the scaled dot products.
                let weighted: f64 = (0..=t).map(|t2| weights[t2] * dweights[t2]).sum();
                let q_at = (b * seq + t) * 3 * c + h * hs;
                for t2 in 0..=t {
                    let dpre = weights[t2] * (dweights[t2] - weighted) * scale;
                    let k_at = (b * seq + t2) * 3 * c + c + h * hs;
                    for i in 0..hs {
                        dqkv[q_at + i] += dpre * qkv[k_at + i];
                        dqkv[k_at + i] += dpre * qkv[q_at + i];
                    }
                }
            }
        }
    }
    dqkv
}

const GELU_SCALE: f64 = 0.797_884_560_802_865_4; // sqrt(2 / pi)

/// GELU in GPT-2's tanh form.
fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (GELU_SCALE * (x + 0.044715 * x * x * x)).tanh())
}

fn gelu_grad(x: f64) -> f64 {
    let u = GELU_SCALE * (x + 0.044715 * x * x * x);
    let t = u.tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_SCALE * (1.0 + 3.0 * 0.044715 * x * x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::TokenStream;

    /// The backward pass against central differences of the loss, at up to
    /// three entries of every tensor (spread over it), with biases and
    /// gains drawn so that every term is seen. A wrong term anywhere in the
    /// backward pass moves some tensor's gradient far beyond the bound.
    #[test]
    fn gradients_match_finite_differences_in_every_tensor() {
        let config = Config::TINY;
        let (batch, seq) = (2, 8);
        let mut stream = TokenStream::new(11, config.vocab);
        let data = stream.batch(batch, seq);
        let mut p = Params::init(&config, 5, true);
        let f = forward(&config, &p, &data.inputs, &data.targets, batch);
        let mut g = backward(&config, &p, &f, &data.inputs, &data.targets);
        let grads: Vec<(String, Vec<f64>)> = g
            .tensors_mut()
            .into_iter()
            .map(|(n, t)| (n, t.clone()))
            .collect();
        let h = 1e-5;
        let mut checked = 0;
        let mut worst = (0.0, String::new());
        for (which, (name, grad)) in grads.iter().enumerate() {
            let len = grad.len();
            // Entries of real tokens' rows of wte too: index by a stride
            // that lands on several rows.
            for k in 0..3 {
                let i = (k * 7919 + which * 131) % len;
                let i = if name == "wte" {
                    (data.inputs[k] * config.channels + k) % len
                } else {
                    i
                };
                let loss_at = |delta: f64, p: &mut Params| {
                    p.tensors_mut()[which].1[i] += delta;
                    let l = forward(&config, p, &data.inputs, &data.targets, batch).loss;
                    p.tensors_mut()[which].1[i] -= delta;
                    l
                };
                let numeric = (loss_at(h, &mut p) - loss_at(-h, &mut p)) / (2.0 * h);
                let analytic = grad[i];
                // Central differences of a loss near 4.6 round off by about
                // 1e-10 at this step: the bound is relative, plus that.
                let bound = 1e-6 * numeric.abs().max(analytic.abs()) + 1e-9;
                let error = (numeric - analytic).abs() / bound;
                assert!(
                    error < 1.0,
                    "{name}[{i}]: backward {analytic:e}, finite differences {numeric:e} ({error:.2} of the bound)"
                );
                if error > worst.0 {
                    worst = (error, format!("{name}[{i}]"));
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 3 * (4 + 12 * config.layers));
        eprintln!(
            "{checked} entries checked; the worst at {:.3} of the bound ({})",
            worst.0, worst.1
        );
    }

    /// At initialization the classifier is close to uniform over the real
    /// vocabulary (the padded rows are not classes): the loss is near
    /// `ln(V)`, and each row's probabilities sum to one.
    #[test]
    fn the_first_loss_is_near_ln_vocab_over_the_real_classes() {
        let config = Config::TINY;
        let mut stream = TokenStream::new(3, config.vocab);
        let data = stream.batch(2, 16);
        let p = Params::init(&config, 1, false);
        let f = forward(&config, &p, &data.inputs, &data.targets, 2);
        let uniform = (config.vocab as f64).ln();
        assert!(
            (f.loss - uniform).abs() < 0.05,
            "loss {} vs ln V {uniform}",
            f.loss
        );
        for row in f.probs.chunks(config.vocab) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
    }

    /// The token stream is learnable and the update learns it: 40 AdamW
    /// steps take the loss well below its start.
    #[test]
    fn training_lowers_the_loss() {
        let config = Config::TINY;
        let mut stream = TokenStream::new(7, config.vocab);
        let mut p = Params::init(&config, 2, false);
        let mut state = AdamState::new(&config);
        let hyper = AdamW {
            learning_rate: 1e-2,
            ..AdamW::default()
        };
        let mut losses = Vec::new();
        for _ in 0..40 {
            let data = stream.batch(4, 16);
            let f = forward(&config, &p, &data.inputs, &data.targets, 4);
            let mut g = backward(&config, &p, &f, &data.inputs, &data.targets);
            adamw_update(&hyper, &mut state, &mut p, &mut g);
            losses.push(f.loss);
        }
        let first = losses[0];
        let last: f64 = losses[35..].iter().sum::<f64>() / 5.0;
        assert!(last < first - 1.0, "losses {losses:?}");
    }

    /// One AdamW step by hand: with bias correction the first step moves
    /// each parameter by the learning rate against its gradient's sign, and
    /// weight decay pulls toward zero in proportion.
    #[test]
    fn the_first_adamw_step_moves_by_the_learning_rate() {
        let config = Config {
            layers: 1,
            heads: 1,
            channels: 2,
            vocab: 3,
            max_seq: 2,
        };
        let mut p = Params::zeros(&config);
        p.lnf_w = vec![0.5, -2.0];
        let mut g = Params::zeros(&config);
        g.lnf_w = vec![3.0, -0.25];
        let mut state = AdamState::new(&config);
        let hyper = AdamW {
            learning_rate: 0.1,
            eps: 1e-30,
            weight_decay: 0.5,
            ..AdamW::default()
        };
        adamw_update(&hyper, &mut state, &mut p, &mut g);
        assert!(
            (p.lnf_w[0] - (0.5 - 0.1 * (1.0 + 0.5 * 0.5))).abs() < 1e-12,
            "{:?}",
            p.lnf_w
        );
        assert!(
            (p.lnf_w[1] - (-2.0 - 0.1 * (-1.0 + 0.5 * -2.0))).abs() < 1e-12,
            "{:?}",
            p.lnf_w
        );
    }
}
