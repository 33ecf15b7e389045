//! Kernel arguments fixed as constants (`ptxspec::arguments`): the
//! baselines' by-value kernels with their block size, sizes or
//! coefficients fixed — through LTO and through PTX — launched with the same
//! argument list as the generic kernel, their results checked against the
//! CPU's.

use super::*;
use ptxspec::cudarc::driver::{CudaFunction, CudaModule};

#[path = "../support/baselines.rs"]
mod baselines;
use crate::child;
use baselines::PTX as BASELINES;
mod graph_verdicts;
pub(super) use graph_verdicts::a_graph_trial_verdict_warms_the_next_process;

/// `kernel` of the baselines with `args` (index, value text) fixed: the
/// module of its LTO cubin for the queue's device (where LTO serves the
/// kernel; else the generic kernel's), and of its PTX.
fn fixed(q: &Queue, kernel: &str, args: &[(usize, &str)]) -> [(String, Arc<CudaModule>); 2] {
    let fixed = baselines::fixed(kernel, args).unwrap();
    let (major, minor) = q.device().compute_capability;
    let load = |code: ptxspec::cudarc::nvrtc::Ptx| q.context().load_module(code).unwrap();
    let first = match fixed.check_lto() {
        Ok(()) => (
            "LTO".to_string(),
            load(ptxspec::cudarc::nvrtc::Ptx::from_binary(
                baselines::lto_cubin(&fixed, (major * 10 + minor) as u32).unwrap(),
            )),
        ),
        Err(_) => (
            "generic".to_string(),
            load(ptxspec::cudarc::nvrtc::Ptx::from_src(BASELINES)),
        ),
    };
    let ptx = fixed.in_ptx(BASELINES).unwrap();
    [
        first,
        (
            "PTX".to_string(),
            load(ptxspec::cudarc::nvrtc::Ptx::from_src(ptx)),
        ),
    ]
}

/// Launches `f` with `args` (one pointer per parameter, to a live value of
/// its type) on the queue's stream.
fn launch(q: &Queue, f: &CudaFunction, cfg: LaunchConfig, args: &mut [*mut std::ffi::c_void]) {
    q.context().bind_to_thread().unwrap();
    // SAFETY: `f` is a function of a module loaded in the queue's context,
    // which is bound; the callers pass one pointer per parameter of the
    // baseline kernel (matmul_param, conv3x3_param: their declarations in
    // baselines.cu), each to a live value of its type, and the launch
    // copies the values before it returns. The test begins no capture of the
    // queue's stream.
    unsafe {
        ptxspec::cudarc::driver::result::launch_kernel(
            f.cu_function(),
            cfg.grid,
            cfg.block,
            cfg.shared_mem_bytes,
            q.cuda_stream().cu_stream(),
            args,
        )
        .unwrap();
    }
}

macro_rules! params {
    ($($v:ident),*) => {
        &mut [$(&mut $v as *mut _ as *mut std::ffi::c_void),*]
    };
}

/// matmul_param with its block size fixed (LTO and PTX) computes what the
/// CPU does, launched with the generic kernel's arguments — the fixed one
/// passed too, as a launch always does.
pub(super) fn matmul_with_its_block_size_fixed_matches_cpu(q: &Arc<Queue>) {
    let n = 128usize;
    let (a, b) = (pseudo_random(n * n, 3), pseudo_random(n * n, 4));
    let want = reference::matmul(&a, &b, n);
    let (da, db) = (q.upload(&a).unwrap(), q.upload(&b).unwrap());
    for bs in [8u32, 16, 32] {
        for (how, module) in fixed(q, "matmul_param", &[(4, &bs.to_string())]) {
            let f = module.load_function("matmul_param").unwrap();
            let dc: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; n * n]).unwrap();
            let cfg = crate::matmul::config(n, bs);
            let (mut x, mut y, mut z) = (
                da.device_address(),
                db.device_address(),
                dc.device_address(),
            );
            let (mut m, mut s) = (n as i32, bs as i32);
            launch(q, &f, cfg, params!(x, y, z, m, s));
            let c = q.download(&dc).unwrap();
            let err = max_rel_err(&c, &want);
            assert!(err < 1e-5, "{how}, block {bs}: relative error {err}");
        }
    }
}

/// conv3x3_param with its size and Sobel's coefficients (an aggregate)
/// fixed: the PTX way (LTO refuses aggregates) computes what the CPU does.
pub(super) fn convolution_with_its_arguments_fixed_matches_cpu(q: &Arc<Queue>) {
    let (h, w) = (67usize, 130usize);
    let img = pseudo_random(h * w, 5);
    let sobel = [[1.0f32, 0.0, -1.0], [2.0, 0.0, -2.0], [1.0, 0.0, -1.0]];
    let want = reference::conv3x3(&img, h, w, &sobel);
    let bytes: String = sobel
        .iter()
        .flatten()
        .flat_map(|f| f.to_le_bytes())
        .map(|b| format!("{b:02x}"))
        .collect();
    let coeff = format!("bytes:{bytes}");
    let din = q.upload(&img).unwrap();
    let [(first, _), (how, module)] = fixed(
        q,
        "conv3x3_param",
        &[(2, &h.to_string()), (3, &w.to_string()), (4, &coeff)],
    );
    assert_eq!((first.as_str(), how.as_str()), ("generic", "PTX"));
    let f = module.load_function("conv3x3_param").unwrap();
    let out: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; h * w]).unwrap();
    let cfg = LaunchConfig::new(
        (w.div_ceil(16) as u32, h.div_ceil(16) as u32, 1),
        (16, 16, 1),
    );
    let (mut x, mut y) = (din.device_address(), out.device_address());
    let (mut hh, mut ww) = (h as i32, w as i32);
    // The coefficients passed are zeros: the fixed ones are in the code.
    let mut c = [0f32; 9];
    launch(q, &f, cfg, params!(x, y, hh, ww, c));
    let got = q.download(&out).unwrap();
    let err = max_rel_err(&got, &want);
    assert!(err < 1e-6, "PTX: relative error {err}");
}

