//! Safe code never makes a kernel reach memory or code the program let go,
//! by each route there was (issue: a raw address for a pointer parameter
//! wrote a live buffer allocated later at the old address; a cudarc capture
//! of the queue's stream replayed a launch after its queue and bundle were
//! gone, SIGSEGV): each ends in a clean error or right results.

use super::buffers::{SPIN_COPY, spin_copy_bundle};
use super::*;

use ptxspec::cudarc::driver::sys::CUstreamCaptureMode;
use ptxspec::cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};

const WORDS: usize = 1 << 20;

fn launch_copy<'a>(
    q: &Queue,
    exe: &KernelBundle<Executable>,
    src: Arg<'a>,
    dst: Arg<'a>,
) -> Result<(), ptxspec::Error> {
    q.submit(|h| {
        h.use_kernel_bundle(exe)?;
        let (cfg, args) = spin_copy_launch(1024, src, dst, WORDS, 0);
        h.launch("spin_copy", cfg, &args)
    })
}

/// `spin_copy`'s launch: `blocks` blocks of 256 threads copy `words` words
/// from `src` to `dst`, each first spinning `spin_ns` nanoseconds.
fn spin_copy_launch<'a>(
    blocks: u32,
    src: Arg<'a>,
    dst: Arg<'a>,
    words: usize,
    spin_ns: u64,
) -> (LaunchConfig, [Arg<'a>; 4]) {
    (
        LaunchConfig::new((blocks, 1, 1), (256, 1, 1)),
        [src, dst, Arg::value(words as u32), Arg::value(spin_ns)],
    )
}

/// Asserts that `e` is the refusal of a value for a parameter that may
/// hold an address, naming kernel `spin_copy` and argument `n`.
fn refused_as_address(e: ptxspec::Error, n: usize) {
    let text = e.to_string();
    match &e {
        ptxspec::Error::KernelArgument {
            kernel, argument, ..
        } => {
            assert_eq!(kernel, "spin_copy", "{text}");
            assert_eq!(*argument, Some(n), "{text}");
            assert!(text.contains("may hold an address"), "{text}");
        }
        _ => panic!("not a kernel-argument error: {text}"),
    }
}

/// A number for a pointer parameter — a `DeviceBuffer`'s address, a cudarc
/// slice's, made up — is refused at a launch and at a capture, for either
/// pointer; nothing is written. The unsafe `Arg::address` takes one.
pub(super) fn a_value_for_a_pointer_parameter_is_refused(_: &Arc<Queue>) {
    let q = Queue::new(0).unwrap();
    let exe = spin_copy_bundle();
    let data: Vec<u32> = (0..WORDS as u32).collect();
    let src = q.upload(&data).unwrap();
    let dst: DeviceBuffer<u32> = q.alloc_zeros(WORDS).unwrap();
    // SAFETY: only the slice's address is read (no launch takes it).
    let ctx = CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let slice: CudaSlice<u32> = stream.alloc_zeros(WORDS).unwrap();
    let slice_address = slice.device_ptr(&stream).0;
    stream.synchronize().unwrap();
    for address in [dst.device_address(), slice_address, 0x7f00_0000_0000] {
        refused_as_address(
            launch_copy(&q, &exe, Arg::buffer(&src), Arg::value(address)).unwrap_err(),
            1,
        );
        refused_as_address(
            launch_copy(&q, &exe, Arg::value(address), Arg::buffer(&dst)).unwrap_err(),
            0,
        );
        let captured = q.capture(|c| {
            c.submit(|h| {
                h.use_kernel_bundle(&exe)?;
                let (cfg, args) =
                    spin_copy_launch(1024, Arg::buffer(&src), Arg::value(address), WORDS, 0u64);
                h.launch("spin_copy", cfg, &args)
            })
        });
        refused_as_address(captured.err().expect("a capture of a raw address"), 1);
    }
    assert!(q.download(&dst).unwrap().iter().all(|&w| w == 0));
    // SAFETY: `dst` outlives the launch, which `wait` waits for.
    let raw = unsafe { Arg::address(dst.device_address()) };
    launch_copy(&q, &exe, Arg::buffer(&src), raw).unwrap();
    q.wait().unwrap();
    assert_eq!(q.download(&dst).unwrap(), data);
}

/// A program's capture never takes a queue's launch: a launch with memory
/// of a capturing stream is refused; a launch whose cudarc slice was last
/// written inside another stream's capture (cudarc's event tracking makes
/// the queue's stream wait for that event, joining it to the capture) is
/// refused, and that capture cannot make a graph of it. The queue and its
/// bundle are dropped and whatever graph the program got is replayed: the
/// process lives and no memory is written.
pub(super) fn a_program_capture_never_takes_a_queue_launch(_: &Arc<Queue>) {
    let ctx = CudaContext::new(0).unwrap();
    let program: Arc<CudaStream> = ctx.new_stream().unwrap();
    let other: Arc<CudaStream> = ctx.new_stream().unwrap();
    let data: Vec<u32> = (0..WORDS as u32).collect();
    let src_home: CudaSlice<u32> = program.clone_htod(&data).unwrap();
    let on_other: CudaSlice<u32> = other.clone_htod(&data).unwrap();
    let keep: CudaSlice<u32> = program.alloc_zeros(WORDS).unwrap();
    program.synchronize().unwrap();
    other.synchronize().unwrap();
    let mut graphs = Vec::new();
    {
        let q = Queue::new(0).unwrap();
        let exe = spin_copy_bundle();
        let dst: DeviceBuffer<u32> = q.alloc_zeros(WORDS).unwrap();
        // Memory of a stream that is capturing.
        program
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .unwrap();
        let e = launch_copy(&q, &exe, Arg::slice(&src_home), Arg::buffer(&dst))
            .expect_err("a launch with memory of a capturing stream");
        assert!(e.to_string().contains("capturing"), "{e}");
        graphs.push(program.end_capture(ptxspec::cudarc::driver::sys::CUgraphInstantiate_flags(0)));
        // Memory of another queue that is capturing (its own capture).
        let capturer = Queue::new(0).unwrap();
        let theirs: DeviceBuffer<u32> = capturer.upload(&data).unwrap();
        let capturing = capturer.begin_capture().unwrap();
        let e = launch_copy(&q, &exe, Arg::buffer(&theirs), Arg::buffer(&dst))
            .expect_err("a launch with memory of a capturing queue");
        assert!(e.to_string().contains("capturing"), "{e}");
        drop(capturing);
        // Waiting for a capturing stream is refused.
        program
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .unwrap();
        let e = q
            .wait_for(&program)
            .expect_err("a wait for a capturing stream");
        assert!(e.to_string().contains("capturing"), "{e}");
        // The queue's stream found in a capture it did not begin (joined
        // here through the unsafe stream, as a race between a check and a
        // wait would): a launch that joins other memory refuses, records
        // nothing, and the program's capture, left unjoined, makes no graph.
        // SAFETY: this breaks `cuda_stream`'s contract on purpose, to reach
        // the state a race could; no launch but the refused one follows
        // until the capture ended.
        unsafe { q.cuda_stream() }.join(&program).unwrap();
        let e = launch_copy(&q, &exe, Arg::slice(&on_other), Arg::buffer(&dst))
            .expect_err("a launch on a stream joined to a program's capture");
        assert!(e.to_string().contains("did not begin"), "{e}");
        // From then on the queue submits nothing until its stream left
        // that capture: a launch of its own memory alone, an upload.
        let src = q.upload(&data);
        assert!(
            src.is_err(),
            "an upload while joined to a program's capture"
        );
        let e = launch_copy(&q, &exe, Arg::buffer(&dst), Arg::buffer(&dst))
            .expect_err("a launch of the queue's own memory while joined to a capture");
        assert!(e.to_string().contains("did not begin"), "{e}");
        let ended = program.end_capture(ptxspec::cudarc::driver::sys::CUgraphInstantiate_flags(0));
        graphs.push(ended);
        // Nothing the queue launched ran or was recorded.
        assert!(q.download(&dst).unwrap().iter().all(|&w| w == 0));
    }
    // The queue and its bundle are gone; replay whatever the program got.
    println!(
        "the program's captures ended: {:?}",
        graphs
            .iter()
            .map(|g| g.as_ref().map(|g| g.is_some()))
            .collect::<Vec<_>>()
    );
    for graph in graphs.iter().flatten().flatten() {
        graph.launch().unwrap();
    }
    program.synchronize().unwrap();
    assert!(program.clone_dtoh(&keep).unwrap().iter().all(|&w| w == 0));
    // The queue works after the captures ended.
    let q = Queue::new(0).unwrap();
    let exe = spin_copy_bundle();
    let dst: DeviceBuffer<u32> = q.alloc_zeros(WORDS).unwrap();
    q.wait_for(&program).unwrap();
    launch_copy(&q, &exe, Arg::slice(&src_home), Arg::buffer(&dst)).unwrap();
    assert_eq!(q.download(&dst).unwrap(), data);
    let _ = SPIN_COPY;
}

/// A graph dropped while its stream captures (the queue's own capture,
/// relaxed; and a program's global-mode capture through the unsafe
/// stream) waits for its queued replays by the event it recorded, not by
/// synchronizing the capturing stream: the replays all run right, and the
/// capture goes on. A replay during the capture is refused (an update that
/// copies no values submits nothing, and goes).
pub(super) fn a_graph_dropped_during_a_capture_waits_for_its_replays(_: &Arc<Queue>) {
    let q = Queue::new(0).unwrap();
    let exe = spin_copy_bundle();
    let data: Vec<u32> = (0..WORDS as u32).map(|i| i ^ 0x5a5a).collect();
    let src = q.upload(&data).unwrap();
    for global in [false, true] {
        let dst: DeviceBuffer<u32> = q.alloc_zeros(WORDS).unwrap();
        let mut graph = q
            .capture(|c| {
                c.submit(|h| {
                    h.use_kernel_bundle(&exe)?;
                    // 20 ms each
                    let (cfg, args) = spin_copy_launch(
                        1024,
                        Arg::buffer(&src),
                        Arg::buffer(&dst),
                        WORDS,
                        20_000_000u64,
                    );
                    h.launch("spin_copy", cfg, &args)
                })
            })
            .unwrap();
        for _ in 0..10 {
            graph.launch().unwrap();
        }
        if global {
            // SAFETY: the capture records no ptxspec launch (the queue's own
            // launches are refused while it lasts) and is ended below.
            unsafe { q.cuda_stream() }
                .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
                .unwrap();
            let e = graph.launch().unwrap_err();
            assert!(e.to_string().contains("capturing"), "{e}");
            drop(graph);
            // SAFETY: as above.
            let made = unsafe { q.cuda_stream() }
                .end_capture(ptxspec::cudarc::driver::sys::CUgraphInstantiate_flags(0));
            // A global-mode capture forbids what the graph's drop does
            // (wait, unload, free): the driver may invalidate it. The
            // graph's memory and code wait for its replays all the same
            // (checked below).
            println!(
                "the program's global capture ended: {:?}",
                made.map(|g| g.is_some())
            );
        } else {
            let capturing = q.begin_capture().unwrap();
            let e = graph.launch().unwrap_err();
            assert!(e.to_string().contains("capturing"), "{e}");
            // An update with no values to copy submits nothing to the
            // stream (node parameters live in the executable graph).
            graph.update().unwrap();
            drop(graph);
            let empty = capturing.end().unwrap();
            assert_eq!(empty.nodes().len(), 0);
        }
        q.wait().unwrap();
        assert_eq!(q.download(&dst).unwrap(), data, "global capture: {global}");
    }
}

/// The `tiny` kernel's constant (kernels/tiny.cu).
const TINY: SpecId<i32> = SpecId::new("tiny_id");

/// Retirement during captures: a capture that lets go of plans and modules
/// (40 native builds on one queue, more than it keeps) records nothing for
/// them and hands them over at its end, and its graph keeps what its nodes
/// run; a graph updated to new code 40 times while its queue captures keeps
/// what it would retire until an update outside the capture. Every replay
/// reads back its values.
pub(super) fn retirement_during_a_capture_is_deferred(_: &Arc<Queue>) {
    let q = Queue::new(0).unwrap();
    let one = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    let native = |v: i32| {
        let mut input = get_kernel_bundle_for(&[KernelId::new("tiny")])
            .unwrap()
            .with_mode(SpecMode::Native);
        input.set_specialization_constant(&TINY, v).unwrap();
        build(&input).unwrap()
    };
    let exes: Vec<_> = (0..40).map(|v| native(100 + v)).collect();
    let outs: Vec<DeviceBuffer<i32>> = (0..40).map(|_| q.alloc_zeros(1).unwrap()).collect();
    let mut graph = q
        .capture(|c| {
            for (exe, out) in exes.iter().zip(&outs) {
                c.submit(|h| {
                    h.use_kernel_bundle(exe)?;
                    h.launch("tiny", one, &[Arg::buffer(out)])
                })?;
            }
            Ok(())
        })
        .unwrap();
    graph.launch().unwrap();
    q.wait().unwrap();
    for (v, out) in outs.iter().enumerate() {
        assert_eq!(q.download(out).unwrap(), [100 + v as i32], "node {v}");
    }
    // A one-node native graph given 40 new values while the queue captures.
    let single: DeviceBuffer<i32> = q.alloc_zeros(1).unwrap();
    let mut small = q
        .capture(|c| {
            c.submit(|h| {
                h.use_kernel_bundle(&exes[0])?;
                h.launch("tiny", one, &[Arg::buffer(&single)])
            })
        })
        .unwrap();
    let capturing = q.begin_capture().unwrap();
    for v in 0..40 {
        small
            .set_specialization_constant(0, &TINY, 500 + v)
            .unwrap();
        small.update().unwrap();
    }
    let empty = capturing.end().unwrap();
    assert_eq!(empty.nodes().len(), 0);
    small.update().unwrap();
    small.launch().unwrap();
    graph.launch().unwrap();
    q.wait().unwrap();
    assert_eq!(q.download(&single).unwrap(), [539]);
    for (v, out) in outs.iter().enumerate() {
        assert_eq!(q.download(out).unwrap(), [100 + v as i32], "node {v} again");
    }
}

/// Rounds of each race below (thousands, as the trust model's issue asks);
/// `PTXSPEC_RACE_ROUNDS` takes more or fewer on a slower machine.
fn race_rounds() -> usize {
    std::env::var("PTXSPEC_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// Safe code only, two threads: one begins and ends captures of a queue's
/// stream again and again; the other captures a graph on the same queue,
/// replays it (refused while the other's capture lasts), and drops it —
/// thousands of rounds. No replay or last-use event is ever recorded into
/// the other thread's capture (the stream's gate: every check and what it
/// decides are one step), so every drop waits for its own replays and
/// nothing is kept for the process's life; every replay that ran wrote
/// its values.
pub(super) fn graph_replays_racing_captures_of_their_queue(_: &Arc<Queue>) {
    let q = Queue::new(0).unwrap();
    let exe = spin_copy_bundle();
    const N: usize = 1 << 14;
    let data: Vec<u32> = (0..N as u32).map(|i| i.wrapping_mul(2654435761)).collect();
    let src = q.upload(&data).unwrap();
    let kept_before = ptxspec::stats().kept_until_exit;
    let rounds = race_rounds();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (mut replayed, mut refused) = (0usize, 0usize);
    let mut empty_captures = 0usize;
    // Every round's output buffer lives to the end: a buffer dropped while
    // the other thread captures is kept for the process's life by design,
    // which would blur what this test counts.
    let mut outputs: Vec<DeviceBuffer<u32>> = Vec::with_capacity(rounds);
    std::thread::scope(|s| {
        let capturer = s.spawn(|| {
            let mut empty_captures = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(c) = q.begin_capture() {
                    std::thread::yield_now();
                    let g = c.end().unwrap();
                    assert_eq!(g.nodes().len(), 0);
                    empty_captures += 1;
                }
            }
            empty_captures
        });
        for _ in 0..rounds {
            let dst: DeviceBuffer<u32> = q.alloc_zeros(N).unwrap_or_else(|_| {
                // The other thread's capture refuses the allocation: wait
                // it out.
                loop {
                    if let Ok(b) = q.alloc_zeros(N) {
                        break b;
                    }
                    std::thread::yield_now();
                }
            });
            let graph = loop {
                let made = q.capture(|c| {
                    c.submit(|h| {
                        h.use_kernel_bundle(&exe)?;
                        let (cfg, args) = spin_copy_launch(
                            64,
                            Arg::buffer(&src),
                            Arg::buffer(&dst),
                            N,
                            20_000u64,
                        );
                        h.launch("spin_copy", cfg, &args)
                    })
                });
                if let Ok(g) = made {
                    break g;
                }
                std::thread::yield_now();
            };
            let mut graph = graph;
            for _ in 0..3 {
                match graph.launch() {
                    Ok(()) => replayed += 1,
                    Err(e) => {
                        assert!(e.to_string().contains("capturing"), "{e}");
                        refused += 1;
                    }
                }
            }
            drop(graph);
            outputs.push(dst);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        empty_captures = capturer.join().unwrap();
    });
    loop {
        if q.wait().is_ok() {
            break;
        }
    }
    println!(
        "{rounds} rounds: {replayed} replays ran, {refused} refused, {empty_captures} captures of the other thread"
    );
    assert!(replayed > 0, "no replay ran");
    assert_eq!(
        ptxspec::stats().kept_until_exit,
        kept_before,
        "a last-use event was recorded into another capture"
    );
    // The queue still works, and reads what a last replay wrote.
    let dst: DeviceBuffer<u32> = q.alloc_zeros(N).unwrap();
    let mut graph = q
        .capture(|c| {
            c.submit(|h| {
                h.use_kernel_bundle(&exe)?;
                let (cfg, args) =
                    spin_copy_launch(64, Arg::buffer(&src), Arg::buffer(&dst), N, 0u64);
                h.launch("spin_copy", cfg, &args)
            })
        })
        .unwrap();
    graph.launch().unwrap();
    assert_eq!(q.download(&dst).unwrap(), data);
}

/// Safe code only, two threads: one begins a capture in global mode on a
/// stream of its own (cudarc's safe API) and ends it, again and again;
/// the other makes a queue, queues a kernel that runs a while, and drops
/// the queue — whose synchronize a global capture refuses. The queue's
/// modules and buffers must outlive the kernel (the retiring thread waits
/// for them, or they are kept): the process survives every round, and the
/// kernel's output, in a buffer that outlives the queue, is right.
pub(super) fn a_queue_dropped_during_a_global_capture_keeps_its_code(_: &Arc<Queue>) {
    let ctx = CudaContext::new(0).unwrap();
    let exe = spin_copy_bundle();
    const N: usize = 1 << 14;
    let data: Vec<u32> = (0..N as u32).map(|i| i ^ 0x3c3c).collect();
    let rounds = race_rounds() / 10;
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let capturer = s.spawn(|| {
            let stream = ctx.new_stream().unwrap();
            let mut captures = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if stream
                    .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
                    .is_ok()
                {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    let _ = stream
                        .end_capture(ptxspec::cudarc::driver::sys::CUgraphInstantiate_flags(0));
                    captures += 1;
                }
            }
            captures
        });
        let keeper = Queue::new(0).unwrap();
        for round in 0..rounds {
            // The output lives on a queue that stays: only the dropped
            // queue's own code and state are at stake.
            let dst: DeviceBuffer<u32> = loop {
                if let Ok(b) = keeper.alloc_zeros(N) {
                    break b;
                }
                std::thread::yield_now();
            };
            let q = loop {
                if let Ok(q) = Queue::new(0) {
                    break q;
                }
                std::thread::yield_now();
            };
            let src = loop {
                if let Ok(b) = q.upload(&data) {
                    break b;
                }
                std::thread::yield_now();
            };
            let launched = q.submit(|h| {
                h.use_kernel_bundle(&exe)?;
                let (cfg, args) =
                    spin_copy_launch(64, Arg::buffer(&src), Arg::buffer(&dst), N, 500_000u64);
                h.launch("spin_copy", cfg, &args)
            });
            drop(src);
            drop(q);
            if launched.is_ok() {
                let out = loop {
                    if let Ok(out) = keeper.download(&dst) {
                        break out;
                    }
                    std::thread::yield_now();
                };
                assert_eq!(out, data, "round {round}");
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        println!(
            "{rounds} queues dropped beside {} global captures; kept until exit: {}",
            capturer.join().unwrap(),
            ptxspec::stats().kept_until_exit
        );
    });
}

/// Device memory is data: a kernel taking a struct that holds a pointer is
/// refused its bytes from safe code (`Arg::bytes`: the analysis sees the
/// struct's pointer used as an address) and launched through the unsafe
/// `Arg::bytes_with_addresses`, whose caller vouches for the address; a
/// kernel that fills a buffer with 64-bit numbers, adds one atomically and
/// bounds a loop by one takes those numbers from safe code.
pub(super) fn structs_holding_pointers_and_64_bit_data(q: &Arc<Queue>) {
    let source = r#"
struct View { int *p; int n; };
extern "C" __global__ void through_view(View v) {
  if (threadIdx.x < v.n) v.p[threadIdx.x] = 7 * threadIdx.x;
}
extern "C" __global__ void fill64(unsigned long long *out, unsigned long long v,
                                  unsigned long long *sum, long long n) {
  for (long long i = threadIdx.x; i < n; i += blockDim.x) out[i] = v + i;
  atomicAdd(sum, v);
}
"#;
    let input =
        ptxspec::kernel_bundle_from_source(&[("gpu_views.cu", source)], &Default::default())
            .unwrap();
    let exe = build(&input).unwrap();
    let block = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    let out: DeviceBuffer<i32> = q.alloc_zeros(32).unwrap();
    let mut view = [0u8; 16];
    view[..8].copy_from_slice(&out.device_address().to_le_bytes());
    view[8..12].copy_from_slice(&32i32.to_le_bytes());
    let e = q
        .submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch("through_view", block, &[Arg::bytes(&view)])
        })
        .unwrap_err();
    assert!(e.to_string().contains("may hold an address"), "{e}");
    // SAFETY: the struct's pointer is `out`'s address, device memory of
    // this queue's context, alive until the download below waited for the
    // kernel.
    let vouched = unsafe { Arg::bytes_with_addresses(&view) };
    q.submit(|h| {
        h.use_kernel_bundle(&exe)?;
        h.launch("through_view", block, &[vouched])
    })
    .unwrap();
    assert_eq!(
        q.download(&out).unwrap(),
        (0..32).map(|i| 7 * i).collect::<Vec<i32>>()
    );
    // 64-bit numbers: stored, added atomically, a loop's bound.
    let data: DeviceBuffer<u64> = q.alloc_zeros(100).unwrap();
    let sum: DeviceBuffer<u64> = q.alloc_zeros(1).unwrap();
    let v = 0x7f00_dead_beef_0000u64;
    q.submit(|h| {
        h.use_kernel_bundle(&exe)?;
        h.launch(
            "fill64",
            block,
            &[
                Arg::buffer(&data),
                Arg::value(v),
                Arg::buffer(&sum),
                Arg::value(100i64),
            ],
        )
    })
    .unwrap();
    assert_eq!(
        q.download(&data).unwrap(),
        (0..100u64).map(|i| v + i).collect::<Vec<u64>>()
    );
    assert_eq!(q.download(&sum).unwrap(), [v.wrapping_mul(32)]);
}

