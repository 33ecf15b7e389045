//! A training step's second half: the backward pass (every gradient written
//! by the one operation that makes it, in a fixed order: no atomics) and
//! AdamW's update, each tensor's.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use ptxspec::runtime::LaunchConfig;

use super::blas::Product;
use super::forward::Ending;
use super::pass::{Pass, rd, val, wr};
use super::tensors::{Activations, COLUMN_CHUNK, Scratch, Weights, rows_by_token};
use super::{AdamW, Error, Gpu, Params, Training, Work, elementwise, rowwise};

impl Gpu {
    /// One training step on `inputs` against `targets` (`batch` rows): the
    /// forward pass, the backward pass and an AdamW update — with graphs
    /// on, one replay of the step's graph. Returns the mean loss before the
    /// update.
    pub fn train_step(
        &mut self,
        inputs: &[usize],
        targets: &[usize],
        batch: usize,
        hyper: &AdamW,
    ) -> Result<f64, Error> {
        self.step(inputs, targets, batch, Some(hyper))
    }

    /// The mean loss and, downloaded as `f64`, the gradient of every
    /// parameter (for comparison with the reference); no update.
    pub fn gradients(
        &mut self,
        inputs: &[usize],
        targets: &[usize],
        batch: usize,
    ) -> Result<(f64, Params), Error> {
        let loss = self.step(inputs, targets, batch, None)?;
        let t = self.training.as_ref().ok_or("no gradients")?;
        let grads = t.grads.download(&self.run.stream, &self.config)?;
        Ok((loss, grads))
    }

