//! CUDA graphs (issue 31), side by side with a plain cudarc graph of the
//! literal kernel: replay cost per kernel node, the cost of a value change
//! per node (every node given a new value before each replay), of a tier
//! swap per node, and the kernel time of a tiered node after its swap
//! against the literal's (`--graphs` runs this part alone).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaModule;
use cudarc::driver::sys::{self, CUgraphInstantiate_flags, CUstreamCaptureMode};
use ptxspec::runtime::{Arg, DeviceBuffer, Graph, LaunchConfig, Queue};
use ptxspec::{KernelBundle, KernelId, SpecMode, build, get_kernel_bundle_for};

use super::{COEFF, Figures, R, SOBEL, TINY, global_buffer_image, ptr, raw_launch, time_ms};

/// Kernel nodes per graph (each a one-block `tiny` launch).
const NODES: usize = 256;
/// Replays per sample; samples (the median is reported).
const REPLAYS: usize = 100;
const SAMPLES: usize = 5;

/// Host µs per replay of `replay`, `REPLAYS` replays waited for once at the
/// end, median of `SAMPLES`.
fn per_replay_us(q: &Queue, replay: &mut dyn FnMut(usize) -> R<()>) -> R<f64> {
    for i in 0..10 {
        replay(i)?;
    }
    q.wait()?;
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let t = Instant::now();
        for i in 0..REPLAYS {
            replay(i)?;
        }
        q.wait()?;
        samples.push(t.elapsed().as_secs_f64() * 1e6 / REPLAYS as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[SAMPLES / 2])
}

/// Median host µs of `f`, run 50 times after the queue went idle each time
/// (what one call costs the host, with nothing queued ahead).
fn host_us(q: &Queue, f: &mut dyn FnMut(usize) -> R<()>) -> R<f64> {
    let mut samples = Vec::with_capacity(50);
    for i in 0..50 {
        q.wait()?;
        let t = Instant::now();
        f(i)?;
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    q.wait()?;
    samples.sort_by(f64::total_cmp);
    Ok(samples[25])
}

/// The host's own speed now: µs for 1 000 000 dependent multiply-adds
/// (no memory, no driver), median of 11 — to tell a slow phase of the
/// machine from a slow driver call.
fn cpu_probe_us() -> f64 {
    let mut samples: Vec<f64> = (0..11)
        .map(|_| {
            let t = Instant::now();
            let mut x = std::hint::black_box(1u64);
            for k in 0..1_000_000u64 {
                x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(k);
            }
            std::hint::black_box(x);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[5]
}

/// Host µs of `mine` and of `theirs`, each run once per round on an idle
/// queue, 50 rounds in turns (so that the machine's phases fall on both
/// alike): the medians of each and of the rounds' differences.
fn paired_host_us(
    q: &Queue,
    mine: &mut dyn FnMut(usize) -> R<()>,
    theirs: &mut dyn FnMut(usize) -> R<()>,
) -> R<[f64; 3]> {
    let timed = |f: &mut dyn FnMut(usize) -> R<()>, i| -> R<f64> {
        q.wait()?;
        let t = Instant::now();
        f(i)?;
        Ok(t.elapsed().as_secs_f64() * 1e6)
    };
    let (mut a, mut b, mut d) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..50 {
        let (x, y) = (timed(mine, i)?, timed(theirs, i)?);
        a.push(x);
        b.push(y);
        d.push(x - y);
    }
    q.wait()?;
    Ok([a, b, d].map(|mut v| {
        v.sort_by(f64::total_cmp);
        v[25]
    }))
}

/// A ptxspec graph of `NODES` launches of `tiny` from `exe`.
fn tiny_graph<'a>(
    q: &'a Queue,
    exe: &'a KernelBundle<ptxspec::Executable>,
    out: &'a DeviceBuffer<i32>,
) -> R<Graph<'a>> {
    let one = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    Ok(q.capture(|q| {
        for _ in 0..NODES {
            q.submit(|h| {
                h.use_kernel_bundle(exe)?;
                h.launch("tiny", one, &[Arg::buffer(out)])
            })?;
        }
        Ok(())
    })?)
}

/// The nodes of `graph` (all kernel nodes in the plain graph).
fn graph_nodes(graph: sys::CUgraph) -> R<Vec<sys::CUgraphNode>> {
    let mut count = 0usize;
    // SAFETY: a graph that lives (its `CudaGraph` is borrowed by the
    // caller); a null array asks for the count alone.
    unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut count) }.result()?;
    let mut nodes = vec![std::ptr::null_mut(); count];
    // SAFETY: `nodes` has room for `count` handles.
    unsafe { sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut count) }.result()?;
    nodes.truncate(count);
    Ok(nodes)
}

