//! CUDA graphs of ptxspec launches on a real GPU (issue 31): launches
//! captured through a queue in every mode, with the values in the parameter
//! space, a global buffer or the code, with bundle and handler values;
//! values changed in the instantiated graph and read back after each
//! replay; tiered nodes swapping to their specialized code; what a capture
//! refuses; the program's own cudarc work recorded beside ptxspec's, and a
//! graph that outlives its queue.
//!
//! A harness of its own (`harness = false`, `support/gpu_harness.rs`):
//! without a CUDA driver every test reports itself ignored.

#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use ptxspec::image::Delivery;
use ptxspec::runtime::{Arg, DeviceBuffer, Graph, LaunchConfig, Queue};
use ptxspec::{Bool, Error, Executable, KernelBundle, KernelId, SpecId, SpecMode, build};
use ptxspec_core::postlink::BufferPlacement;

ptxspec_kernels::register_example_kernels!();

#[path = "support/gpu_harness.rs"]
mod gpu_harness;
#[path = "support/scalars.rs"]
mod scalars;
use scalars::*;

/// One thread: `scalars` writes its nine values once.
fn one() -> LaunchConfig {
    LaunchConfig::new((1, 1, 1), (1, 1, 1))
}

const SENTINEL: i64 = 0x5a5a_5a5a;

/// A value set of the `scalars` kernel, as the test sets it and as the
/// kernel writes it back.
#[derive(Clone, Copy)]
struct Values {
    c: i8,
    d: f64,
    s: i16,
    p: (i32, i8, i32, i8),
}

impl Values {
    fn expected(&self) -> Vec<i64> {
        let (a, b, c, d) = self.p;
        scalars_expected(
            self.c,
            self.d,
            true,
            self.s,
            0x1234_5678_9abc_def0,
            padded(a, b, c, d),
        )
    }

    fn set_on(&self, input: &mut KernelBundle<ptxspec::Input>) {
        input.set_specialization_constant(&CHAR, self.c).unwrap();
        input.set_specialization_constant(&DOUBLE, self.d).unwrap();
        input.set_specialization_constant(&SHORT, self.s).unwrap();
        let (a, b, c, d) = self.p;
        input
            .set_specialization_constant(&PADDED, padded(a, b, c, d))
            .unwrap();
    }

    fn set_on_node(&self, graph: &mut Graph, node: usize) {
        graph
            .set_specialization_constant(node, &CHAR, self.c)
            .unwrap();
        graph
            .set_specialization_constant(node, &DOUBLE, self.d)
            .unwrap();
        graph
            .set_specialization_constant(node, &SHORT, self.s)
            .unwrap();
        let (a, b, c, d) = self.p;
        graph
            .set_specialization_constant(node, &PADDED, padded(a, b, c, d))
            .unwrap();
    }
}

fn values(seed: i32) -> Values {
    Values {
        c: (seed % 100) as i8,
        d: seed as f64 * 0.25,
        s: (seed * 7) as i16,
        p: (seed, -(seed % 50) as i8, i32::MIN + seed, 3),
    }
}

/// A graph of one `scalars` launch from `exe` writing `out`.
fn capture_scalars<'a>(
    q: &'a Queue,
    exe: &'a KernelBundle<Executable>,
    out: &'a DeviceBuffer<i64>,
) -> Graph<'a> {
    q.capture(|q| {
        q.submit(|h| {
            h.use_kernel_bundle(exe)?;
            h.launch("scalars", one(), &[Arg::buffer(out)])
        })
    })
    .unwrap()
}

fn replay(q: &Queue, graph: &mut Graph, out: &DeviceBuffer<i64>) -> Vec<i64> {
    graph.launch().unwrap();
    q.download(out).unwrap()
}