/// An adapting bundle says why it does not adapt a kernel's launches, in
/// `stats()` (and once to `tracing`): a kernel whose parameters are all
/// pointers (nothing to fix), one of an emulated image with constants (the
/// values travel with each launch), and one whose only scalar argument
/// takes more values than the policy watches (it keeps changing). Results
/// are read back: the generic code ran.
pub(super) fn adapting_bundles_say_why_a_kernel_is_not_adapted(q: &Arc<Queue>) {
    use ptxspec::bundle::AdaptiveArguments;
    use ptxspec::stats::NotAdapted;
    let count = |why: NotAdapted| {
        ptxspec::stats()
            .not_adapted
            .iter()
            .find(|(w, _)| *w == why)
            .map_or(0, |(_, n)| *n)
    };
    let src = r#"
extern "C" __global__ void only_pointers(float *x) { x[threadIdx.x] += 1.0f; }
extern "C" __global__ void add_n(float *x, int n) { x[threadIdx.x] += (float)n; }
"#;
    let policy = AdaptiveArguments::all()
        .with_after(std::time::Duration::ZERO)
        .with_max_distinct(3);
    let input = ptxspec::kernel_bundle_from_source(&[("why.cu", src)], &Default::default())
        .unwrap()
        .with_mode(ptxspec::SpecMode::Native)
        .with_adaptive_arguments(policy.clone());
    let exe = build(&input).unwrap();
    let x = q.upload(&[0f32; 32]).unwrap();
    let cfg = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    let (nothing, changing) = (
        count(NotAdapted::NothingToFix),
        count(NotAdapted::ArgumentsKeepChanging),
    );
    q.submit(|h| {
        h.use_kernel_bundle(&exe)?;
        h.launch("only_pointers", cfg, &[Arg::buffer(&x)])
    })
    .unwrap();
    assert_eq!(count(NotAdapted::NothingToFix), nothing + 1);
    // n = 1..=5: past 3 distinct values it is no longer watched.
    for n in 1..=5 {
        q.submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch("add_n", cfg, &[Arg::buffer(&x), Arg::value(n)])
        })
        .unwrap();
    }
    assert_eq!(count(NotAdapted::ArgumentsKeepChanging), changing + 1);
    assert_eq!(q.download(&x).unwrap(), vec![16f32; 32]);
    // The example matmul, emulated: its block size travels with launches.
    let travel = count(NotAdapted::ValuesTravelWithLaunches);
    let matmul = ptxspec::get_kernel_bundle_for(&[ptxspec::KernelId::new("matmul")])
        .unwrap()
        .with_mode(ptxspec::SpecMode::Emulated)
        .with_adaptive_arguments(policy);
    let exe = build(&matmul).unwrap();
    let n = 32usize;
    let (a, b) = (
        q.upload(&vec![1f32; n * n]).unwrap(),
        q.upload(&vec![1f32; n * n]).unwrap(),
    );
    let c: DeviceBuffer<f32> = q.alloc_zeros(n * n).unwrap();
    q.submit(|h| {
        h.use_kernel_bundle(&exe)?;
        h.launch(
            "matmul",
            crate::matmul::config(n, 16),
            &[
                Arg::buffer(&a),
                Arg::buffer(&b),
                Arg::buffer(&c),
                Arg::value(n as i32),
            ],
        )
    })
    .unwrap();
    assert_eq!(count(NotAdapted::ValuesTravelWithLaunches), travel + 1);
    assert!(q.download(&c).unwrap().iter().all(|&v| v == n as f32));
}

/// The baselines' `matmul_param` arguments: C = A·B of n×n row-major
/// matrices, computed in blocks of `bs`.
pub(super) fn matmul_args<'a>(
    a: &'a DeviceBuffer<f32>,
    b: &'a DeviceBuffer<f32>,
    c: &'a DeviceBuffer<f32>,
    n: usize,
    bs: u32,
) -> [Arg<'a>; 5] {
    [
        Arg::buffer(a),
        Arg::buffer(b),
        Arg::buffer(c),
        Arg::value(n as i32),
        Arg::value(bs as i32),
    ]
}

/// `src` compiled with LTO-IR into a bundle that adapts to every argument
/// set at once and keeps each variant untimed (the guard's own test times
/// them).
fn untimed_adapting(name: &str, src: &str) -> ptxspec::KernelBundle<ptxspec::Input> {
    ptxspec::kernel_bundle_from_source(
        &[(name, src)],
        &ptxspec::SourceOptions::default().with_lto(true),
    )
    .unwrap()
    .with_adaptive_arguments(
        ptxspec::bundle::AdaptiveArguments::all()
            .with_after(std::time::Duration::ZERO)
            .with_timing(false),
    )
}