/// The environment variable naming an exiting child's moment and way.
const EXIT_AT: &str = "PTXSPEC_TEST_EXIT_AT";

/// A process ends cleanly at any moment of a program's work: a child
/// launches adapting matmuls of several sizes (variants link and load in
/// the background) and captures, replays and drops graphs (their modules
/// and plans retire in the background), and ends after `moment` rounds —
/// by `std::process::exit` with the work in flight (on the main thread, or
/// on another), or by a panic that unwinds its graphs and buffers before
/// the harness exits (the way a
/// failed test's child once ended in glibc's "free(): invalid next size").
/// Each child runs under glibc's heap checks where the machine has them;
/// each must end with its own status and say nothing of a damaged heap.
pub(super) fn a_process_ends_cleanly_at_any_moment(_: &Arc<Queue>) {
    if let Some(at) = std::env::var_os(EXIT_AT) {
        let at = at.to_string_lossy().to_string();
        let (moment, how) = at.split_once(':').expect("moment:how");
        exiting_child(moment.parse().expect("a moment"), how);
    }
    let debug_malloc = ["/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    for moment in [0usize, 1, 2, 3, 5, 8, 13] {
        for how in ["exit", "exit-from-a-thread", "panic"] {
            let mut c = crate::child::this_test_again("a_process_ends_cleanly_at_any_moment");
            c.env(EXIT_AT, format!("{moment}:{how}"))
                .env("MALLOC_CHECK_", "3")
                .env("MALLOC_PERTURB_", "165");
            if let Some(lib) = debug_malloc {
                c.env("LD_PRELOAD", lib);
            }
            let out = c.output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let want = if how == "panic" { 101 } else { 0 };
            assert_eq!(
                out.status.code(),
                Some(want),
                "moment {moment}, {how}: {:?}\n{stderr}",
                out.status
            );
            for damage in [
                "free()",
                "corrupted",
                "double free",
                "malloc",
                "Segmentation",
            ] {
                assert!(
                    !stderr.contains(damage),
                    "moment {moment}, {how}: {damage:?} in\n{stderr}"
                );
            }
        }
    }
}

