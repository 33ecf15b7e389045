//! The parameter sweep (issue 22, item 3): K value sets × L launches each,
//! total wall time and the time from a new value set to its first launch
//! returning, for each way of getting values into a kernel:
//!
//! * **emulated**: one emulated image, the values set on each launch's
//!   handler (nothing is compiled per value set; kernels read the values);
//! * **lto**: per value set, an input bundle with the values, built in LTO
//!   mode; its first launch links the kernel (nvJitLink, cold) and later
//!   launches — and sets seen before — find the cubin cached;
//! * **tiered**: per value set, an input bundle with the values built in
//!   tiered mode: launches run the emulated image until a background worker
//!   has linked the LTO cubin, then that (nothing waits for the link);
//! * **nvrtc**: per value set, the kernel's CUDA source with the values
//!   written in as literals, compiled by NVRTC to a cubin and loaded
//!   (Jitify's way), cached per value set as Jitify caches.
//!
//! Every value set here is one no other part of the bench uses, so the first
//! of each is cold in every mode. The last launch's output is checked.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt::Write as _;
use std::time::Instant;

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule};
use ptxspec::runtime::{Arg, DeviceBuffer, LaunchConfig, Queue};
use ptxspec::{Executable, Input, KernelBundle, KernelId, SpecMode, build, get_kernel_bundle_for};

use super::{BLOCK, COEFF, R, median, raw_launch};

const HEADER: &str = include_str!("../../crates/ptxspec-core/include/ptxspec.cuh");
const CONV_SOURCE: &str = include_str!("../../kernels/conv3x3.cu");
const MATMUL_SOURCE: &str = include_str!("../../kernels/matmul.cu");

/// One way of running the sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    /// The values on the handler: the emulated image, no build.
    Emulated,
    /// A bundle per value set, built emulated: what tiered runs until a
    /// link is ready.
    EmulatedBundle,
    Lto,
    Tiered,
    Nvrtc,
}

const WAYS: [Way; 5] = [
    Way::Emulated,
    Way::EmulatedBundle,
    Way::Lto,
    Way::Tiered,
    Way::Nvrtc,
];

impl Way {
    /// The mode of the bundle a way builds per value set.
    fn bundle_mode(self) -> Option<SpecMode> {
        match self {
            Way::EmulatedBundle => Some(SpecMode::Emulated),
            Way::Lto => Some(SpecMode::Lto),
            Way::Tiered => Some(SpecMode::Tiered),
            Way::Emulated | Way::Nvrtc => None,
        }
    }
}

/// The ways `--ways a,b` names (all by default). One way per process keeps
/// each cold: LTO and tiered links of a value set share the caches.
fn ways() -> Vec<Way> {
    let args: Vec<String> = std::env::args().collect();
    let Some(list) = args
        .iter()
        .position(|a| a == "--ways")
        .and_then(|i| args.get(i + 1))
    else {
        return WAYS.to_vec();
    };
    WAYS.into_iter()
        .filter(|w| {
            list.split(',')
                .any(|n| n.eq_ignore_ascii_case(&format!("{w:?}")))
        })
        .collect()
}

/// What one run of a workload in one way took.
struct Run {
    total_ms: f64,
    /// Per new value set: from setting it to its first launch returning.
    first_ms: Vec<f64>,
}

/// `source` (a kernel file of `examples/kernels`) with the header inlined
/// and the getter call replaced by `literal`, compiled by NVRTC for this
/// device to a cubin and loaded.
fn nvrtc_module(q: &Queue, source: &str, getter: &str, literal: &str) -> R<Arc<CudaModule>> {
    let src = source
        .replace("#include \"ptxspec.cuh\"", HEADER)
        .replace(getter, literal);
    let arch = q.device().arch();
    let cubin = ptxspec_core::toolkit::nvrtc::compile(
        &src,
        "sweep.cu",
        &["-std=c++17".into(), format!("-arch=sm_{arch}")],
        ptxspec_core::toolkit::nvrtc::Output::Cubin,
    )?;
    Ok(q.context()
        .load_module(cudarc::nvrtc::Ptx::from_binary(cubin.code))?)
}

/// The bundles of the LTO and tiered ways, per value set and mode, and what
/// they did: the LTO links made when each was built, and which code the
/// tiered launches ran.
#[derive(Default)]
struct Bundles {
    built: HashMap<(usize, SpecMode), KernelBundle<Executable>>,
    links: Vec<(f64, ptxspec_core::lto::Source)>,
    tiers: TierCount,
}