/// A bundle with adaptive arguments (the baselines compiled from source
/// with LTO-IR): launches of matmul_param whose block size and size change
/// on every launch, then recur, then change again — each result read back
/// and checked against the CPU's, so that no launch ever ran a variant
/// made for other arguments; the recurring sets are linked in the
/// background and later launches run them (the `ptxspec::adapt` variants,
/// counted by the wall time of a launch set before and after).
pub(super) fn adaptive_arguments_never_run_the_wrong_variant(q: &Arc<Queue>) {
    // Untimed: every variant runs once linked (the guard is the next
    // test's), so that each set's launches are known to run one.
    let input = untimed_adapting(
        "baselines.cu",
        include_str!("../../kernels/bench/baselines.cu"),
    );
    let exe = build(&input).unwrap();
    let n_max = 128usize;
    let (a, b) = (
        pseudo_random(n_max * n_max, 6),
        pseudo_random(n_max * n_max, 7),
    );
    let run = |n: usize, bs: u32| {
        // The matrices' leading n×n corner: A and B as n×n row-major.
        let (sa, sb): (Vec<f32>, Vec<f32>) = (
            (0..n * n).map(|i| a[(i / n) * n_max + i % n]).collect(),
            (0..n * n).map(|i| b[(i / n) * n_max + i % n]).collect(),
        );
        let (xa, xb) = (q.upload(&sa).unwrap(), q.upload(&sb).unwrap());
        let dc: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; n * n]).unwrap();
        let cfg = crate::matmul::config(n, bs);
        q.submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch("matmul_param", cfg, &matmul_args(&xa, &xb, &dc, n, bs))
        })
        .unwrap();
        let c = q.download(&dc).unwrap();
        let want = reference::matmul(&sa, &sb, n);
        let err = max_rel_err(&c, &want);
        assert!(err < 1e-5, "n {n}, block {bs}: relative error {err}");
    };
    let before = ptxspec::stats();
    // Changing on every launch, then recurring (linked in the background
    // meanwhile), then changing again: each launch's result is right.
    let sets = [(32, 8), (64, 16), (128, 32), (64, 8), (32, 16), (128, 8)];
    for round in 0..40 {
        for &(n, bs) in &sets {
            run(n, bs);
        }
        if round % 10 == 9 {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    let after = ptxspec::stats();
    let variants = after.adapted_variants - before.adapted_variants;
    let adapted = after.adapted_launches - before.adapted_launches;
    eprintln!("adaptive arguments: {variants} variants, {adapted} of 240 launches adapted");
    assert_eq!(variants, 4, "the policy's bound of variants");
    // Once the four are linked (as long as a loaded machine takes), each
    // round runs four of its six sets adapted: the four with variants.
    let started = std::time::Instant::now();
    loop {
        let round = ptxspec::stats().adapted_launches;
        for &(n, bs) in &sets {
            run(n, bs);
        }
        let adapted = ptxspec::stats().adapted_launches - round;
        if adapted == 4 {
            break;
        }
        assert!(
            adapted < 4,
            "{adapted} of a round's 6 launches ran a variant"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "{adapted} of a round's launches adapted after two minutes"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A graph captured now: its nodes run the variants made for their
    // arguments ((64, 16) has one; (32, 16) has none), and replays give the
    // right results.
    let before = ptxspec::stats();
    let corner = |n: usize| -> (Vec<f32>, Vec<f32>) {
        (
            (0..n * n).map(|i| a[(i / n) * n_max + i % n]).collect(),
            (0..n * n).map(|i| b[(i / n) * n_max + i % n]).collect(),
        )
    };
    let nodes: Vec<(usize, u32)> = vec![(64, 16), (32, 16)];
    let inputs: Vec<_> = nodes
        .iter()
        .map(|&(n, _)| {
            let (sa, sb) = corner(n);
            let want = reference::matmul(&sa, &sb, n);
            let (xa, xb) = (q.upload(&sa).unwrap(), q.upload(&sb).unwrap());
            let dc: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; n * n]).unwrap();
            (xa, xb, dc, want)
        })
        .collect();
    // A graph of one matmul_param launch per node, through `exe`.
    let capture = |exe: &KernelBundle<Executable>| {
        q.capture(|c| {
            for (&(n, bs), (xa, xb, dc, _)) in nodes.iter().zip(&inputs) {
                let cfg = crate::matmul::config(n, bs);
                c.submit(|h| {
                    h.use_kernel_bundle(exe)?;
                    h.launch("matmul_param", cfg, &matmul_args(xa, xb, dc, n, bs))
                })?;
            }
            Ok(())
        })
        .unwrap()
    };
    let mut graph = capture(&exe);
    let captured = ptxspec::stats().adapted_launches - before.adapted_launches;
    assert_eq!(captured, 1, "one node runs a variant");
    for replay in 0..3 {
        graph.launch().unwrap();
        for (&(n, bs), (_, _, dc, want)) in nodes.iter().zip(&inputs) {
            let err = max_rel_err(&q.download(dc).unwrap(), want);
            assert!(
                err < 1e-5,
                "replay {replay}, n {n}, block {bs}: relative error {err}"
            );
        }
    }
    drop(graph);
    // A graph captured through a bundle that has made no variant yet: its
    // nodes ask for the variants of their arguments at the capture, run
    // the generic code meanwhile, and switch once linked — every replay
    // right.
    let fresh = build(&input).unwrap();
    let before = ptxspec::stats();
    let mut graph = capture(&fresh);
    let started = std::time::Instant::now();
    let mut replays = 0;
    loop {
        graph.launch().unwrap();
        replays += 1;
        for (&(n, bs), (_, _, dc, want)) in nodes.iter().zip(&inputs) {
            let err = max_rel_err(&q.download(dc).unwrap(), want);
            assert!(
                err < 1e-5,
                "replay {replays}, n {n}, block {bs}: relative error {err}"
            );
        }
        let switched = ptxspec::stats().adapted_graph_nodes - before.adapted_graph_nodes;
        if switched == 2 {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{switched} of 2 nodes switched after {replays} replays"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    eprintln!("adaptive arguments, graph: both nodes switched after {replays} replays");
    drop(graph);
    // The convolution takes its coefficients as an aggregate (never
    // watched; LTO does not serve it): its sizes are adapted to the PTX
    // way, and the coefficients, changed on every launch, still reach the
    // adapted code.
    let before = ptxspec::stats();
    let (h, w) = (40usize, 70usize);
    let img = pseudo_random(h * w, 8);
    let din = q.upload(&img).unwrap();
    for launch in 0..60 {
        let k = launch as f32;
        let coeff = [[1.0, k, -1.0], [2.0, 0.5, -2.0], [1.0, 0.0, -k]];
        let out: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; h * w]).unwrap();
        let cfg = LaunchConfig::new(
            (w.div_ceil(16) as u32, h.div_ceil(16) as u32, 1),
            (16, 16, 1),
        );
        let flat: [f32; 9] = bytemuck::cast(coeff);
        q.submit(|hd| {
            hd.use_kernel_bundle(&exe)?;
            hd.launch(
                "conv3x3_param",
                cfg,
                &[
                    Arg::buffer(&din),
                    Arg::buffer(&out),
                    Arg::value(h as i32),
                    Arg::value(w as i32),
                    Arg::value(flat),
                ],
            )
        })
        .unwrap();
        let got = q.download(&out).unwrap();
        let want = reference::conv3x3(&img, h, w, &coeff);
        let err = max_rel_err(&got, &want);
        assert!(err < 1e-5, "launch {launch}: relative error {err}");
        if launch % 20 == 19 {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    let after = ptxspec::stats();
    let (variants, adapted) = (
        after.adapted_variants - before.adapted_variants,
        after.adapted_launches - before.adapted_launches,
    );
    eprintln!(
        "adaptive arguments, convolution: {variants} variant, {adapted} of 60 launches adapted"
    );
    assert_eq!(variants, 1);
    assert!(adapted >= 20, "{adapted}");
}

/// A kernel whose last parameter it never reads: a variant fixing it is the
/// generic code, which a guard must not keep.
const TWICE_PLUS_ONE: &str = r#"
extern "C" __global__ void twice_plus_one(float *x, int n, int unused) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 2.0f * x[i] + 1.0f;
}
"#;

/// The baselines compiled from source with LTO-IR: built plain, and with
/// adaptive arguments (guarded, linked at once).
pub(super) fn baselines_generic_and_adaptive()
-> (KernelBundle<Executable>, KernelBundle<Executable>) {
    use ptxspec::bundle::AdaptiveArguments;
    let src = include_str!("../../kernels/bench/baselines.cu");
    let input = ptxspec::kernel_bundle_from_source(
        &[("baselines.cu", src)],
        &ptxspec::SourceOptions::default().with_lto(true),
    )
    .unwrap();
    let generic = build(&input).unwrap();
    let adaptive =
        build(&input.with_adaptive_arguments(
            AdaptiveArguments::all().with_after(std::time::Duration::ZERO),
        ))
        .unwrap();
    (generic, adaptive)
}

/// `twice_plus_one` of [`TWICE_PLUS_ONE`] built adapting, at once, its
/// third argument — which the kernel never reads: its variant is the
/// generic code.
pub(super) fn twice_plus_one_adapting() -> KernelBundle<Executable> {
    use ptxspec::bundle::AdaptiveArguments;
    let input = ptxspec::kernel_bundle_from_source(
        &[("graph_guard.cu", TWICE_PLUS_ONE)],
        &ptxspec::SourceOptions::default().with_lto(true),
    )
    .unwrap()
    .with_adaptive_arguments(AdaptiveArguments::only(&[2]).with_after(std::time::Duration::ZERO));
    build(&input).unwrap()
}

/// Sixteen launches of `twice_plus_one` on `x` (its `n` floats, `n` a
/// multiple of 256) as one graph: x = 2^16 - 1 after each replay from 0
/// (exact in f32).
pub(super) fn twice_plus_one_graph<'m>(
    q: &Queue,
    exe: &KernelBundle<Executable>,
    x: &'m DeviceBuffer<f32>,
    n: usize,
) -> ptxspec::Graph<'m> {
    let cfg = LaunchConfig::new(((n / 256) as u32, 1, 1), (256, 1, 1));
    let args = [Arg::buffer(x), Arg::value(n as i32), Arg::value(7i32)];
    launches_as_graph(q, exe, 16, "twice_plus_one", cfg, &args)
}