/// Sets kernel node `node` to launch `function` with `params` (the driver's
/// call that a graph's value change comes down to): in the executable graph
/// `exec`, or where that is `None`, in the graph it was made from (applied
/// by [`update_from_template`]).
fn set_node(
    exec: Option<sys::CUgraphExec>,
    node: sys::CUgraphNode,
    code: Code,
    cfg: LaunchConfig,
    params: &mut [*mut std::ffi::c_void],
) -> R<()> {
    let (func, kern) = match code {
        Code::Function(f) => (f, std::ptr::null_mut()),
        Code::Kernel(k) => (std::ptr::null_mut(), k),
    };
    let p = sys::CUDA_KERNEL_NODE_PARAMS {
        func,
        gridDimX: cfg.grid.0,
        gridDimY: cfg.grid.1,
        gridDimZ: cfg.grid.2,
        blockDimX: cfg.block.0,
        blockDimY: cfg.block.1,
        blockDimZ: cfg.block.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        kernelParams: params.as_mut_ptr(),
        extra: std::ptr::null_mut(),
        kern,
        // The current context (the queue's) for a kernel.
        ctx: std::ptr::null_mut(),
    };
    // Both calls: `node` is a kernel node of the plain graph, which lives;
    // `code` is `tiny_plain(int *out, int v)` of a module or library loaded
    // in the queue's context (bound by the caller's earlier calls), and
    // `params` points to a live address and value, which the call copies.
    match exec {
        // SAFETY: as above, and `exec` was instantiated from that graph.
        Some(exec) => unsafe { sys::cuGraphExecKernelNodeSetParams_v2(exec, node, &p) },
        // SAFETY: as above.
        None => unsafe { sys::cuGraphKernelNodeSetParams_v2(node, &p) },
    }
    .result()?;
    Ok(())
}

/// The code a kernel node launches: a module's function, or a library's
/// kernel (the driver's context-independent handle).
#[derive(Clone, Copy)]
enum Code {
    Function(sys::CUfunction),
    Kernel(sys::CUkernel),
}