/// Every mode and placement: the capture runs nothing; a replay writes the
/// bundle's values; values changed on the node are what the next replay
/// writes, and values seen before come back.
fn graphs_replay_and_change_values_in_every_mode(q: &Arc<Queue>) {
    let registered = || {
        ptxspec::get_kernel_bundle_for(&[KernelId::new("scalars")])
            .unwrap()
            .with_mode(SpecMode::Emulated)
    };
    let global = || KernelBundle::from_images(images_placed(&["scalars"], BufferPlacement::Global));
    let cases: [(&str, KernelBundle<ptxspec::Input>, SpecMode, Delivery); 6] = [
        (
            "param",
            registered(),
            SpecMode::Emulated,
            Delivery::ParamSpace,
        ),
        ("param", registered(), SpecMode::Native, Delivery::InCode),
        ("param", registered(), SpecMode::Lto, Delivery::InCode),
        ("param", registered(), SpecMode::Auto, Delivery::InCode),
        (
            "global",
            global(),
            SpecMode::Emulated,
            Delivery::GlobalBuffer,
        ),
        ("global", global(), SpecMode::Native, Delivery::InCode),
    ];
    for (i, (placement, base, mode, delivery)) in cases.into_iter().enumerate() {
        let what = format!("{placement} {mode:?}");
        let first = values(11 + i as i32);
        let mut input = base.with_mode(mode);
        first.set_on(&mut input);
        let exe = build(&input).unwrap();
        assert_eq!(
            exe.built_image_named("scalars").unwrap().delivery(),
            delivery,
            "{what}"
        );
        let out: DeviceBuffer<i64> = q.upload(&[SENTINEL; 9]).unwrap();
        let mut graph = capture_scalars(q, &exe, &out);
        assert_eq!(
            q.download(&out).unwrap(),
            [SENTINEL; 9],
            "{what}: capture ran"
        );
        assert_eq!(graph.nodes().len(), 1);
        let node_mode = graph.nodes().next().unwrap().mode();
        assert_eq!(graph.nodes().next().unwrap().kernel(), "scalars");
        assert_eq!(
            replay(q, &mut graph, &out),
            first.expected(),
            "{what}: captured values"
        );
        for seed in [100, 101, 100] {
            let next = values(seed + i as i32 * 10);
            next.set_on_node(&mut graph, 0);
            assert_eq!(graph.get_specialization_constant(0, &CHAR).unwrap(), next.c);
            assert_eq!(
                replay(q, &mut graph, &out),
                next.expected(),
                "{what}: seed {seed}"
            );
            assert_eq!(graph.nodes().next().unwrap().mode(), node_mode, "{what}");
        }
        // Replays without changes replay the last values.
        graph.launch().unwrap();
        let last = values(100 + i as i32 * 10);
        assert_eq!(
            replay(q, &mut graph, &out),
            last.expected(),
            "{what}: again"
        );
    }
}