/// Four launches of `exe`'s `matmul_param` (c = a b, `n` × `n`, block 16)
/// as one graph.
pub(super) fn matmul_graph<'m>(
    q: &Queue,
    exe: &KernelBundle<Executable>,
    [a, b, c]: [&'m DeviceBuffer<f32>; 3],
    n: usize,
) -> ptxspec::Graph<'m> {
    let (cfg, args) = (crate::matmul::config(n, 16), matmul_args(a, b, c, n, 16));
    launches_as_graph(q, exe, 4, "matmul_param", cfg, &args)
}

/// `times` launches of `exe`'s `kernel` with `args`, captured as one graph.
fn launches_as_graph<'m>(
    q: &Queue,
    exe: &KernelBundle<Executable>,
    times: usize,
    kernel: &str,
    cfg: LaunchConfig,
    args: &[Arg<'m>],
) -> ptxspec::Graph<'m> {
    q.capture(|c| {
        for _ in 0..times {
            c.submit(|h| {
                h.use_kernel_bundle(exe)?;
                h.launch(kernel, cfg, args)
            })?;
        }
        Ok(())
    })
    .unwrap()
}

/// `a`'s time over `b`'s: each timed seven times, in turns, the medians'
/// ratio.
fn median_ratio(mut a: impl FnMut() -> f32, mut b: impl FnMut() -> f32) -> f32 {
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        tb.push(b());
        ta.push(a());
    }
    ta.sort_by(f32::total_cmp);
    tb.sort_by(f32::total_cmp);
    ta[3] / tb[3]
}

