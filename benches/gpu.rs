//! The GPU benchmark, side by side in one run on the same data:
//!
//! * kernel time of the convolution and the matmul (block 8/16/32) with the
//!   constant as a literal (the physical limit), ptxspec native (PTX
//!   immediates), ptxspec LTO (nvJitLink with the values), ptxspec emulated
//!   with the values in the parameter space and in a global buffer, and a
//!   plain by-value kernel parameter (what a CUDA user writes by hand), and
//!   that by-value kernel with its arguments fixed by ptxspec
//!   (`ptxspec::arguments`, through LTO where it serves and through PTX)
//!   (`--kernels-only` runs this part alone);
//! * launch overhead: plain, and ptxspec with unchanged values and with a
//!   value changed before every launch, for both buffer placements
//!   (`--launch-overhead` runs this part alone; with `GPU_BENCH_PROFILE=DIR`
//!   it samples where each way's host time goes instead, one file of
//!   addresses per way — `gpu/counters.rs` says how to read them — and with
//!   `GPU_BENCH_COUNTERS=1` it counts the processor's events, where the
//!   machine has counters);
//! * the cost of a new value set: ptxspec native (rewrite + driver JIT),
//!   ptxspec LTO cold (definitions + nvJitLink, then load and launch), LTO
//!   from the memory cache and from the disk cache in a new process, against
//!   NVRTC compiling the kernel source with the value as a literal (Jitify's
//!   way), each stage timed with the same scope on both sides
//!   (`--new-value` runs this part alone);
//! * a parameter sweep (`gpu/sweep.rs`): K value sets × L launches, total
//!   wall time and time to a new set's first launch, emulated / LTO /
//!   tiered / NVRTC (`--sweep-only [--ways lto,tiered]`), and the host time
//!   of a new value set's first launch, emulated against tiered
//!   (`--first-launch`);
//! * CUDA graphs (`gpu/graphs.rs`): replay, value change and tier swap per
//!   kernel node against a plain cudarc graph, and kernel time after a swap
//!   against the literal's (`--graphs`);
//! * transformer-shaped kernels (`gpu/transformer.rs`) with GPT-2 small's
//!   sizes: generic, fixed through LTO and PTX, literal, and through an
//!   adapting bundle once its guard decided (`--transformer`).
//!
//! NVIDIA's compute cache is switched off (`CUDA_CACHE_DISABLE=1`), so that
//! cold compiles and links are cold; `PTXSPEC_BENCH_NV_CACHE=1` keeps it.
//!
//! Prints tables and writes JSON lines to `$PTXSPEC_BENCH_OUT` (default
//! `target/gpu-bench.jsonl`): a line of where and how, then the kernel-time
//! rows and the other measures' figures (launch overhead, graphs, the cost
//! of a new value set, sweeps, a tiered first launch; [`Figures`]) — for
//! the parts run alone too;
//! copied to `benches/results/NAME-N.jsonl` (N: the process), they
//! make BENCHMARKS.md's current tables and plots (`python3
//! benches/report.py`). `cargo bench --bench gpu` (with no GPU it
//! says so and exits).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaFunction, CudaModule};
use ptxspec::image::{Delivery, Image};
use ptxspec::runtime::{self, Arg, DeviceBuffer, LaunchConfig, Queue};
use ptxspec::{Executable, KernelBundle, KernelId, SpecId, SpecMode, build, get_kernel_bundle_for};
use ptxspec_core::postlink::{BufferPlacement, Options};

ptxspec_kernels::register_example_kernels!();

#[path = "../tests/support/baselines.rs"]
mod baselines;
#[path = "../tests/support/matmul.rs"]
mod matmul;
use baselines::PTX as BASELINES;

/// The figures of the measures besides kernel time (launch overhead,
/// graphs), for the JSON lines `benches/report.py` makes tables of: per
/// row of a measure, named figures (µs; counts).
#[derive(Default)]
pub struct Figures(Vec<String>);

impl Figures {
    /// Row `row` of measure `measure`: each figure by name. A figure that
    /// is not a finite number is left out (JSON has none).
    pub fn add(&mut self, measure: &str, row: &str, figures: &[(&str, f64)]) {
        let mut line = format!("{{\"measure\":{measure:?},\"row\":{row:?}");
        for (name, value) in figures.iter().filter(|(_, v)| v.is_finite()) {
            let _ = write!(line, ",{name:?}:{value:.4}");
        }
        line.push('}');
        self.0.push(line);
    }
}

/// Writes the JSON lines of a run to `$PTXSPEC_BENCH_OUT` (default
/// `target/gpu-bench.jsonl`): a first line of where and how — what this
/// program cannot know (the driver, the date, the commit) from
/// `PTXSPEC_BENCH_META_*` where set, else "?" — then `rows`.
fn write_results(q: &Queue, args: &[String], rows: &[String]) -> R<()> {
    let out_path =
        std::env::var("PTXSPEC_BENCH_OUT").unwrap_or_else(|_| "target/gpu-bench.jsonl".into());
    let meta =
        |name: &str| std::env::var(format!("PTXSPEC_BENCH_META_{name}")).unwrap_or("?".into());
    let mut jsonl = format!(
        "{{\"meta\":{{\"device\":{:?},\"driver\":{:?},\"date\":{:?},\"commit\":{:?},\"command\":{:?}}}}}\n",
        q.device().name,
        meta("DRIVER"),
        meta("DATE"),
        meta("COMMIT"),
        args.join(" ")
    );
    for r in rows {
        jsonl.push_str(r);
        jsonl.push('\n');
    }
    if let Some(dir) = std::path::Path::new(&out_path).parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out_path, jsonl)?;
    println!("wrote {out_path}");
    Ok(())
}
const MATMUL_SOURCE: &str = include_str!("../kernels/matmul.cu");
const COEFF: SpecId<[[f32; 3]; 3]> = SpecId::new("coeff_id");
const BLOCK: SpecId<i32> = SpecId::new("block_size_id");
const TINY: SpecId<i32> = SpecId::new("tiny_id");
const SOBEL: [[f32; 3]; 3] = [[1.0, 0.0, -1.0], [2.0, 0.0, -2.0], [1.0, 0.0, -1.0]];
/// A Gaussian-like blur whose coefficients a literal cannot fold away
/// (no zeros, no ±1s); `conv3x3_literal_blur` in the baselines has them.
const BLUR: [[f32; 3]; 3] = [
    [0.0625, 0.125, 0.0625],
    [0.125, 0.25, 0.125],
    [0.0625, 0.125, 0.0625],
];
/// Timed repetitions (the median is reported) and launches per repetition.
const REPS: usize = 7;
const LAUNCHES: usize = 20;

type R<T> = Result<T, Box<dyn std::error::Error>>;

/// Pointers to each argument value, as `cuLaunchKernel` takes them.
macro_rules! params {
    ($($v:ident),*) => {
        &mut [$(&mut $v as *mut _ as *mut std::ffi::c_void),*]
    };
}

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

/// Heap allocations per call of `f`, over 1 000 calls (after a warm-up).
fn allocations_per_call(f: &mut dyn FnMut(i32) -> R<()>) -> R<f64> {
    for i in 0..100 {
        f(i)?;
    }
    let before = counting_alloc::allocations();
    for i in 0..1_000 {
        f(i)?;
    }
    let after = counting_alloc::allocations();
    Ok((after - before) as f64 / 1_000.0)
}

#[cfg(target_os = "linux")]
#[path = "gpu/counters.rs"]
mod counters;
#[path = "gpu/graphs.rs"]
mod graphs;
#[path = "gpu/sweep.rs"]
mod sweep;
#[path = "gpu/transformer.rs"]
mod transformer;