/// The child's part of [`a_process_ends_cleanly_at_any_moment`]: rounds of
/// work until round `moment`, then the end `how` says (`exit`,
/// `exit-from-a-thread` or `panic`).
fn exiting_child(moment: usize, how: &str) -> ! {
    use super::arguments::{
        baselines_generic_and_adaptive, matmul_graph, twice_plus_one_adapting, twice_plus_one_graph,
    };
    let q = Queue::new(0).unwrap();
    let (_, adaptive) = baselines_generic_and_adaptive();
    let twice = twice_plus_one_adapting();
    let n = 1 << 16;
    let x = q.upload(&vec![0f32; n]).unwrap();
    let mut kept = Vec::new();
    for round in 0.. {
        let size = [64usize, 96, 128, 160][round % 4];
        let a = q.upload(&pseudo_random(size * size, round as u64)).unwrap();
        let b = q.upload(&pseudo_random(size * size, 7)).unwrap();
        let c: DeviceBuffer<f32> = q.upload(&vec![0f32; size * size]).unwrap();
        let mut graph = matmul_graph(&q, &adaptive, [&a, &b, &c], size);
        graph.launch().unwrap();
        let mut twice_graph = twice_plus_one_graph(&q, &twice, &x, n);
        twice_graph.launch().unwrap();
        drop(twice_graph);
        drop(graph);
        kept.push((a, b, c));
        if round == moment {
            break;
        }
    }
    match how {
        "exit" => std::process::exit(0),
        // Another thread ends the process: the main thread's guard does
        // not run first; exit's hook, registered again after each library
        // call, does.
        "exit-from-a-thread" => {
            let _ = std::thread::spawn(|| std::process::exit(0)).join();
            unreachable!("the process ended on the other thread")
        }
        _ => panic!("the planned end of an exiting child"),
    }
}