/// The guard of adaptive arguments: a variant runs in place of the
/// generic code only once its trial timed it faster. A variant whose code
/// is the generic code's (it fixes an argument the kernel never reads) is
/// dropped — counted as not faster, its launches back on the generic code —
/// and the matmul with its size and block size fixed is kept (through LTO
/// or PTX, whichever ran faster) and then runs faster than the generic
/// code, timed here apart from the trial. Every launch's result is right.
pub(super) fn adaptive_variants_are_kept_only_when_faster(q: &Arc<Queue>) {
    use ptxspec::bundle::AdaptiveArguments;
    use ptxspec::stats::NotAdapted;
    let not_faster = || {
        let s = ptxspec::stats();
        let reason = s
            .not_adapted
            .iter()
            .find(|(w, _)| *w == NotAdapted::NotFaster)
            .map_or(0, |(_, n)| *n);
        (s.variants_not_faster, reason, s.adapted_variants)
    };
    let src = TWICE_PLUS_ONE;
    let policy = AdaptiveArguments::only(&[2]).with_after(std::time::Duration::ZERO);
    let input = ptxspec::kernel_bundle_from_source(
        &[("guard.cu", src)],
        &ptxspec::SourceOptions::default().with_lto(true),
    )
    .unwrap()
    .with_adaptive_arguments(policy);
    let exe = build(&input).unwrap();
    let n = 1 << 22;
    let mut x = q.upload(&vec![0f32; n]).unwrap();
    let cfg = LaunchConfig::new(((n / 256) as u32, 1, 1), (256, 1, 1));
    let before = not_faster();
    let started = std::time::Instant::now();
    let mut launches = 0u32;
    while not_faster().0 == before.0 {
        q.submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch(
                "twice_plus_one",
                cfg,
                &[Arg::buffer(&x), Arg::value(n as i32), Arg::value(7i32)],
            )
        })
        .unwrap();
        launches += 1;
        // Every 16 launches the values are checked (x = 2^16 - 1, exact in
        // f32), and start again from 0.
        if launches.is_multiple_of(16) {
            let got = q.download(&x).unwrap();
            let want = (1u32 << 16) as f32 - 1.0;
            assert!(got.iter().all(|&v| v == want), "launch {launches}");
            x = q.upload(&vec![0f32; n]).unwrap();
        }
        assert!(
            ptxspec::stats().adapted_variants == before.2,
            "a variant that is the generic code was kept"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "no verdict after {launches} launches"
        );
    }
    let after = not_faster();
    assert_eq!(after.0, before.0 + 1, "one variant dropped");
    assert_eq!(after.1, before.1 + 1, "said as NotAdapted::NotFaster");
    assert_eq!(after.2, before.2, "none kept");
    eprintln!(
        "adaptive guard: the variant that is the generic code dropped after {launches} launches"
    );

    // The matmul: its variant is faster, and kept.
    let (generic, adaptive) = baselines_generic_and_adaptive();
    let n = 512usize;
    let (a, b) = (pseudo_random(n * n, 11), pseudo_random(n * n, 12));
    let want = reference::matmul(&a, &b, n);
    let (da, db) = (q.upload(&a).unwrap(), q.upload(&b).unwrap());
    let dc: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; n * n]).unwrap();
    let cfg = crate::matmul::config(n, 16);
    let mm = |exe: &KernelBundle<Executable>| {
        q.submit(|h| {
            h.use_kernel_bundle(exe)?;
            h.launch("matmul_param", cfg, &matmul_args(&da, &db, &dc, n, 16))
        })
        .unwrap()
    };
    let before = ptxspec::stats();
    let started = std::time::Instant::now();
    let mut launches = 0u32;
    while ptxspec::stats().adapted_launches == before.adapted_launches {
        mm(&adaptive);
        launches += 1;
        if launches.is_multiple_of(8) {
            let err = max_rel_err(&q.download(&dc).unwrap(), &want);
            assert!(err < 1e-5, "launch {launches}: relative error {err}");
        }
        let s = ptxspec::stats();
        assert_eq!(
            s.variants_not_faster, before.variants_not_faster,
            "the matmul's variant was dropped"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "no variant kept after {launches} launches"
        );
    }
    let after = ptxspec::stats();
    assert_eq!(after.adapted_variants, before.adapted_variants + 1);
    assert!(after.timed_launches >= before.timed_launches + 30);
    // Kernel time, in turns: the kept variant against the generic code.
    let time = |exe: &KernelBundle<Executable>| {
        let start = q.record_event().unwrap();
        for _ in 0..20 {
            mm(exe);
        }
        let end = q.record_event().unwrap();
        end.synchronize().unwrap();
        start.elapsed_ms(&end).unwrap()
    };
    let ratio = median_ratio(|| time(&adaptive), || time(&generic));
    eprintln!(
        "adaptive guard: the matmul's variant kept after {launches} launches, × {ratio:.3} of the generic code"
    );
    assert!(
        ratio < 0.97,
        "the kept variant runs × {ratio:.3} of the generic code"
    );
    let err = max_rel_err(&q.download(&dc).unwrap(), &want);
    assert!(err < 1e-5, "relative error {err}");
}

