//! The forward pass: each block's activations kept for the backward pass.

use cudarc::driver::CudaSlice;
use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;

use super::blas::Product;
use super::pass::{Pass, rd, val, wr};
use super::tensors::{Activations, Weights};
use super::{Error, Gpu, Work, elementwise, rowwise};

/// What a forward pass ends with.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// Each row's loss (the logits kept).
    Loss,
    /// Nothing more: the backward pass computes the losses as it turns the
    /// logits into their gradient.
    Logits,
}

impl Gpu {
    /// The mean loss of `inputs` against `targets` (`batch` rows).
    pub fn forward(
        &mut self,
        inputs: &[usize],
        targets: &[usize],
        batch: usize,
    ) -> Result<f64, Error> {
        let (tokens, wanted, seq) = self.token_ids(inputs, targets, batch)?;
        let mut a = self.activations(batch, seq)?;
        let mut none = None;
        let start = match self.gpu_time {
            Some(_) => Some(self.run.stream.record_event(Some(CU_EVENT_DEFAULT))?),
            None => None,
        };
        let result = self
            .upload_batch(&mut a, &tokens, &wanted)
            .and_then(|()| {
                self.run_pass(
                    Work::Forward,
                    batch,
                    seq,
                    &mut a,
                    &mut none,
                    |p, w, a, _| p.forward_into(w, a, batch, seq, Ending::Loss),
                )
            })
            .and_then(|()| {
                self.submitted = Some(std::time::Instant::now());
                let end = match start {
                    Some(_) => Some(self.run.stream.record_event(Some(CU_EVENT_DEFAULT))?),
                    None => None,
                };
                let loss = self.mean_loss(&a, batch * seq)?;
                if let (Some(start), Some(end)) = (&start, &end) {
                    self.gpu_time = Some(f64::from(start.elapsed_ms(end)?));
                }
                Ok(loss)
            });
        self.acts = Some(a);
        result
    }

    pub(super) fn upload_batch(
        &self,
        a: &mut Activations,
        tokens: &[i32],
        targets: &[i32],
    ) -> Result<(), Error> {
        let n = tokens.len();
        self.run
            .stream
            .memcpy_htod(tokens, &mut a.tokens.slice_mut(..n))?;
        self.run
            .stream
            .memcpy_htod(targets, &mut a.targets.slice_mut(..n))?;
        Ok(())
    }

    /// The mean of the first `rows` losses (waits for them).
    pub(super) fn mean_loss(&self, a: &Activations, rows: usize) -> Result<f64, Error> {
        let losses = self.run.stream.clone_dtoh(&a.losses.slice(..rows))?;
        Ok(losses.iter().map(|&l| f64::from(l)).sum::<f64>() / rows as f64)
    }
}