/// Median milliseconds per launch of `launch`, timed with CUDA events.
fn time_ms(q: &Queue, mut launch: impl FnMut() -> R<()>) -> R<f64> {
    for _ in 0..3 {
        launch()?;
    }
    q.wait()?;
    let mut samples = Vec::with_capacity(REPS);
    for _ in 0..REPS {
        let start = q.record_event()?;
        for _ in 0..LAUNCHES {
            launch()?;
        }
        let end = q.record_event()?;
        end.synchronize()?;
        samples.push(start.elapsed_ms(&end)? as f64 / LAUNCHES as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[REPS / 2])
}

/// A raw launch of a baseline kernel: `args` are pointers to each value.
fn raw_launch(
    q: &Queue,
    f: &CudaFunction,
    cfg: LaunchConfig,
    args: &mut [*mut std::ffi::c_void],
) -> R<()> {
    raw_launch_of(q, f.cu_function(), cfg, args)
}

/// [`raw_launch`] of a driver function handle (of a module loaded in the
/// queue's context).
fn raw_launch_of(
    q: &Queue,
    f: cudarc::driver::sys::CUfunction,
    cfg: LaunchConfig,
    args: &mut [*mut std::ffi::c_void],
) -> R<()> {
    q.context().bind_to_thread()?;
    // SAFETY: `f` is a function of a module loaded in the queue's context,
    // which is bound; the callers pass one pointer per parameter of the
    // baseline kernel, each to a live value of that parameter's type (their
    // argument lists follow the kernels' declarations in baselines.cu), and
    // the launch copies the values before it returns. The bench begins no
    // capture of the queue's stream but its baselines' own.
    unsafe {
        cudarc::driver::result::launch_kernel(
            f,
            cfg.grid,
            cfg.block,
            cfg.shared_mem_bytes,
            q.cuda_stream().cu_stream(),
            args,
        )?;
    }
    Ok(())
}

/// A convolution problem on the GPU: an `h` × `w` image of a fixed
/// pattern, its output buffer, the launch shape, and the check of the
/// output at the image's centre against the CPU's sum.
struct ConvProblem {
    img: Vec<f32>,
    din: DeviceBuffer<f32>,
    dout: DeviceBuffer<f32>,
    cfg: LaunchConfig,
    h: usize,
    w: usize,
}

impl ConvProblem {
    fn new(q: &Queue, h: usize, w: usize) -> R<ConvProblem> {
        let img: Vec<f32> = (0..h * w)
            .map(|i| ((i * 7919) % 1013) as f32 / 1013.0)
            .collect();
        Ok(ConvProblem {
            din: q.upload(&img)?,
            dout: q.alloc_zeros(h * w)?,
            cfg: LaunchConfig::new(((w / 32) as u32, (h / 8) as u32, 1), (32, 8, 1)),
            img,
            h,
            w,
        })
    }

    /// The `conv3x3` kernel's arguments: input, output, height, width.
    fn args(&self) -> [Arg<'_>; 4] {
        [
            Arg::buffer(&self.din),
            Arg::buffer(&self.dout),
            Arg::value(self.h as i32),
            Arg::value(self.w as i32),
        ]
    }

    /// The output at the centre, with `coeff`, against the CPU's.
    fn check(&self, q: &Queue, coeff: [[f32; 3]; 3], what: &str) -> R<()> {
        let got = q.download(&self.dout)?;
        let (y, x, w) = (self.h / 2, self.w / 2, self.w);
        let mut want = 0f32;
        for (i, row) in coeff.iter().enumerate() {
            for (j, c) in row.iter().enumerate() {
                want += c * self.img[(y + i - 1) * w + x + j - 1];
            }
        }
        let g = got[y * w + x];
        if (g - want).abs() > 1e-4 {
            return Err(format!("{what}: got {g}, want {want}").into());
        }
        Ok(())
    }
}

/// A matmul problem on the GPU: `n` × `n` matrices A and B of fixed
/// patterns, the output C, and the check of C's first element against the
/// CPU's.
struct MatmulProblem {
    n: usize,
    da: DeviceBuffer<f32>,
    db: DeviceBuffer<f32>,
    dc: DeviceBuffer<f32>,
    want00: f32,
}

impl MatmulProblem {
    fn new(q: &Queue, n: usize) -> R<MatmulProblem> {
        let (a, b) = ptxspec_kernels::reference::matmul_inputs(n);
        Ok(MatmulProblem {
            n,
            da: q.upload(&a)?,
            db: q.upload(&b)?,
            dc: q.alloc_zeros(n * n)?,
            want00: (0..n).map(|k| a[k] * b[k * n]).sum(),
        })
    }

    /// A, B and C's addresses and `n`, as a raw launch passes them.
    fn raw_args(&self) -> (u64, u64, u64, i32) {
        (ptr(&self.da), ptr(&self.db), ptr(&self.dc), self.n as i32)
    }

    /// One launch of `matmul_param` through `exe` on the first `m` × `m`
    /// elements of A, B and C taken as `m` × `m` matrices, in blocks of
    /// `bs` × `bs`.
    fn launch_param(&self, q: &Queue, exe: &KernelBundle<Executable>, m: usize, bs: u32) -> R<()> {
        q.submit(|h| {
            h.use_kernel_bundle(exe)?;
            h.launch(
                "matmul_param",
                matmul::config(m, bs),
                &[
                    Arg::buffer(&self.da),
                    Arg::buffer(&self.db),
                    Arg::buffer(&self.dc),
                    Arg::value(m as i32),
                    Arg::value(bs as i32),
                ],
            )
        })?;
        Ok(())
    }

    /// C's first element against the CPU's.
    fn check(&self, q: &Queue, what: &str) -> R<()> {
        let got = q.download(&self.dc)?[0];
        let want = self.want00;
        if (got - want).abs() > 1e-2 * want.abs().max(1.0) {
            return Err(format!("matmul {what}: c[0][0] = {got}, want {want}").into());
        }
        Ok(())
    }
}

fn ptr<T>(b: &DeviceBuffer<T>) -> u64 {
    // The address stays valid while `b` lives; the baselines run on the
    // buffer's own queue, whose stream orders all uses.
    b.device_address()
}

struct Row {
    kernel: String,
    variant: String,
    ms: f64,
}

/// The registered image of `kernel` post-linked again from its committed
/// PTX with the buffer in global memory (the registered one has it in the
/// parameter space).
fn global_buffer_image(name: &str, ptx: &str) -> R<Image> {
    let opts = Options {
        buffer: BufferPlacement::Global,
        ..Default::default()
    };
    let img =
        ptxspec_core::postlink::post_link(vec![(format!("{name}.ptx"), ptx.to_string())], &opts)?
            .remove(0);
    Ok(Image::new(img.stem, img.ptx, &img.props.to_text())?)
}

/// The variants every kernel is measured in: label, bundle.
fn variants(
    kernel: &str,
    global: Image,
    set: impl Fn(&mut KernelBundle<ptxspec::Input>) -> R<()>,
) -> R<Vec<(&'static str, KernelBundle<Executable>)>> {
    let mut out = Vec::new();
    let registered = get_kernel_bundle_for(&[KernelId::new(kernel)])?;
    for (label, mode) in [
        ("ptxspec native", SpecMode::Native),
        ("ptxspec lto", SpecMode::Lto),
        ("ptxspec emulated, param space", SpecMode::Emulated),
    ] {
        let mut b = registered.clone().with_mode(mode);
        set(&mut b)?;
        out.push((label, build(&b)?));
    }
    let mut g = KernelBundle::from_images(vec![global]).with_mode(SpecMode::Emulated);
    set(&mut g)?;
    let exe = build(&g)?;
    assert_eq!(
        exe.built_image(&KernelId::new(kernel))?.delivery(),
        Delivery::GlobalBuffer
    );
    out.push(("ptxspec emulated, global buffer", exe));
    Ok(out)
}

fn main() -> R<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return Ok(());
    }
    if let Some(i) = args.iter().position(|a| a == "--disk-hit") {
        return disk_hit(args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or(3));
    }
    if !runtime::driver_available() {
        println!("gpu bench: no GPU found (no CUDA driver on this machine); nothing measured");
        return Ok(());
    }
    // NVIDIA's compute cache (~/.nv/ComputeCache) keeps what nvJitLink, NVRTC
    // and the driver's JIT compiled, across processes: with it, a value set
    // linked by an earlier run on this machine links in 2 ms instead of 60.
    // "Cold" here means cold: off, unless PTXSPEC_BENCH_NV_CACHE=1 asks to
    // measure with it.
    if std::env::var_os("PTXSPEC_BENCH_NV_CACHE").is_none() {
        // SAFETY: set before any other thread exists and before any CUDA
        // library is loaded.
        unsafe { std::env::set_var("CUDA_CACHE_DISABLE", "1") };
    }
    // A cache folder of this run's own, so that "cold" is cold.
    let cache = std::env::temp_dir().join(format!("ptxspec-bench-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    // SAFETY: set before any other thread exists.
    unsafe { std::env::set_var("PTXSPEC_CACHE_DIR", &cache) };
    let q = Queue::new(0)?;
    if args.iter().any(|a| a == "--link-times") {
        return sweep::link_times(&q);
    }
    if args.iter().any(|a| a == "--first-launch") {
        let mut figures = Figures::default();
        sweep::first_launch(&q, &mut figures)?;
        return write_results(&q, &args, &figures.0);
    }
    if args.iter().any(|a| a == "--new-value") {
        let (mut notes, mut figures) = (String::new(), Figures::default());
        new_value_costs(&q, &cache, &mut notes, &mut figures)?;
        println!("{notes}");
        return write_results(&q, &args, &figures.0);
    }
    if args.iter().any(|a| a == "--launch-overhead") {
        let module = q
            .context()
            .load_module(cudarc::nvrtc::Ptx::from_src(BASELINES))?;
        let (mut notes, mut figures) = (String::new(), Figures::default());
        launch_overhead(&q, &module, &mut notes, &mut figures)?;
        println!("{notes}");
        return write_results(&q, &args, &figures.0);
    }
    if args.iter().any(|a| a == "--graphs") {
        let module = q
            .context()
            .load_module(cudarc::nvrtc::Ptx::from_src(BASELINES))?;
        let (mut notes, mut figures) = (String::new(), Figures::default());
        graphs::graphs(&q, &module, &mut notes, &mut figures)?;
        println!("{notes}");
        return write_results(&q, &args, &figures.0);
    }
    if args.iter().any(|a| a == "--adaptive") {
        let module = q
            .context()
            .load_module(cudarc::nvrtc::Ptx::from_src(BASELINES))?;
        let mut notes = String::new();
        adaptive_arguments(&q, &module, &mut notes)?;
        println!("{notes}");
        return Ok(());
    }
    if args.iter().any(|a| a == "--transformer") {
        let (mut notes, mut rows, mut figures) = (String::new(), Vec::new(), Figures::default());
        transformer::transformer(&q, &mut notes, &mut rows, &mut figures)?;
        println!("{notes}");
        rows.extend(figures.0);
        return write_results(&q, &args, &rows);
    }
    if args.iter().any(|a| a == "--sweep-only") {
        let (mut notes, mut figures) = (String::new(), Figures::default());
        sweep::parameter_sweep(&q, &mut notes, &mut figures)?;
        println!("{notes}");
        return write_results(&q, &args, &figures.0);
    }
    let module: Arc<CudaModule> = q
        .context()
        .load_module(cudarc::nvrtc::Ptx::from_src(BASELINES))?;
    let mut rows: Vec<Row> = Vec::new();
    let mut notes = String::new();
    println!(
        "device: {} (sm_{}{})",
        q.device().name,
        q.device().compute_capability.0,
        q.device().compute_capability.1
    );

    // 3x3 convolution, 8192^2 floats: Sobel (zeros and ±1s, which a literal
    // lets NVVM fold away) and a blur (nothing to fold).
    conv(
        &q,
        &module,
        &mut rows,
        "conv3x3 8192²",
        SOBEL,
        "conv3x3_literal",
    )?;
    conv(
        &q,
        &module,
        &mut rows,
        "conv3x3 8192², blur",
        BLUR,
        "conv3x3_literal_blur",
    )?;

    // Blocked matmul, N = 4096.
    let mm = MatmulProblem::new(&q, 4096)?;
    let (n, (pa, pb, pc, ni)) = (mm.n, mm.raw_args());
    let (da, db, dc) = (&mm.da, &mm.db, &mm.dc);
    let matmul_global = global_buffer_image("matmul", include_str!("../kernels/ptx/matmul.ptx"))?;
    for bs in [8u32, 16, 32] {
        let label = format!("matmul 4096, block {bs}");
        let cfg = matmul::config(n, bs);
        let lit = module.load_function(&format!("matmul_literal_{bs}"))?;
        let param = module.load_function("matmul_param")?;
        let ms = time_ms(&q, || {
            let (mut x, mut y, mut z, mut m) = (pa, pb, pc, ni);
            raw_launch(&q, &lit, cfg, params!(x, y, z, m))
        })?;
        mm.check(&q, "literal")?;
        rows.push(Row {
            kernel: label.clone(),
            variant: "literal".into(),
            ms,
        });
        let set = |b: &mut KernelBundle<ptxspec::Input>| {
            Ok(b.set_specialization_constant(&BLOCK, bs as i32)?)
        };
        for (variant, exe) in variants("matmul", matmul_global.clone(), set)? {
            let ms = time_ms(&q, || {
                q.submit(|h| {
                    h.use_kernel_bundle(&exe)?;
                    h.launch(
                        "matmul",
                        cfg,
                        &[
                            Arg::buffer(da),
                            Arg::buffer(db),
                            Arg::buffer(dc),
                            Arg::value(ni),
                        ],
                    )
                })?;
                Ok(())
            })?;
            mm.check(&q, variant)?;
            rows.push(Row {
                kernel: label.clone(),
                variant: variant.into(),
                ms,
            });
        }
        let ms = time_ms(&q, || {
            let (mut x, mut y, mut z, mut m, mut s) = (pa, pb, pc, ni, bs as i32);
            raw_launch(&q, &param, cfg, params!(x, y, z, m, s))
        })?;
        mm.check(&q, "by-value")?;
        rows.push(Row {
            kernel: label.clone(),
            variant: "by-value parameter".into(),
            ms,
        });
        let bs_text = bs.to_string();
        for (variant, fixed) in fixed_arguments(&q, "matmul_param", &[(4, bs_text.as_str())])? {
            let f = fixed.load_function("matmul_param")?;
            let ms = time_ms(&q, || {
                let (mut x, mut y, mut z, mut m, mut s) = (pa, pb, pc, ni, bs as i32);
                raw_launch(&q, &f, cfg, params!(x, y, z, m, s))
            })?;
            mm.check(&q, &variant)?;
            rows.push(Row {
                kernel: label.clone(),
                variant,
                ms,
            });
        }
    }

    // `--kernels-only`: the kernel-time table alone (each row against its
    // literal), without the launch, graph, new-value and sweep measures.
    let mut figures = Figures::default();
    if !args.iter().any(|a| a == "--kernels-only") {
        launch_overhead(&q, &module, &mut notes, &mut figures)?;
        graphs::graphs(&q, &module, &mut notes, &mut figures)?;
        new_value_costs(&q, &cache, &mut notes, &mut figures)?;
        sweep::parameter_sweep(&q, &mut notes, &mut figures)?;
    }

    // The table: ratio of each variant to the literal of the same kernel.
    println!("\n| kernel | variant | ms (median) | × literal |\n|---|---|---|---|");
    let mut lines = Vec::new();
    for r in &rows {
        let lit = rows
            .iter()
            .find(|x| x.kernel == r.kernel && x.variant == "literal")
            .map_or(f64::NAN, |x| x.ms);
        println!(
            "| {} | {} | {:.4} | {:.3} |",
            r.kernel,
            r.variant,
            r.ms,
            r.ms / lit
        );
        lines.push(format!(
            "{{\"kernel\":\"{}\",\"variant\":\"{}\",\"ms\":{:.6},\"ratio\":{:.5}}}",
            r.kernel,
            r.variant,
            r.ms,
            r.ms / lit
        ));
    }
    println!("\n{notes}");
    lines.extend(figures.0);
    write_results(&q, &args, &lines)?;
    let _ = std::fs::remove_dir_all(&cache);
    Ok(())
}

/// The convolution with `coeff`, as a literal (`literal`, a kernel of the
/// baselines), through ptxspec in every variant, and by value.
fn conv(
    q: &Queue,
    module: &Arc<CudaModule>,
    rows: &mut Vec<Row>,
    label: &str,
    coeff: [[f32; 3]; 3],
    literal: &str,
) -> R<()> {
    let p = ConvProblem::new(q, 8192, 8192)?;
    let cfg = p.cfg;
    let (pin, pout, hi, wi) = (ptr(&p.din), ptr(&p.dout), p.h as i32, p.w as i32);
    let lit = module.load_function(literal)?;
    let param = module.load_function("conv3x3_param")?;
    let mut coeff_flat = coeff;
    let check = |q: &Queue, what: &str| p.check(q, coeff, &format!("{label} {what}"));
    let mut row = |variant: &str, ms: f64| {
        rows.push(Row {
            kernel: label.to_string(),
            variant: variant.into(),
            ms,
        })
    };
    let ms = time_ms(q, || {
        let (mut a, mut b, mut c, mut d) = (pin, pout, hi, wi);
        raw_launch(q, &lit, cfg, params!(a, b, c, d))
    })?;
    check(q, "literal")?;
    row("literal", ms);
    let global = global_buffer_image("conv3x3", include_str!("../kernels/ptx/conv3x3.ptx"))?;
    for (variant, exe) in variants("conv3x3", global, |b| {
        Ok(b.set_specialization_constant(&COEFF, coeff)?)
    })? {
        let ms = time_ms(q, || {
            q.submit(|hd| {
                hd.use_kernel_bundle(&exe)?;
                hd.launch("conv3x3", cfg, &p.args())
            })?;
            Ok(())
        })?;
        check(q, variant)?;
        row(variant, ms);
    }
    let ms = time_ms(q, || {
        let (mut a, mut b, mut c, mut d) = (pin, pout, hi, wi);
        raw_launch(q, &param, cfg, params!(a, b, c, d, coeff_flat))
    })?;
    check(q, "by-value")?;
    row("by-value parameter", ms);
    // The by-value kernel with its sizes and coefficients fixed by ptxspec
    // (the PTX way: LTO does not serve a kernel with an aggregate
    // parameter), launched with the same arguments.
    let flat: Vec<u8> = coeff
        .iter()
        .flatten()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    let coeff_bytes = format!(
        "bytes:{}",
        flat.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let (h, w) = (p.h.to_string(), p.w.to_string());
    for (variant, fixed) in fixed_arguments(
        q,
        "conv3x3_param",
        &[(2, h.as_str()), (3, w.as_str()), (4, coeff_bytes.as_str())],
    )? {
        let f = fixed.load_function("conv3x3_param")?;
        let ms = time_ms(q, || {
            let (mut a, mut b, mut c, mut d) = (pin, pout, hi, wi);
            raw_launch(q, &f, cfg, params!(a, b, c, d, coeff_flat))
        })?;
        check(q, &variant)?;
        row(&variant, ms);
    }
    Ok(())
}

/// Adaptive arguments (issue 44.2), the baselines compiled from source with
/// LTO-IR into a bundle without and one with adaptation: the host cost of
/// a launch whose arguments recur (the variant runs) and of one whose
/// arguments change every launch, each against the bundle without
/// adaptation in turns; kernel time of the matmul once its variant runs,
/// against the literal; and a sweep whose arguments change every launch.
fn adaptive_arguments(q: &Queue, module: &Arc<CudaModule>, notes: &mut String) -> R<()> {
    use ptxspec::bundle::AdaptiveArguments;
    let src = include_str!("../kernels/bench/baselines.cu");
    let input = ptxspec::kernel_bundle_from_source(
        &[("baselines.cu", src)],
        &ptxspec::SourceOptions::default().with_lto(true),
    )?;
    let generic = build(&input)?;
    // Untimed: what a launch costs once a variant runs, and what the variant
    // runs at (the guard's verdicts are `--transformer`'s).
    let adaptive =
        build(&input.with_adaptive_arguments(AdaptiveArguments::all().with_timing(false)))?;
    let out: DeviceBuffer<i32> = q.alloc_zeros(1)?;
    let one = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    let tiny = |exe: &KernelBundle<Executable>, v: i32| -> R<()> {
        q.submit(|h| {
            h.use_kernel_bundle(exe)?;
            h.launch("tiny_plain", one, &[Arg::buffer(&out), Arg::value(v)])
        })?;
        Ok(())
    };
    // Recurring: the variant is linked in the background and then runs.
    let before = ptxspec::stats();
    let started = Instant::now();
    while ptxspec::stats().adapted_variants == before.adapted_variants {
        tiny(&adaptive, 7)?;
        q.wait()?;
        if started.elapsed().as_secs() > 60 {
            return Err("no variant of tiny_plain within 60 s".into());
        }
    }
    let to_variant = started.elapsed();
    let (us, over, [low, high]) =
        paired_us(q, &mut |_| tiny(&generic, 7), &mut |_| tiny(&adaptive, 7))?;
    let _ = writeln!(
        notes,
        "adaptive arguments (host µs per launch, tiny_plain through a bundle, against the same bundle without \
         adaptation in turns, {PAIRED_ROUNDS} rounds of 4 × {PAIRED_LAUNCHES}): its variant ready {:.1} ms after the \
         first launch; arguments recurring (the variant runs): {us:.2} ({over:+.3}, rounds {low:+.3}…{high:+.3})",
        to_variant.as_secs_f64() * 1e3
    );
    // Changing every launch: watched until it took 8 values, then not.
    let (us, over, [low, high]) =
        paired_us(q, &mut |i| tiny(&generic, i), &mut |i| tiny(&adaptive, i))?;
    let _ = writeln!(
        notes,
        "  arguments changing every launch: {us:.2} ({over:+.3}, rounds {low:+.3}…{high:+.3})"
    );
    // Kernel time: matmul 4096 once its variant runs, against the literal.
    let mp = MatmulProblem::new(q, 4096)?;
    let n = mp.n;
    for bs in [16u32, 32] {
        let cfg = matmul::config(n, bs);
        let mm = |exe: &KernelBundle<Executable>| mp.launch_param(q, exe, n, bs);
        let before = ptxspec::stats().adapted_variants;
        let started = Instant::now();
        let mut first = 0;
        while ptxspec::stats().adapted_variants == before {
            mm(&adaptive)?;
            q.wait()?;
            first += 1;
        }
        let ready = started.elapsed();
        let lit = module.load_function(&format!("matmul_literal_{bs}"))?;
        let (pa, pb, pc, ni) = mp.raw_args();
        let lit_ms = time_ms(q, || {
            let (mut x, mut y, mut z, mut m) = (pa, pb, pc, ni);
            raw_launch(q, &lit, cfg, params!(x, y, z, m))
        })?;
        let adapted_ms = time_ms(q, || mm(&adaptive))?;
        mp.check(q, "adapted")?;
        let generic_ms = time_ms(q, || mm(&generic))?;
        let _ = writeln!(
            notes,
            "  matmul 4096, block {bs}: variant ready after {first} launches ({:.0} ms); kernel time × literal: \
             adapted {:.3}, without adaptation {:.3} (literal {lit_ms:.3} ms)",
            ready.as_secs_f64() * 1e3,
            adapted_ms / lit_ms,
            generic_ms / lit_ms
        );
    }
    // The convolution (its coefficients an aggregate, adapted the PTX
    // way): Sobel's recurring, against the literal kernel.
    let p = ConvProblem::new(q, 8192, 8192)?;
    let (hi, wi) = (p.h as i32, p.w as i32);
    let conv = |exe: &KernelBundle<Executable>| -> R<()> {
        q.submit(|h| {
            h.use_kernel_bundle(exe)?;
            h.launch(
                "conv3x3_param",
                p.cfg,
                &[
                    Arg::buffer(&p.din),
                    Arg::buffer(&p.dout),
                    Arg::value(hi),
                    Arg::value(wi),
                    Arg::value(SOBEL),
                ],
            )
        })?;
        Ok(())
    };
    let before = ptxspec::stats().adapted_variants;
    let started = Instant::now();
    while ptxspec::stats().adapted_variants == before {
        conv(&adaptive)?;
        q.wait()?;
        if started.elapsed().as_secs() > 60 {
            return Err("no variant of conv3x3_param within 60 s".into());
        }
    }
    let ready = started.elapsed();
    let lit = module.load_function("conv3x3_literal")?;
    let (pin, pout) = (ptr(&p.din), ptr(&p.dout));
    let lit_ms = time_ms(q, || {
        let (mut a, mut b, mut c, mut d) = (pin, pout, hi, wi);
        raw_launch(q, &lit, p.cfg, params!(a, b, c, d))
    })?;
    let adapted_ms = time_ms(q, || conv(&adaptive))?;
    p.check(q, SOBEL, "adapted conv3x3")?;
    let generic_ms = time_ms(q, || conv(&generic))?;
    let _ = writeln!(
        notes,
        "  conv3x3 8192², Sobel: variant ready after {:.0} ms; kernel time × literal: adapted {:.3}, without \
         adaptation {:.3} (literal {lit_ms:.4} ms)",
        ready.as_secs_f64() * 1e3,
        adapted_ms / lit_ms,
        generic_ms / lit_ms
    );
    // A sweep whose arguments change every launch: matmul 1024 with the
    // size cycling through 16 values, without and with adaptation.
    let sizes: Vec<usize> = (1..=16).map(|k| 64 * k).collect();
    let sweep = |exe: &KernelBundle<Executable>| -> R<f64> {
        let t = Instant::now();
        for _ in 0..20 {
            for &m in &sizes {
                mp.launch_param(q, exe, m, 16)?;
            }
        }
        q.wait()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let (mut g_ms, mut a_ms) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        g_ms.push(sweep(&generic)?);
        a_ms.push(sweep(&adaptive)?);
    }
    g_ms.sort_by(f64::total_cmp);
    a_ms.sort_by(f64::total_cmp);
    let _ = writeln!(
        notes,
        "  sweep (matmul, size changing every launch, 320 launches, median of 5 in turns): without adaptation \
         {:.2} ms, with {:.2} ms (× {:.4})",
        g_ms[2],
        a_ms[2],
        a_ms[2] / g_ms[2]
    );
    Ok(())
}

/// `kernel` of the baselines with `args` (index, value) fixed as constants
/// (`ptxspec::arguments`): its module through LTO (where LTO serves the
/// kernel) and through PTX, each with its row's name.
fn fixed_arguments(
    q: &Queue,
    kernel: &str,
    args: &[(usize, &str)],
) -> R<Vec<(String, Arc<CudaModule>)>> {
    let fixed = baselines::fixed(kernel, args)?;
    let mut out = Vec::new();
    if fixed.check_lto().is_ok() {
        let (major, minor) = q.device().compute_capability;
        let cubin = baselines::lto_cubin(&fixed, (major * 10 + minor) as u32)?;
        out.push((
            "by-value, fixed by ptxspec (LTO)".to_string(),
            q.context()
                .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?,
        ));
    }
    out.push((
        "by-value, fixed by ptxspec (PTX)".to_string(),
        q.context()
            .load_module(cudarc::nvrtc::Ptx::from_src(fixed.in_ptx(BASELINES)?))?,
    ));
    Ok(out)
}

/// Host time per launch of a tiny kernel, 10 000 launches synchronized once
/// at the end (launches queue up as an application's would), median of 5.
fn per_launch_us(q: &Queue, f: &mut dyn FnMut(i32) -> R<()>) -> R<f64> {
    for i in 0..200 {
        f(i)?;
    }
    q.wait()?;
    let mut samples = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for i in 0..10_000 {
            f(i)?;
        }
        q.wait()?;
        samples.push(t.elapsed().as_secs_f64() * 1e6 / 10_000.0);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[2])
}

/// Rounds of [`paired_us`], and launches of each batch (two of each side
/// per round).
const PAIRED_ROUNDS: usize = 21;
const PAIRED_LAUNCHES: i32 = 1_000;

/// `variant`'s host µs per launch and its overhead over `baseline`,
/// measured in turns so that the machine's drift (clock, placement) falls
/// on both sides alike: each of [`PAIRED_ROUNDS`] rounds times batches of
/// [`PAIRED_LAUNCHES`] launches (each synchronized) in the order baseline,
/// variant, variant, baseline — a drift that runs one way through a round
/// then adds as much to both sides, where an order of one each added it to
/// the side timed second; medians of the variant's times and of the rounds'
/// differences, and the differences' quartiles (how much the rounds of one
/// process agree).
fn paired_us(
    q: &Queue,
    baseline: &mut dyn FnMut(i32) -> R<()>,
    variant: &mut dyn FnMut(i32) -> R<()>,
) -> R<(f64, f64, [f64; 2])> {
    let batch = |f: &mut dyn FnMut(i32) -> R<()>| -> R<f64> {
        let t = Instant::now();
        for i in 0..PAIRED_LAUNCHES {
            f(i)?;
        }
        q.wait()?;
        Ok(t.elapsed().as_secs_f64() * 1e6 / PAIRED_LAUNCHES as f64)
    };
    batch(baseline)?;
    batch(variant)?;
    let (mut times, mut diffs) = (Vec::new(), Vec::new());
    for _ in 0..PAIRED_ROUNDS {
        let b1 = batch(baseline)?;
        let v1 = batch(variant)?;
        let v2 = batch(variant)?;
        let b2 = batch(baseline)?;
        times.push((v1 + v2) / 2.0);
        diffs.push((v1 + v2 - b1 - b2) / 2.0);
    }
    times.sort_by(f64::total_cmp);
    diffs.sort_by(f64::total_cmp);
    Ok((
        times[PAIRED_ROUNDS / 2],
        diffs[PAIRED_ROUNDS / 2],
        [diffs[PAIRED_ROUNDS / 4], diffs[3 * PAIRED_ROUNDS / 4]],
    ))
}

/// `ptx`'s function `tiny` loaded into the current context by
/// `cuModuleLoadDataEx` with the JIT's log buffers, as ptxspec loads
/// modules (a probe: does the loading change the launch's cost?). The
/// module is never unloaded (the bench's process ends).
fn load_with_logs(ptx: &str, logs: &mut [[u8; 4096]; 2]) -> R<cudarc::driver::sys::CUfunction> {
    use cudarc::driver::sys;
    let text = std::ffi::CString::new(ptx)?;
    let mut keys = [
        sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let [info, error] = logs;
    let mut values = [
        info.as_mut_ptr().cast::<std::ffi::c_void>(),
        std::ptr::without_provenance_mut(4096),
        error.as_mut_ptr().cast(),
        std::ptr::without_provenance_mut(4096),
    ];
    let mut module: sys::CUmodule = std::ptr::null_mut();
    let mut function: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: `text` is NUL-terminated PTX; the options' buffers outlive
    // the call; the caller's context is bound (the queue's).
    unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            text.as_ptr().cast(),
            keys.len() as u32,
            keys.as_mut_ptr(),
            values.as_mut_ptr(),
        )
        .result()?;
        sys::cuModuleGetFunction(&mut function, module, c"tiny".as_ptr()).result()?;
    }
    Ok(function)
}

