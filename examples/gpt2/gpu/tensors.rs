//! The model's memory on the GPU: its weights (and tensors of the same
//! shapes: the gradients, AdamW's moments), what a forward pass keeps for the
//! backward pass, and the backward pass's own scratch.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use crate::reference::{Config, Params};

type Error = Box<dyn std::error::Error>;

/// One block's tensors, in the reference's order (`Params::tensors_mut`).
pub struct BlockWeights {
    pub ln1_w: CudaSlice<f32>,
    pub ln1_b: CudaSlice<f32>,
    pub qkv_w: CudaSlice<f32>,
    pub qkv_b: CudaSlice<f32>,
    pub proj_w: CudaSlice<f32>,
    pub proj_b: CudaSlice<f32>,
    pub ln2_w: CudaSlice<f32>,
    pub ln2_b: CudaSlice<f32>,
    pub fc_w: CudaSlice<f32>,
    pub fc_b: CudaSlice<f32>,
    pub fc_proj_w: CudaSlice<f32>,
    pub fc_proj_b: CudaSlice<f32>,
}

/// Every tensor of the model: its weights, or a gradient, or a moment.
pub struct Weights {
    pub wte: CudaSlice<f32>,
    pub wpe: CudaSlice<f32>,
    pub blocks: Vec<BlockWeights>,
    pub lnf_w: CudaSlice<f32>,
    pub lnf_b: CudaSlice<f32>,
}