/// Values set on the handler (the kernel's emulated image) are captured,
/// and the node's values change as a bundle's do. Two nodes of one kernel
/// keep their own values.
fn handler_values_in_a_graph(q: &Arc<Queue>) {
    let out0: DeviceBuffer<i64> = q.upload(&[SENTINEL; 9]).unwrap();
    let out1: DeviceBuffer<i64> = q.upload(&[SENTINEL; 9]).unwrap();
    let (a, b) = (values(21), values(22));
    let mut graph = q
        .capture(|q| {
            for (v, out) in [(a, &out0), (b, &out1)] {
                q.submit(|h| {
                    h.set_specialization_constant(&CHAR, v.c)?;
                    h.set_specialization_constant(&DOUBLE, v.d)?;
                    h.set_specialization_constant(&SHORT, v.s)?;
                    let (pa, pb, pc, pd) = v.p;
                    h.set_specialization_constant(&PADDED, padded(pa, pb, pc, pd))?;
                    h.launch("scalars", one(), &[Arg::buffer(out)])
                })?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(graph.nodes().len(), 2);
    graph.launch().unwrap();
    assert_eq!(q.download(&out0).unwrap(), a.expected());
    assert_eq!(q.download(&out1).unwrap(), b.expected());
    let c = values(23);
    c.set_on_node(&mut graph, 1);
    graph.launch().unwrap();
    assert_eq!(
        q.download(&out0).unwrap(),
        a.expected(),
        "node 0 kept its values"
    );
    assert_eq!(q.download(&out1).unwrap(), c.expected());
    // Everywhere: both nodes.
    assert_eq!(
        graph
            .set_specialization_constant_everywhere(&CHAR, -1)
            .unwrap(),
        2
    );
    graph.launch().unwrap();
    assert_eq!(q.download(&out0).unwrap()[0], -1);
    assert_eq!(q.download(&out1).unwrap()[0], -1);
    assert_eq!(q.download(&out1).unwrap()[1..], c.expected()[1..]);
}

/// Nodes of two images in turn (`scalars`, `tiny`, `scalars`, `tiny`), in
/// native mode (new code per value set): a value set everywhere reaches the
/// nodes whose image has the constant, and only those.
fn values_everywhere_across_images(q: &Arc<Queue>) {
    const TINY: SpecId<i32> = SpecId::new("tiny_id");
    let kernels = [KernelId::new("scalars"), KernelId::new("tiny")];
    let exe = build(
        &ptxspec::get_kernel_bundle_for(&kernels)
            .unwrap()
            .with_mode(SpecMode::Native),
    )
    .unwrap();
    let scalars_out: Vec<DeviceBuffer<i64>> =
        (0..2).map(|_| q.upload(&[SENTINEL; 9]).unwrap()).collect();
    let tiny_out: Vec<DeviceBuffer<i32>> = (0..2).map(|_| q.upload(&[0i32]).unwrap()).collect();
    let mut graph = q
        .capture(|q| {
            for n in 0..2 {
                q.submit(|h| {
                    h.use_kernel_bundle(&exe)?;
                    h.launch("scalars", one(), &[Arg::buffer(&scalars_out[n])])
                })?;
                q.submit(|h| {
                    h.use_kernel_bundle(&exe)?;
                    h.launch(
                        "tiny",
                        LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                        &[Arg::buffer(&tiny_out[n])],
                    )
                })?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(graph.nodes().len(), 4);
    for round in 0..3i32 {
        let (c, t) = (-(round as i8) - 10, 1_000 + round);
        assert_eq!(
            graph
                .set_specialization_constant_everywhere(&CHAR, c)
                .unwrap(),
            2
        );
        assert_eq!(
            graph
                .set_specialization_constant_everywhere(&TINY, t)
                .unwrap(),
            2
        );
        graph.launch().unwrap();
        for n in 0..2 {
            assert_eq!(
                q.download(&scalars_out[n]).unwrap()[0],
                i64::from(c),
                "round {round}"
            );
            assert_eq!(q.download(&tiny_out[n]).unwrap(), [t], "round {round}");
        }
    }
    // The wrong type for a constant: refused on the first node that has it.
    const WRONG: SpecId<i64> = SpecId::new("tiny_id");
    let e = graph
        .set_specialization_constant_everywhere(&WRONG, 5)
        .unwrap_err();
    assert!(
        matches!(&e, Error::SpecConst { id, .. } if id == "tiny_id"),
        "{e}"
    );
}

/// A tiered node runs emulated, swaps to its specialized code on a replay
/// after its link, and new values start over from emulated (values read
/// back at every step).
fn tiered_graph_nodes_swap_to_the_specialized_tier(q: &Arc<Queue>) {
    let arch = q.device().arch();
    let scalars = KernelId::new("scalars");
    // Values no other test links (a linked value set starts specialized).
    let first = values(57);
    let mut input = ptxspec::get_kernel_bundle_for(std::slice::from_ref(&scalars))
        .unwrap()
        .with_mode(SpecMode::Tiered);
    first.set_on(&mut input);
    let exe = build(&input).unwrap();
    let out: DeviceBuffer<i64> = q.upload(&[SENTINEL; 9]).unwrap();
    let mut graph = capture_scalars(q, &exe, &out);
    let node = |g: &Graph| {
        (
            g.nodes().next().unwrap().mode(),
            g.nodes().next().unwrap().awaits_tier(),
        )
    };
    assert_eq!(node(&graph), (SpecMode::Emulated, true));
    assert_eq!(replay(q, &mut graph, &out), first.expected(), "emulated");
    exe.wait_for_tier_up(&scalars, arch, Duration::from_secs(120))
        .unwrap();
    // Linked: a replay starts loading the code in the background, and a
    // later one swaps the node (values right at every replay).
    let started = Instant::now();
    while node(&graph).0 != SpecMode::Lto {
        // A background load: as long as a loaded machine takes (the loop
        // ends at the swap).
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no swap in 120 s"
        );
        assert_eq!(replay(q, &mut graph, &out), first.expected(), "loading");
    }
    assert_eq!(replay(q, &mut graph, &out), first.expected(), "swapped");
    assert_eq!(node(&graph), (SpecMode::Lto, false));
    // New values: emulated at once, specialized once linked.
    let next = values(58);
    next.set_on_node(&mut graph, 0);
    assert_eq!(replay(q, &mut graph, &out), next.expected(), "new values");
    assert_eq!(node(&graph), (SpecMode::Emulated, true));
    let started = Instant::now();
    while node(&graph).0 != SpecMode::Lto {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no swap in 120 s"
        );
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(replay(q, &mut graph, &out), next.expected(), "waiting");
    }
    assert_eq!(
        replay(q, &mut graph, &out),
        next.expected(),
        "swapped again"
    );
}

/// What a capture refuses, and a queue that works after it.
fn captures_refuse_what_they_cannot_replay(q: &Arc<Queue>) {
    let other = Queue::new(q.device().ordinal).unwrap();
    let foreign: DeviceBuffer<i64> = other.upload(&[SENTINEL; 9]).unwrap();
    let exe = build(
        &ptxspec::get_kernel_bundle_for(&[KernelId::new("scalars")])
            .unwrap()
            .with_mode(SpecMode::Emulated),
    )
    .unwrap();
    let err = q
        .capture(|q| {
            q.submit(|h| {
                h.use_kernel_bundle(&exe)?;
                h.launch("scalars", one(), &[Arg::buffer(&foreign)])
            })
        })
        .err()
        .unwrap();
    assert!(
        matches!(&err, Error::InvalidObject { misuse: ptxspec::Misuse::Capture, detail: m, .. } if m.contains("another stream")),
        "{err}"
    );
    let capturing = q.begin_capture().unwrap();
    assert!(matches!(
        q.begin_capture(),
        Err(Error::InvalidObject {
            misuse: ptxspec::Misuse::Capture,
            ..
        })
    ));
    // While it lasts the queue takes no other launch, upload or wait.
    let out: DeviceBuffer<i64> = {
        drop(capturing);
        q.upload(&[SENTINEL; 9]).unwrap()
    };
    let capturing = q.begin_capture().unwrap();
    let refused = q.submit(|h| {
        h.use_kernel_bundle(&exe)?;
        h.launch("scalars", one(), &[Arg::buffer(&out)])
    });
    assert!(
        matches!(&refused, Err(Error::InvalidObject { misuse: ptxspec::Misuse::Capture, detail: m, .. }) if m.contains("capturing")),
        "{refused:?}"
    );
    assert!(matches!(
        q.upload(&[1i64]),
        Err(Error::InvalidObject {
            misuse: ptxspec::Misuse::Capture,
            ..
        })
    ));
    assert!(matches!(
        q.download(&out),
        Err(Error::InvalidObject {
            misuse: ptxspec::Misuse::Capture,
            ..
        })
    ));
    assert!(matches!(
        q.wait(),
        Err(Error::InvalidObject {
            misuse: ptxspec::Misuse::Capture,
            ..
        })
    ));
    let empty = capturing.end().unwrap();
    assert_eq!(empty.nodes().len(), 0);
    drop(empty);
    // The queue launches as before, and a graph's errors name what is wrong.
    let mut graph = capture_scalars(q, &exe, &out);
    assert!(matches!(
        graph.set_specialization_constant(3, &CHAR, 1),
        Err(Error::InvalidObject {
            misuse: ptxspec::Misuse::OutOfRange,
            ..
        })
    ));
    let as_int: SpecId<i32> = SpecId::new("char_id");
    assert!(matches!(
        graph.set_specialization_constant(0, &as_int, 1),
        Err(Error::SpecConst { id, .. }) if id == "char_id"
    ));
    let unknown: SpecId<Bool> = SpecId::new("no_such_id");
    assert!(matches!(
        graph.set_specialization_constant(0, &unknown, Bool(1)),
        Err(Error::SpecConst { id, .. }) if id == "no_such_id"
    ));
    assert_eq!(replay(q, &mut graph, &out), scalars_defaults());
}

/// A capture records the program's own cudarc work on the queue's stream
/// too where the program takes the graph unchecked (not listed among
/// ptxspec's nodes; `end` refuses it), and a graph keeps what it needs
/// after its queue is dropped.
fn graphs_record_cudarc_work_and_outlive_their_queue(_: &Arc<Queue>) {
    let ctx = ptxspec::cudarc::driver::CudaContext::new(0).unwrap();
    // With cudarc's event tracking, the memset below would wait on the
    // write event of the slice's upload, recorded before the capture: the
    // driver invalidates such a capture, which ptxspec reports as
    // invalid_object.
    let tracked = ctx.new_stream().unwrap();
    let mut slice = tracked.clone_htod(&[SENTINEL; 4]).unwrap();
    // SAFETY: the program captures `tracked` through this queue alone.
    let q = unsafe { Queue::from_stream(Arc::clone(&tracked)) }.unwrap();
    let err = q
        .capture(|_| {
            tracked.memset_zeros(&mut slice)?;
            Ok(())
        })
        .err()
        .unwrap();
    assert!(
        matches!(&err, ptxspec::Error::InvalidObject { misuse: ptxspec::Misuse::Capture, detail: m, .. } if m.contains("disable_event_tracking")),
        "{err}"
    );
    drop(q);
    // SAFETY: this test's slices are used on their own stream only; the
    // other tests' memory is ptxspec's, which orders its uses itself.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().unwrap();
    // SAFETY: `stream` is captured through this queue alone; the second
    // queue over it (`reader`) comes after this one is dropped.
    let q = unsafe { Queue::from_stream(Arc::clone(&stream)) }.unwrap();
    let v = values(77);
    let mut input = ptxspec::get_kernel_bundle_for(&[KernelId::new("scalars")])
        .unwrap()
        .with_mode(SpecMode::Emulated);
    v.set_on(&mut input);
    let exe = build(&input).unwrap();
    let out: DeviceBuffer<i64> = q.upload(&[SENTINEL; 9]).unwrap();
    let mut mine = stream.clone_htod(&[SENTINEL; 4]).unwrap();
    // The program's own work in a capture: refused by `end`, whose graph
    // could not keep its memory alive...
    let refused = q.capture(|q| {
        q.submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch("scalars", one(), &[Arg::buffer(&out)])
        })?;
        stream.memset_zeros(&mut mine)?;
        Ok(())
    });
    assert!(
        matches!(&refused, Err(ptxspec::Error::InvalidObject { misuse: ptxspec::Misuse::Capture, detail: m, .. }) if m.contains("did not launch")),
        "{:?}",
        refused.err()
    );
    // ...and taken by `end_unchecked`, which leaves that memory to us.
    let mut capturing = q.begin_capture().unwrap();
    capturing
        .submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch("scalars", one(), &[Arg::buffer(&out)])
        })
        .unwrap();
    stream.memset_zeros(&mut mine).unwrap();
    // SAFETY: `mine`, which the memset node writes, is dropped at the end
    // of this test, after the graph.
    let mut graph = unsafe { capturing.end_unchecked() }.unwrap();
    assert_eq!(
        graph.nodes().len(),
        1,
        "only ptxspec's kernel nodes are listed"
    );
    assert_eq!(
        stream.clone_dtoh(&mine).unwrap(),
        [SENTINEL; 4],
        "the capture ran"
    );
    drop(q);
    graph.launch().unwrap();
    assert_eq!(
        stream.clone_dtoh(&mine).unwrap(),
        [0; 4],
        "the memset replayed"
    );
    // SAFETY: `q` is gone; nothing captures `stream` from here on.
    let reader = unsafe { Queue::from_stream(Arc::clone(&stream)) }.unwrap();
    assert_eq!(reader.download(&out).unwrap(), v.expected());
    let w = values(78);
    w.set_on_node(&mut graph, 0);
    graph.launch().unwrap();
    assert_eq!(reader.download(&out).unwrap(), w.expected());
    // SAFETY: slices made while it was off are this test's, done with.
    unsafe { ctx.enable_event_tracking() };
}

