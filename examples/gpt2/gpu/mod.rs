//! The model's forward pass on the GPU: the kernels of `kernels.cu` through
//! a ptxspec bundle compiled from source at run time (the model's fixed
//! dimensions its specialization constants), the matmuls through cuBLAS on
//! the queue's stream, every tensor a cudarc slice of the program's own — as
//! a program that already uses cudarc would write it.

use std::cell::RefCell;
use std::sync::Arc;

use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream};
use ptxspec::bundle::AdaptiveArguments;
use ptxspec::runtime::{Arg, LaunchConfig, Queue};
use ptxspec::{
    Executable, KernelBundle, SourceOptions, SpecId, SpecMode, build, kernel_bundle_from_source,
};

use crate::reference::{Config, Params};

type Error = Box<dyn std::error::Error>;

const CHANNELS: SpecId<i32> = SpecId::new("channels");
const HEADS: SpecId<i32> = SpecId::new("heads");
const VOCAB: SpecId<i32> = SpecId::new("vocab");
const PADDED_VOCAB: SpecId<i32> = SpecId::new("padded_vocab");

/// How the kernels are built: what the compiler knows of the sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// The dimensions read from the constants' buffer at run time.
    Emulated,
    /// The dimensions as immediates in the PTX.
    Native,
    /// The dimensions linked into the LTO-IR by nvJitLink.
    Lto,
    /// Emulated at once, each kernel swapped for its LTO link once the
    /// link is made (on a worker thread).
    Tiered,
    /// As `Lto`, and the batch and length arguments fixed by adaptive
    /// arguments where the variant is timed faster.
    Adaptive,
    /// Every size a literal of the source (`-DGPT2_LITERAL`): what a
    /// program that knew them when it compiled would run. Built for one
    /// batch and length.
    Literal { batch: usize, seq: usize },
}

impl Build {
    pub fn name(&self) -> &'static str {
        match self {
            Build::Emulated => "emulated",
            Build::Native => "native",
            Build::Lto => "LTO",
            Build::Tiered => "tiered",
            Build::Adaptive => "adaptive",
            Build::Literal { .. } => "literal",
        }
    }
}

/// The kernels' bundle for `config`: compiled by NVRTC and built, which
/// needs no GPU.
pub fn kernels(config: &Config, how: Build) -> Result<KernelBundle<Executable>, Error> {
    let mut options = SourceOptions::default();
    if let Build::Literal { batch, seq } = how {
        options.options.extend([
            "-DGPT2_LITERAL".to_string(),
            format!("-DGPT2_C={}", config.channels),
            format!("-DGPT2_NH={}", config.heads),
            format!("-DGPT2_V={}", config.vocab),
            format!("-DGPT2_VP={}", config.padded_vocab()),
            format!("-DGPT2_B={batch}"),
            format!("-DGPT2_T={seq}"),
        ]);
    }
    let mut input =
        kernel_bundle_from_source(&[("gpt2.cu", include_str!("kernels.cu"))], &options)?;
    for (id, value) in [
        (&CHANNELS, config.channels),
        (&HEADS, config.heads),
        (&VOCAB, config.vocab),
        (&PADDED_VOCAB, config.padded_vocab()),
    ] {
        input.set_specialization_constant(id, i32::try_from(value)?)?;
    }
    let input = match how {
        Build::Emulated => input.with_mode(SpecMode::Emulated),
        Build::Native => input.with_mode(SpecMode::Native),
        Build::Lto | Build::Literal { .. } => input.with_mode(SpecMode::Lto),
        Build::Tiered => input.with_mode(SpecMode::Tiered),
        Build::Adaptive => input
            .with_mode(SpecMode::Lto)
            .with_adaptive_arguments(AdaptiveArguments::all()),
    };
    Ok(build(&input)?)
}

/// One block's weights on the GPU.
struct BlockWeights {
    ln1_w: CudaSlice<f32>,
    ln1_b: CudaSlice<f32>,
    qkv_w: CudaSlice<f32>,
    qkv_b: CudaSlice<f32>,
    proj_w: CudaSlice<f32>,
    proj_b: CudaSlice<f32>,
    ln2_w: CudaSlice<f32>,
    ln2_b: CudaSlice<f32>,
    fc_w: CudaSlice<f32>,
    fc_b: CudaSlice<f32>,
    fc_proj_w: CudaSlice<f32>,
    fc_proj_b: CudaSlice<f32>,
}

