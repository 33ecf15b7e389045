//! The model on the GPU: the kernels of `kernels.cu` through a ptxspec
//! bundle compiled from source at run time (the model's fixed dimensions its
//! specialization constants), the matmuls through cuBLAS on the queue's
//! stream, every tensor a cudarc slice of the program's own — as a program
//! that already uses cudarc would write it. A training step is a forward
//! pass, a backward pass and an AdamW update (`forward.rs`, `backward.rs`);
//! `blas.rs` has the matmuls, `tensors.rs` the memory, `pass.rs` the
//! launches, run at once or recorded into a CUDA graph (`--graphs`: a
//! training step, or a request's forward pass, captured once per shape and
//! replayed).

mod backward;
mod blas;
mod forward;
mod pass;
mod tensors;

use std::cell::RefCell;
use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr};
use ptxspec::bundle::AdaptiveArguments;
use ptxspec::runtime::{Graph, LaunchConfig, Queue};
use ptxspec::{
    Executable, KernelBundle, SourceOptions, SpecId, SpecMode, kernel_bundle_from_source,
};

use crate::reference::{AdamW, Config, Params};
use pass::Pass;
use tensors::{Activations, Weights};

type Error = Box<dyn std::error::Error>;

const CHANNELS: SpecId<i32> = SpecId::new("channels");
const HEADS: SpecId<i32> = SpecId::new("heads");
const VOCAB: SpecId<i32> = SpecId::new("vocab");
const PADDED_VOCAB: SpecId<i32> = SpecId::new("padded_vocab");