impl Bundles {
    /// Launches `kernel` of value set `set` from its bundle in `mode`, built
    /// by `input(mode)` the first time — an LTO bundle's kernel linked at
    /// once (what its first launch would do), the link recorded; a tiered
    /// one is left to ask for its link itself.
    #[allow(clippy::too_many_arguments)]
    fn launch(
        &mut self,
        q: &Queue,
        mode: SpecMode,
        set: usize,
        kernel: &str,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
        input: impl FnOnce(SpecMode) -> R<KernelBundle<Input>>,
    ) -> R<()> {
        let exe = match self.built.entry((set, mode)) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                let exe = v.insert(build(&input(mode)?)?);
                if mode == SpecMode::Lto {
                    self.links.push(link_now(q, exe, kernel)?);
                }
                exe
            }
        };
        q.submit(|hd| {
            hd.use_kernel_bundle(exe)?;
            hd.launch(kernel, cfg, args)
        })?;
        if mode == SpecMode::Tiered {
            self.tiers.count(q);
        }
        Ok(())
    }
}

/// `kernel` of value set `set`'s NVRTC module, compiled the first time from
/// what `source` gives: (kernel source, getter call, literal replacing it).
fn nvrtc_function(
    q: &Queue,
    modules: &mut HashMap<usize, Arc<CudaModule>>,
    set: usize,
    kernel: &str,
    source: impl FnOnce() -> (&'static str, &'static str, String),
) -> R<CudaFunction> {
    let module = match modules.entry(set) {
        Entry::Occupied(o) => o.into_mut(),
        Entry::Vacant(v) => {
            let (text, getter, literal) = source();
            v.insert(nvrtc_module(q, text, getter, &literal)?)
        }
    };
    Ok(module.load_function(kernel)?)
}

/// How long the GPU works before each way's run.
const WARM_UP: std::time::Duration = std::time::Duration::from_millis(300);