/// The activations of one batch shape, allocated once.
struct Activations {
    batch: usize,
    seq: usize,
    tokens: CudaSlice<i32>,
    targets: CudaSlice<i32>,
    x: CudaSlice<f32>,
    mid: CudaSlice<f32>,
    ln: CudaSlice<f32>,
    mean: CudaSlice<f32>,
    rstd: CudaSlice<f32>,
    qkv: CudaSlice<f32>,
    q: CudaSlice<f32>,
    k: CudaSlice<f32>,
    v: CudaSlice<f32>,
    scores: CudaSlice<f32>,
    att: CudaSlice<f32>,
    heads_out: CudaSlice<f32>,
    atty: CudaSlice<f32>,
    proj: CudaSlice<f32>,
    fc: CudaSlice<f32>,
    gelu: CudaSlice<f32>,
    logits: CudaSlice<f32>,
    losses: CudaSlice<f32>,
}

/// Each launch of a profiled forward: its name and the events around it.
type LaunchLog = Vec<(&'static str, CudaEvent, CudaEvent)>;

/// The model on one GPU.
pub struct Gpu {
    config: Config,
    queue: Queue,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    kernels: KernelBundle<Executable>,
    wte: CudaSlice<f32>,
    wpe: CudaSlice<f32>,
    blocks: Vec<BlockWeights>,
    lnf_w: CudaSlice<f32>,
    lnf_b: CudaSlice<f32>,
    acts: Option<Activations>,
    /// While a forward pass is profiled: each launch's name and the events
    /// around it.
    profile: RefCell<Option<LaunchLog>>,
}

impl Gpu {
    /// Uploads `params` (as `f32`) to device 0.
    pub fn new(
        config: Config,
        params: &Params,
        kernels: KernelBundle<Executable>,
    ) -> Result<Self, Error> {
        let queue = Queue::new(0)?;
        // SAFETY: this program begins no capture of the queue's stream, by
        // cudarc or by CUDA, and makes no other queue over it; cuBLAS and
        // the uploads below only order their work with the queue's.
        let stream = unsafe { queue.cuda_stream() }.clone();
        let blas = CudaBlas::new(stream.clone())?;
        let up = |v: &[f64]| -> Result<CudaSlice<f32>, Error> {
            let host: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            Ok(stream.clone_htod(&host)?)
        };
        let blocks = params
            .blocks
            .iter()
            .map(|b| {
                Ok(BlockWeights {
                    ln1_w: up(&b.ln1_w)?,
                    ln1_b: up(&b.ln1_b)?,
                    qkv_w: up(&b.qkv_w)?,
                    qkv_b: up(&b.qkv_b)?,
                    proj_w: up(&b.proj_w)?,
                    proj_b: up(&b.proj_b)?,
                    ln2_w: up(&b.ln2_w)?,
                    ln2_b: up(&b.ln2_b)?,
                    fc_w: up(&b.fc_w)?,
                    fc_b: up(&b.fc_b)?,
                    fc_proj_w: up(&b.fc_proj_w)?,
                    fc_proj_b: up(&b.fc_proj_b)?,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(Gpu {
            config,
            wte: up(&params.wte)?,
            wpe: up(&params.wpe)?,
            lnf_w: up(&params.lnf_w)?,
            lnf_b: up(&params.lnf_b)?,
            blocks,
            queue,
            stream,
            blas,
            kernels,
            acts: None,
            profile: RefCell::new(None),
        })
    }

    /// The device's name.
    pub fn device_name(&self) -> String {
        self.queue.device().name.clone()
    }

    /// Swaps the kernels' bundle (another mode), keeping the weights.
    pub fn set_kernels(&mut self, kernels: KernelBundle<Executable>) {
        self.kernels = kernels;
    }

    fn activations(&mut self, batch: usize, seq: usize) -> Result<Activations, Error> {
        if let Some(a) = self.acts.take()
            && a.batch == batch
            && a.seq == seq
        {
            return Ok(a);
        }
        let c = self.config.channels;
        let n = batch * seq;
        let att = batch * self.config.heads * seq * seq;
        let s = &self.stream;
        Ok(Activations {
            batch,
            seq,
            tokens: s.alloc_zeros(n)?,
            targets: s.alloc_zeros(n)?,
            x: s.alloc_zeros(n * c)?,
            mid: s.alloc_zeros(n * c)?,
            ln: s.alloc_zeros(n * c)?,
            mean: s.alloc_zeros(n)?,
            rstd: s.alloc_zeros(n)?,
            qkv: s.alloc_zeros(n * 3 * c)?,
            q: s.alloc_zeros(n * c)?,
            k: s.alloc_zeros(n * c)?,
            v: s.alloc_zeros(n * c)?,
            scores: s.alloc_zeros(att)?,
            att: s.alloc_zeros(att)?,
            heads_out: s.alloc_zeros(n * c)?,
            atty: s.alloc_zeros(n * c)?,
            proj: s.alloc_zeros(n * c)?,
            fc: s.alloc_zeros(n * 4 * c)?,
            gelu: s.alloc_zeros(n * 4 * c)?,
            logits: s.alloc_zeros(n * self.config.padded_vocab())?,
            losses: s.alloc_zeros(n)?,
        })
    }

    /// The mean loss of `inputs` against `targets` (`batch` rows).
    pub fn forward(
        &mut self,
        inputs: &[usize],
        targets: &[usize],
        batch: usize,
    ) -> Result<f64, Error> {
        let seq = inputs.len() / batch;
        if seq == 0
            || seq > self.config.max_seq
            || inputs.len() != batch * seq
            || targets.len() != inputs.len()
        {
            return Err(format!(
                "{} tokens do not make {batch} rows of 1 to {}",
                inputs.len(),
                self.config.max_seq
            )
            .into());
        }
        let ids = |v: &[usize]| -> Result<Vec<i32>, Error> {
            v.iter()
                .map(|&t| {
                    if t < self.config.vocab {
                        Ok(t as i32)
                    } else {
                        Err(format!(
                            "token {t} is outside the vocabulary of {}",
                            self.config.vocab
                        )
                        .into())
                    }
                })
                .collect()
        };
        let (tokens, wanted) = (ids(inputs)?, ids(targets)?);
        let mut a = self.activations(batch, seq)?;
        let result = self.forward_into(&mut a, &tokens, &wanted);
        self.acts = Some(a);
        result
    }

    fn forward_into(
        &self,
        a: &mut Activations,
        tokens: &[i32],
        targets: &[i32],
    ) -> Result<f64, Error> {
        let cfg = self.config;
        let (c, heads) = (cfg.channels, cfg.heads);
        let (batch, seq) = (a.batch, a.seq);
        let n = batch * seq;
        let (ni, si, bi) = (n as i32, seq as i32, batch as i32);
        self.stream.memcpy_htod(tokens, &mut a.tokens)?;
        self.stream.memcpy_htod(targets, &mut a.targets)?;
        self.launch(
            "encoder_forward",
            elementwise(n * c),
            &[
                Arg::slice_mut(&mut a.x),
                Arg::slice(&a.tokens),
                Arg::slice(&self.wte),
                Arg::slice(&self.wpe),
                Arg::value(ni),
                Arg::value(si),
            ],
        )?;
        for w in &self.blocks {
            self.layer_norm(
                &mut a.ln,
                &mut a.mean,
                &mut a.rstd,
                &a.x,
                &w.ln1_w,
                &w.ln1_b,
                n,
            )?;
            self.linear(&mut a.qkv, &a.ln, &w.qkv_w, Some(&w.qkv_b), n, c, 3 * c)?;
            self.launch(
                "attention_permute",
                elementwise(n * c),
                &[
                    Arg::slice_mut(&mut a.q),
                    Arg::slice_mut(&mut a.k),
                    Arg::slice_mut(&mut a.v),
                    Arg::slice(&a.qkv),
                    Arg::value(bi),
                    Arg::value(si),
                ],
            )?;
            let hs = (c / heads) as i32;
            let t = seq as i32;
            let batches = (batch * heads) as i32;
            // scores[t][t2] = q[t] · k[t2], each (batch, head) a matrix.
            self.per_head(
                gemm_config(CUBLAS_OP_T, CUBLAS_OP_N, t, t, hs, hs, hs, t),
                batches,
                [t * hs, t * hs, t * t],
                &a.k,
                &a.q,
                &mut a.scores,
            )?;
            self.launch(
                "softmax_causal",
                rowwise(batch * heads * seq),
                &[
                    Arg::slice_mut(&mut a.att),
                    Arg::slice(&a.scores),
                    Arg::value(batches * t),
                    Arg::value(si),
                ],
            )?;
            // heads_out[t] = Σ att[t][t2] · v[t2]
            self.per_head(
                gemm_config(CUBLAS_OP_N, CUBLAS_OP_N, hs, t, t, hs, t, hs),
                batches,
                [t * hs, t * t, t * hs],
                &a.v,
                &a.att,
                &mut a.heads_out,
            )?;
            self.launch(
                "attention_unpermute",
                elementwise(n * c),
                &[
                    Arg::slice_mut(&mut a.atty),
                    Arg::slice(&a.heads_out),
                    Arg::value(bi),
                    Arg::value(si),
                ],
            )?;
            self.linear(&mut a.proj, &a.atty, &w.proj_w, Some(&w.proj_b), n, c, c)?;
            self.residual(&mut a.mid, &a.x, &a.proj, n * c)?;
            self.layer_norm(
                &mut a.ln,
                &mut a.mean,
                &mut a.rstd,
                &a.mid,
                &w.ln2_w,
                &w.ln2_b,
                n,
            )?;
            self.linear(&mut a.fc, &a.ln, &w.fc_w, Some(&w.fc_b), n, c, 4 * c)?;
            self.launch(
                "gelu_forward",
                elementwise(n * 4 * c),
                &[
                    Arg::slice_mut(&mut a.gelu),
                    Arg::slice(&a.fc),
                    Arg::value((n * 4 * c) as i64),
                ],
            )?;
            self.linear(
                &mut a.proj,
                &a.gelu,
                &w.fc_proj_w,
                Some(&w.fc_proj_b),
                n,
                4 * c,
                c,
            )?;
            self.residual(&mut a.x, &a.mid, &a.proj, n * c)?;
        }
        self.layer_norm(
            &mut a.ln,
            &mut a.mean,
            &mut a.rstd,
            &a.x,
            &self.lnf_w,
            &self.lnf_b,
            n,
        )?;
        self.linear(
            &mut a.logits,
            &a.ln,
            &self.wte,
            None,
            n,
            c,
            cfg.padded_vocab(),
        )?;
        self.launch(
            "crossentropy_forward",
            rowwise(n),
            &[
                Arg::slice_mut(&mut a.losses),
                Arg::slice(&a.logits),
                Arg::slice(&a.targets),
                Arg::value(ni),
            ],
        )?;
        let losses = self.stream.clone_dtoh(&a.losses)?;
        Ok(losses.iter().map(|&l| f64::from(l)).sum::<f64>() / n as f64)
    }

    /// Waits for everything submitted.
    pub fn synchronize(&self) -> Result<(), Error> {
        Ok(self.stream.synchronize()?)
    }

    fn launch(
        &self,
        kernel: &'static str,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<(), Error> {
        self.timed(kernel, || {
            self.queue.submit(|h| {
                h.use_kernel_bundle(&self.kernels)?;
                h.launch(kernel, cfg, args)
            })?;
            Ok(())
        })
    }

    /// A forward pass with CUDA events around each launch: each kernel's
    /// (and the matmuls') total milliseconds and launch count, the largest
    /// first.
    pub fn profile_forward(
        &mut self,
        inputs: &[usize],
        targets: &[usize],
        batch: usize,
    ) -> Result<Vec<(&'static str, f64, usize)>, Error> {
        self.profile.replace(Some(Vec::new()));
        let result = self.forward(inputs, targets, batch);
        let log = self.profile.replace(None).unwrap_or_default();
        result?;
        let mut totals: Vec<(&'static str, f64, usize)> = Vec::new();
        for (name, start, end) in &log {
            let ms = f64::from(start.elapsed_ms(end)?);
            match totals.iter_mut().find(|t| t.0 == *name) {
                Some(t) => {
                    t.1 += ms;
                    t.2 += 1;
                }
                None => totals.push((name, ms, 1)),
            }
        }
        totals.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(totals)
    }

    /// Runs `work` between two timed events while a forward pass is
    /// profiled.
    fn timed(
        &self,
        name: &'static str,
        work: impl FnOnce() -> Result<(), Error>,
    ) -> Result<(), Error> {
        let mut profile = self.profile.borrow_mut();
        let Some(log) = profile.as_mut() else {
            drop(profile);
            return work();
        };
        let start = self.stream.record_event(Some(CU_EVENT_DEFAULT))?;
        work()?;
        let end = self.stream.record_event(Some(CU_EVENT_DEFAULT))?;
        log.push((name, start, end));
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
        self.launch(
            "layernorm_forward",
            rowwise(rows),
            &[
                Arg::slice_mut(out),
                Arg::slice_mut(mean),
                Arg::slice_mut(rstd),
                Arg::slice(inp),
                Arg::slice(w),
                Arg::slice(b),
                Arg::value(rows as i32),
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
            &[
                Arg::slice_mut(out),
                Arg::slice(a),
                Arg::slice(b),
                Arg::value(n as i64),
            ],
        )
    }

    /// cuBLAS's strided batched product, one (batch, head) a matrix:
    /// `c = op(a) · op(b)` (column-major) for each of `batches`, the
    /// matrices `strides` (a, b, c) apart — refused unless every matrix
    /// lies inside its slice.
    #[allow(clippy::too_many_arguments)]
    fn per_head(
        &self,
        gemm: GemmConfig<f32>,
        batches: i32,
        strides: [i32; 3],
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
    ) -> Result<(), Error> {
        let positive = |x: i32| usize::try_from(x).ok().filter(|&x| x > 0);
        let shape = [
            gemm.m, gemm.n, gemm.k, batches, gemm.lda, gemm.ldb, gemm.ldc,
        ]
        .map(positive)
        .into_iter()
        .chain(strides.map(positive))
        .collect::<Option<Vec<usize>>>();
        let Some(&[m, n, k, batches_u, ..]) = shape.as_deref() else {
            return Err(format!(
                "a per-head product of an empty or negative shape ({gemm:?}, {batches} batches)"
            )
            .into());
        };
        let stored = |op, rows, cols| {
            if op == CUBLAS_OP_N {
                (rows, cols)
            } else {
                (cols, rows)
            }
        };
        let needs = |(rows, cols): (usize, usize), ld: i32, stride: i32| {
            (batches_u - 1) * stride as usize + (cols - 1) * ld as usize + rows
        };
        let fits = needs(stored(gemm.transa, m, k), gemm.lda, strides[0]) <= a.len()
            && needs(stored(gemm.transb, k, n), gemm.ldb, strides[1]) <= b.len()
            && needs((m, n), gemm.ldc, strides[2]) <= c.len();
        if !fits {
            return Err(format!(
                "a per-head product does not fit its slices ({gemm:?}, {batches} batches)"
            )
            .into());
        }
        self.timed("matmul (cuBLAS, attention)", || {
            let cfg = StridedBatchedConfig {
                gemm,
                batch_size: batches,
                stride_a: strides[0].into(),
                stride_b: strides[1].into(),
                stride_c: strides[2].into(),
            };
            // SAFETY: every matrix of the batch lies inside its slice
            // (checked above), and the slices are of the queue's stream.
            unsafe { Ok(self.blas.gemm_strided_batched(cfg, a, b, c)?) }
        })
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
        if w.len() < outputs * inputs || inp.len() < rows * inputs || out.len() < rows * outputs {
            return Err(format!(
                "a {rows}×{inputs} by {inputs}×{outputs} product does not fit its slices"
            )
            .into());
        }
        let (m, n, k) = (outputs as i32, rows as i32, inputs as i32);
        // Row-major out is column-major outputs × rows: w (column-major
        // inputs × outputs) transposed, times inp (inputs × rows).
        self.timed("matmul (cuBLAS, linear)", || {
            let cfg = gemm_config(CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, k, k, m);
            // SAFETY: w holds outputs·inputs values, inp rows·inputs and
            // out rows·outputs (checked above), all of the queue's stream.
            unsafe { Ok(self.blas.gemm(cfg, w, inp, out)?) }
        })?;
        if let Some(bias) = bias {
            self.launch(
                "add_bias",
                elementwise(rows * outputs),
                &[
                    Arg::slice_mut(out),
                    Arg::slice(bias),
                    Arg::value(rows as i32),
                    Arg::value(outputs as i32),
                ],
            )?;
        }
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
fn gemm_config(
    transa: cudarc::cublas::sys::cublasOperation_t,
    transb: cudarc::cublas::sys::cublasOperation_t,
    m: i32,
    n: i32,
    k: i32,
    lda: i32,
    ldb: i32,
    ldc: i32,
) -> GemmConfig<f32> {
    GemmConfig {
        transa,
        transb,
        m,
        n,
        k,
        alpha: 1.0,
        lda,
        ldb,
        beta: 0.0,
        ldc,
    }
}

/// A thread an element.
fn elementwise(n: usize) -> LaunchConfig {
    LaunchConfig::new(((n as u32).div_ceil(256), 1, 1), (256, 1, 1))
}

/// A warp a row, eight rows a block.
fn rowwise(rows: usize) -> LaunchConfig {
    LaunchConfig::new(((rows as u32).div_ceil(8), 1, 1), (256, 1, 1))
}