/// Kernels alike but for their second parameter's declaration (`gpu_bench
/// --launch-overhead`'s probes): a 4- and an 8-byte scalar, a 4-, an 8- and
/// a 64-byte aggregate; thread 0 stores the parameter's first word. And one
/// whose second parameter is the address of its value, which it loads (as
/// a kernel whose values are in a global buffer does).
fn param_shapes() -> String {
    let mut ptx = String::from(".version 7.0\n.target sm_70\n.address_size 64\n");
    for (name, decl, load) in [
        ("shape_u32", ".u32 {p}", "ld.param.u32 %r2, [{p}];"),
        (
            "shape_u64",
            ".u64 {p}",
            "ld.param.u64 %rd3, [{p}]; cvt.u32.u64 %r2, %rd3;",
        ),
        (
            "shape_b4",
            ".align 4 .b8 {p}[4]",
            "ld.param.u32 %r2, [{p}];",
        ),
        (
            "shape_b8",
            ".align 8 .b8 {p}[8]",
            "ld.param.u64 %rd3, [{p}]; cvt.u32.u64 %r2, %rd3;",
        ),
        (
            "shape_b8_64",
            ".align 8 .b8 {p}[64]",
            "ld.param.u64 %rd3, [{p}]; cvt.u32.u64 %r2, %rd3;",
        ),
        (
            "shape_global",
            ".u64 {p}",
            "ld.param.u64 %rd3, [{p}]; cvta.to.global.u64 %rd3, %rd3; ld.global.u32 %r2, [%rd3];",
        ),
    ] {
        let p = format!("{name}_1");
        let _ = write!(
            ptx,
            ".visible .entry {name}(.param .u64 {name}_0, .param {})\n{{\n\
             \t.reg .pred %p<2>; .reg .b32 %r<3>; .reg .b64 %rd<4>;\n\
             \tld.param.u64 %rd1, [{name}_0]; {}\n\
             \tmov.u32 %r1, %tid.x; setp.ne.s32 %p1, %r1, 0; @%p1 bra DONE;\n\
             \tcvta.to.global.u64 %rd2, %rd1; st.global.u32 [%rd2], %r2;\nDONE:\n\tret;\n}}\n",
            decl.replace("{p}", &p),
            load.replace("{p}", &p),
        );
    }
    ptx
}