impl Pass<'_> {
    /// The forward pass of `batch` rows of `seq` tokens (uploaded to `a`)
    /// through the weights `w`.
    pub(super) fn forward_into(
        &self,
        w: &Weights,
        a: &mut Activations,
        batch: usize,
        seq: usize,
        ending: Ending,
    ) -> Result<(), Error> {
        let cfg = self.config;
        let (c, heads) = (cfg.channels, cfg.heads);
        let n = batch * seq;
        let (ni, si, bi) = (n as i32, seq as i32, batch as i32);
        self.launch_sized(
            "encoder_forward",
            elementwise(n * c),
            vec![
                wr(&mut a.residual[0]),
                rd(&a.tokens),
                rd(&w.wte),
                rd(&w.wpe),
                val(ni),
                val(si),
            ],
        )?;
        for (l, b) in w.blocks.iter().enumerate() {
            let (before, after) = a.residual.split_at_mut(l + 1);
            let (x, out) = (&before[l], &mut after[0]);
            let s = &mut a.layers[l];
            self.layer_norm(
                &mut s.ln1,
                &mut s.ln1_mean,
                &mut s.ln1_rstd,
                x,
                &b.ln1_w,
                &b.ln1_b,
                n,
            )?;
            self.linear(&mut s.qkv, &s.ln1, &b.qkv_w, Some(&b.qkv_b), n, c, 3 * c)?;
            self.launch_sized(
                "attention_permute",
                elementwise(n * c),
                vec![
                    wr(&mut s.q),
                    wr(&mut s.k),
                    wr(&mut s.v),
                    rd(&s.qkv),
                    val(bi),
                    val(si),
                ],
            )?;
            let hs = c / heads;
            let per_head = batch * heads;
            // scores[t][t2] = q[t] · k[t2], each (batch, head) a matrix.
            self.per_head(
                Product::new(seq, seq, hs).q_transposed(),
                per_head,
                &mut a.scores,
                &s.q,
                &s.k,
            )?;
            self.launch_sized(
                "softmax_causal",
                rowwise(per_head * seq),
                vec![
                    wr(&mut s.att),
                    rd(&a.scores),
                    val((per_head * seq) as i32),
                    val(si),
                ],
            )?;
            // heads_out[t] = Σ att[t][t2] · v[t2]
            self.per_head(
                Product::new(seq, hs, seq),
                per_head,
                &mut a.heads_out,
                &s.att,
                &s.v,
            )?;
            self.launch_sized(
                "attention_unpermute",
                elementwise(n * c),
                vec![wr(&mut s.atty), rd(&a.heads_out), val(bi), val(si)],
            )?;
            self.linear(&mut a.proj, &s.atty, &b.proj_w, Some(&b.proj_b), n, c, c)?;
            self.residual(&mut s.mid, x, &a.proj, n * c)?;
            self.layer_norm(
                &mut s.ln2,
                &mut s.ln2_mean,
                &mut s.ln2_rstd,
                &s.mid,
                &b.ln2_w,
                &b.ln2_b,
                n,
            )?;
            self.linear(&mut s.fc, &s.ln2, &b.fc_w, Some(&b.fc_b), n, c, 4 * c)?;
            self.launch(
                "gelu_forward",
                elementwise(n * 4 * c),
                vec![wr(&mut s.gelu), rd(&s.fc), val((n * 4 * c) as i64)],
            )?;
            self.linear(
                &mut a.proj,
                &s.gelu,
                &b.fc_proj_w,
                Some(&b.fc_proj_b),
                n,
                4 * c,
                c,
            )?;
            self.residual(out, &s.mid, &a.proj, n * c)?;
        }
        let last = &a.residual[cfg.layers];
        self.layer_norm(
            &mut a.lnf,
            &mut a.lnf_mean,
            &mut a.lnf_rstd,
            last,
            &w.lnf_w,
            &w.lnf_b,
            n,
        )?;
        self.matmul(
            "matmul (cuBLAS, linear)",
            Product::new(n, cfg.padded_vocab(), c).q_transposed(),
            &mut a.logits,
            &a.lnf,
            &w.wte,
        )?;
        if ending == Ending::Loss {
            self.launch_sized(
                "crossentropy_forward",
                rowwise(n),
                vec![wr(&mut a.losses), rd(&a.logits), rd(&a.targets), val(ni)],
            )?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn layer_norm(
        &self,
        out: &mut CudaSlice<f32>,
        mean: &mut CudaSlice<f32>,
        rstd: &mut CudaSlice<f32>,
        inp: &CudaSlice<f32>,
        w: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        rows: usize,
    ) -> Result<(), Error> {
        self.launch_sized(
            "layernorm_forward",
            rowwise(rows),
            vec![
                wr(out),
                wr(mean),
                wr(rstd),
                rd(inp),
                rd(w),
                rd(b),
                val(rows as i32),
            ],
        )
    }

    fn residual(
        &self,
        out: &mut CudaSlice<f32>,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        n: usize,
    ) -> Result<(), Error> {
        self.launch(
            "residual_forward",
            elementwise(n),
            vec![wr(out), rd(a), rd(b), val(n as i64)],
        )
    }

    /// `out[rows × outputs] = inp[rows × inputs] · w[outputs × inputs]ᵀ (+ bias)`
    #[allow(clippy::too_many_arguments)]
    fn linear(
        &self,
        out: &mut CudaSlice<f32>,
        inp: &CudaSlice<f32>,
        w: &CudaSlice<f32>,
        bias: Option<&CudaSlice<f32>>,
        rows: usize,
        inputs: usize,
        outputs: usize,
    ) -> Result<(), Error> {
        let shape = Product::new(rows, outputs, inputs).q_transposed();
        self.matmul("matmul (cuBLAS, linear)", shape, out, inp, w)?;
        if let Some(bias) = bias {
            self.launch(
                "add_bias",
                elementwise(rows * outputs),
                vec![wr(out), rd(bias), val(rows as i32), val(outputs as i32)],
            )?;
        }
        Ok(())
    }
}