/// Runs `requests` (value-set index, launches) in `way`: `launch(way,
/// set, first)` makes one launch of set `set` (`first`: its first launch
/// in this run, which may build or compile). First, [`WARM_UP`] of the
/// first set's launches with handler values: the way before may have left
/// the GPU idle for seconds (the LTO way's links), and a GPU that idled
/// runs its first milliseconds of work at lower clocks — which the way
/// timed next would pay.
fn run(
    q: &Queue,
    way: Way,
    requests: &[(usize, usize)],
    launch: &mut dyn FnMut(Way, usize, bool) -> R<()>,
) -> R<Run> {
    if let Some(&(set, _)) = requests.first() {
        let warm = Instant::now();
        while warm.elapsed() < WARM_UP {
            for _ in 0..20 {
                launch(Way::Emulated, set, false)?;
            }
            q.wait()?;
        }
    }
    q.wait()?;
    let mut seen = std::collections::HashSet::new();
    let mut first_ms = Vec::new();
    let start = Instant::now();
    for &(set, launches) in requests {
        let new = seen.insert(set);
        let t = Instant::now();
        launch(way, set, new)?;
        if new {
            q.wait()?;
            first_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        for _ in 1..launches {
            launch(way, set, false)?;
        }
    }
    q.wait()?;
    Ok(Run {
        total_ms: start.elapsed().as_secs_f64() * 1e3,
        first_ms,
    })
}

/// Links `kernel` of an LTO bundle for the queue's device now (what its
/// first launch would do), timed, with where the cubin came from: the
/// sweep reports it, so that a "cold" figure is seen to be one.
pub fn link_now(
    q: &Queue,
    exe: &KernelBundle<Executable>,
    kernel: &str,
) -> R<(f64, ptxspec_core::lto::Source)> {
    let t = Instant::now();
    let cubin = exe
        .built_image(&KernelId::new(kernel))?
        .cubin_for_kernel(q.device().arch(), kernel)?;
    Ok((t.elapsed().as_secs_f64() * 1e3, cubin.source))
}

/// Cold links of the matmul kernel alone for block sizes in turn (each a
/// new value set), timed one by one: `gpu_bench --link-times`.
pub fn link_times(q: &Queue) -> R<()> {
    let base = get_kernel_bundle_for(&[KernelId::new("matmul")])?;
    for bs in [16, 1, 2, 4, 8, 32, 64, 3, 5] {
        let mut input = base.clone().with_mode(SpecMode::Lto);
        input.set_specialization_constant(&BLOCK, bs)?;
        let exe = build(&input)?;
        let (ms, source) = link_now(q, &exe, "matmul")?;
        println!("matmul block {bs}: {ms:.2} ms ({source:?})");
    }
    Ok(())
}

/// How LTO links went: median ms, and how many were linked (not cached).
fn links_summary(links: &[(f64, ptxspec_core::lto::Source)]) -> String {
    let linked = links
        .iter()
        .filter(|l| matches!(l.1, ptxspec_core::lto::Source::Linked { .. }))
        .count();
    format!(
        "[LTO links: median {:.2} ms, {linked} of {} linked now]",
        median(links.iter().map(|l| l.0).collect()),
        links.len()
    )
}

/// Coefficient sets no other part of the bench uses: deterministic, no
/// zeros or ones a compiler could fold.
fn coefficient_sets(k: usize) -> Vec<[[f32; 3]; 3]> {
    (0..k)
        .map(|s| {
            std::array::from_fn(|i| {
                std::array::from_fn(|j| 0.03 + ((s * 9 + i * 3 + j) % 97) as f32 / 131.0)
            })
        })
        .collect()
}

fn conv_literal(c: &[[f32; 3]; 3]) -> String {
    let row = |r: &[f32; 3]| format!("{{{{{:?}f, {:?}f, {:?}f}}}}", r[0], r[1], r[2]);
    format!(
        "coeff_t{{{{{}, {}, {}}}}}",
        row(&c[0]),
        row(&c[1]),
        row(&c[2])
    )
}

/// The sweep on the convolution (2048², `sets` × `launches`, and a mix in
/// which 8 sets recur) and the matmul (n = 1024, block 8/16/32 × 20).
/// The measures' names in the JSON lines.
const SWEEP_TOTAL: &str = "parameter sweep: total wall time (ms)";
const SWEEP_FIRST: &str = "parameter sweep: a new value set's first launch (median ms)";

/// A sweep's row of each measure: per way, its total and first-launch times.
fn add_sweep_row(figures: &mut super::Figures, row: &str, per_way: &[(String, f64, f64)]) {
    let total: Vec<(&str, f64)> = per_way.iter().map(|(w, t, _)| (w.as_str(), *t)).collect();
    let first: Vec<(&str, f64)> = per_way.iter().map(|(w, _, f)| (w.as_str(), *f)).collect();
    figures.add(SWEEP_TOTAL, row, &total);
    figures.add(SWEEP_FIRST, row, &first);
}

pub fn parameter_sweep(q: &Queue, notes: &mut String, figures: &mut super::Figures) -> R<()> {
    let p = super::ConvProblem::new(q, 2048, 2048)?;
    let (din, dout, cfg) = (&p.din, &p.dout, p.cfg);
    let (hi, wi) = (p.h as i32, p.w as i32);
    let sets = coefficient_sets(64 + 8);
    let conv_base = get_kernel_bundle_for(&[KernelId::new("conv3x3")])?;
    let mut bundles = Bundles::default();
    let mut modules: HashMap<usize, Arc<CudaModule>> = HashMap::new();
    let mut conv_launch = |way: Way, set: usize, _first: bool| -> R<()> {
        let c = sets[set];
        let args = p.args();
        match way {
            Way::Emulated => q.submit(|hd| {
                hd.set_specialization_constant(&COEFF, c)?;
                hd.launch("conv3x3", cfg, &args)
            })?,
            Way::EmulatedBundle | Way::Lto | Way::Tiered => {
                let mode = way.bundle_mode().ok_or("a way without bundles")?;
                bundles.launch(q, mode, set, "conv3x3", cfg, &args, |mode| {
                    let mut input = conv_base.clone().with_mode(mode);
                    input.set_specialization_constant(&COEFF, c)?;
                    Ok(input)
                })?
            }
            Way::Nvrtc => {
                let f = nvrtc_function(q, &mut modules, set, "conv3x3", || {
                    let getter = "h.get_specialization_constant<coeff_id>()";
                    (CONV_SOURCE, getter, conv_literal(&c))
                })?;
                let (mut a, mut b, mut hh, mut ww, mut handler) =
                    (din.device_address(), dout.device_address(), hi, wi, 0u64);
                raw_launch(q, &f, cfg, params!(a, b, hh, ww, handler))?;
            }
        }
        Ok(())
    };
    let check_conv =
        |q: &Queue, set: usize, what: &str| p.check(q, sets[set], &format!("sweep {what}"));
    let workloads: [(&str, Vec<(usize, usize)>); 2] = [
        (
            "conv 2048², 64 sets × 50 launches",
            (0..64).map(|s| (s, 50)).collect(),
        ),
        (
            "conv 2048², 8 sets recurring, 64 × 10 launches",
            (0..64).map(|i| (64 + i % 8, 10)).collect(),
        ),
    ];
    let _ = writeln!(
        notes,
        "parameter sweep (total wall ms; first launch of a new value set, median ms):"
    );
    for (name, requests) in &workloads {
        let mut line = format!("  {name}:");
        // What each way made the queue do: its launches' paths, the plans
        // it made and the modules it loaded.
        let mut work = String::from("    launches short/whole, plans made, modules loaded:");
        let mut per_way = Vec::new();
        for way in ways() {
            let (paths, stats) = (q.launch_paths(), ptxspec::stats());
            let r = run(q, way, requests, &mut conv_launch)?;
            let (paths_after, stats_after) = (q.launch_paths(), ptxspec::stats());
            let _ = write!(
                work,
                " {way:?} {}/{}, {}, {};",
                paths_after.short - paths.short,
                paths_after.whole - paths.whole,
                stats_after.launch_plans_made - stats.launch_plans_made,
                stats_after.modules_loaded - stats.modules_loaded
            );
            let last = requests.last().map_or(0, |r| r.0);
            check_conv(q, last, &format!("{name} {way:?}"))?;
            let first = median(r.first_ms.clone());
            let _ = write!(line, " {way:?} {:.1} ({first:.2})", r.total_ms);
            per_way.push((format!("{way:?}"), r.total_ms, first));
        }
        let _ = writeln!(notes, "{line}");
        let _ = writeln!(notes, "{work}");
        add_sweep_row(figures, name, &per_way);
    }
    let _ = writeln!(notes, "    conv {}", links_summary(&bundles.links));
    let _ = writeln!(notes, "    conv tiered: {}", bundles.tiers.summary());
    matmul_sweep(q, notes, figures)?;
    Ok(())
}

/// The matmul (n = 1024) with block sizes 8, 16, 32, 20 launches each.
fn matmul_sweep(q: &Queue, notes: &mut String, figures: &mut super::Figures) -> R<()> {
    let n = 1024usize;
    let a: Vec<f32> = (0..n * n).map(|i| ((i * 31) % 17) as f32 / 17.0).collect();
    let (da, db) = (q.upload(&a)?, q.upload(&a)?);
    let dc: DeviceBuffer<f32> = q.alloc_zeros(n * n)?;
    let blocks = [8u32, 16, 32];
    let base = get_kernel_bundle_for(&[KernelId::new("matmul")])?;
    let mut bundles = Bundles::default();
    let mut modules: HashMap<usize, Arc<CudaModule>> = HashMap::new();
    let ni = n as i32;
    let mut launch = |way: Way, set: usize, _: bool| -> R<()> {
        let bs = blocks[set];
        let cfg = super::matmul::config(n, bs);
        let args = [
            Arg::buffer(&da),
            Arg::buffer(&db),
            Arg::buffer(&dc),
            Arg::value(ni),
        ];
        match way {
            Way::Emulated => q.submit(|hd| {
                hd.set_specialization_constant(&BLOCK, bs as i32)?;
                hd.launch("matmul", cfg, &args)
            })?,
            Way::EmulatedBundle | Way::Lto | Way::Tiered => {
                let mode = way.bundle_mode().ok_or("a way without bundles")?;
                bundles.launch(q, mode, set, "matmul", cfg, &args, |mode| {
                    let mut input = base.clone().with_mode(mode);
                    input.set_specialization_constant(&BLOCK, bs as i32)?;
                    Ok(input)
                })?
            }
            Way::Nvrtc => {
                let f = nvrtc_function(q, &mut modules, set, "matmul", || {
                    let getter = "h.get_specialization_constant<block_size_id>()";
                    (MATMUL_SOURCE, getter, bs.to_string())
                })?;
                let (mut x, mut y, mut z, mut m, mut handler) = (
                    da.device_address(),
                    db.device_address(),
                    dc.device_address(),
                    ni,
                    0u64,
                );
                raw_launch(q, &f, cfg, params!(x, y, z, m, handler))?;
            }
        }
        Ok(())
    };
    let requests: Vec<(usize, usize)> = (0..3).map(|s| (s, 20)).collect();
    const NAME: &str = "matmul 1024, block 8/16/32 × 20 launches";
    let mut line = format!("  {NAME}:");
    let mut per_way = Vec::new();
    for way in ways() {
        let r = run(q, way, &requests, &mut launch)?;
        // C = A·A: one element, against the CPU.
        let got = q.download(&dc)?;
        let (i, j) = (n / 3, n / 5);
        let want: f32 = (0..n).map(|k| a[i * n + k] * a[k * n + j]).sum();
        if (got[i * n + j] - want).abs() > 1e-2 * want.abs().max(1.0) {
            return Err(
                format!("sweep matmul {way:?}: got {}, want {want}", got[i * n + j]).into(),
            );
        }
        let first = median(r.first_ms.clone());
        let _ = write!(line, " {way:?} {:.1} ({first:.2})", r.total_ms);
        per_way.push((format!("{way:?}"), r.total_ms, first));
    }
    add_sweep_row(figures, NAME, &per_way);
    let _ = writeln!(notes, "{line} {}", links_summary(&bundles.links));
    let _ = writeln!(notes, "    matmul tiered: {}", bundles.tiers.summary());
    Ok(())
}

/// How many tiered launches ran which code.
#[derive(Default)]
struct TierCount {
    emulated: usize,
    specialized: usize,
}

impl TierCount {
    fn count(&mut self, q: &Queue) {
        match q.last_launch_mode() {
            Some(SpecMode::Emulated) => self.emulated += 1,
            _ => self.specialized += 1,
        }
    }

    fn summary(&self) -> String {
        format!(
            "{} launches emulated, {} specialized",
            self.emulated, self.specialized
        )
    }
}

/// The host time from a new value set to its launch returning (not the
/// kernel: the queue is drained between samples), emulated with handler
/// values against a tiered bundle built for the set (build included):
/// `gpu_bench --first-launch`. The convolution on 64², 200 new sets each.
pub fn first_launch(q: &Queue, figures: &mut super::Figures) -> R<()> {
    let (h, w) = (64usize, 64usize);
    let din = q.upload(&vec![1.0f32; h * w])?;
    let dout: DeviceBuffer<f32> = q.alloc_zeros(h * w)?;
    let cfg = LaunchConfig::new(((w / 32) as u32, (h / 8) as u32, 1), (32, 8, 1));
    let args = [
        Arg::buffer(&din),
        Arg::buffer(&dout),
        Arg::value(h as i32),
        Arg::value(w as i32),
    ];
    let base = get_kernel_bundle_for(&[KernelId::new("conv3x3")])?;
    let sets = coefficient_sets(400);
    // Warm both paths (modules loaded, plans made) with a set of their own.
    q.submit(|hd| {
        hd.set_specialization_constant(&COEFF, sets[0])?;
        hd.launch("conv3x3", cfg, &args)
    })?;
    q.wait()?;
    let (mut emulated, mut tiered, mut built) = (Vec::new(), Vec::new(), Vec::new());
    for i in 1..200 {
        let c = sets[i];
        let t = Instant::now();
        q.submit(|hd| {
            hd.set_specialization_constant(&COEFF, c)?;
            hd.launch("conv3x3", cfg, &args)
        })?;
        emulated.push(t.elapsed().as_secs_f64() * 1e6);
        q.wait()?;
        let c = sets[200 + i];
        let t = Instant::now();
        let mut input = base.clone().with_mode(SpecMode::Tiered);
        input.set_specialization_constant(&COEFF, c)?;
        let exe = build(&input)?;
        built.push(t.elapsed().as_secs_f64() * 1e6);
        q.submit(|hd| {
            hd.use_kernel_bundle(&exe)?;
            hd.launch("conv3x3", cfg, &args)
        })?;
        tiered.push(t.elapsed().as_secs_f64() * 1e6);
        if q.last_launch_mode() != Some(SpecMode::Emulated) {
            return Err("a tiered first launch did not run emulated".into());
        }
        q.wait()?;
    }
    // The first tiered build + launch of the process (it loads no toolkit
    // library: a worker does, before its first link).
    let first_build = tiered.first().copied().unwrap_or(f64::NAN);
    let (e, t, b) = (median(emulated), median(tiered), median(built));
    println!(
        "first tiered build + launch of the process: {:.3} ms",
        first_build / 1e3
    );
    println!(
        "first launch of a new value set (host µs, median of 199): emulated handler values {e:.2}, \
         tiered (build + launch) {t:.2}, difference {:.2}",
        t - e
    );
    const FIRST: &str = "first launch of a new value set (host µs)";
    figures.add(
        FIRST,
        "emulated handler values: set + launch (median of 199)",
        &[("µs", e)],
    );
    figures.add(
        FIRST,
        "tiered: build + launch (median of 199)",
        &[("µs", t), ("over emulated", t - e), ("the build alone", b)],
    );
    figures.add(
        FIRST,
        "tiered: the process's first build + launch",
        &[("µs", first_build)],
    );
    Ok(())
}