/// Launch overhead: each way of launching the `tiny` kernel against a plain
/// launch of `tiny_plain` (the value as a kernel argument), in turns
/// ([`paired_us`]).
fn launch_overhead(
    q: &Queue,
    module: &Arc<CudaModule>,
    notes: &mut String,
    figures: &mut Figures,
) -> R<()> {
    let out: DeviceBuffer<i32> = q.alloc_zeros(1)?;
    let pout = ptr(&out);
    let plain = module.load_function("tiny_plain")?;
    let one = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    let plain_fn = |i: i32| {
        let (mut p, mut v) = (pout, i);
        raw_launch(
            q,
            &plain,
            one,
            &mut [&mut p as *mut _ as _, &mut v as *mut _ as _],
        )
    };
    // A `&Fn` is `FnMut` and `Copy`: the probes below launch it too.
    let mut plain_launch = &plain_fn;
    let plain_us = per_launch_us(q, &mut plain_launch)?;
    let _ = writeln!(
        notes,
        "launch overhead (host µs per launch; plain: 10 000 launches, median of 5; the others in turns with plain, \
         {PAIRED_ROUNDS} rounds of {PAIRED_LAUNCHES} launches of plain, the way, the way, plain, medians of the launch time and of the difference, \
         the differences' quartiles): \
         plain {plain_us:.2}"
    );
    const LAUNCH: &str = "launch overhead";
    let global = global_buffer_image("tiny", include_str!("../kernels/ptx/tiny.ptx"))?;
    let registered = get_kernel_bundle_for(&[KernelId::new("tiny")])?;
    let param_input = registered.with_mode(SpecMode::Emulated);
    let global_input = KernelBundle::from_images(vec![global]).with_mode(SpecMode::Emulated);
    let (param_exe, global_exe) = (build(&param_input)?, build(&global_input)?);
    // The same PTX loaded by cudarc and launched raw with the values as its
    // parameter: what the driver alone costs for this kernel.
    let built = param_exe.built_image_named("tiny")?;
    let ptx = built.ptx().ok_or("an emulated image without PTX")?;
    let own = q
        .context()
        .load_module(cudarc::nvrtc::Ptx::from_src(ptx))?
        .load_function("tiny")?;
    let mut values = [0u8; 8];
    values[..built.blob().len()].copy_from_slice(built.blob());
    // Two executable bundles with different values, alternating: every
    // launch rewrites the image's global buffer.
    let mut b0 = global_input.clone();
    b0.set_specialization_constant(&TINY, 5)?;
    let mut b1 = global_input;
    b1.set_specialization_constant(&TINY, 9_999)?;
    let (e0, e1) = (build(&b0)?, build(&b1)?);
    // Eight bundles of the kernel, in turn: a program's launches go round
    // more kernels than the two most recent plans (a transformer layer's).
    let round: Vec<KernelBundle<Executable>> = (0..8)
        .map(|v| {
            let mut b = param_input.clone();
            b.set_specialization_constant(&TINY, 100 + v)?;
            Ok(build(&b)?)
        })
        .collect::<R<_>>()?;
    let bundle_launch = |exe: &KernelBundle<Executable>| -> R<()> {
        q.submit(|h| {
            h.use_kernel_bundle(exe)?;
            h.launch("tiny", one, &[Arg::buffer(&out)])
        })?;
        Ok(())
    };
    // What a launch's own host work costs when it follows a launch: an
    // atomic read-modify-write (which waits for the stores before it,
    // among them the driver's writes for the previous launch), a lock, and
    // plain arithmetic of about the same length.
    let counter = std::sync::atomic::AtomicU64::new(0);
    let lock = std::sync::Mutex::new(0u64);
    let plain_then = |i: i32, after: &dyn Fn(i32)| -> R<()> {
        plain_fn(i)?;
        after(i);
        Ok(())
    };
    type Way<'a> = (&'a str, Box<dyn FnMut(i32) -> R<()> + 'a>);
    let probes: Vec<Way> = vec![
        (
            "probe: plain, then one atomic add",
            Box::new(|i| {
                plain_then(i, &|_| {
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                })
            }),
        ),
        (
            "probe: plain, then a mutex locked and unlocked",
            Box::new(|i| {
                plain_then(i, &|i| {
                    *lock.lock().unwrap_or_else(|p| p.into_inner()) += i as u64;
                })
            }),
        ),
        (
            "probe: plain, then 64 multiply-adds (no atomic)",
            Box::new(|i| {
                plain_then(i, &|i| {
                    let mut x = std::hint::black_box(i as u64);
                    for k in 0..64u64 {
                        x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(k);
                    }
                    std::hint::black_box(x);
                })
            }),
        ),
    ];
    // The one difference of ptxspec's kernel from the plain one as the
    // driver sees it: its values' parameter, an aggregate (`.b8` array, as
    // NVVM declares a struct by value), against a scalar of the same size.
    let shapes = q
        .context()
        .load_module(cudarc::nvrtc::Ptx::from_src(param_shapes()))?;
    let shape_fns = [
        "shape_u32",
        "shape_u64",
        "shape_b4",
        "shape_b8",
        "shape_b8_64",
        "shape_global",
    ]
    .map(|name| shapes.load_function(name));
    let [
        shape_u32,
        shape_u64,
        shape_b4,
        shape_b8,
        shape_b8_64,
        shape_global,
    ] = shape_fns;
    let (shape_u32, shape_u64, shape_b4, shape_b8, shape_b8_64, shape_global) = (
        shape_u32?,
        shape_u64?,
        shape_b4?,
        shape_b8?,
        shape_b8_64?,
        shape_global?,
    );
    let shape_launch = |f: &CudaFunction| {
        let mut p = pout;
        let mut bytes = [0u64; 8];
        bytes[0] = 7;
        raw_launch(
            q,
            f,
            one,
            &mut [&mut p as *mut _ as _, bytes.as_mut_ptr().cast()],
        )
    };
    // The same PTX loaded as ptxspec loads it (with the JIT's log buffers),
    // and its parameter value on the heap as ptxspec's layout keeps it.
    let mut logs = [[0u8; 4096]; 2];
    let own_ex = load_with_logs(ptx, &mut logs)?;
    let heap_values = Box::new(u64::from_le_bytes(values));
    // Memory a launch's own bookkeeping might touch: 32 lines, 2 KiB apart.
    let lines: Vec<u64> = (0..32 * 256u64).map(|i| (i + 256) % (32 * 256)).collect();
    let ways: Vec<Way> = vec![
        (
            "probe: plain, then 32 cache lines read (2 KiB apart, one after another)",
            Box::new(|i| {
                plain_fn(i)?;
                let mut at = 0u64;
                for _ in 0..32 {
                    at = std::hint::black_box(lines[at as usize]);
                }
                std::hint::black_box(at);
                Ok(())
            }),
        ),
        (
            "probe: ptxspec's PTX loaded with JIT log options, value on the heap, launched raw",
            Box::new(|_| {
                let (mut p, v) = (pout, heap_values.as_ref() as *const u64);
                raw_launch_of(
                    q,
                    own_ex,
                    one,
                    &mut [&mut p as *mut _ as _, v.cast_mut().cast()],
                )
            }),
        ),
        (
            "probe: a kernel of (pointer, .u32), launched raw",
            Box::new(|_| shape_launch(&shape_u32)),
        ),
        (
            "probe: a kernel of (pointer, .u64), launched raw",
            Box::new(|_| shape_launch(&shape_u64)),
        ),
        (
            "probe: a kernel of (pointer, .align 4 .b8 [4]), launched raw",
            Box::new(|_| shape_launch(&shape_b4)),
        ),
        (
            "probe: a kernel of (pointer, .align 8 .b8 [8]), launched raw",
            Box::new(|_| shape_launch(&shape_b8)),
        ),
        (
            "probe: a kernel of (pointer, .align 8 .b8 [64]), launched raw",
            Box::new(|_| shape_launch(&shape_b8_64)),
        ),
        (
            "probe: a kernel of (pointer, pointer to its value), launched raw",
            Box::new(|_| {
                let (mut p, mut v) = (pout, pout);
                raw_launch(
                    q,
                    &shape_global,
                    one,
                    &mut [&mut p as *mut _ as _, &mut v as *mut _ as _],
                )
            }),
        ),
        (
            "probe: ptxspec's PTX loaded with JIT log options, launched raw",
            Box::new(|_| {
                let (mut p, mut v) = (pout, u64::from_le_bytes(values));
                raw_launch_of(
                    q,
                    own_ex,
                    one,
                    &mut [&mut p as *mut _ as _, &mut v as *mut _ as _],
                )
            }),
        ),
        (
            "probe: ptxspec's PTX launched raw (cudarc module), value on the heap",
            Box::new(|_| {
                let (mut p, v) = (pout, heap_values.as_ref() as *const u64);
                raw_launch(
                    q,
                    &own,
                    one,
                    &mut [&mut p as *mut _ as _, v.cast_mut().cast()],
                )
            }),
        ),
        (
            "ptxspec's PTX launched raw (cudarc module, no ptxspec code)",
            Box::new(|_| {
                let (mut p, mut v) = (pout, u64::from_le_bytes(values));
                raw_launch(
                    q,
                    &own,
                    one,
                    &mut [&mut p as *mut _ as _, &mut v as *mut _ as _],
                )
            }),
        ),
        (
            "param space, unchanged values",
            Box::new(|_| bundle_launch(&param_exe)),
        ),
        (
            "param space, a handler value changed before every launch",
            Box::new(|i| {
                q.submit(|h| {
                    h.set_specialization_constant(&TINY, i)?;
                    h.launch("tiny", one, &[Arg::buffer(&out)])
                })?;
                Ok(())
            }),
        ),
        (
            "param space, unchanged values, 8 bundles in turn",
            Box::new(|i| bundle_launch(&round[i as usize % round.len()])),
        ),
        (
            "global buffer, unchanged values",
            Box::new(|_| bundle_launch(&global_exe)),
        ),
        (
            "global buffer, values changed before every launch (two bundles in turn)",
            Box::new(|i| bundle_launch(if i % 2 == 0 { &e0 } else { &e1 })),
        ),
    ];
    let plain_allocations = allocations_per_call(&mut plain_launch)?;
    figures.add(
        LAUNCH,
        "plain (cudarc launch of the literal-free kernel)",
        &[("µs", plain_us), ("allocations", plain_allocations)],
    );
    let _ = writeln!(
        notes,
        "  (heap allocations per launch, 1 000 launches: plain {plain_allocations:.2}; each way's below)"
    );
    // Every way, plain first: what the profilers' modes below take (way N
    // of this list), and past plain, what the timed rounds take.
    let mut all: Vec<Way> = vec![("plain", Box::new(plain_fn))];
    all.extend(probes.into_iter().chain(ways));
    #[cfg(target_os = "linux")]
    let wait = || -> R<()> { Ok(q.wait()?) };
    // The processor's counters per launch, each way in turn
    // (`GPU_BENCH_COUNTERS=1`), instead of the timed rounds.
    #[cfg(target_os = "linux")]
    if std::env::var_os("GPU_BENCH_COUNTERS").is_some() {
        let mut plain_counts = None;
        for (way, launch) in &mut all {
            let Some(counts) =
                counters::per_launch(&wait, launch.as_mut(), 20, PAIRED_LAUNCHES as usize)?
            else {
                let _ = writeln!(notes, "  processor counters: none on this machine");
                return Ok(());
            };
            let _ = writeln!(notes, "  {way}:");
            for (i, (name, per)) in counts.iter().enumerate() {
                let over = plain_counts
                    .as_ref()
                    .and_then(|p: &Vec<(&str, f64)>| p.get(i))
                    .map(|(_, p)| per - p);
                let _ = writeln!(
                    notes,
                    "    {name}: {per:.1} per launch{}",
                    over.map(|o| format!(" ({o:+.1} over plain)"))
                        .unwrap_or_default()
                );
            }
            figures.add("launch counters", way, &counts);
            plain_counts.get_or_insert(counts);
        }
        return Ok(());
    }
    // Where each way's time goes (`GPU_BENCH_PROFILE=FOLDER`): a file of
    // sampled addresses per way (FOLDER/N.txt: file, offset, samples).
    #[cfg(target_os = "linux")]
    if let Some(folder) = std::env::var_os("GPU_BENCH_PROFILE") {
        let folder = std::path::PathBuf::from(folder);
        for (n, (way, launch)) in all.iter_mut().enumerate() {
            let samples = counters::profile(&wait, launch.as_mut(), 300_000, 9_973)?;
            let mut text = format!("# {way}\n");
            for (file, offset, count) in samples {
                let _ = writeln!(text, "{file} {offset:#x} {count}");
            }
            std::fs::write(folder.join(format!("{n}.txt")), text)?;
        }
        return Ok(());
    }
    // For profilers (`GPU_BENCH_LOOP=N ./gpu_bench --launch-overhead`): way
    // N of the list above (0: plain) alone, 300 000 launches.
    if let Ok(n) = std::env::var("GPU_BENCH_LOOP") {
        let n: usize = n.parse()?;
        let (way, launch) = all.get_mut(n).ok_or("GPU_BENCH_LOOP: no such way")?;
        let t = Instant::now();
        for round in 0..150 {
            for i in 0..PAIRED_LAUNCHES {
                launch(round * PAIRED_LAUNCHES + i)?;
            }
            q.wait()?;
        }
        let _ = writeln!(
            notes,
            "  {way}: 300 000 launches, {:.3} µs each",
            t.elapsed().as_secs_f64() * 1e6 / 300_000.0
        );
        return Ok(());
    }
    for (way, mut launch) in all.into_iter().skip(1) {
        let (us, over, [low, high]) = paired_us(q, &mut plain_launch, &mut launch)?;
        let allocations = allocations_per_call(&mut launch)?;
        q.wait()?;
        let _ = writeln!(
            notes,
            "  {way}: {us:.2} ({over:+.2}, rounds {low:+.2}…{high:+.2}); {allocations:.2} allocations per launch"
        );
        figures.add(
            LAUNCH,
            way,
            &[
                ("µs", us),
                ("over plain, µs", over),
                ("difference's lower quartile", low),
                ("difference's upper quartile", high),
                ("allocations", allocations),
            ],
        );
    }
    // The last launch was of e1 (an odd count per batch is not used).
    let last = q.download(&out)?[0];
    if last != 9_999 {
        return Err(format!("tiny kernel ended with {last}, not 9999").into());
    }
    Ok(())
}