/// Another thread launching on a queue while it captures, again and again
/// (issue: the capture's end released the queue's lock before the driver
/// ended the capture, so a launch in that gap became a node ptxspec did not
/// record): each of its launches either runs or is refused as made during
/// a capture, every capture's graph holds exactly the launch recorded
/// through it, and every result reads back right.
fn launches_racing_the_end_of_a_capture(q: &Arc<Queue>) {
    let exe = Arc::new(
        build(
            &ptxspec::get_kernel_bundle_for(&[KernelId::new("scalars")])
                .unwrap()
                .with_mode(SpecMode::Emulated),
        )
        .unwrap(),
    );
    let theirs: Arc<DeviceBuffer<i64>> = Arc::new(q.upload(&[SENTINEL; 9]).unwrap());
    let ours: DeviceBuffer<i64> = q.upload(&[SENTINEL; 9]).unwrap();
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let stop = Arc::new(AtomicBool::new(false));
    // What the other thread's launches did so far: (ran, refused).
    let counts = Arc::new((AtomicU32::new(0), AtomicU32::new(0)));
    let other = {
        let (q, exe, theirs, stop, counts) = (
            Arc::clone(q),
            Arc::clone(&exe),
            Arc::clone(&theirs),
            Arc::clone(&stop),
            Arc::clone(&counts),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match q.submit(|h| {
                    h.use_kernel_bundle(&exe)?;
                    h.launch("scalars", one(), &[Arg::buffer(&theirs)])
                }) {
                    Ok(()) => counts.0.fetch_add(1, Ordering::Relaxed),
                    Err(Error::InvalidObject {
                        misuse: ptxspec::Misuse::Capture,
                        detail: m,
                        ..
                    }) if m.contains("capturing") => counts.1.fetch_add(1, Ordering::Relaxed),
                    Err(e) => panic!("a launch beside the capture: {e}"),
                };
            }
        })
    };
    // At least 200 captures, and on until the other thread's launches have
    // both run and met a capture: how soon that thread starts is the
    // scheduler's (a loaded machine may run all 200 captures first).
    let met = || counts.0.load(Ordering::Relaxed) > 0 && counts.1.load(Ordering::Relaxed) > 0;
    let mut graphs = 0;
    let started = Instant::now();
    while (graphs < 200 || !met()) && started.elapsed() < Duration::from_secs(60) {
        let mut graph = q
            .capture(|c| {
                c.submit(|h| {
                    h.use_kernel_bundle(&exe)?;
                    h.launch("scalars", one(), &[Arg::buffer(&ours)])
                })
            })
            .unwrap_or_else(|e| panic!("capture {graphs}: {e}"));
        assert_eq!(graph.nodes().len(), 1, "capture {graphs}");
        graph.launch().unwrap();
        graphs += 1;
    }
    stop.store(true, Ordering::Relaxed);
    other.join().unwrap();
    let (ran, refused) = (
        counts.0.load(Ordering::Relaxed),
        counts.1.load(Ordering::Relaxed),
    );
    eprintln!("{graphs} captures; beside them {ran} launches ran, {refused} were refused");
    assert!(ran > 0 && refused > 0, "the launches never met a capture");
    assert_eq!(q.download(&ours).unwrap(), scalars_defaults());
    assert_eq!(q.download(&theirs).unwrap(), scalars_defaults());
}

fn gpus_needed(_: &str) -> usize {
    1
}

const TESTS: &[(&str, gpu_harness::GpuTest)] = &[
    (
        "graphs_replay_and_change_values_in_every_mode",
        graphs_replay_and_change_values_in_every_mode,
    ),
    ("handler_values_in_a_graph", handler_values_in_a_graph),
    (
        "values_everywhere_across_images",
        values_everywhere_across_images,
    ),
    (
        "tiered_graph_nodes_swap_to_the_specialized_tier",
        tiered_graph_nodes_swap_to_the_specialized_tier,
    ),
    (
        "captures_refuse_what_they_cannot_replay",
        captures_refuse_what_they_cannot_replay,
    ),
    (
        "graphs_record_cudarc_work_and_outlive_their_queue",
        graphs_record_cudarc_work_and_outlive_their_queue,
    ),
    (
        "launches_racing_the_end_of_a_capture",
        launches_racing_the_end_of_a_capture,
    ),
];

fn main() {
    gpu_harness::run(TESTS, gpus_needed);
}