impl Weights {
    /// `params` as `f32`, on `stream`.
    pub fn upload(stream: &Arc<CudaStream>, params: &Params) -> Result<Self, Error> {
        let mut host = params.clone();
        let slices = host
            .tensors_mut()
            .into_iter()
            .map(|(_, t)| {
                let values: Vec<f32> = t.iter().map(|&x| x as f32).collect();
                Ok(stream.clone_htod(&values)?)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(Weights::from_slices(slices))
    }

    /// Zeros of this model's shapes.
    pub fn zeros_like(&self, stream: &Arc<CudaStream>) -> Result<Self, Error> {
        let slices = self
            .tensors()
            .into_iter()
            .map(|t| Ok(stream.alloc_zeros::<f32>(t.len())?))
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(Weights::from_slices(slices))
    }

    /// The tensors as `f64`, for comparison with the reference.
    pub fn download(&self, stream: &Arc<CudaStream>, config: &Config) -> Result<Params, Error> {
        let mut host = Params::zeros(config);
        for ((name, into), from) in host.tensors_mut().into_iter().zip(self.tensors()) {
            if into.len() != from.len() {
                return Err(format!(
                    "{name}: {} values on the GPU, {} here",
                    from.len(),
                    into.len()
                )
                .into());
            }
            let values = stream.clone_dtoh(from)?;
            for (x, v) in into.iter_mut().zip(values) {
                *x = f64::from(v);
            }
        }
        Ok(host)
    }

    /// Tensors in the reference's order back into their places.
    fn from_slices(mut slices: Vec<CudaSlice<f32>>) -> Self {
        let lnf_b = slices.pop().expect("lnf_b");
        let lnf_w = slices.pop().expect("lnf_w");
        let mut rest = slices.into_iter();
        let wte = rest.next().expect("wte");
        let wpe = rest.next().expect("wpe");
        let mut blocks = Vec::new();
        while let Some(ln1_w) = rest.next() {
            let mut take = || rest.next().expect("a whole block");
            blocks.push(BlockWeights {
                ln1_w,
                ln1_b: take(),
                qkv_w: take(),
                qkv_b: take(),
                proj_w: take(),
                proj_b: take(),
                ln2_w: take(),
                ln2_b: take(),
                fc_w: take(),
                fc_b: take(),
                fc_proj_w: take(),
                fc_proj_b: take(),
            });
        }
        Weights {
            wte,
            wpe,
            blocks,
            lnf_w,
            lnf_b,
        }
    }

    /// Every tensor, in the reference's order.
    pub fn tensors(&self) -> Vec<&CudaSlice<f32>> {
        let mut out = vec![&self.wte, &self.wpe];
        for b in &self.blocks {
            out.extend([
                &b.ln1_w,
                &b.ln1_b,
                &b.qkv_w,
                &b.qkv_b,
                &b.proj_w,
                &b.proj_b,
                &b.ln2_w,
                &b.ln2_b,
                &b.fc_w,
                &b.fc_b,
                &b.fc_proj_w,
                &b.fc_proj_b,
            ]);
        }
        out.extend([&self.lnf_w, &self.lnf_b]);
        out
    }

    /// Every tensor, in the reference's order, to write.
    pub fn tensors_mut(&mut self) -> Vec<&mut CudaSlice<f32>> {
        let mut out = vec![&mut self.wte, &mut self.wpe];
        for b in &mut self.blocks {
            out.extend([
                &mut b.ln1_w,
                &mut b.ln1_b,
                &mut b.qkv_w,
                &mut b.qkv_b,
                &mut b.proj_w,
                &mut b.proj_b,
                &mut b.ln2_w,
                &mut b.ln2_b,
                &mut b.fc_w,
                &mut b.fc_b,
                &mut b.fc_proj_w,
                &mut b.fc_proj_b,
            ]);
        }
        out.extend([&mut self.lnf_w, &mut self.lnf_b]);
        out
    }
}

/// What one block's forward pass keeps for the backward pass.
pub struct LayerActs {
    pub ln1: CudaSlice<f32>,
    pub ln1_mean: CudaSlice<f32>,
    pub ln1_rstd: CudaSlice<f32>,
    pub qkv: CudaSlice<f32>,
    /// The queries, keys and values, each `(B, NH, T, HS)`.
    pub q: CudaSlice<f32>,
    pub k: CudaSlice<f32>,
    pub v: CudaSlice<f32>,
    /// The softmax's weights, `(B, NH, T, T)`.
    pub att: CudaSlice<f32>,
    /// The heads' outputs side by side, `(B, T, C)`.
    pub atty: CudaSlice<f32>,
    /// The residual stream after attention.
    pub mid: CudaSlice<f32>,
    pub ln2: CudaSlice<f32>,
    pub ln2_mean: CudaSlice<f32>,
    pub ln2_rstd: CudaSlice<f32>,
    pub fc: CudaSlice<f32>,
    pub gelu: CudaSlice<f32>,
}

/// The activations of up to `capacity` rows of up to `max_seq` tokens,
/// allocated once: a smaller batch or sequence uses their first elements.
pub struct Activations {
    /// The largest batch and sequence length they hold.
    pub capacity: (usize, usize),
    pub tokens: CudaSlice<i32>,
    pub targets: CudaSlice<i32>,
    /// The residual stream into each block, and out of the last
    /// (`layers + 1`).
    pub residual: Vec<CudaSlice<f32>>,
    pub layers: Vec<LayerActs>,
    pub scores: CudaSlice<f32>,
    pub heads_out: CudaSlice<f32>,
    pub proj: CudaSlice<f32>,
    pub lnf: CudaSlice<f32>,
    pub lnf_mean: CudaSlice<f32>,
    pub lnf_rstd: CudaSlice<f32>,
    /// The logits; after a training step's backward pass, their gradient.
    pub logits: CudaSlice<f32>,
    pub losses: CudaSlice<f32>,
    /// The backward pass's scratch, made by the first one.
    pub backward: Option<Scratch>,
}

impl Activations {
    pub fn new(
        stream: &Arc<CudaStream>,
        config: &Config,
        batch: usize,
        seq: usize,
    ) -> Result<Self, Error> {
        let (c, n, att) = shapes(config, batch, seq);
        let zeros = |len: usize| zeros(stream, len);
        let layers = (0..config.layers)
            .map(|_| {
                Ok(LayerActs {
                    ln1: zeros(n * c)?,
                    ln1_mean: zeros(n)?,
                    ln1_rstd: zeros(n)?,
                    qkv: zeros(n * 3 * c)?,
                    q: zeros(n * c)?,
                    k: zeros(n * c)?,
                    v: zeros(n * c)?,
                    att: zeros(att)?,
                    atty: zeros(n * c)?,
                    mid: zeros(n * c)?,
                    ln2: zeros(n * c)?,
                    ln2_mean: zeros(n)?,
                    ln2_rstd: zeros(n)?,
                    fc: zeros(n * 4 * c)?,
                    gelu: zeros(n * 4 * c)?,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(Activations {
            capacity: (batch, seq),
            tokens: stream.alloc_zeros(n)?,
            targets: stream.alloc_zeros(n)?,
            residual: (0..=config.layers)
                .map(|_| zeros(n * c))
                .collect::<Result<_, _>>()?,
            layers,
            scores: zeros(att)?,
            heads_out: zeros(n * c)?,
            proj: zeros(n * c)?,
            lnf: zeros(n * c)?,
            lnf_mean: zeros(n)?,
            lnf_rstd: zeros(n)?,
            logits: zeros(n * config.padded_vocab())?,
            losses: zeros(n)?,
            backward: None,
        })
    }

    /// Whether `batch` rows of `seq` tokens fit.
    pub fn holds(&self, batch: usize, seq: usize) -> bool {
        batch * seq <= self.capacity.0 * self.capacity.1
            && batch * seq * seq <= self.capacity.0 * self.capacity.1 * self.capacity.1
    }
}

/// The channels, the rows and the attention matrices' elements of `batch`
/// rows of `seq` tokens.
fn shapes(config: &Config, batch: usize, seq: usize) -> (usize, usize, usize) {
    (
        config.channels,
        batch * seq,
        batch * config.heads * seq * seq,
    )
}

/// `len` zeroed values on `stream`.
fn zeros(stream: &Arc<CudaStream>, len: usize) -> Result<CudaSlice<f32>, Error> {
    Ok(stream.alloc_zeros(len)?)
}

/// Rows a block of `column_sum_partial` sums.
pub const COLUMN_CHUNK: usize = 128;

/// The backward pass's gradients of activations (shared by the blocks: each
/// is used by one block at a time) and the encoder's token lists.
pub struct Scratch {
    /// The residual stream's gradient.
    pub dres: CudaSlice<f32>,
    pub dln: CudaSlice<f32>,
    pub datty: CudaSlice<f32>,
    pub dheads: CudaSlice<f32>,
    pub datt: CudaSlice<f32>,
    pub dscores: CudaSlice<f32>,
    pub dq: CudaSlice<f32>,
    pub dk: CudaSlice<f32>,
    pub dv: CudaSlice<f32>,
    pub dqkv: CudaSlice<f32>,
    pub dgelu: CudaSlice<f32>,
    pub dfc: CudaSlice<f32>,
    /// A layer norm's per-row products, whose column sums are its gain's
    /// gradient.
    pub dweight_rows: CudaSlice<f32>,
    /// Column sums' partials: up to `rows / COLUMN_CHUNK` rows of `4C`.
    pub partial: CudaSlice<f32>,
    pub distinct_tokens: CudaSlice<i32>,
    pub starts: CudaSlice<i32>,
    pub rows_by_token: CudaSlice<i32>,
    /// How many tokens are distinct (one value).
    pub distinct_count: CudaSlice<i32>,
}

impl Scratch {
    pub fn new(
        stream: &Arc<CudaStream>,
        config: &Config,
        batch: usize,
        seq: usize,
    ) -> Result<Self, Error> {
        let (c, n, att) = shapes(config, batch, seq);
        let zeros = |len: usize| zeros(stream, len);
        Ok(Scratch {
            dres: zeros(n * c)?,
            dln: zeros(n * c)?,
            datty: zeros(n * c)?,
            dheads: zeros(n * c)?,
            datt: zeros(att)?,
            dscores: zeros(att)?,
            dq: zeros(n * c)?,
            dk: zeros(n * c)?,
            dv: zeros(n * c)?,
            dqkv: zeros(n * 3 * c)?,
            dgelu: zeros(n * 4 * c)?,
            dfc: zeros(n * 4 * c)?,
            dweight_rows: zeros(n * c)?,
            partial: zeros(n.div_ceil(COLUMN_CHUNK) * 4 * c)?,
            distinct_tokens: stream.alloc_zeros(n)?,
            starts: stream.alloc_zeros(n + 1)?,
            rows_by_token: stream.alloc_zeros(n)?,
            distinct_count: stream.alloc_zeros(1)?,
        })
    }
}

/// The encoder's backward pass's lists: each distinct token of `tokens`,
/// where its rows start in the list of rows by token, and that list (rows in
/// ascending order within a token) — what lets one thread sum a token's rows
/// in a fixed order.
pub fn rows_by_token(tokens: &[i32]) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    let mut order: Vec<usize> = (0..tokens.len()).collect();
    order.sort_by_key(|&row| (tokens[row], row));
    let (mut distinct, mut starts) = (Vec::new(), Vec::new());
    for (at, &row) in order.iter().enumerate() {
        if distinct.last() != Some(&tokens[row]) {
            distinct.push(tokens[row]);
            starts.push(at as i32);
        }
    }
    starts.push(order.len() as i32);
    (
        distinct,
        starts,
        order.into_iter().map(|r| r as i32).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::rows_by_token;

    #[test]
    fn rows_are_listed_by_token_in_order() {
        let (distinct, starts, rows) = rows_by_token(&[5, 2, 5, 9, 2, 5]);
        assert_eq!(distinct, [2, 5, 9]);
        assert_eq!(starts, [0, 2, 5, 6]);
        assert_eq!(rows, [1, 4, 0, 2, 5, 3]);
        let (distinct, starts, rows) = rows_by_token(&[]);
        assert!(distinct.is_empty() && rows.is_empty());
        assert_eq!(starts, [0]);
    }
}