    /// The forward and backward passes, and the update where `hyper` is
    /// given (a step without one runs at once, never as a graph).
    fn step(
        &mut self,
        inputs: &[usize],
        targets: &[usize],
        batch: usize,
        hyper: Option<&AdamW>,
    ) -> Result<f64, Error> {
        let (tokens, wanted, seq) = self.token_ids(inputs, targets, batch)?;
        let mut a = self.activations(batch, seq)?;
        let mut t = Some(self.training()?);
        let graphs = self.use_graphs;
        self.use_graphs &= hyper.is_some();
        let result = self.step_with(&mut a, &mut t, &tokens, &wanted, batch, seq, hyper);
        self.use_graphs = graphs;
        self.acts = Some(a);
        self.training = t;
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn step_with(
        &mut self,
        a: &mut Activations,
        t: &mut Option<Training>,
        tokens: &[i32],
        wanted: &[i32],
        batch: usize,
        seq: usize,
        hyper: Option<&AdamW>,
    ) -> Result<f64, Error> {
        if a.backward.is_none() {
            let (b, s) = a.capacity;
            a.backward = Some(Scratch::new(&self.run.stream, &self.config, b, s)?);
        }
        self.upload_batch(a, tokens, wanted)?;
        let scratch = a.backward.as_mut().ok_or("no scratch")?;
        upload_token_lists(&self.run.stream, scratch, &rows_by_token(tokens))?;
        let training = t.as_mut().ok_or("no optimizer state")?;
        if let Some(h) = hyper {
            training.step += 1;
            let corrections = [
                (1.0 - h.beta1.powi(training.step)) as f32,
                (1.0 - h.beta2.powi(training.step)) as f32,
            ];
            self.run
                .stream
                .memcpy_htod(&corrections, &mut training.corrections)?;
        }
        let hyper = hyper.copied();
        self.run_pass(Work::Step, batch, seq, a, t, |p, w, a, t| {
            let t = t.as_mut().ok_or("no optimizer state")?;
            p.forward_into(w, a, batch, seq, Ending::Logits)?;
            let mut scratch = a.backward.take().ok_or("no scratch")?;
            let result = p.backward(w, a, &mut scratch, &mut t.grads, batch, seq);
            a.backward = Some(scratch);
            result?;
            match &hyper {
                Some(h) => p.update(w, t, h),
                None => Ok(()),
            }
        })?;
        self.mean_loss(a, batch * seq)
    }
}

/// The encoder's backward pass's lists, uploaded; the count of distinct
/// tokens too (read by the kernel from memory).
fn upload_token_lists(
    stream: &Arc<CudaStream>,
    s: &mut Scratch,
    (distinct, starts, rows): &(Vec<i32>, Vec<i32>, Vec<i32>),
) -> Result<(), Error> {
    stream.memcpy_htod(distinct, &mut s.distinct_tokens.slice_mut(..distinct.len()))?;
    stream.memcpy_htod(starts, &mut s.starts.slice_mut(..starts.len()))?;
    stream.memcpy_htod(rows, &mut s.rows_by_token.slice_mut(..rows.len()))?;
    stream.memcpy_htod(&[distinct.len() as i32], &mut s.distinct_count)?;
    Ok(())
}

impl Pass<'_> {
    /// The backward pass of the forward pass `a` holds (its logits not yet
    /// turned into losses): every gradient into `g`.
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        w: &Weights,
        a: &mut Activations,
        s: &mut Scratch,
        g: &mut Weights,
        batch: usize,
        seq: usize,
    ) -> Result<(), Error> {
        let cfg = self.config;
        let (c, heads) = (cfg.channels, cfg.heads);
        let n = batch * seq;
        let (ni, si, bi) = (n as i32, seq as i32, batch as i32);
        self.launch_sized(
            "crossentropy_backward",
            rowwise(n),
            vec![
                wr(&mut a.logits),
                wr(&mut a.losses),
                rd(&a.targets),
                val(ni),
            ],
        )?;
        // logits = lnf · wteᵀ
        let vp = cfg.padded_vocab();
        self.matmul(
            "matmul (cuBLAS, backward)",
            Product::new(n, c, vp),
            &mut s.dln,
            &a.logits,
            &w.wte,
        )?;
        self.matmul(
            "matmul (cuBLAS, backward)",
            Product::new(vp, c, n).p_transposed(),
            &mut g.wte,
            &a.logits,
            &a.lnf,
        )?;
        let last = &a.residual[cfg.layers];
        self.layer_norm_backward(s, last, &w.lnf_w, &a.lnf_mean, &a.lnf_rstd, n, false)?;
        self.column_sums(&mut g.lnf_w, &s.dweight_rows, &mut s.partial, n, c)?;
        self.column_sums(&mut g.lnf_b, &s.dln, &mut s.partial, n, c)?;
        for (l, b) in w.blocks.iter().enumerate().rev() {
            let act = &a.layers[l];
            let gb = &mut g.blocks[l];
            // x(l+1) = mid + fc_proj(gelu(fc(ln2(mid))))
            self.linear_backward(
                &mut s.dgelu,
                &mut gb.fc_proj_w,
                &mut gb.fc_proj_b,
                &s.dres,
                &act.gelu,
                &b.fc_proj_w,
                &mut s.partial,
                n,
                4 * c,
                c,
            )?;
            self.launch(
                "gelu_backward",
                elementwise(n * 4 * c),
                vec![
                    wr(&mut s.dfc),
                    rd(&act.fc),
                    rd(&s.dgelu),
                    val((n * 4 * c) as i64),
                ],
            )?;
            self.linear_backward(
                &mut s.dln,
                &mut gb.fc_w,
                &mut gb.fc_b,
                &s.dfc,
                &act.ln2,
                &b.fc_w,
                &mut s.partial,
                n,
                c,
                4 * c,
            )?;
            self.layer_norm_backward(s, &act.mid, &b.ln2_w, &act.ln2_mean, &act.ln2_rstd, n, true)?;
            self.column_sums(&mut gb.ln2_w, &s.dweight_rows, &mut s.partial, n, c)?;
            self.column_sums(&mut gb.ln2_b, &s.dln, &mut s.partial, n, c)?;
            // mid = x(l) + proj(attention(qkv(ln1(x(l)))))
            self.linear_backward(
                &mut s.datty,
                &mut gb.proj_w,
                &mut gb.proj_b,
                &s.dres,
                &act.atty,
                &b.proj_w,
                &mut s.partial,
                n,
                c,
                c,
            )?;
            self.launch_sized(
                "attention_unpermute_backward",
                elementwise(n * c),
                vec![wr(&mut s.dheads), rd(&s.datty), val(bi), val(si)],
            )?;
            let hs = c / heads;
            let per_head = batch * heads;
            // heads_out = att · v
            self.per_head(
                Product::new(seq, seq, hs).q_transposed(),
                per_head,
                &mut s.datt,
                &s.dheads,
                &act.v,
            )?;
            self.per_head(
                Product::new(seq, hs, seq).p_transposed(),
                per_head,
                &mut s.dv,
                &act.att,
                &s.dheads,
            )?;
            self.launch_sized(
                "softmax_causal_backward",
                rowwise(per_head * seq),
                vec![
                    wr(&mut s.dscores),
                    rd(&s.datt),
                    rd(&act.att),
                    val((per_head * seq) as i32),
                    val(si),
                ],
            )?;
            // scores = q · kᵀ
            self.per_head(
                Product::new(seq, hs, seq),
                per_head,
                &mut s.dq,
                &s.dscores,
                &act.k,
            )?;
            self.per_head(
                Product::new(seq, hs, seq).p_transposed(),
                per_head,
                &mut s.dk,
                &s.dscores,
                &act.q,
            )?;
            self.launch_sized(
                "attention_permute_backward",
                elementwise(n * c),
                vec![
                    wr(&mut s.dqkv),
                    rd(&s.dq),
                    rd(&s.dk),
                    rd(&s.dv),
                    val(bi),
                    val(si),
                ],
            )?;
            self.linear_backward(
                &mut s.dln,
                &mut gb.qkv_w,
                &mut gb.qkv_b,
                &s.dqkv,
                &act.ln1,
                &b.qkv_w,
                &mut s.partial,
                n,
                c,
                3 * c,
            )?;
            self.layer_norm_backward(
                s,
                &a.residual[l],
                &b.ln1_w,
                &act.ln1_mean,
                &act.ln1_rstd,
                n,
                true,
            )?;
            self.column_sums(&mut gb.ln1_w, &s.dweight_rows, &mut s.partial, n, c)?;
            self.column_sums(&mut gb.ln1_b, &s.dln, &mut s.partial, n, c)?;
        }
        let positions = cfg.max_seq;
        self.launch_sized(
            "wpe_backward",
            elementwise(positions * c),
            vec![
                wr(&mut g.wpe),
                rd(&s.dres),
                val(bi),
                val(si),
                val(positions as i32),
            ],
        )?;
        self.launch_sized(
            "wte_backward",
            // As many tokens as rows, at most: the kernel reads how many.
            elementwise(n * c),
            vec![
                wr(&mut g.wte),
                rd(&s.dres),
                rd(&s.distinct_tokens),
                rd(&s.starts),
                rd(&s.rows_by_token),
                rd(&s.distinct_count),
            ],
        )
    }

    /// A layer norm's backward pass from `s.dln` (its output's gradient):
    /// the input's gradient into `s.dres` (added when `accumulate`), the
    /// per-row products for the gain's gradient into `s.dweight_rows`.
    #[allow(clippy::too_many_arguments)]
    fn layer_norm_backward(
        &self,
        s: &mut Scratch,
        inp: &CudaSlice<f32>,
        weight: &CudaSlice<f32>,
        mean: &CudaSlice<f32>,
        rstd: &CudaSlice<f32>,
        rows: usize,
        accumulate: bool,
    ) -> Result<(), Error> {
        self.launch_sized(
            "layernorm_backward",
            rowwise(rows),
            vec![
                wr(&mut s.dres),
                wr(&mut s.dweight_rows),
                rd(&s.dln),
                rd(inp),
                rd(weight),
                rd(mean),
                rd(rstd),
                val(rows as i32),
                val(i32::from(accumulate)),
            ],
        )
    }

    /// `linear`'s backward pass: the input's gradient into `dinp`, the
    /// weight's and the bias's written.
    #[allow(clippy::too_many_arguments)]
    fn linear_backward(
        &self,
        dinp: &mut CudaSlice<f32>,
        dw: &mut CudaSlice<f32>,
        db: &mut CudaSlice<f32>,
        dout: &CudaSlice<f32>,
        inp: &CudaSlice<f32>,
        w: &CudaSlice<f32>,
        partial: &mut CudaSlice<f32>,
        rows: usize,
        inputs: usize,
        outputs: usize,
    ) -> Result<(), Error> {
        let label = "matmul (cuBLAS, backward)";
        self.matmul(label, Product::new(rows, inputs, outputs), dinp, dout, w)?;
        self.matmul(
            label,
            Product::new(outputs, inputs, rows).p_transposed(),
            dw,
            dout,
            inp,
        )?;
        self.column_sums(db, dout, partial, rows, outputs)
    }

    /// `out[col]` = the sum of column `col` of `x` (`rows × cols`), in a
    /// fixed order: partial sums of `COLUMN_CHUNK` rows, then their sum.
    fn column_sums(
        &self,
        out: &mut CudaSlice<f32>,
        x: &CudaSlice<f32>,
        partial: &mut CudaSlice<f32>,
        rows: usize,
        cols: usize,
    ) -> Result<(), Error> {
        let chunks = rows.div_ceil(COLUMN_CHUNK);
        if partial.len() < chunks * cols || out.len() < cols || x.len() < rows * cols {
            return Err(format!("column sums of {rows} × {cols} do not fit their slices").into());
        }
        let blocks = (cols as u32).div_ceil(256);
        self.launch(
            "column_sum_partial",
            LaunchConfig::new((blocks, chunks as u32, 1), (256, 1, 1)),
            vec![
                wr(partial),
                rd(x),
                val(rows as i32),
                val(cols as i32),
                val(COLUMN_CHUNK as i32),
            ],
        )?;
        self.launch(
            "column_sum_finish",
            LaunchConfig::new((blocks, 1, 1), (256, 1, 1)),
            vec![wr(out), rd(partial), val(chunks as i32), val(cols as i32)],
        )
    }

    /// One AdamW step of every parameter along its gradient, with the bias
    /// corrections in `t.corrections`.
    fn update(&self, weights: &mut Weights, t: &mut Training, h: &AdamW) -> Result<(), Error> {
        let tensors = weights
            .tensors_mut()
            .into_iter()
            .zip(t.m.tensors_mut())
            .zip(t.v.tensors_mut())
            .zip(t.grads.tensors());
        for (((p, m), v), g) in tensors {
            let n = p.len();
            self.launch(
                "adamw_update",
                elementwise(n),
                vec![
                    wr(p),
                    wr(m),
                    wr(v),
                    rd(g),
                    rd(&t.corrections),
                    val(n as i64),
                    val(h.learning_rate as f32),
                    val(h.beta1 as f32),
                    val(h.beta2 as f32),
                    val(h.eps as f32),
                    val(h.weight_decay as f32),
                ],
            )?;
        }
        Ok(())
    }
}