/// A graph that only replays adapts, guarded: its nodes wait for their
/// variants' links (asked for at the capture), then its replays are timed
/// in turns — the nodes on their variants against the graph as captured —
/// and the faster kept. No launch happens outside the graph. A variant
/// whose code is the generic code's (it fixes an argument the kernel never
/// reads) leaves the graph as captured, counted as not faster; the matmul
/// with its sizes fixed is kept, and the graph then replays faster than a
/// graph of the generic code, timed here apart from the trial. Every
/// replay's result is right.
pub(super) fn a_graph_that_only_replays_adapts_guarded(q: &Arc<Queue>) {
    let exe = twice_plus_one_adapting();
    let n = 1 << 20;
    let x = q.upload(&vec![0f32; n]).unwrap();
    let before = ptxspec::stats();
    let mut graph = twice_plus_one_graph(q, &exe, &x, n);
    let zeros = vec![0f32; n];
    let started = std::time::Instant::now();
    let mut replays = 0u32;
    loop {
        let s = ptxspec::stats();
        if s.variants_not_faster > before.variants_not_faster {
            break;
        }
        assert_eq!(
            s.adapted_graph_nodes, before.adapted_graph_nodes,
            "a variant that is the generic code was kept"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "no verdict after {replays} replays"
        );
        graph.launch().unwrap();
        replays += 1;
        if replays.is_multiple_of(8) {
            let got = q.download(&x).unwrap();
            let want = (1u32 << 16) as f32 - 1.0;
            assert!(got.iter().all(|&v| v == want), "replay {replays}");
        }
        q.write(&x, 0, &zeros).unwrap();
    }
    let after = ptxspec::stats();
    assert_eq!(
        after.variants_not_faster,
        before.variants_not_faster + 16,
        "every node left as captured"
    );
    assert!(after.timed_replays >= before.timed_replays + 30);
    assert_eq!(
        after.timed_launches, before.timed_launches,
        "no launch timed"
    );
    assert_eq!(
        after.variants_undecided, before.variants_undecided,
        "a variant linked and decided by its graph is not undecided"
    );
    eprintln!("graph guard: the variant that is the generic code dropped after {replays} replays");
    drop(graph);

    // The matmul: its variant is faster, and the graph keeps it.
    let (generic, adaptive) = baselines_generic_and_adaptive();
    let n = 512usize;
    let (a, b) = (pseudo_random(n * n, 13), pseudo_random(n * n, 14));
    let want = reference::matmul(&a, &b, n);
    let (da, db) = (q.upload(&a).unwrap(), q.upload(&b).unwrap());
    let dc: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; n * n]).unwrap();
    let graph_of = |exe: &KernelBundle<Executable>| matmul_graph(q, exe, [&da, &db, &dc], n);
    let before = ptxspec::stats();
    let mut adapting = graph_of(&adaptive);
    let started = std::time::Instant::now();
    let mut replays = 0u32;
    while ptxspec::stats().adapted_graph_nodes == before.adapted_graph_nodes {
        adapting.launch().unwrap();
        replays += 1;
        if replays.is_multiple_of(8) {
            let err = max_rel_err(&q.download(&dc).unwrap(), &want);
            assert!(err < 1e-5, "replay {replays}: relative error {err}");
        }
        assert_eq!(
            ptxspec::stats().variants_not_faster,
            before.variants_not_faster,
            "the matmul's variant was dropped"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "the graph kept no variant after {replays} replays"
        );
    }
    let after = ptxspec::stats();
    assert_eq!(after.adapted_graph_nodes, before.adapted_graph_nodes + 4);
    assert_eq!(
        after.timed_launches, before.timed_launches,
        "no launch timed"
    );
    // Replay time, in turns: the adapted graph against the generic one.
    let mut plain = graph_of(&generic);
    let time = |g: &mut ptxspec::Graph<'_>| {
        let start = q.record_event().unwrap();
        for _ in 0..10 {
            g.launch().unwrap();
        }
        let end = q.record_event().unwrap();
        end.synchronize().unwrap();
        start.elapsed_ms(&end).unwrap()
    };
    let ratio = median_ratio(|| time(&mut adapting), || time(&mut plain));
    eprintln!(
        "graph guard: the matmul's variants kept after {replays} replays, × {ratio:.3} of the generic graph"
    );
    assert!(
        ratio < 0.97,
        "the adapted graph replays × {ratio:.3} of the generic one"
    );
    let err = max_rel_err(&q.download(&dc).unwrap(), &want);
    assert!(err < 1e-5, "relative error {err}");
}

/// A kernel taking an empty tag by value (as `std::bool_constant` is
/// passed) adapts through LTO: untimed, its first route is LTO (the tag
/// passes through the wrapper), and once the variant runs every launch's
/// result is the generic kernel's.
pub(super) fn a_kernel_with_an_empty_tag_adapts_through_lto(q: &Arc<Queue>) {
    let src = r#"
template <bool B> struct bool_constant { static constexpr bool value = B; };
__global__ void scale(float *x, int n, bool_constant<true> t) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = decltype(t)::value ? 2.0f * x[i] + 1.0f : x[i];
}
"#;
    let input = untimed_adapting("tag.cu", src);
    let exe = build(&input).unwrap();
    let n = 1000usize;
    let cfg = LaunchConfig::new((4, 1, 1), (256, 1, 1));
    let before = ptxspec::stats();
    let started = std::time::Instant::now();
    let mut launches = 0;
    loop {
        let x = q.upload(&vec![3f32; n]).unwrap();
        q.submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch(
                "scale",
                cfg,
                &[Arg::buffer(&x), Arg::value(n as i32), Arg::value([1u8])],
            )
        })
        .unwrap();
        launches += 1;
        assert_eq!(q.download(&x).unwrap(), vec![7f32; n], "launch {launches}");
        let s = ptxspec::stats();
        if s.adapted_launches > before.adapted_launches {
            break;
        }
        assert_eq!(
            s.not_adapted, before.not_adapted,
            "the kernel was not adapted"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "no variant after {launches} launches"
        );
    }
    eprintln!("empty tag: the LTO variant ran after {launches} launches");
}