/// How the kernels are built: what the compiler knows of the sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// What a plain CUDA program runs: the dimensions a by-value argument
    /// of every kernel that needs them (`-DGPT2_GENERIC`), no
    /// specialization constant used.
    Generic,
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
    /// Every build, the literal one for `batch` rows of `seq` tokens.
    pub fn all(batch: usize, seq: usize) -> [Build; 7] {
        [
            Build::Generic,
            Build::Emulated,
            Build::Native,
            Build::Lto,
            Build::Tiered,
            Build::Adaptive,
            Build::Literal { batch, seq },
        ]
    }

    /// This build with the literal one's shape set to `batch` × `seq`.
    pub fn for_shape(self, batch: usize, seq: usize) -> Build {
        match self {
            Build::Literal { .. } => Build::Literal { batch, seq },
            other => other,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Build::Generic => "generic",
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
/// needs no GPU. `toolkit_worker`: the ptxspec binary whose worker
/// processes make the build's links (`--toolkit-worker`; see
/// `BuildOptions::with_toolkit_worker`), where one was named.
pub fn kernels(
    config: &Config,
    how: Build,
    toolkit_worker: Option<&std::path::Path>,
) -> Result<KernelBundle<Executable>, Error> {
    let mut options = SourceOptions::default();
    if how == Build::Generic {
        options.options.push("-DGPT2_GENERIC".to_string());
    }
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
        kernel_bundle_from_source(&[("gpt2.cu", include_str!("../kernels.cu"))], &options)?;
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
        // The generic and literal builds link as the LTO build does, so
        // that the three differ only in what the compiler knows.
        Build::Generic | Build::Lto | Build::Literal { .. } => input.with_mode(SpecMode::Lto),
        Build::Tiered => input.with_mode(SpecMode::Tiered),
        Build::Adaptive => input
            .with_mode(SpecMode::Lto)
            .with_adaptive_arguments(AdaptiveArguments::all()),
    };
    let options = ptxspec::BuildOptions::default()
        .with_toolkit_worker(toolkit_worker.map(std::path::Path::to_path_buf));
    Ok(ptxspec::build_with_options(&input, &options)?)
}

/// Each kernel's (and the matmuls') milliseconds and launches in one
/// profiled run, the largest first.
pub type KernelTimes = Vec<(&'static str, f64, usize)>;

/// Each launch of a profiled run: its name and the events around it.
type LaunchLog = Vec<(&'static str, CudaEvent, CudaEvent)>;

/// What training adds: the gradients and AdamW's moments and step count.
struct Training {
    grads: Weights,
    m: Weights,
    v: Weights,
    /// AdamW's bias corrections of the step under way (read by the update
    /// kernel from memory, so that a graph's replay takes each step's).
    corrections: CudaSlice<f32>,
    step: i32,
}

/// The model's dimensions as the generic build's kernels take them.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Dims {
    channels: i32,
    heads: i32,
    vocab: i32,
    padded_vocab: i32,
}

/// What launches the model's work: the queue, its stream, cuBLAS and the
/// kernels.
pub struct Launcher {
    queue: Queue,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    /// cuBLAS's workspace, after `blas` (dropped after its handle): see
    /// [`BLAS_WORKSPACE`].
    _blas_workspace: CudaSlice<u8>,
    kernels: KernelBundle<Executable>,
    /// Set for the generic build: its kernels take the dimensions.
    generic: Option<Dims>,
    /// While a run is profiled: each launch's name and the events around
    /// it.
    profile: RefCell<Option<LaunchLog>>,
}

/// What a graph replays: a training step, or a forward pass ending in the
/// losses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    Step,
    Forward,
}

/// A captured graph and the shape it was captured for.
struct StepGraph {
    work: Work,
    batch: usize,
    seq: usize,
    graph: Graph<'static>,
}

/// The model on one GPU.
pub struct Gpu {
    // First: dropped before the memory its graphs replay (fields drop in
    // order).
    graphs: Vec<StepGraph>,
    use_graphs: bool,
    config: Config,
    run: Launcher,
    weights: Weights,
    training: Option<Training>,
    acts: Option<Activations>,
    /// Where forward passes are timed on the GPU too: the last one's
    /// milliseconds, from its tokens' upload to its losses (`NaN` before
    /// the first).
    gpu_time: Option<f64>,
    /// When the last forward pass's work was all submitted (before its
    /// losses were waited for).
    submitted: Option<std::time::Instant>,
}

/// The bytes of cuBLAS's own workspace (NVIDIA's advice for Hopper): with
/// none set, cuBLAS allocates one inside a capture, and a graph holding
/// such memory nodes may not be instantiated again while an earlier
/// instantiation lives — ptxspec's instantiation with a graph's settled
/// code would then wait for the replay under way.
const BLAS_WORKSPACE: usize = 32 << 20;

/// How long a new bundle's preparation waits for the tier profile's
/// variants (fetched from the fleet or the disk cache, or linked).
const PREPARE_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

impl Gpu {
    /// Uploads `params` (as `f32`) to device 0, to run with `kernels`
    /// (built as `how`).
    pub fn new(
        config: Config,
        params: &Params,
        kernels: KernelBundle<Executable>,
        how: Build,
    ) -> Result<Self, Error> {
        let queue = Queue::new(0)?;
        // SAFETY: this program begins no capture of the queue's stream but
        // through the queue (`Queue::begin_capture`), and makes no other
        // queue over it; cuBLAS and the copies only order their work with
        // the queue's.
        let stream = unsafe { queue.cuda_stream() }.clone();
        // cudarc's event tracking makes a slice's use wait for an event of
        // its last write; inside a capture, a wait for an event recorded
        // before it invalidates the capture. The model's slices, all made
        // after this, live on the queue's one stream, where the stream's
        // order is all the order they need.
        // SAFETY: every slice of the model is made on the queue's stream
        // and used there alone (cuBLAS included); ptxspec orders its own
        // memory itself.
        unsafe { stream.context().disable_event_tracking() };
        let blas = CudaBlas::new(stream.clone())?;
        let blas_workspace = stream.alloc_zeros::<u8>(BLAS_WORKSPACE)?;
        {
            let (address, _sync) = blas_workspace.device_ptr(&stream);
            // SAFETY: the handle is live and `blas_workspace` is device
            // memory of its stream's context, of the size given, which the
            // launcher keeps until after the handle (field order) and every
            // graph that replays cuBLAS's kernels (`Gpu::graphs` drop
            // first).
            unsafe {
                cudarc::cublas::sys::cublasSetWorkspace_v2(
                    *blas.handle(),
                    address as *mut std::ffi::c_void,
                    BLAS_WORKSPACE,
                )
            }
            .result()?;
        }
        let weights = Weights::upload(&stream, params)?;
        // Every kernel's code loaded now, and the tier profile's variants
        // with it: a module load during a step waits for the GPU.
        queue.prepare(&kernels, PREPARE_WITHIN)?;
        Ok(Gpu {
            graphs: Vec::new(),
            use_graphs: false,
            run: Launcher {
                queue,
                stream,
                blas,
                _blas_workspace: blas_workspace,
                kernels,
                generic: generic_dims(&config, how),
                profile: RefCell::new(None),
            },
            config,
            weights,
            training: None,
            acts: None,
            gpu_time: None,
            submitted: None,
        })
    }

    /// The device's name.
    pub fn device_name(&self) -> String {
        self.run.queue.device().name.clone()
    }

    /// Whether training steps and forward passes run as CUDA graphs, each
    /// captured once per shape and replayed.
    pub fn use_graphs(&mut self, on: bool) {
        self.use_graphs = on;
        if !on {
            self.graphs.clear();
        }
    }

    /// Times each forward pass on the GPU too (CUDA events around it, from
    /// its tokens' upload to its losses), for [`last_gpu_ms`](Self::last_gpu_ms).
    pub fn time_forwards_on_gpu(&mut self) {
        self.gpu_time = Some(f64::NAN);
    }

    /// The last forward pass's time on the GPU, in milliseconds, where
    /// forwards are timed there.
    pub fn last_gpu_ms(&self) -> Option<f64> {
        self.gpu_time
    }

    /// When the last forward pass's work was all submitted, before its
    /// losses were waited for: a request's host time up to here is what
    /// launching it took.
    pub fn last_submitted(&self) -> Option<std::time::Instant> {
        self.submitted
    }

    /// How many nodes of the captured graphs still wait for a variant of
    /// adaptive arguments (its link, or a trial).
    /// The model's queue's launches by path so far (the short path: the
    /// plan ready, nothing else to do).
    pub fn launch_paths(&self) -> ptxspec::runtime::LaunchPaths {
        self.run.queue.launch_paths()
    }

    pub fn graph_nodes_waiting(&self) -> usize {
        self.graphs
            .iter()
            .map(|g| g.graph.nodes().filter(|n| n.awaits_variant()).count())
            .sum()
    }

    /// Swaps the kernels' bundle for another of the same build's that
    /// serves other shapes (the literal build's bundle for another length),
    /// giving the last back. A graph keeps the code it was captured with:
    /// the graph of a shape replays the bundle that served that shape. A
    /// bundle not [prepared](Self::prepare) loads its code as it launches.
    pub fn swap_kernels(&mut self, kernels: KernelBundle<Executable>) -> KernelBundle<Executable> {
        std::mem::replace(&mut self.run.kernels, kernels)
    }

    /// Loads `kernels`' code into the model's queue now, for a later
    /// [`swap_kernels`](Self::swap_kernels): what it took.
    pub fn prepare(
        &self,
        kernels: &KernelBundle<Executable>,
    ) -> Result<std::time::Duration, Error> {
        let started = std::time::Instant::now();
        self.run.queue.prepare(kernels, PREPARE_WITHIN)?;
        Ok(started.elapsed())
    }

    /// Allocates the activations for `batch` rows of `seq` tokens now (a
    /// server's largest request), so that smaller ones use them.
    pub fn reserve(&mut self, batch: usize, seq: usize) -> Result<(), Error> {
        let a = self.activations(batch, seq)?;
        self.acts = Some(a);
        Ok(())
    }

    /// Activations that hold `batch` rows of `seq` tokens (the ones there,
    /// or new ones: then every graph goes first, as it replays the old).
    fn activations(&mut self, batch: usize, seq: usize) -> Result<Activations, Error> {
        match self.acts.take() {
            Some(a) if a.holds(batch, seq) => Ok(a),
            old => {
                self.graphs.clear();
                drop(old);
                Activations::new(&self.run.stream, &self.config, batch, seq)
            }
        }
    }

    /// The optimizer's state, made on first use.
    fn training(&mut self) -> Result<Training, Error> {
        match self.training.take() {
            Some(t) => Ok(t),
            None => Ok(Training {
                grads: self.weights.zeros_like(&self.run.stream)?,
                m: self.weights.zeros_like(&self.run.stream)?,
                v: self.weights.zeros_like(&self.run.stream)?,
                corrections: self.run.stream.alloc_zeros(2)?,
                step: 0,
            }),
        }
    }

    /// Checks a batch of token IDs against the model, as `i32`.
    fn token_ids(
        &self,
        inputs: &[usize],
        targets: &[usize],
        batch: usize,
    ) -> Result<(Vec<i32>, Vec<i32>, usize), Error> {
        let seq = inputs.len().checked_div(batch).unwrap_or(0);
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
        Ok((ids(inputs)?, ids(targets)?, seq))
    }

    /// Runs `work` with CUDA events around each launch (as launches run
    /// at once: no graph): each kernel's (and the matmuls') total
    /// milliseconds and launch count, the largest first.
    pub fn profiled<R>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<R, Error>,
    ) -> Result<(R, KernelTimes), Error> {
        let graphs = std::mem::replace(&mut self.use_graphs, false);
        self.run.profile.replace(Some(Vec::new()));
        let result = work(self);
        let log = self.run.profile.replace(None).unwrap_or_default();
        self.use_graphs = graphs;
        let result = result?;
        let mut totals: KernelTimes = Vec::new();
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
        Ok((result, totals))
    }

    /// Runs `record` as one pass: at once, or — with graphs on — replays
    /// the graph captured for `work` at this shape, capturing it first
    /// where there is none.
    fn run_pass(
        &mut self,
        work: Work,
        batch: usize,
        seq: usize,
        a: &mut Activations,
        t: &mut Option<Training>,
        record: impl Fn(
            &Pass<'_>,
            &mut Weights,
            &mut Activations,
            &mut Option<Training>,
        ) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let Gpu {
            graphs,
            use_graphs,
            config,
            run,
            weights,
            ..
        } = self;
        if !*use_graphs {
            let pass = Pass {
                config: *config,
                run,
                capture: None,
            };
            return record(&pass, weights, a, t);
        }
        let at = graphs
            .iter()
            .position(|g| g.work == work && g.batch == batch && g.seq == seq);
        let at = match at {
            Some(at) => at,
            None => {
                let pass = Pass {
                    config: *config,
                    run,
                    capture: Some(RefCell::new(run.queue.begin_capture()?)),
                };
                let recorded = record(&pass, weights, a, t);
                let capturing = pass.capture.map(RefCell::into_inner).ok_or("no capture")?;
                recorded?;
                // SAFETY: the work ptxspec did not record is cuBLAS's, on
                // the model's own memory, which stays allocated while the
                // graph exists: `graphs` is dropped before the memory
                // (first among the model's fields, and before any
                // reallocation of the activations).
                let graph = unsafe { capturing.end_unchecked()? };
                graphs.push(StepGraph {
                    work,
                    batch,
                    seq,
                    graph,
                });
                graphs.len() - 1
            }
        };
        Ok(graphs[at].graph.launch()?)
    }
}

impl Launcher {
    /// Runs `work` between two timed events while a run is profiled.
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
}

/// The generic build's dimensions argument (none for the others).
fn generic_dims(config: &Config, how: Build) -> Option<Dims> {
    let dim = |x: usize| i32::try_from(x).unwrap_or(i32::MAX);
    (how == Build::Generic).then(|| Dims {
        channels: dim(config.channels),
        heads: dim(config.heads),
        vocab: dim(config.vocab),
        padded_vocab: dim(config.padded_vocab()),
    })
}

/// A thread an element.
fn elementwise(n: usize) -> LaunchConfig {
    LaunchConfig::new(((n as u32).div_ceil(256), 1, 1), (256, 1, 1))
}

/// A warp a row, eight rows a block.
fn rowwise(rows: usize) -> LaunchConfig {
    LaunchConfig::new(((rows as u32).div_ceil(8), 1, 1), (256, 1, 1))
}