/// The registrations on background threads that
/// [`nvidia_libraries_start_on_the_program_threads`] lets pass: a library
/// may register a destructor in a later call that first reaches some code
/// the warm-up did not (the residual case `toolkit::exit` names). On the
/// H200 with CUDA 13.0: none in 42 runs alone or beside a few other
/// tests, 2 of nvJitLink's on a tier worker, inside its link, in the whole
/// suite (3 of 3 runs) — a warm-up that also linked for the device's
/// architecture, with a kernel of shared memory, a barrier and a loop, did
/// not reach them.
const LAZY_REGISTRATIONS: i64 = 8;

/// The environment variable that makes the child of
/// [`nvidia_libraries_start_on_the_program_threads`] run its part.
const ATEXIT_CHILD: &str = "PTXSPEC_TEST_ATEXIT_COUNT";

/// NVIDIA's libraries start — load, and first run the code in which they
/// register their static destructors — on the program's threads, never on
/// ptxspec's background threads: a destructor registered on one of those
/// runs before exit's hook, and an exit from another thread tore libNVVM
/// down under a variant's link that way (glibc's heap checks failed in
/// 13 of 248 and 6 of 172 children exiting from a thread, at moments 1 and 2 of
/// [`a_process_ends_cleanly_at_any_moment`]). A child, with a counter of
/// the libraries' exit handler registrations preloaded
/// (`count_atexit.c`, built with `cc`), makes every kind of background
/// link: adaptive arguments' variants on their link threads (three sizes,
/// until a verdict) and a tiered bundle's tier on a worker. Registrations
/// on threads named `ptxspec-…`: at most [`LAZY_REGISTRATIONS`] of about
/// 10 000 (6 633 when the link thread loaded the libraries itself).
pub(super) fn nvidia_libraries_start_on_the_program_threads(_: &Arc<Queue>) {
    if std::env::var_os(ATEXIT_CHILD).is_some() {
        background_links_counting_registrations();
        return;
    }
    assert!(
        crate::atexit_counter::cc_on_path(),
        "this test needs a C compiler (cc) on PATH"
    );
    let dir = std::env::temp_dir().join(format!("ptxspec-gpu-atexit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = crate::child::this_test_again("nvidia_libraries_start_on_the_program_threads");
    child.env(ATEXIT_CHILD, "1");
    let out = crate::atexit_counter::run_counting(child, &dir);
    let said = crate::child::said(&out, "registered:");
    let counts = crate::atexit_counter::counts_said(&said);
    let _ = std::fs::remove_dir_all(&dir);
    let [total, background] = counts[..] else {
        panic!("the child said {said:?}");
    };
    // The counter saw the libraries' registrations (thousands at a load).
    assert!(total > 1000, "{said}");
    assert!(
        background <= LAZY_REGISTRATIONS,
        "{said}; the child's call stacks:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The child's part of [`nvidia_libraries_start_on_the_program_threads`].
fn background_links_counting_registrations() {
    use super::arguments::{baselines_generic_and_adaptive, matmul_args};
    let q = Queue::new(0).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    // Adaptive arguments: variants link on threads of their own.
    let (_, adaptive) = baselines_generic_and_adaptive();
    let decided = || {
        let s = ptxspec::stats();
        s.adapted_variants + s.variants_not_faster
    };
    let before = decided();
    for n in [64usize, 96, 128] {
        let (a, b) = (pseudo_random(n * n, 1), pseudo_random(n * n, 2));
        let (a, b) = (q.upload(&a).unwrap(), q.upload(&b).unwrap());
        let c: DeviceBuffer<f32> = q.alloc_zeros(n * n).unwrap();
        let verdicts = decided();
        while decided() == verdicts {
            assert!(std::time::Instant::now() < deadline, "no verdict for n {n}");
            q.submit(|h| {
                h.use_kernel_bundle(&adaptive)?;
                h.launch(
                    "matmul_param",
                    crate::matmul::config(n, 16),
                    &matmul_args(&a, &b, &c, n, 16),
                )
            })
            .unwrap();
            q.wait().unwrap();
        }
    }
    assert!(decided() >= before + 3);
    // A tiered bundle: its tier links on a worker.
    let matmul = KernelId::new("matmul");
    let mut tiered = get_kernel_bundle_for(std::slice::from_ref(&matmul))
        .unwrap()
        .with_mode(SpecMode::Tiered);
    tiered.set_specialization_constant(&BLOCK, 4).unwrap();
    let tiered = build(&tiered).unwrap();
    let n = 96;
    let (a, b) = (pseudo_random(n * n, 3), pseudo_random(n * n, 4));
    let (a, b) = (q.upload(&a).unwrap(), q.upload(&b).unwrap());
    matmul_once(&q, Some(&tiered), (&a, &b), n, 4);
    tiered
        .wait_for_tier_up(
            &matmul,
            q.device().arch(),
            std::time::Duration::from_secs(120),
        )
        .unwrap();
    let [total, background] = crate::atexit_counter::registrations();
    println!(
        "registered: {total} in all, {background} on ptxspec's background threads (first: {})",
        crate::atexit_counter::first_in_the_background()
    );
}