/// The small problem a new value set's first launch runs: 64 × 64 floats.
const SMALL: usize = 64;

/// One launch of the matmul bundle on the small problem (`small`: 64 × 64
/// floats; loads the module), waited for.
fn small_matmul(
    q: &Queue,
    exe: &KernelBundle<Executable>,
    bs: u32,
    small: &DeviceBuffer<f32>,
) -> R<()> {
    q.submit(|h| {
        h.use_kernel_bundle(exe)?;
        h.launch(
            "matmul",
            matmul::config(SMALL, bs),
            &[
                Arg::buffer(small),
                Arg::buffer(small),
                Arg::buffer(small),
                Arg::value(SMALL as i32),
            ],
        )
    })?;
    q.wait()?;
    Ok(())
}

/// The median; NaN for no samples.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Milliseconds since `t`.
fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// The cost of a new value set of the matmul, per way and stage. The ways
/// take turns on each value, so that a slow moment of the machine falls on
/// all of them; every stage is timed with the same scope on both sides of
/// a ratio: the compile (ptxspec LTO's definitions + nvJitLink against
/// NVRTC's source → cubin), and the whole path from the values to the
/// first launch returning (build, compile, module load, launch, wait).
fn new_value_costs(
    q: &Queue,
    cache: &std::path::Path,
    notes: &mut String,
    figures: &mut Figures,
) -> R<()> {
    let base = get_kernel_bundle_for(&[KernelId::new("matmul")])?;
    // Block sizes no other part of the bench uses: each is a new value set.
    let values = [1i32, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15];
    let arch = q.device().arch();
    let mut native = Vec::new();
    let (mut lto_link, mut lto_total) = (Vec::new(), Vec::new());
    let (mut nvrtc_compile, mut nvrtc_total) = (Vec::new(), Vec::new());
    let small: DeviceBuffer<f32> = q.alloc_zeros(SMALL * SMALL)?;
    for &bs in &values {
        let mut input: KernelBundle<_> = base.clone().with_mode(SpecMode::Native);
        input.set_specialization_constant(&BLOCK, bs)?;
        let t = Instant::now();
        let exe = build(&input)?;
        small_matmul(q, &exe, bs as u32, &small)?;
        native.push(ms_since(t));

        let mut input: KernelBundle<_> = base.clone().with_mode(SpecMode::Lto);
        input.set_specialization_constant(&BLOCK, bs)?;
        let t = Instant::now();
        let exe = build(&input)?;
        // What the first launch would link, linked here to time it alone.
        let (link_ms, source) = sweep::link_now(q, &exe, "matmul")?;
        if !matches!(source, ptxspec_core::lto::Source::Linked { .. }) {
            return Err(format!("block {bs}: the LTO cubin was not linked now: {source:?}").into());
        }
        lto_link.push(link_ms);
        small_matmul(q, &exe, bs as u32, &small)?;
        lto_total.push(ms_since(t));

        // NVRTC from source with the value as a literal (Jitify's way), to
        // a cubin for this device, loaded and launched: the cost a CUDA
        // user pays per value set without ptxspec. The source is the
        // kernel alone (ptxspec's header stubbed out): the least a user
        // without ptxspec compiles.
        let src = MATMUL_SOURCE
            .replace(
                "#include \"ptxspec.cuh\"",
                "namespace ptxspec { struct kernel_handler { const void *p; }; }",
            )
            .replace("PTXSPEC_SPECIALIZATION_ID(block_size_id, int, 16);", "")
            .replace(
                "h.get_specialization_constant<block_size_id>()",
                &bs.to_string(),
            );
        let t = Instant::now();
        let cubin = ptxspec_core::toolkit::nvrtc::compile(
            &src,
            "matmul_literal.cu",
            &["-std=c++17".into(), format!("-arch=sm_{arch}")],
            ptxspec_core::toolkit::nvrtc::Output::Cubin,
        )?;
        nvrtc_compile.push(ms_since(t));
        let m = q
            .context()
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin.code))?;
        let f = m.load_function("matmul")?;
        let (mut x, mut n, mut handler) = (small.device_address(), SMALL as i32, 0u64);
        let (mut y, mut z) = (x, x);
        raw_launch(
            q,
            &f,
            matmul::config(SMALL, bs as u32),
            params!(x, y, z, n, handler),
        )?;
        q.wait()?;
        nvrtc_total.push(ms_since(t));
    }
    // A repeat build with values seen before: the LTO cubin comes from the
    // memory cache. Linked once first, untimed (until round 9 the loop
    // timed that link too: with --new-value alone nothing had linked block
    // 16, and the whole image's cubin was asked where launches link the
    // kernel alone — ~80 ms over 10 000 rounds, +8 µs each).
    let mut input = base.clone().with_mode(SpecMode::Lto);
    input.set_specialization_constant(&BLOCK, 16)?;
    build(&input)?
        .built_image(&KernelId::new("matmul"))?
        .cubin_for_kernel(arch, "matmul")?;
    // The hit, and its two parts timed apart (the build, the lookup in a
    // built image), with the hit's heap allocations: what differs from
    // the cache_hit bench's criterion figures shows in the parts.
    let matmul_id = KernelId::new("matmul");
    let mut hit = || -> R<()> {
        let exe = build(std::hint::black_box(&input))?;
        let b = exe.built_image(&matmul_id)?;
        std::hint::black_box(b.cubin_for_kernel(arch, "matmul")?);
        Ok(())
    };
    let reps = 10_000;
    let per_call_us = |f: &mut dyn FnMut() -> R<()>| -> R<f64> {
        // Five rounds, the median: one round's spread is the host's.
        let mut rounds = Vec::with_capacity(5);
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..reps / 5 {
                f()?;
            }
            rounds.push(t.elapsed().as_secs_f64() * 1e6 / (reps / 5) as f64);
        }
        Ok(median(rounds))
    };
    let hit_us = per_call_us(&mut hit)?;
    let build_us = per_call_us(&mut || {
        std::hint::black_box(build(std::hint::black_box(&input))?);
        Ok(())
    })?;
    let one = build(&input)?;
    let one = one.built_image(&matmul_id)?;
    let lookup_us = per_call_us(&mut || {
        std::hint::black_box(one.cubin_for_kernel(arch, "matmul")?);
        Ok(())
    })?;
    let hit_allocations = allocations_per_call(&mut |_| hit())?;
    // The LTO memory cache itself: value sets built before but no longer
    // among the recent builds a process keeps alive (17 in turn, one more
    // than it keeps), so that each build makes its image anew and finds the
    // cubin in the memory cache.
    let cycled: Vec<KernelBundle<ptxspec::Input>> = (1..=17)
        .map(|bs| {
            let mut i = base.clone().with_mode(SpecMode::Lto);
            i.set_specialization_constant(&BLOCK, bs)?;
            build(&i)?
                .built_image(&matmul_id)?
                .cubin_for_kernel(arch, "matmul")?;
            Ok(i)
        })
        .collect::<R<_>>()?;
    let mut turn = 0;
    let anew_us = per_call_us(&mut || {
        let exe = build(std::hint::black_box(&cycled[turn % cycled.len()]))?;
        turn += 1;
        std::hint::black_box(
            exe.built_image(&matmul_id)?
                .cubin_for_kernel(arch, "matmul")?,
        );
        Ok(())
    })?;
    // A new process, same disk cache: the value set block 16 linked above.
    let exe = std::env::current_exe()?;
    let mut disk = Vec::new();
    for _ in 0..5 {
        let out = std::process::Command::new(&exe)
            .args(["--disk-hit", "16"])
            .env("PTXSPEC_CACHE_DIR", cache)
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let ms: f64 = text
            .trim()
            .strip_prefix("disk hit ms ")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                format!(
                    "--disk-hit printed {text:?} {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })?;
        disk.push(ms);
    }
    let fmt = |v: &[f64]| {
        let all = v
            .iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join("/");
        format!("{all} (median {:.1})", median(v.to_vec()))
    };
    let _ = writeln!(
        notes,
        "cost of a new value set (matmul, block sizes {values:?}, ways in turn; ms):\n  \
         ptxspec native, build + first launch (PTX rewrite + driver JIT): {}\n  \
         ptxspec lto, cold link (definitions + nvJitLink): {}\n  \
         NVRTC from source with a literal, compile to a cubin (Jitify's way): {}\n  \
         ptxspec lto, build + link + first launch (module load, launch, wait): {}\n  \
         NVRTC, compile + first launch (module load, launch, wait): {}\n  \
         cold LTO link / NVRTC compile, medians: {:.3}\n  \
         LTO / NVRTC from the values to the first launch returned, medians: {:.3}\n  \
         ptxspec lto, memory-cache hit (build + cubin lookup) of a value set built before: {hit_us:.2} µs \
         (build alone {build_us:.2}, lookup in a built image {lookup_us:.2}; {hit_allocations:.1} heap allocations); \
         its image made anew (17 value sets in turn), the cubin from the LTO memory cache: {anew_us:.2} µs\n  \
         ptxspec lto, disk-cache hit in a new process (bundle + build + cubin read): {}",
        fmt(&native),
        fmt(&lto_link),
        fmt(&nvrtc_compile),
        fmt(&lto_total),
        fmt(&nvrtc_total),
        median(lto_link.clone()) / median(nvrtc_compile.clone()),
        median(lto_total.clone()) / median(nvrtc_total.clone()),
        fmt(&disk),
    );
    const NEW_VALUE: &str = "cost of a new value set (ms; matmul)";
    for (row, v) in [
        (
            "ptxspec native: build + first launch (PTX rewrite + driver JIT)",
            &native,
        ),
        (
            "ptxspec LTO: cold link (definitions + nvJitLink)",
            &lto_link,
        ),
        (
            "NVRTC from source with a literal: compile to a cubin",
            &nvrtc_compile,
        ),
        ("ptxspec LTO: build + link + first launch", &lto_total),
        ("NVRTC: compile + first launch", &nvrtc_total),
        ("ptxspec LTO: disk-cache hit in a new process", &disk),
    ] {
        let (low, high) = v
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
                (l.min(x), h.max(x))
            });
        figures.add(
            NEW_VALUE,
            row,
            &[("median", median(v.to_vec())), ("min", low), ("max", high)],
        );
    }
    figures.add(
        "cost of a value set built before (µs; matmul, LTO)",
        "memory-cache hit: build + cubin lookup",
        &[
            ("hit", hit_us),
            ("build_alone", build_us),
            ("lookup_alone", lookup_us),
            ("allocations", hit_allocations),
        ],
    );
    Ok(())
}

/// In a new process: the registered matmul, block `bs`, built in LTO mode;
/// the cubin for device 0's architecture from the disk cache. Prints the
/// time from the first ptxspec call to the cubin in hand.
fn disk_hit(bs: i32) -> R<()> {
    let arch = runtime::devices()?[0].arch();
    let t = Instant::now();
    let mut input = get_kernel_bundle_for(&[KernelId::new("matmul")])?.with_mode(SpecMode::Lto);
    input.set_specialization_constant(&BLOCK, bs)?;
    let exe = build(&input)?;
    let cubin = exe
        .built_image(&KernelId::new("matmul"))?
        .cubin_for_kernel(arch, "matmul")?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if cubin.source != ptxspec_core::lto::Source::Disk {
        return Err(format!("expected a disk hit, got {:?}", cubin.source).into());
    }
    println!("disk hit ms {ms:.3}");
    Ok(())
}