/// `tiny_plain` of the baselines' PTX loaded as a library
/// (`cuLibraryLoadData`), as a kernel handle and as its function in the
/// current context. The library stays loaded (the bench's process ends).
fn library_tiny_plain() -> R<(sys::CUkernel, sys::CUfunction)> {
    let text = std::ffi::CString::new(super::BASELINES)?;
    let mut library: sys::CUlibrary = std::ptr::null_mut();
    let mut kernel: sys::CUkernel = std::ptr::null_mut();
    let mut function: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: NUL-terminated PTX, no options; the current context (the
    // queue's) is bound by the caller's earlier calls.
    unsafe {
        sys::cuLibraryLoadData(
            &mut library,
            text.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
        .result()?;
        sys::cuLibraryGetKernel(&mut kernel, library, c"tiny_plain".as_ptr()).result()?;
        sys::cuKernelGetFunction(&mut function, kernel).result()?;
    }
    Ok((kernel, function))
}

/// Brings `exec` to what `graph` (the graph it was made from, changed since)
/// now says, in one call.
fn update_from_template(exec: sys::CUgraphExec, graph: sys::CUgraph) -> R<()> {
    // SAFETY: two node handles (null is valid) and the result enum, whose
    // zero is `CU_GRAPH_EXEC_UPDATE_SUCCESS`.
    let mut info: sys::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
    // SAFETY: `exec` was instantiated from `graph`, both live; the driver
    // writes its result into `info`.
    unsafe { sys::cuGraphExecUpdate_v2(exec, graph, &mut info) }.result()?;
    Ok(())
}

fn check(q: &Queue, out: &DeviceBuffer<i32>, want: i32, what: &str) -> R<()> {
    let got = q.download(out)?[0];
    if got != want {
        return Err(format!("graph {what}: tiny wrote {got}, want {want}").into());
    }
    Ok(())
}

/// The measures' names in the JSON lines.
const REPLAY: &str = "graphs: replay (µs per kernel node)";
const CHANGE: &str = "graphs: a value change on every node (host µs per node)";
const TIER: &str = "graphs: tiered nodes (host µs per node)";

pub fn graphs(
    q: &Queue,
    module: &Arc<CudaModule>,
    notes: &mut String,
    figures: &mut Figures,
) -> R<()> {
    let out: DeviceBuffer<i32> = q.alloc_zeros(1)?;
    let one = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    // The plain graph: cudarc's capture of the literal-free baseline kernel
    // (`tiny_plain(out, v)`: a value the caller passes, as a literal would be).
    let plain = module.load_function("tiny_plain")?;
    // SAFETY: this capture of the queue's stream records the baseline's raw
    // launches alone (no ptxspec launch while it lasts), and its graph uses
    // no code or memory of ptxspec's but `out`, which outlives it.
    unsafe { q.cuda_stream() }
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    for _ in 0..NODES {
        let (mut p, mut v) = (ptr(&out), 7i32);
        raw_launch(
            q,
            &plain,
            one,
            &mut [&mut p as *mut _ as _, &mut v as *mut _ as _],
        )?;
    }
    // SAFETY: as above.
    let plain_graph = unsafe { q.cuda_stream() }
        .end_capture(CUgraphInstantiate_flags(0))?
        .ok_or("the plain capture made no graph")?;
    let plain_us = per_replay_us(q, &mut |_| Ok(plain_graph.launch()?))?;
    let plain_host = host_us(q, &mut |_| Ok(plain_graph.launch()?))?;
    check(q, &out, 7, "plain")?;
    let per_node = |us: f64| us / NODES as f64;
    // The driver's floor for a value change: every node of the plain graph
    // given a new value by the driver's call alone (the function kept), and
    // given another function (the same kernel from a second module, as new
    // native or LTO code for new values is).
    let second = q
        .context()
        .load_module(cudarc::nvrtc::Ptx::from_src(super::BASELINES))?
        .load_function("tiny_plain")?;
    let (first, second) = (plain.cu_function(), second.cu_function());
    let nodes = graph_nodes(plain_graph.cu_graph())?;
    // Every node set to `function` with value `v`, in the executable graph
    // or (`exec` none) in the graph it was made from.
    let set_all = |exec: Option<sys::CUgraphExec>, code: Code, v: i32| -> R<()> {
        let (mut p, mut v) = (ptr(&out), v);
        let mut params = [&mut p as *mut u64 as _, &mut v as *mut i32 as _];
        for &node in &nodes {
            set_node(exec, node, code, one, &mut params)?;
        }
        Ok(())
    };
    let exec = Some(plain_graph.cu_graph_exec());
    let (first, second) = (Code::Function(first), Code::Function(second));
    let cpu_before = cpu_probe_us();
    let driver_value = host_us(q, &mut |i| set_all(exec, first, 11 + (i % 2) as i32))?;
    let driver_swap = host_us(q, &mut |i| {
        let function = if i.is_multiple_of(2) { second } else { first };
        set_all(exec, function, 7)
    })?;
    // The same swap between two libraries' handles of the kernel: their
    // kernels (context-independent), and their functions in this context.
    let (kernel_a, function_a) = library_tiny_plain()?;
    let (kernel_b, function_b) = library_tiny_plain()?;
    let library_swap = |a: Code, b: Code| {
        host_us(q, &mut |i| {
            set_all(exec, if i.is_multiple_of(2) { a } else { b }, 7)
        })
    };
    let kernel_swap = library_swap(Code::Kernel(kernel_a), Code::Kernel(kernel_b))?;
    let library_function_swap =
        library_swap(Code::Function(function_a), Code::Function(function_b))?;
    // The same swap set on the graph the executable one was made from, and
    // applied by one whole-graph update: the driver's other route.
    let set_template = |function| -> R<()> {
        set_all(None, function, 7)?;
        update_from_template(plain_graph.cu_graph_exec(), plain_graph.cu_graph())
    };
    let driver_update = host_us(q, &mut |i| {
        set_template(if i.is_multiple_of(2) { second } else { first })
    })?;
    // Replays that each swap every node's function first: in one executable
    // graph, and alternately in two of the same graph (each changed while
    // the other runs).
    let swap_replay_one = per_replay_us(q, &mut |i| {
        set_all(exec, if i.is_multiple_of(2) { second } else { first }, 7)?;
        Ok(plain_graph.launch()?)
    })?;
    // SAFETY: the plain graph lives until the end of this function; the
    // second instance is destroyed below, after the queue waited for it.
    let other = unsafe {
        cudarc::driver::result::graph::instantiate(
            plain_graph.cu_graph(),
            CUgraphInstantiate_flags(0),
        )?
    };
    let execs = [plain_graph.cu_graph_exec(), other];
    let swap_replay_two = per_replay_us(q, &mut |i| {
        let e = execs[i % 2];
        set_all(Some(e), if (i / 2) % 2 == 0 { second } else { first }, 7)?;
        // SAFETY: an instance of the plain graph, in the queue's context.
        unsafe { cudarc::driver::result::graph::launch(e, q.cuda_stream().cu_stream())? };
        Ok(())
    })?;
    q.wait()?;
    // SAFETY: instantiated above, its replays waited for.
    unsafe { cudarc::driver::result::graph::exec_destroy(other)? };
    set_template(first)?;
    set_all(exec, first, 7)?;
    plain_graph.launch()?;
    check(q, &out, 7, "plain, after its nodes were set")?;
    let _ = writeln!(
        notes,
        "graphs of {NODES} tiny kernel nodes, µs per node: replay = wall time of {REPLAYS} replays waited for once \
         (median of {SAMPLES}); host = one call's host time on an idle queue (median of 50)\n  \
         plain cudarc graph: replay {:.3}, host {:.4}; the driver alone setting every node (median of 50): \
         a new value {:.3}, another function {:.3} (set on the template graph, one whole-graph update: {:.3}; \
         between two libraries' kernel handles {:.3}, their functions {:.3}); the host's speed then: \
         {cpu_before:.0} µs for 10⁶ dependent multiply-adds; replays that each swap every node's function \
         first: {:.3} in one executable graph, {:.3} alternating between two",
        per_node(plain_us),
        per_node(plain_host),
        per_node(driver_value),
        per_node(driver_swap),
        per_node(driver_update),
        per_node(kernel_swap),
        per_node(library_function_swap),
        per_node(swap_replay_one),
        per_node(swap_replay_two),
    );
    figures.add(
        REPLAY,
        "plain cudarc graph",
        &[
            ("replay, waited for", per_node(plain_us)),
            ("host", per_node(plain_host)),
        ],
    );
    figures.add(
        CHANGE,
        "the driver alone: a new value",
        &[("host", per_node(driver_value))],
    );
    figures.add(
        CHANGE,
        "the driver alone: another function",
        &[("host", per_node(driver_swap))],
    );

    let global = global_buffer_image("tiny", include_str!("../../kernels/ptx/tiny.ptx"))?;
    let registered = get_kernel_bundle_for(&[KernelId::new("tiny")])?;
    let ways = [
        (
            "emulated, parameter space",
            registered.clone().with_mode(SpecMode::Emulated),
        ),
        (
            "emulated, global buffer",
            KernelBundle::from_images(vec![global]).with_mode(SpecMode::Emulated),
        ),
        ("native", registered.clone().with_mode(SpecMode::Native)),
        ("LTO", registered.clone().with_mode(SpecMode::Lto)),
    ];
    for (way, mut input) in ways {
        input.set_specialization_constant(&TINY, 5)?;
        let exe = build(&input)?;
        let mut graph = tiny_graph(q, &exe, &out)?;
        let replay_us = per_replay_us(q, &mut |_| Ok(graph.launch()?))?;
        let replay_host = host_us(q, &mut |_| Ok(graph.launch()?))?;
        check(q, &out, 5, way)?;
        // Every node gets a new value before each replay: two values in
        // turn (native and LTO code for both is built before timing, as a
        // cache would hold it).
        let mut change = |i: usize| -> R<()> {
            let v = if i.is_multiple_of(2) { 11 } else { 12 };
            graph.set_specialization_constant_everywhere(&TINY, v)?;
            Ok(graph.update()?)
        };
        change(0)?;
        change(1)?;
        // For profilers (`GPU_BENCH_GRAPH_LOOP=native ./gpu_bench --graphs`):
        // this way's value change alone, 4 000 times.
        if std::env::var("GPU_BENCH_GRAPH_LOOP").is_ok_and(|w| w == way) {
            for i in 0..4_000 {
                change(i)?;
            }
            q.wait()?;
            return Ok(());
        }
        let change_host = host_us(q, &mut change)?;
        // In turns with the driver's own call for such a change on the
        // plain graph (another function where the code follows the values;
        // else a new value), which the plain graph keeps no further use for.
        let code_changes = matches!(way, "native" | "LTO");
        let [mine, theirs, over] = paired_host_us(q, &mut change, &mut |i| match code_changes {
            true => set_all(exec, if i.is_multiple_of(2) { second } else { first }, 7),
            false => set_all(exec, first, 11 + (i % 2) as i32),
        })?;
        let cpu = cpu_probe_us();
        // The same change while a replay runs (launched, not waited for):
        // does the driver's call wait for it?
        let mut busy = Vec::with_capacity(20);
        for i in 0..20 {
            q.wait()?;
            graph.launch()?;
            let t = Instant::now();
            graph
                .set_specialization_constant_everywhere(&TINY, if i % 2 == 0 { 11 } else { 12 })?;
            graph.update()?;
            busy.push(t.elapsed().as_secs_f64() * 1e6);
        }
        q.wait()?;
        busy.sort_by(f64::total_cmp);
        let busy_host = busy[10];
        // The driver's own call for the change while the plain graph runs.
        let mut busy = Vec::with_capacity(20);
        for i in 0..20 {
            q.wait()?;
            plain_graph.launch()?;
            let t = Instant::now();
            match code_changes {
                true => set_all(exec, if i % 2 == 0 { second } else { first }, 7)?,
                false => set_all(exec, first, 11 + (i % 2))?,
            }
            busy.push(t.elapsed().as_secs_f64() * 1e6);
        }
        q.wait()?;
        busy.sort_by(f64::total_cmp);
        let busy_driver = busy[10];
        let changed_us = per_replay_us(q, &mut |i| {
            let v = if i.is_multiple_of(2) { 11 } else { 12 };
            graph.set_specialization_constant_everywhere(&TINY, v)?;
            Ok(graph.launch()?)
        })?;
        check(q, &out, 12, way)?;
        let _ = writeln!(
            notes,
            "  ptxspec {way}: replay {:.3} ({:+.3} vs plain), host {:.4} ({:+.4}); value change: host {:.3} \
             (set on every node + update), replay with a change {:.3}; in turns with the driver's own call for \
             the change ({}): ptxspec {:.3}, the driver {:.3}, difference {:+.3} (the host's speed then: {cpu:.0} µs); \
             the change while a replay runs: ptxspec {:.3}, the driver {:.3}",
            per_node(replay_us),
            per_node(replay_us - plain_us),
            per_node(replay_host),
            per_node(replay_host - plain_host),
            per_node(change_host),
            per_node(changed_us),
            if code_changes {
                "another function"
            } else {
                "a new value"
            },
            per_node(mine),
            per_node(theirs),
            per_node(over),
            per_node(busy_host),
            per_node(busy_driver),
        );
        figures.add(
            REPLAY,
            &format!("ptxspec {way}"),
            &[
                ("replay, waited for", per_node(replay_us)),
                ("host", per_node(replay_host)),
                ("replay over plain", per_node(replay_us - plain_us)),
            ],
        );
        figures.add(
            CHANGE,
            &format!("ptxspec {way}"),
            &[
                ("host", per_node(change_host)),
                ("over the driver's call, in turns", per_node(over)),
            ],
        );
    }

    // Tier swaps: a tiered graph whose nodes all get a new value set, then
    // the replay that swaps them once the link is ready, against a replay
    // that swaps nothing (each waited for).
    let mut input = registered.with_mode(SpecMode::Tiered);
    input.set_specialization_constant(&TINY, 1_000)?;
    let exe = build(&input)?;
    let mut graph = tiny_graph(q, &exe, &out)?;
    let mut swaps = Vec::new();
    for k in 0..5 {
        let v = 2_000 + k;
        graph.set_specialization_constant_everywhere(&TINY, v)?;
        graph.launch()?;
        q.wait()?;
        check(q, &out, v, "tiered, emulated")?;
        let started = Instant::now();
        while !graph.nodes().all(|n| n.tier_linked()) {
            if started.elapsed() > Duration::from_secs(120) {
                return Err("tiered graph: no link in 120 s".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // The first updates start the new code's load on the loader thread
        // (none of them waits for it); the one that finds it loaded swaps
        // every node: that one is timed.
        let mut swap_us = 0.0;
        let loading = Instant::now();
        while graph.nodes().any(|n| n.awaits_tier()) {
            if loading.elapsed() > Duration::from_secs(10) {
                return Err("tiered graph: the linked code did not load in 10 s".into());
            }
            let t = Instant::now();
            graph.update()?;
            swap_us = t.elapsed().as_secs_f64() * 1e6;
        }
        let t = Instant::now();
        graph.launch()?;
        q.wait()?;
        let first_us = t.elapsed().as_secs_f64() * 1e6;
        if graph.nodes().any(|n| n.mode() != SpecMode::Lto) {
            return Err("tiered graph: a node did not swap".into());
        }
        check(q, &out, v, "tiered, swapped")?;
        let t = Instant::now();
        graph.launch()?;
        q.wait()?;
        let replay_us = t.elapsed().as_secs_f64() * 1e6;
        swaps.push((
            swap_us / NODES as f64,
            (first_us - replay_us) / NODES as f64,
        ));
    }
    swaps.sort_by(|a, b| a.0.total_cmp(&b.0));
    figures.add(
        TIER,
        "the update that swaps every node to its linked code (5 value sets)",
        &[
            ("median", swaps[2].0),
            ("min", swaps[0].0),
            ("max", swaps[4].0),
        ],
    );
    let _ = writeln!(
        notes,
        "  tier swap, 5 value sets: the update that swaps every node (its code loaded in the background), host per node median {:.3} (min {:.3}, max {:.3}); \
         its first replay less the next one, waited for, per node: {}",
        swaps[2].0,
        swaps[0].0,
        swaps[4].0,
        swaps
            .iter()
            .map(|s| format!("{:+.3}", s.1))
            .collect::<Vec<_>>()
            .join(" ")
    );
    // Back to value sets linked above: every node swaps at once to code the
    // graph loaded before (no link, no module load): the swap itself.
    let mut back = Vec::new();
    for k in (0..5).rev() {
        graph.set_specialization_constant_everywhere(&TINY, 2_000 + k)?;
        q.wait()?;
        let t = Instant::now();
        graph.update()?;
        back.push(t.elapsed().as_secs_f64() * 1e6 / NODES as f64);
        if graph.nodes().any(|n| n.mode() != SpecMode::Lto) {
            return Err("tiered graph: a value set linked before did not start specialized".into());
        }
        graph.launch()?;
        q.wait()?;
        check(q, &out, 2_000 + k, "tiered, back to a linked value set")?;
    }
    back.sort_by(f64::total_cmp);
    figures.add(
        TIER,
        "a value change to a set linked and loaded before (update; 5 sets)",
        &[("median", back[2]), ("min", back[0]), ("max", back[4])],
    );
    let _ = writeln!(
        notes,
        "  value change on the tiered graph to a value set linked and loaded before (host per node, update alone; 5 sets): \
         median {:.3}, min {:.3}, max {:.3}",
        back[2], back[0], back[4]
    );
    kernel_time_after_swap(q, module, notes, figures)
}

/// A one-node graph of the 8192² convolution, tiered and swapped, against a
/// plain graph of the literal kernel: GPU time per replay (CUDA events).
fn kernel_time_after_swap(
    q: &Queue,
    module: &Arc<CudaModule>,
    notes: &mut String,
    figures: &mut Figures,
) -> R<()> {
    let p = super::ConvProblem::new(q, 8192, 8192)?;
    let (h, w, cfg) = (p.h, p.w, p.cfg);
    let literal = module.load_function("conv3x3_literal")?;
    // SAFETY: this capture of the queue's stream records the baseline's raw
    // launches alone (no ptxspec launch while it lasts), and its graph uses
    // no code or memory of ptxspec's but `out`, which outlives it.
    unsafe { q.cuda_stream() }
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    let (mut a, mut b, mut c, mut d) = (ptr(&p.din), ptr(&p.dout), h as i32, w as i32);
    raw_launch(
        q,
        &literal,
        cfg,
        &mut [
            &mut a as *mut _ as _,
            &mut b as *mut _ as _,
            &mut c as *mut _ as _,
            &mut d as *mut _ as _,
        ],
    )?;
    // SAFETY: as above.
    let plain = unsafe { q.cuda_stream() }
        .end_capture(CUgraphInstantiate_flags(0))?
        .ok_or("the plain capture made no graph")?;
    let mut input = get_kernel_bundle_for(&[KernelId::new("conv3x3")])?.with_mode(SpecMode::Tiered);
    input.set_specialization_constant(&COEFF, SOBEL)?;
    let exe = build(&input)?;
    let mut graph = q.capture(|q| {
        q.submit(|hd| {
            hd.use_kernel_bundle(&exe)?;
            hd.launch("conv3x3", cfg, &p.args())
        })
    })?;
    exe.wait_for_tier_up(
        &KernelId::new("conv3x3"),
        q.device().arch(),
        Duration::from_secs(120),
    )?;
    // Linked: replays until the loader thread loaded the code and a replay
    // swapped the node.
    let loading = Instant::now();
    while graph.nodes().any(|n| n.awaits_tier()) && loading.elapsed() < Duration::from_secs(10) {
        graph.launch()?;
        q.wait()?;
    }
    if graph.nodes().any(|n| n.mode() != SpecMode::Lto) {
        return Err("the convolution graph did not swap to LTO".into());
    }
    let mut ratios = Vec::new();
    let mut last = (0.0, 0.0);
    for _ in 0..3 {
        let lit_ms = time_ms(q, || Ok(plain.launch()?))?;
        let swapped_ms = time_ms(q, || Ok(graph.launch()?))?;
        ratios.push(swapped_ms / lit_ms);
        last = (lit_ms, swapped_ms);
    }
    p.check(q, SOBEL, "swapped convolution graph")?;
    ratios.sort_by(f64::total_cmp);
    let _ = writeln!(
        notes,
        "  kernel time after the swap, conv3x3 8192² Sobel, one-node graphs: literal {:.4} ms, swapped {:.4} ms; ratio median of 3 rounds ×{:.3} (min ×{:.3}, max ×{:.3})",
        last.0, last.1, ratios[1], ratios[0], ratios[2]
    );
    figures.add(
        "graphs: kernel time after a tier swap (× literal)",
        "conv3x3 8192² Sobel, one-node graph, tiered then swapped to LTO",
        &[
            ("median", ratios[1]),
            ("min", ratios[0]),
            ("max", ratios[2]),
        ],
    );
    Ok(())
}