/// `PTXSPEC_TIER_PROFILE` and adaptive arguments: a process records each
/// variant it made (its arguments), and the next process naming the
/// profile makes those variants at once — here with a policy that would
/// wait an hour before linking anything — from the shared disk cache;
/// without the profile it makes none.
pub(super) fn adaptive_arguments_warm_the_next_process(q: &Arc<Queue>) {
    const PART: &str = "PTXSPEC_TEST_ADAPT_PROFILE";
    if let Some(part) = std::env::var_os(PART) {
        use ptxspec::bundle::AdaptiveArguments;
        let after = match part == "first" {
            true => std::time::Duration::ZERO,
            false => std::time::Duration::from_secs(3600),
        };
        let input = ptxspec::kernel_bundle_from_source(
            &[(
                "baselines.cu",
                include_str!("../../kernels/bench/baselines.cu"),
            )],
            &ptxspec::SourceOptions::default().with_lto(true),
        )
        .unwrap()
        .with_adaptive_arguments(
            AdaptiveArguments::all()
                .with_after(after)
                .with_timing(false),
        );
        let exe = build(&input).unwrap();
        // Prepared (issue 63's first step): the kernels' code and the
        // profile's variant are ready before the first launch, which then
        // runs the variant.
        let prepared = part == "prepared";
        if prepared {
            let kernels = q
                .prepare(&exe, std::time::Duration::from_secs(120))
                .unwrap();
            assert!(kernels >= 1, "no kernel prepared");
        }
        let n = 64usize;
        let (a, b) = (pseudo_random(n * n, 9), pseudo_random(n * n, 10));
        let want = reference::matmul(&a, &b, n);
        let (da, db) = (q.upload(&a).unwrap(), q.upload(&b).unwrap());
        // Where a variant is expected, as long as a loaded machine takes
        // (the loop ends once one ran); where none is, five seconds of
        // launches make none.
        let expected = std::env::var_os("PTXSPEC_TEST_EXPECT_VARIANT").is_some();
        let bound = std::time::Duration::from_secs(if expected { 120 } else { 5 });
        let started = std::time::Instant::now();
        let mut launches = 0;
        while ptxspec::stats().adapted_launches == 0 && started.elapsed() < bound {
            let dc: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; n * n]).unwrap();
            let cfg = LaunchConfig::new((4, 4, 1), (16, 16, 1)).with_shared_mem(2 * 16 * 16 * 4);
            q.submit(|h| {
                h.use_kernel_bundle(&exe)?;
                h.launch("matmul_param", cfg, &matmul_args(&da, &db, &dc, n, 16))
            })
            .unwrap();
            let err = max_rel_err(&q.download(&dc).unwrap(), &want);
            assert!(err < 1e-5, "launch {launches}: relative error {err}");
            launches += 1;
            if prepared {
                assert_eq!(
                    ptxspec::stats().adapted_launches,
                    1,
                    "the first launch after prepare ran the variant"
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        println!("variants: {}", ptxspec::stats().adapted_variants);
        std::process::exit(0);
    }
    let dir = std::env::temp_dir().join(format!("ptxspec-adapt-profile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("profile.txt");
    let run = |part: &str, with_profile: bool| {
        let mut c = child::this_test_again("adaptive_arguments_warm_the_next_process");
        c.env(PART, part)
            .env_remove("PTXSPEC_TEST_EXPECT_VARIANT")
            .env("PTXSPEC_CACHE_DIR", dir.join("disk"))
            .env_remove("PTXSPEC_REMOTE_CACHE");
        match with_profile {
            true => c.env("PTXSPEC_TIER_PROFILE", &profile),
            false => c.env_remove("PTXSPEC_TIER_PROFILE"),
        };
        if part == "first" || with_profile {
            c.env("PTXSPEC_TEST_EXPECT_VARIANT", "1");
        }
        child::said(&c.output().unwrap(), "variants: ")
    };
    assert_eq!(run("first", true), "variants: 1");
    let text = std::fs::read_to_string(&profile).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains("matmul_param") && l.contains(" args=3:40000000,4:10000000")),
        "{text}"
    );
    assert_eq!(run("second", true), "variants: 1", "warmed by the profile");
    assert_eq!(
        run("prepared", true),
        "variants: 1",
        "prepared from the profile"
    );
    assert_eq!(
        run("second", false),
        "variants: 0",
        "an hour's wait without it"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Divisions by fixed arguments made multiplications (the PTX way, issue
/// 55.2) give what the division gives on the GPU, bit for bit: quotients and
/// remainders, signed and unsigned, 32 and 64 bits, of 2^20 dividends (the
/// extremes, the divisor's multiples ± 1 and random words) by divisors that
/// are powers of two, odd, negative, 1, −1 and the extremes.
pub(super) fn divisions_by_fixed_arguments_match_the_division(q: &Arc<Queue>) {
    use ptxspec_core::arguments::{FixedArguments, KernelParams};
    const SRC: &str = r#"
extern "C" __global__ void divides(long long *out, const long long *in, int n, int c, unsigned u, long long w, unsigned long long v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    long long x = in[i];
    int s = (int)x; unsigned t = (unsigned)x;
    out[8 * i + 0] = s / c;   out[8 * i + 1] = s % c;
    out[8 * i + 2] = t / u;   out[8 * i + 3] = t % u;
    out[8 * i + 4] = x / w;   out[8 * i + 5] = x % w;
    out[8 * i + 6] = (long long)((unsigned long long)x / v);
    out[8 * i + 7] = (long long)((unsigned long long)x % v);
  }
}
"#;
    let opts = ptxspec_core::compile::CompileOptions {
        arch: "compute_80".into(),
        ..Default::default()
    };
    let header = ptxspec_core::compile::header_dir(None).unwrap();
    let ptx = ptxspec_core::compile::compile_unit("divides.cu", SRC, &opts, &header)
        .unwrap()
        .ptx;
    let params = KernelParams::from_ptx(&ptx, "divides").unwrap();
    const N: usize = 1 << 20;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut words: Vec<i64> = (0..N)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng as i64
        })
        .collect();
    for (i, x) in [
        0,
        1,
        -1,
        i64::MIN,
        i64::MAX,
        i32::MIN as i64,
        i32::MAX as i64,
        u32::MAX as i64,
    ]
    .into_iter()
    .enumerate()
    {
        words[i] = x;
    }
    let input = q.upload(&words).unwrap();
    let load = |code: String| {
        q.context()
            .load_module(ptxspec::cudarc::nvrtc::Ptx::from_src(code))
            .unwrap()
            .load_function("divides")
            .unwrap()
    };
    let generic = load(ptx.clone());
    let cfg = LaunchConfig::new(((N / 256) as u32, 1, 1), (256, 1, 1));
    for (c, u, w, v) in [
        (768i32, 12u32, -3i64, 64u64),
        (-7, 1, 4096, 1_000_003),
        (1, 0x8000_0000, -1, u64::MAX),
        (-1, 0xffff_ffff, i64::MIN, 3),
        (i32::MIN, 641, 6_700_417, 1 << 63),
    ] {
        let values = [
            (3, params.value(3, &c.to_string()).unwrap()),
            (4, params.value(4, &u.to_string()).unwrap()),
            (5, params.value(5, &w.to_string()).unwrap()),
            (6, params.value(6, &v.to_string()).unwrap()),
        ];
        let fixed = FixedArguments::new(&params, values.to_vec()).unwrap();
        let rewritten = fixed.in_ptx(&ptx).unwrap();
        assert!(!rewritten.contains("div.s32"), "a division left");
        let special = load(rewritten);
        let mut results = Vec::new();
        for f in [&generic, &special] {
            let out: DeviceBuffer<i64> = q.alloc_zeros(8 * N).unwrap();
            let (mut o, mut x) = (out.device_address(), input.device_address());
            let (mut n, mut cc, mut uu, mut ww, mut vv) = (N as i32, c, u, w, v);
            launch(q, f, cfg, params!(o, x, n, cc, uu, ww, vv));
            results.push(q.download(&out).unwrap());
        }
        assert!(
            results[0] == results[1],
            "divisors {c} {u} {w} {v}: the rewritten divisions differ"
        );
    }
}

/// Issue 68: a process pinned to a table of choices times nothing and runs
/// exactly the table's choices. A first phase adapts as usual until its
/// trial decides (a choice made, its digest); pinned to that table, a
/// fresh bundle of the same kernel takes the same choice untimed (no timed
/// launch, the digest unchanged); an argument set the table does not hold
/// runs the generic code, untimed. Every output is right.
pub(super) fn pinned_choices_time_nothing_and_repeat_a_run(q: &Arc<Queue>) {
    use ptxspec::bundle::AdaptiveArguments;
    let src = r#"
extern "C" __global__ void scaled_sum(float *out, const float *in, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    for (int c = 0; c < cols; ++c) acc += in[row * cols + c];
    out[row] = acc;
}
"#;
    let bundle = || {
        let input = ptxspec::kernel_bundle_from_source(
            &[("pinned.cu", src)],
            &ptxspec::SourceOptions::default().with_lto(true),
        )
        .unwrap()
        .with_adaptive_arguments(
            AdaptiveArguments::only(&[2]).with_after(std::time::Duration::ZERO),
        );
        build(&input).unwrap()
    };
    let rows = 1 << 14;
    let run = |exe: &KernelBundle<Executable>, cols: i32| {
        let input: Vec<f32> = (0..rows * cols as usize).map(|i| (i % 7) as f32).collect();
        let dx = q.upload(&input).unwrap();
        let out: DeviceBuffer<f32> = q.alloc_zeros(rows).unwrap();
        q.submit(|h| {
            h.use_kernel_bundle(exe)?;
            h.launch(
                "scaled_sum",
                LaunchConfig::new(((rows / 128) as u32, 1, 1), (128, 1, 1)),
                &[Arg::buffer(&out), Arg::buffer(&dx), Arg::value(cols)],
            )
        })
        .unwrap();
        let got = q.download(&out).unwrap();
        for (r, v) in got.iter().enumerate() {
            let want: f32 = input[r * cols as usize..(r + 1) * cols as usize]
                .iter()
                .sum();
            assert_eq!(*v, want, "row {r}, cols {cols}");
        }
    };
    // Phase 1: adapting, until a choice is made for cols = 32.
    // The variant counts as undecided while it links and is timed, and no
    // longer once its choice is made.
    let exe = bundle();
    let before = ptxspec::stats().choices;
    let undecided_before = ptxspec::stats().variants_undecided;
    let mut undecided_seen = undecided_before;
    let started = std::time::Instant::now();
    while ptxspec::stats().choices == before {
        run(&exe, 32);
        undecided_seen = undecided_seen.max(ptxspec::stats().variants_undecided);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "no choice made"
        );
    }
    assert_eq!(
        undecided_seen,
        undecided_before + 1,
        "undecided while on trial"
    );
    assert_eq!(
        ptxspec::stats().variants_undecided,
        undecided_before,
        "undecided once chosen"
    );
    let table = ptxspec::choices::made();
    let digest = ptxspec::choices::digest();
    assert!(!table.is_empty());
    // Phase 2: pinned to that table, a fresh bundle times nothing.
    ptxspec::choices::pin(table.clone());
    let exe = bundle();
    let timed = ptxspec::stats().timed_launches;
    for _ in 0..200 {
        run(&exe, 32);
    }
    // An argument set the table does not hold: the generic code, untimed.
    let choices_before = ptxspec::stats().choices;
    let started = std::time::Instant::now();
    while ptxspec::stats().choices == choices_before {
        run(&exe, 48);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "no choice taken"
        );
    }
    ptxspec::choices::unpin();
    assert_eq!(
        ptxspec::stats().timed_launches,
        timed,
        "a pinned process timed launches"
    );
    let made = ptxspec::choices::made();
    let new: Vec<String> = table.differences(&made);
    assert!(
        new.len() == 1 && new[0].contains("none in the first, generic in the second"),
        "{new:?}"
    );
    // The first choice is the table's still.
    let mut without_new = made.clone();
    without_new = ptxspec::choices::ChoiceTable::parse(
        &without_new
            .to_text()
            .lines()
            .filter(|l| !new[0].starts_with(l.split(' ').next().unwrap_or("-")))
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    assert_eq!(
        without_new.digest().hex(),
        digest,
        "a pinned choice differed"
    );
    println!("pinned: {} choice(s); digest {digest}", made.len());
}
