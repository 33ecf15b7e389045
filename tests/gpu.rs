//! Launches on a real GPU: every example kernel in every mode (native,
//! emulated with the values in the parameter space, LTO) and with the
//! buffer in global memory, with defaults, set values, values changed
//! between launches, composite constants; 8 threads at once; 10 000
//! launches without leaking; selectors, bundles bound to devices, JIT logs
//! and errors, dynamic parallelism, a debug (-G) build; with two GPUs, one
//! bundle on both from four threads.
//!
//! A harness of its own (`harness = false`): without a CUDA driver it says so
//! and reports every test as ignored, never as passed (CI has no GPU); with
//! a driver present it runs them all and any failure fails the run.

// A harness-less binary: `missing_docs` would ask for docs on what its macros
// (spec_struct!, criterion_group!) generate, which is no API.
#![allow(missing_docs)]

use std::sync::Arc;

use ptxspec::image::{Delivery, Image};
use ptxspec::runtime::{self, Arg, DeviceBuffer, LaunchConfig, Queue};
use ptxspec::{
    Bool, BuildOptions, Executable, KernelBundle, KernelId, SpecId, SpecMode, build, build_with,
    get_kernel_bundle_for,
};
use ptxspec_core::postlink::{BufferPlacement, Options};

ptxspec_kernels::register_example_kernels!();

#[path = "support/gpu_harness.rs"]
mod gpu_harness;
#[path = "support/scalars.rs"]
mod scalars;
use scalars::*;

use ptxspec_kernels::reference;

/// Every way a bundle delivers values; the example images carry LTO-IR
/// (build.rs compiles them with NVRTC where it is installed).
const MODES: [SpecMode; 4] = [
    SpecMode::Auto,
    SpecMode::Native,
    SpecMode::Emulated,
    SpecMode::Lto,
];

ptxspec::spec_struct! {
    pub struct A { pub x: i32, pub y: f32 }
}
ptxspec::spec_struct! {
    /// DPC++'s SYCL 1.2.1 spec-constant design's POD; CUDA's int2 is 8-aligned, which `[i32; 2]` after two
    /// 8-byte `A`s already is.
    pub struct Pod { pub a: [A; 2], pub b: [i32; 2] }
}
const POD: SpecId<Pod> = SpecId::new("pod_id");

fn run_scalars(q: &Queue, bundle: &ptxspec::KernelBundle<ptxspec::Executable>) -> Vec<i64> {
    let out: DeviceBuffer<i64> = q.upload(&[0x5a5a_5a5a_i64; 9]).unwrap();
    q.submit(|h| {
        h.use_kernel_bundle(bundle)?;
        h.launch(
            "scalars",
            LaunchConfig::new((1, 1, 1), (1, 1, 1)),
            &[Arg::buffer(&out)],
        )
    })
    .unwrap();
    q.download(&out).unwrap()
}

fn scalars_and_composites_in_both_modes(q: &Arc<Queue>) {
    for mode in MODES {
        let input = get_kernel_bundle_for(&[KernelId::new("scalars")])
            .unwrap()
            .with_mode(mode);
        // Defaults.
        let got = run_scalars(q, &build(&input).unwrap());
        assert_eq!(got, scalars_defaults(), "{mode:?} defaults");
        // Set values, including sign extension and a composite with padding.
        let mut input = input;
        input.set_specialization_constant(&CHAR, -128).unwrap();
        input.set_specialization_constant(&DOUBLE, -0.125).unwrap();
        input.set_specialization_constant(&BOOL, Bool(0)).unwrap();
        input.set_specialization_constant(&SHORT, 32767).unwrap();
        input
            .set_specialization_constant(&U64, u64::MAX - 1)
            .unwrap();
        input
            .set_specialization_constant(&PADDED, padded(-1, -2, i32::MIN, 127))
            .unwrap();
        let got = run_scalars(q, &build(&input).unwrap());
        let want = scalars_expected(
            -128,
            -0.125,
            false,
            32767,
            u64::MAX - 1,
            padded(-1, -2, i32::MIN, 127),
        );
        assert_eq!(got, want, "{mode:?} set values");
    }
}

fn seed000_pod(q: &Arc<Queue>) {
    for mode in MODES {
        let mut input = get_kernel_bundle_for(&[KernelId::new("pod")])
            .unwrap()
            .with_mode(mode);
        let run = |b: &ptxspec::KernelBundle<ptxspec::Executable>| {
            let out: DeviceBuffer<i32> = q.upload(&[0x5a5a5a5a; 6]).unwrap();
            q.submit(|h| {
                h.use_kernel_bundle(b)?;
                h.launch(
                    "pod",
                    LaunchConfig::new((1, 1, 1), (1, 1, 1)),
                    &[Arg::buffer(&out)],
                )
            })
            .unwrap();
            q.download(&out).unwrap()
        };
        let f = |x: f32| x.to_bits() as i32;
        assert_eq!(
            run(&build(&input).unwrap()),
            [1, f(2.0), 2, f(3.0), 44, 44],
            "{mode:?}"
        );
        let v = Pod {
            a: [A { x: -3, y: 0.5 }, A { x: 9, y: -7.25 }],
            b: [100, -100],
        };
        input.set_specialization_constant(&POD, v).unwrap();
        assert_eq!(
            run(&build(&input).unwrap()),
            [-3, f(0.5), 9, f(-7.25), 100, -100],
            "{mode:?}"
        );
    }
}

fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

fn max_rel_err(a: &[f32], b: &[f32]) -> f32 {
    let norm = b.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-30);
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f32>()
        .sqrt()
        / norm
}

const COEFF: SpecId<[[f32; 3]; 3]> = SpecId::new("coeff_id");

fn convolution_matches_cpu_with_values_changed_between_launches(q: &Arc<Queue>) {
    let (h, w) = (67usize, 130usize);
    let img = pseudo_random(h * w, 7);
    let input_buf = q.upload(&img).unwrap();
    let out: DeviceBuffer<f32> = q.alloc_zeros(h * w).unwrap();
    let cfg = LaunchConfig::new(
        (w.div_ceil(16) as u32, h.div_ceil(16) as u32, 1),
        (16, 16, 1),
    );
    let sobel = [[1.0, 0.0, -1.0], [2.0, 0.0, -2.0], [1.0, 0.0, -1.0]];
    let box9 = [[1.0f32 / 9.0; 3]; 3];
    let sharpen = [[0.0, -1.0, 0.0], [-1.0, 5.0, -1.0], [0.0, -1.0, 0.0]];
    for mode in MODES {
        for (name, c) in [
            ("default box", None),
            ("sobel", Some(sobel)),
            ("sharpen", Some(sharpen)),
            ("sobel again", Some(sobel)),
        ] {
            let mut input = get_kernel_bundle_for(&[KernelId::new("conv3x3")])
                .unwrap()
                .with_mode(mode);
            if let Some(c) = c {
                input.set_specialization_constant(&COEFF, c).unwrap();
            }
            let exe = build(&input).unwrap();
            q.upload(&vec![f32::NAN; h * w]).unwrap(); // unrelated traffic
            q.submit(|hd| {
                hd.use_kernel_bundle(&exe)?;
                hd.launch(
                    "conv3x3",
                    cfg,
                    &[
                        Arg::buffer(&input_buf),
                        Arg::buffer(&out),
                        Arg::value(h as i32),
                        Arg::value(w as i32),
                    ],
                )
            })
            .unwrap();
            let got = q.download(&out).unwrap();
            let want = reference::conv3x3(&img, h, w, &c.unwrap_or(box9));
            let err = max_rel_err(&got, &want);
            assert!(err < 1e-5, "{mode:?} {name}: relative error {err}");
        }
    }
}

const BLOCK: SpecId<i32> = SpecId::new("block_size_id");

/// One launch of the blocked matmul (C = A·B, n×n, blocks of `bs`) from
/// `bundle`, or without one with `bs` as a handler value: C, and the code
/// the launch ran.
fn matmul_once(
    q: &Queue,
    bundle: Option<&KernelBundle<Executable>>,
    (da, db): (&DeviceBuffer<f32>, &DeviceBuffer<f32>),
    n: usize,
    bs: u32,
) -> (Vec<f32>, Option<SpecMode>) {
    let dc: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; n * n]).unwrap();
    let g = n as u32 / bs;
    let cfg = LaunchConfig::new((g, g, 1), (bs, bs, 1)).with_shared_mem(2 * bs * bs * 4);
    q.submit(|h| {
        match bundle {
            Some(b) => h.use_kernel_bundle(b)?,
            None => h.set_specialization_constant(&BLOCK, bs as i32)?,
        }
        h.launch(
            "matmul",
            cfg,
            &[
                Arg::buffer(da),
                Arg::buffer(db),
                Arg::buffer(&dc),
                Arg::value(n as i32),
            ],
        )
    })
    .unwrap();
    (q.download(&dc).unwrap(), q.last_launch_mode())
}

fn blocked_matmul_for_each_block_size(q: &Arc<Queue>) {
    let n = 128usize;
    let (a, b) = (pseudo_random(n * n, 1), pseudo_random(n * n, 2));
    let want = reference::matmul(&a, &b, n);
    let (da, db) = (q.upload(&a).unwrap(), q.upload(&b).unwrap());
    for mode in MODES {
        for bs in [8u32, 16, 32] {
            let mut input = get_kernel_bundle_for(&[KernelId::new("matmul")])
                .unwrap()
                .with_mode(mode);
            input
                .set_specialization_constant(&BLOCK, bs as i32)
                .unwrap();
            let exe = build(&input).unwrap();
            let (c, _) = matmul_once(q, Some(&exe), (&da, &db), n, bs);
            let err = max_rel_err(&c, &want);
            assert!(err < 1e-5, "{mode:?} block {bs}: relative error {err}");
        }
    }
}

fn two_translation_units_on_the_gpu(q: &Arc<Queue>) {
    let scale: SpecId<f32> = SpecId::new("scale_id");
    let offset: SpecId<i32> = SpecId::new("offset_id");
    let x: Vec<f32> = (0..100).map(|i| i as f32).collect();
    let din = q.upload(&x).unwrap();
    for mode in MODES {
        for (s, o) in [(None, None), (Some(0.5f32), Some(-4i32))] {
            let mut input = get_kernel_bundle_for(&[KernelId::new("two_tu")])
                .unwrap()
                .with_mode(mode);
            if let (Some(s), Some(o)) = (s, o) {
                input.set_specialization_constant(&scale, s).unwrap();
                input.set_specialization_constant(&offset, o).unwrap();
            }
            let exe = build(&input).unwrap();
            let out: DeviceBuffer<f32> = q.alloc_zeros(100).unwrap();
            q.submit(|h| {
                h.use_kernel_bundle(&exe)?;
                h.launch(
                    "two_tu",
                    LaunchConfig::new((1, 1, 1), (128, 1, 1)),
                    &[Arg::buffer(&din), Arg::buffer(&out), Arg::value(100i32)],
                )
            })
            .unwrap();
            let (s, o) = (s.unwrap_or(3.0), o.unwrap_or(10) as f32);
            let want: Vec<f32> = x.iter().map(|v| v * s + o + s).collect();
            assert_eq!(q.download(&out).unwrap(), want, "{mode:?}");
        }
    }
}

fn handler_values_errors_and_eight_threads(q: &Arc<Queue>) {
    // Errors: unknown kernel; kernel outside the bundle; wrong arguments.
    let out: DeviceBuffer<i64> = q.alloc_zeros(9).unwrap();
    let one = LaunchConfig::new((1, 1, 1), (1, 1, 1));
    let e = q.submit(|h| h.launch("nope", one, &[])).unwrap_err();
    assert!(matches!(e, ptxspec::Error::KernelNotFound(_)), "{e}");
    let pod_only = build(&get_kernel_bundle_for(&[KernelId::new("pod")]).unwrap()).unwrap();
    let e = q
        .submit(|h| {
            h.use_kernel_bundle(&pod_only)?;
            h.launch("scalars", one, &[Arg::buffer(&out)])
        })
        .unwrap_err();
    // SYCL-CTS use_kernel_bundle_invoke_kernel_without_bundle_no_second_queue.cpp.
    assert!(matches!(e, ptxspec::Error::KernelNotSupported(_)), "{e}");
    assert_eq!(e.errc(), ptxspec::Errc::KernelNotSupported, "{e}");
    let e = q
        .submit(|h| h.launch("scalars", one, &[Arg::value(1i32)]))
        .unwrap_err();
    assert!(matches!(e, ptxspec::Error::KernelArgument(_)), "{e}");
    // 8 threads, each setting its own values per submission on one queue.
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let q = Arc::clone(q);
            std::thread::spawn(move || {
                for round in 0..20i16 {
                    let v = t as i16 * 1000 + round;
                    let out: DeviceBuffer<i64> = q.alloc_zeros(9).unwrap();
                    q.submit(|h| {
                        h.set_specialization_constant(&SHORT, v)?;
                        h.set_specialization_constant(&CHAR, -(t as i8))?;
                        h.launch("scalars", one, &[Arg::buffer(&out)])
                    })
                    .unwrap();
                    let got = q.download(&out).unwrap();
                    assert_eq!(
                        (got[0], got[3]),
                        (-(t as i64), v as i64),
                        "thread {t} round {round}"
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// intel vector-convolution-demo.cpp: values for four constants set on the
/// handler, one read by the launched kernel — the others are for kernels
/// that use them, and ignored. intel handler-api.cpp / SYCL-CTS: the
/// handler's `get_specialization_constant` — its value, else the bundle's,
/// else the default.
fn handler_values_for_other_kernels_and_handler_get(q: &Arc<Queue>) {
    let one = LaunchConfig::new((1, 1, 1), (1, 1, 1));
    let out: DeviceBuffer<i64> = q.alloc_zeros(9).unwrap();
    const BLOCK: SpecId<i32> = SpecId::new("block_size_id");
    const COEFF: SpecId<[[f32; 3]; 3]> = SpecId::new("coeff_id");
    const NOWHERE: SpecId<u32> = SpecId::with_default("used_by_no_kernel_id", 7);
    q.submit(|h| {
        h.set_specialization_constant(&BLOCK, 32)?;
        h.set_specialization_constant(&COEFF, [[1.0; 3]; 3])?;
        h.set_specialization_constant(&NOWHERE, 1)?;
        h.set_specialization_constant(&CHAR, -9)?;
        // The handler's own values, and defaults for the rest.
        assert_eq!(h.get_specialization_constant(&CHAR)?, -9);
        assert_eq!(h.get_specialization_constant(&BLOCK)?, 32);
        assert_eq!(h.get_specialization_constant(&SHORT)?, -300);
        assert_eq!(h.get_specialization_constant(&NOWHERE)?, 1);
        h.launch("scalars", one, &[Arg::buffer(&out)])
    })
    .unwrap();
    assert_eq!(q.download(&out).unwrap()[0], -9);
    // Through a bundle: its values.
    let mut input = get_kernel_bundle_for(&[KernelId::new("scalars")]).unwrap();
    input.set_specialization_constant(&SHORT, 11).unwrap();
    let exe = build(&input).unwrap();
    q.submit(|h| {
        h.use_kernel_bundle(&exe)?;
        assert_eq!(h.get_specialization_constant(&SHORT)?, 11);
        assert_eq!(h.get_specialization_constant(&CHAR)?, -5);
        assert_eq!(h.get_specialization_constant(&NOWHERE)?, 7);
        Ok(())
    })
    .unwrap();
}

/// intel aot_w_kernel_handler_wo_spec_consts.cpp: kernels that take a
/// kernel_handler — one reading no constant — launched with the caller's
/// arguments only, from every mode, with handler values, and split into
/// an image of its own.
fn kernel_handler_without_constants(q: &Arc<Queue>) {
    const WITHOUT: &str = "_Z25handler_without_constantsPiN7ptxspec14kernel_handlerE";
    const READS: &str = "_Z16reads_a_constantPiN7ptxspec14kernel_handlerE";
    const DEMO: SpecId<i32> = SpecId::new("handler_demo_id");
    let block = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    let run = |kernel: &str,
               bundle: Option<&ptxspec::KernelBundle<ptxspec::Executable>>,
               value: Option<i32>| {
        let out: DeviceBuffer<i32> = q.alloc_zeros(32).unwrap();
        q.submit(|h| {
            if let Some(b) = bundle {
                h.use_kernel_bundle(b)?;
            }
            if let Some(v) = value {
                h.set_specialization_constant(&DEMO, v)?;
            }
            h.launch(kernel, block, &[Arg::buffer(&out)])
        })
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
        q.download(&out).unwrap()
    };
    let doubled: Vec<i32> = (0..32).map(|i| 2 * i).collect();
    let plus = |v: i32| (0..32).map(|i| v + i).collect::<Vec<i32>>();
    for mode in MODES {
        let mut input = get_kernel_bundle_for(&[KernelId::new(WITHOUT), KernelId::new(READS)])
            .unwrap()
            .with_mode(mode);
        input.set_specialization_constant(&DEMO, 100).unwrap();
        let exe = build(&input).unwrap();
        assert_eq!(run(WITHOUT, Some(&exe), None), doubled, "{mode:?}");
        assert_eq!(run(READS, Some(&exe), None), plus(100), "{mode:?}");
    }
    // Handler values (the emulated image): set for the kernel that reads
    // it, ignored by the one that does not.
    assert_eq!(run(WITHOUT, None, Some(7)), doubled);
    assert_eq!(run(READS, None, Some(7)), plus(7));
    assert_eq!(run(READS, None, None), plus(40));
    // Split into an image of its own (which has no constants).
    let opts = Options {
        split: ptxspec_core::postlink::Split::PerKernel,
        ..Default::default()
    };
    let images: Vec<Arc<Image>> = ptxspec_core::postlink::post_link(
        vec![(
            "handler_only.ptx".into(),
            include_str!("../kernels/ptx/handler_only.ptx").into(),
        )],
        &opts,
    )
    .unwrap()
    .into_iter()
    .map(|i| Arc::new(Image::new(i.stem, i.ptx, &i.props.to_text()).unwrap()))
    .collect();
    let exe = build(&KernelBundle::from_images(images)).unwrap();
    assert_eq!(run(WITHOUT, Some(&exe), None), doubled);
    assert_eq!(run(READS, Some(&exe), None), plus(40));
}

/// Calls `launch` (2 ms apart) until one runs the LTO code, at most for two
/// minutes (`what` names what never switched): how many launches that took
/// and the milliseconds since the first.
fn launches_until_lto(what: &str, launch: impl Fn() -> Option<SpecMode>) -> (usize, f64) {
    launches_until(SpecMode::Lto, what, launch)
}

/// Launches until one runs `tier` (within 120 s): how many, and the ms.
fn launches_until(
    tier: SpecMode,
    what: &str,
    launch: impl Fn() -> Option<SpecMode>,
) -> (usize, f64) {
    let start = std::time::Instant::now();
    let mut launches = 1;
    while launch() != Some(tier) {
        launches += 1;
        assert!(
            start.elapsed() < std::time::Duration::from_secs(120),
            "{what} never switched to the {tier:?} tier"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    (launches, start.elapsed().as_secs_f64() * 1e3)
}

/// SpecMode::Tiered with two queues: while a worker links the value set
/// that queue 1 launches, queue 2's first launch of the same bundle runs
/// the emulated code at once — it waited 16–29 ms for the link before the
/// cubin slots (issue 31). Once linked, both queues run LTO with the right
/// results. Tried with value sets until a launch falls inside a link (a
/// link may finish first); run with an empty `PTXSPEC_CACHE_DIR` so that
/// the links are links.
fn a_second_queue_never_waits_for_a_tier_link(q: &Arc<Queue>) {
    let n = 70usize;
    let (a, b) = (pseudo_random(n * n, 5), pseudo_random(n * n, 6));
    let want = reference::matmul(&a, &b, n);
    let (da, db) = (q.upload(&a).unwrap(), q.upload(&b).unwrap());
    let q2 = Queue::new(0).unwrap();
    let (da2, db2) = (q2.upload(&a).unwrap(), q2.upload(&b).unwrap());
    let dc2: DeviceBuffer<f32> = q2.upload(&vec![f32::NAN; n * n]).unwrap();
    let arch = q.device().arch();
    let matmul = KernelId::new("matmul");
    let mut timed_during_link = Vec::new();
    for bs in [7u32, 5, 10, 14] {
        let mut input = get_kernel_bundle_for(std::slice::from_ref(&matmul))
            .unwrap()
            .with_mode(SpecMode::Tiered);
        input
            .set_specialization_constant(&BLOCK, bs as i32)
            .unwrap();
        let exe = Arc::new(build(&input).unwrap());
        let (out, mode) = matmul_once(q, Some(&exe), (&da, &db), n, bs);
        assert_eq!(mode, Some(SpecMode::Emulated), "block {bs}, queue 1");
        assert!(max_rel_err(&out, &want) < 1e-5, "block {bs}, queue 1");
        let waiter = {
            let exe = Arc::clone(&exe);
            std::thread::spawn(move || {
                exe.wait_for_tier_up(
                    &KernelId::new("matmul"),
                    arch,
                    std::time::Duration::from_secs(120),
                )
            })
        };
        let g = n as u32 / bs;
        let cfg = LaunchConfig::new((g, g, 1), (bs, bs, 1)).with_shared_mem(2 * bs * bs * 4);
        let args = [
            Arg::buffer(&da2),
            Arg::buffer(&db2),
            Arg::buffer(&dc2),
            Arg::value(n as i32),
        ];
        let started = std::time::Instant::now();
        q2.submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch("matmul", cfg, &args)
        })
        .unwrap();
        let took = started.elapsed();
        let linking = !waiter.is_finished();
        assert_eq!(q2.last_launch_mode(), Some(SpecMode::Emulated));
        assert!(
            max_rel_err(&q2.download(&dc2).unwrap(), &want) < 1e-5,
            "block {bs}, queue 2 emulated"
        );
        println!(
            "block {bs}: queue 2's first launch {:.0} us, {}",
            took.as_secs_f64() * 1e6,
            if linking {
                "during the link"
            } else {
                "after the link"
            }
        );
        if linking {
            timed_during_link.push(took);
        }
        assert_eq!(waiter.join().unwrap().unwrap(), SpecMode::Lto);
        // Linked: each queue's next launch starts loading the code on the
        // loader thread, and a launch after the load runs it.
        for (queue, (x, y)) in [(q.as_ref(), (&da, &db)), (&q2, (&da2, &db2))] {
            launches_until_lto("a queue after the link", || {
                let (out, mode) = matmul_once(queue, Some(&exe), (x, y), n, bs);
                assert!(
                    max_rel_err(&out, &want) < 1e-5,
                    "block {bs}, after the link"
                );
                mode
            });
        }
    }
    assert!(
        !timed_during_link.is_empty(),
        "no launch of queue 2 fell inside a link"
    );
    let slowest = timed_during_link.iter().max().unwrap();
    assert!(
        *slowest < std::time::Duration::from_millis(1),
        "queue 2's first launch during a link took {slowest:?}"
    );
}

/// While one thread's first launch of an LTO bundle links its cubin (a
/// value set no cache holds), another thread's launches on the same queue
/// never wait for it: each returns within 1 ms (issue: the queue's lock was
/// held through the link, and they waited 45-79 ms).
fn launches_beside_a_link_on_the_same_queue_never_wait(q: &Arc<Queue>) {
    let out: DeviceBuffer<i64> = q.alloc_zeros(9).unwrap();
    let theirs: DeviceBuffer<i64> = q.alloc_zeros(9).unwrap();
    let one = LaunchConfig::new((1, 1, 1), (1, 1, 1));
    let emulated = |v: i16| {
        q.submit(|h| {
            h.set_specialization_constant(&SHORT, v)?;
            h.launch("scalars", one, &[Arg::buffer(&out)])
        })
    };
    emulated(1).unwrap();
    // A value no earlier run has linked: the process's clock.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let value = (nanos % 30_000) as i16 + 1000;
    let mut input = get_kernel_bundle_for(&[KernelId::new("scalars")])
        .unwrap()
        .with_mode(SpecMode::Lto);
    input.set_specialization_constant(&SHORT, value).unwrap();
    let exe = build(&input).unwrap();
    let linking = std::sync::atomic::AtomicBool::new(true);
    let (link_took, timed) = std::thread::scope(|scope| {
        let linker = scope.spawn(|| {
            let started = std::time::Instant::now();
            q.submit(|h| {
                h.use_kernel_bundle(&exe)?;
                h.launch("scalars", one, &[Arg::buffer(&theirs)])
            })
            .unwrap();
            let took = started.elapsed();
            linking.store(false, std::sync::atomic::Ordering::Release);
            took
        });
        let mut timed = Vec::new();
        let mut v = 2i16;
        while linking.load(std::sync::atomic::Ordering::Acquire) {
            let started = std::time::Instant::now();
            emulated(v).unwrap();
            timed.push(started.elapsed());
            v = v.wrapping_add(1);
        }
        (linker.join().unwrap(), timed)
    });
    assert!(
        link_took > std::time::Duration::from_millis(10),
        "the LTO launch took {link_took:?}: its cubin was cached, and the test shows nothing"
    );
    let slowest = timed.iter().max().copied().unwrap_or_default();
    eprintln!(
        "an LTO launch that linked took {link_took:?}; beside it {} launches, the slowest {slowest:?}",
        timed.len()
    );
    assert!(
        timed.len() >= 10,
        "only {} launches beside the link",
        timed.len()
    );
    assert!(
        slowest < std::time::Duration::from_millis(1),
        "a launch beside the link took {slowest:?}"
    );
    q.wait().unwrap();
    assert_eq!(q.download(&theirs).unwrap()[3], value as i64);
}

/// SpecMode::Tiered: the first launch of a new value set runs the emulated
/// image at once (never waiting for a link); once the background link is
/// done, launches run the specialized tier — LTO for an image with LTO-IR,
/// native (the specialized PTX compiled by nvJitLink) for one without —
/// with the same results (within rounding: the tiers may contract
/// differently).
fn tiered_bundles_switch_to_the_specialized_tier(q: &Arc<Queue>) {
    // n = 96: block sizes that divide it and that no other test links (a
    // value set linked before starts at its tier, which the first part does
    // not want).
    let n = 96usize;
    let (a, b) = (pseudo_random(n * n, 3), pseudo_random(n * n, 4));
    let want = reference::matmul(&a, &b, n);
    let (da, db) = (q.upload(&a).unwrap(), q.upload(&b).unwrap());
    let arch = q.device().arch();
    let matmul = KernelId::new("matmul");
    let without_ltoir: Vec<Arc<Image>> = images_placed(&["matmul"], BufferPlacement::Auto);
    assert!(without_ltoir.iter().all(|i| i.ltoir().is_none()));
    let inputs = [
        (
            get_kernel_bundle_for(std::slice::from_ref(&matmul)).unwrap(),
            SpecMode::Lto,
        ),
        (KernelBundle::from_images(without_ltoir), SpecMode::Native),
    ];
    for (base, tier) in inputs {
        for bs in [6u32, 12] {
            let mut input = base.clone().with_mode(SpecMode::Tiered);
            input
                .set_specialization_constant(&BLOCK, bs as i32)
                .unwrap();
            let exe = build(&input).unwrap();
            let launch = || {
                let (c, mode) = matmul_once(q, Some(&exe), (&da, &db), n, bs);
                (mode, c)
            };
            let (first, out) = launch();
            assert_eq!(first, Some(SpecMode::Emulated), "{tier:?} block {bs}");
            let err = max_rel_err(&out, &want);
            assert!(
                err < 1e-5,
                "{tier:?} block {bs} emulated: relative error {err}"
            );
            assert_eq!(
                exe.wait_for_tier_up(&matmul, arch, std::time::Duration::from_secs(120))
                    .unwrap(),
                tier
            );
            // The launch after the link starts loading its code on the
            // loader thread; one after the load runs it.
            let (launches, _) = launches_until(tier, "a linked tier", || {
                let (mode, out) = launch();
                let err = max_rel_err(&out, &want);
                assert!(
                    err < 1e-5,
                    "{tier:?} block {bs} after the link ({mode:?}): relative error {err}"
                );
                mode
            });
            assert!(
                launches <= 100,
                "{tier:?} block {bs}: {launches} launches to switch"
            );
        }
    }
    // Without anyone waiting: a kernel that keeps being launched with one
    // value set (past PTXSPEC_TIER_AFTER_MS) has its link asked for by a
    // launch, and a later launch switches to it.
    let mut input = get_kernel_bundle_for(std::slice::from_ref(&matmul))
        .unwrap()
        .with_mode(SpecMode::Tiered);
    input.set_specialization_constant(&BLOCK, 24).unwrap();
    let exe = build(&input).unwrap();
    let (launches, ms) = launches_until_lto("a tiered bundle", || {
        let (c, mode) = matmul_once(q, Some(&exe), (&da, &db), n, 24);
        let err = max_rel_err(&c, &want);
        assert!(err < 1e-5, "block 24: relative error {err}");
        mode
    });
    println!("a tiered bundle switched by itself at launch {launches}, {ms:.1} ms");
    // Values linked before (block 6, above): a new tiered bundle's first
    // launch finds the cubin and runs it, no worker asked.
    let mut input = get_kernel_bundle_for(std::slice::from_ref(&matmul))
        .unwrap()
        .with_mode(SpecMode::Tiered);
    input.set_specialization_constant(&BLOCK, 6).unwrap();
    let exe = build(&input).unwrap();
    let (c, mode) = matmul_once(q, Some(&exe), (&da, &db), n, 6);
    assert_eq!(mode, Some(SpecMode::Lto), "values linked before");
    let err = max_rel_err(&c, &want);
    assert!(err < 1e-5, "block 6 from the cache: relative error {err}");
    // Handler values tier up by a counter: emulated for the first launches
    // of a value set (one no build above linked); from the third, a worker
    // links it, and a later launch runs the LTO cubin (never waiting: the
    // launches go on meanwhile).
    q.tier_up_handler_values(Some(3));
    let launch = || {
        let (c, mode) = matmul_once(q, None, (&da, &db), n, 3);
        let err = max_rel_err(&c, &want);
        assert!(err < 1e-5, "handler values: relative error {err}");
        mode
    };
    for i in 0..3 {
        assert_eq!(launch(), Some(SpecMode::Emulated), "launch {i}");
    }
    let (launches, ms) = launches_until_lto("handler values", launch);
    println!(
        "handler values tiered up at launch {} of the value set, {ms:.1} ms after the third",
        launches + 3
    );
    q.tier_up_handler_values(None);
    assert_eq!(launch(), Some(SpecMode::Emulated), "counting off");
}

/// SYCL-CTS same_name_stress, defined_various_ways and
/// same_name_internal_linkage on the GPU: one name in ten scopes, two
/// instantiations of a variable template, every declaration form and an
/// internal constant of one name in two units each read their own value, in
/// every mode and as handler values.
fn each_cpp_entity_reads_its_own_value(q: &Arc<Queue>) {
    use ptxspec_kernels::same_name::*;
    let launch = |kernel: &str,
                  n: usize,
                  bundle: Option<&ptxspec::KernelBundle<ptxspec::Executable>>,
                  handler: &[(&'static str, i32)]| {
        let out: DeviceBuffer<i32> = q.alloc_zeros(n).unwrap();
        q.submit(|h| {
            if let Some(b) = bundle {
                h.use_kernel_bundle(b)?;
            }
            for (id, v) in handler {
                h.set_specialization_constant(&SpecId::<i32>::new(id), *v)?;
            }
            h.launch(
                kernel,
                LaunchConfig::new((1, 1, 1), (1, 1, 1)),
                &[Arg::buffer(&out)],
            )
        })
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
        q.download(&out).unwrap()
    };
    let kernels = [STRESS, WAYS, HERE, THERE].map(KernelId::new);
    // Defaults: each scope's index, the float instantiation 0; the forms
    // 10 to 16; the two units' internal constants 20 and 21.
    let mut defaults: Vec<i32> = (0..10).collect();
    defaults.push(0);
    assert_eq!(launch(STRESS, 11, None, &[]), defaults);
    assert_eq!(launch(WAYS, 7, None, &[]), (10..17).collect::<Vec<_>>());
    assert_eq!(launch(HERE, 1, None, &[]), [20]);
    assert_eq!(launch(THERE, 1, None, &[]), [21]);
    for mode in MODES {
        let mut input = get_kernel_bundle_for(&kernels).unwrap().with_mode(mode);
        for (i, id) in SCOPES.iter().chain(&FORMS).enumerate() {
            input
                .set_specialization_constant(&SpecId::<i32>::new(id), 100 + i as i32)
                .unwrap();
        }
        input
            .set_specialization_constant(&SpecId::<f32>::new("same<float>"), 77.0)
            .unwrap();
        input
            .set_specialization_constant(&SpecId::<i32>::new(THERE_ID), -21)
            .unwrap();
        let exe = build(&input).unwrap();
        let mut stress: Vec<i32> = (100..110).collect();
        stress.push(77);
        assert_eq!(launch(STRESS, 11, Some(&exe), &[]), stress, "{mode:?}");
        assert_eq!(
            launch(WAYS, 7, Some(&exe), &[]),
            (110..117).collect::<Vec<_>>(),
            "{mode:?}"
        );
        assert_eq!(launch(HERE, 1, Some(&exe), &[]), [20], "{mode:?}");
        assert_eq!(launch(THERE, 1, Some(&exe), &[]), [-21], "{mode:?}");
    }
    // Handler values: one scope's constant and one unit's.
    let mut expected = defaults.clone();
    expected[5] = -5;
    let inner = SCOPES[5];
    assert_eq!(launch(STRESS, 11, None, &[(inner, -5)]), expected);
    assert_eq!(launch(HERE, 1, None, &[(HERE_ID, 8), (THERE_ID, 9)]), [8]);
    assert_eq!(launch(THERE, 1, None, &[(HERE_ID, 8), (THERE_ID, 9)]), [9]);
}

/// SYCL 2020's vec (every length) and marray as constants' types (intel
/// marray_vec.cpp, SYCL-CTS specialization_constants): defaults and set
/// values read back byte for byte in every mode, and as handler values.
fn vec_and_marray_values_in_every_mode(q: &Arc<Queue>) {
    use ptxspec::{Marray, SyclVec};
    const F3: SpecId<SyclVec<f32, 3>> = SpecId::new("vec_f3_id");
    const MF3: SpecId<Marray<f32, 3>> = SpecId::new("marray_f3_id");
    const I1: SpecId<SyclVec<i32, 1>> = SpecId::new("vec_i1_id");
    const S2: SpecId<SyclVec<i16, 2>> = SpecId::new("vec_s2_id");
    const D4: SpecId<SyclVec<f64, 4>> = SpecId::new("vec_d4_id");
    const U8: SpecId<SyclVec<u8, 8>> = SpecId::new("vec_u8_id");
    const I16: SpecId<SyclVec<i32, 16>> = SpecId::new("vec_i16_id");
    const D16: SpecId<SyclVec<f64, 16>> = SpecId::new("vec_d16_id");
    const C5: SpecId<Marray<i8, 5>> = SpecId::new("marray_c5_id");
    /// What the kernel writes: each value at a multiple of 128 bytes.
    fn slots(values: &[&[u8]]) -> Vec<u8> {
        let mut out = vec![0u8; 128 * 9];
        for (i, v) in values.iter().enumerate() {
            out[128 * i..128 * i + v.len()].copy_from_slice(v);
        }
        out
    }
    let mut ints: [i32; 16] = std::array::from_fn(|i| i as i32);
    ints[15] = -15;
    let doubles: [f64; 16] = std::array::from_fn(|i| i as f64 + 1.0);
    let defaults = slots(&[
        bytemuck::bytes_of(&SyclVec::new([1.0f32, 2.0, 3.0])),
        bytemuck::bytes_of(&Marray([1.0f32, 2.0, 3.0])),
        &(-7i32).to_le_bytes(),
        bytemuck::bytes_of(&SyclVec::new([-1i16, 2])),
        bytemuck::bytes_of(&SyclVec::new([0.5f64, 1.5, 2.5, 3.5])),
        &[1, 2, 3, 4, 5, 6, 7, 250],
        bytemuck::bytes_of(&SyclVec::new(ints)),
        bytemuck::bytes_of(&SyclVec::new(doubles)),
        b"abcde",
    ]);
    let run = |bundle: Option<&ptxspec::KernelBundle<ptxspec::Executable>>, handler: bool| {
        let out: DeviceBuffer<u8> = q.alloc_zeros(128 * 9).unwrap();
        q.submit(|h| {
            if let Some(b) = bundle {
                h.use_kernel_bundle(b)?;
            }
            if handler {
                h.set_specialization_constant(&F3, SyclVec::new([-1.0, -2.0, -3.0]))?;
                h.set_specialization_constant(&D16, SyclVec::new([0.25; 16]))?;
                h.set_specialization_constant(&C5, Marray([1, -2, 3, -4, 5]))?;
            }
            h.launch(
                "vec_types",
                LaunchConfig::new((1, 1, 1), (1, 1, 1)),
                &[Arg::buffer(&out)],
            )
        })
        .unwrap();
        q.download(&out).unwrap()
    };
    let set = slots(&[
        bytemuck::bytes_of(&SyclVec::new([10.0f32, 20.0, 30.0])),
        bytemuck::bytes_of(&Marray([4.0f32, 5.0, 6.0])),
        &i32::MIN.to_le_bytes(),
        bytemuck::bytes_of(&SyclVec::new([i16::MAX, i16::MIN])),
        bytemuck::bytes_of(&SyclVec::new([-0.0f64, 1e300, -2.0, 4.0])),
        &[255, 0, 1, 2, 3, 4, 5, 6],
        bytemuck::bytes_of(&SyclVec::new([7i32; 16])),
        bytemuck::bytes_of(&SyclVec::new([-1.5f64; 16])),
        bytemuck::bytes_of(&Marray([0i8, 1, 2, 3, -128])),
    ]);
    for mode in MODES {
        let input = get_kernel_bundle_for(&[KernelId::new("vec_types")])
            .unwrap()
            .with_mode(mode);
        let exe = build(&input).unwrap();
        assert_eq!(run(Some(&exe), false), defaults, "{mode:?}: defaults");
        let mut input = input;
        input
            .set_specialization_constant(&F3, SyclVec::new([10.0, 20.0, 30.0]))
            .unwrap();
        input
            .set_specialization_constant(&MF3, Marray([4.0, 5.0, 6.0]))
            .unwrap();
        input
            .set_specialization_constant(&I1, SyclVec::new([i32::MIN]))
            .unwrap();
        input
            .set_specialization_constant(&S2, SyclVec::new([i16::MAX, i16::MIN]))
            .unwrap();
        input
            .set_specialization_constant(&D4, SyclVec::new([-0.0, 1e300, -2.0, 4.0]))
            .unwrap();
        input
            .set_specialization_constant(&U8, SyclVec::new([255, 0, 1, 2, 3, 4, 5, 6]))
            .unwrap();
        input
            .set_specialization_constant(&I16, SyclVec::new([7; 16]))
            .unwrap();
        input
            .set_specialization_constant(&D16, SyclVec::new([-1.5; 16]))
            .unwrap();
        input
            .set_specialization_constant(&C5, Marray([0, 1, 2, 3, -128]))
            .unwrap();
        assert_eq!(
            input.get_specialization_constant(&D4).unwrap().elems[1],
            1e300
        );
        let exe = build(&input).unwrap();
        assert_eq!(run(Some(&exe), false), set, "{mode:?}: set values");
    }
    // Handler values (the emulated image), the others at their defaults.
    let mut want = defaults.clone();
    want[..16].copy_from_slice(bytemuck::bytes_of(&SyclVec::new([-1.0f32, -2.0, -3.0])));
    want[128 * 7..128 * 8].copy_from_slice(bytemuck::bytes_of(&SyclVec::new([0.25f64; 16])));
    want[128 * 8..128 * 8 + 5].copy_from_slice(bytemuck::bytes_of(&Marray([1i8, -2, 3, -4, 5])));
    assert_eq!(run(None, true), want, "handler values");
}

fn ten_thousand_launches_with_changing_values_leak_nothing(q: &Arc<Queue>) {
    let out: DeviceBuffer<i64> = q.alloc_zeros(9).unwrap();
    let one = LaunchConfig::new((1, 1, 1), (1, 1, 1));
    let launch = |v: i16| {
        q.submit(|h| {
            h.set_specialization_constant(&SHORT, v)?;
            h.launch("scalars", one, &[Arg::buffer(&out)])
        })
        .unwrap()
    };
    for v in 0..100 {
        launch(v);
    }
    q.wait().unwrap();
    let (free_before, _) = q.memory_info().unwrap();
    for v in 0..10_000i32 {
        launch((v % 30_000) as i16);
    }
    q.wait().unwrap();
    assert_eq!(q.download(&out).unwrap()[3], 9_999);
    let (free_after, _) = q.memory_info().unwrap();
    let lost = free_before as i64 - free_after as i64;
    assert!(
        lost < 4 << 20,
        "10 000 launches used {lost} bytes of device memory"
    );
    // Native bundles with many value sets: the module cache is bounded.
    let input = get_kernel_bundle_for(&[KernelId::new("scalars")]).unwrap();
    // Each launch's module is let go of by the queue while the kernel may
    // still be queued (no stream synchronize when the cache evicts): every
    // launch reads back its own value.
    for v in 0..150i16 {
        let mut b: KernelBundle<_> = input.clone();
        b.set_specialization_constant(&SHORT, v).unwrap();
        let exe = build(&b).unwrap();
        q.submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch("scalars", one, &[Arg::buffer(&out)])
        })
        .unwrap();
        if v % 10 == 9 {
            assert_eq!(q.download(&out).unwrap()[3], v as i64);
        }
    }
    q.wait().unwrap();
    assert_eq!(q.download(&out).unwrap()[3], 149);
    let (free_native, _) = q.memory_info().unwrap();
    let lost = free_before as i64 - free_native as i64;
    assert!(
        lost < 64 << 20,
        "150 native builds keep {lost} bytes of device memory"
    );
    eprintln!(
        "device memory: {free_before} free before, {free_after} after 10 000 emulated launches, {free_native} after 150 native builds"
    );
}

/// Launches of one kernel, one after another, each with other handler
/// values or none (the defaults again), a value of the wrong type, and a
/// value for a constant the kernel lacks: the launches after the first
/// find their plan ready and fill its parameter anew; each reads its own.
fn handler_values_and_defaults_launch_after_launch(q: &Arc<Queue>) {
    const NOT_HERE: SpecId<i32> = SpecId::new("handler_demo_id");
    let one = LaunchConfig::new((1, 1, 1), (1, 1, 1));
    let run = |short: Option<i16>, char_: Option<i8>, other: bool| {
        let out: DeviceBuffer<i64> = q.alloc_zeros(9).unwrap();
        q.submit(|h| {
            if let Some(v) = short {
                h.set_specialization_constant(&SHORT, v)?;
            }
            if let Some(v) = char_ {
                h.set_specialization_constant(&CHAR, v)?;
            }
            if other {
                h.set_specialization_constant(&NOT_HERE, 1)?;
            }
            h.launch("scalars", one, &[Arg::buffer(&out)])
        })
        .map(|()| {
            let got = q.download(&out).unwrap();
            (got[0], got[3])
        })
    };
    // The defaults: char_id -5, short_id -300.
    let cases = [
        (None, None, false, (-5, -300)),
        (Some(7), None, false, (-5, 7)),
        (Some(7), Some(3), false, (3, 7)),
        (None, None, false, (-5, -300)),
        (None, Some(-1), true, (-1, -300)),
        (Some(-2), None, false, (-5, -2)),
        (None, None, true, (-5, -300)),
    ];
    for round in 0..3 {
        for (n, &(short, char_, other, want)) in cases.iter().enumerate() {
            assert_eq!(
                run(short, char_, other).unwrap(),
                want,
                "round {round}, case {n}"
            );
        }
    }
    // A value of another type than the constant's: refused, at once and
    // after launches that found the plan ready; nothing runs.
    const WRONG: SpecId<i32> = SpecId::new("short_id");
    for _ in 0..2 {
        let out: DeviceBuffer<i64> = q.upload(&[42i64; 9]).unwrap();
        let e = q
            .submit(|h| {
                h.set_specialization_constant(&WRONG, 1)?;
                h.launch("scalars", one, &[Arg::buffer(&out)])
            })
            .unwrap_err();
        assert_eq!(e.errc(), ptxspec::Errc::Invalid, "{e}");
        assert_eq!(q.download(&out).unwrap(), [42; 9]);
        assert_eq!(run(Some(5), None, false).unwrap(), (-5, 5));
    }
}

fn devices_are_listed(_q: &Arc<Queue>) {
    let d = runtime::devices().unwrap();
    assert!(!d.is_empty());
    eprintln!("{:?}", d[0]);
    assert_eq!(d[0].sub_group_size, 32);
}

fn optional_features_run_where_supported(q: &Arc<Queue>) {
    // fp64 through two levels of calls in another translation unit.
    let x: Vec<f64> = (0..100).map(|i| i as f64 * 0.5).collect();
    let y0: Vec<f64> = (0..100).map(|i| 1.0 - i as f64).collect();
    let (dx, dy) = (q.upload(&x).unwrap(), q.upload(&y0).unwrap());
    q.submit(|h| {
        h.launch(
            "fp64_axpy",
            LaunchConfig::new((1, 1, 1), (128, 1, 1)),
            &[Arg::buffer(&dx), Arg::buffer(&dy), Arg::value(100i32)],
        )
    })
    .unwrap();
    let want: Vec<f64> = x
        .iter()
        .zip(&y0)
        .map(|(x, y)| (x * 2.5 + 1.0) + y)
        .collect();
    assert_eq!(q.download(&dy).unwrap(), want);
    // 64-bit atomics from 256 threads.
    let counter: DeviceBuffer<u64> = q.alloc_zeros(1).unwrap();
    q.submit(|h| {
        h.launch(
            "count64",
            LaunchConfig::new((2, 1, 1), (128, 1, 1)),
            &[Arg::buffer(&counter)],
        )
    })
    .unwrap();
    assert_eq!(q.download(&counter).unwrap(), [256]);
    // Half precision: 1.5 + 2.25 = 3.75 (0x3e00 + 0x4080 = 0x4380).
    let halves: DeviceBuffer<u16> = q.upload(&[0x3e00u16, 0x4080, 0]).unwrap();
    q.submit(|h| {
        h.launch(
            "half_add",
            LaunchConfig::new((1, 1, 1), (1, 1, 1)),
            &[Arg::buffer(&halves)],
        )
    })
    .unwrap();
    assert_eq!(q.download(&halves).unwrap()[2], 0x4380);
}

fn reqntid_kernel_with_the_wrong_block_size(q: &Arc<Queue>) {
    // Hand-written PTX: .reqntid 64, every thread writes its index.
    let ptx = ".version 7.0\n.target sm_70\n.address_size 64\n\
               .visible .entry fixed64(.param .u64 out) .reqntid 64, 1, 1\n{\n\
               .reg .b32 %r<2>; .reg .b64 %rd<4>;\n\
               ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd2, %rd1;\n\
               mov.u32 %r1, %tid.x; mul.wide.u32 %rd3, %r1, 4; add.s64 %rd2, %rd2, %rd3;\n\
               st.global.u32 [%rd2], %r1;\n ret;\n}\n";
    let opts = ptxspec_core::postlink::Options::default();
    let img = ptxspec_core::postlink::post_link(vec![("fixed.ptx".into(), ptx.into())], &opts)
        .unwrap()
        .remove(0);
    assert_eq!(img.requirements.reqd_work_group_size, Some(vec![64, 1, 1]));
    let image = ptxspec::image::Image::new(img.stem, img.ptx, &img.props.to_text()).unwrap();
    let exe = build(&KernelBundle::from_images(vec![Arc::new(image)])).unwrap();
    let out: DeviceBuffer<u32> = q.upload(&[u32::MAX; 64]).unwrap();
    let launch = |block: u32| {
        q.submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch(
                "fixed64",
                LaunchConfig::new((1, 1, 1), (block, 1, 1)),
                &[Arg::buffer(&out)],
            )
        })
    };
    let e = launch(32).unwrap_err();
    assert_eq!(e.errc(), ptxspec::Errc::NdRange, "{e}");
    assert!(
        e.to_string()
            .contains("required work-group size of [64, 1, 1]"),
        "{e}"
    );
    // Nothing ran; with the right size it does.
    assert_eq!(q.download(&out).unwrap(), [u32::MAX; 64]);
    launch(64).unwrap();
    assert_eq!(q.download(&out).unwrap(), (0..64).collect::<Vec<u32>>());
    // Once the kernel has launched, its plan is ready for the next launch:
    // a launch that does not suit it is still checked, and runs nothing.
    let e = launch(32).unwrap_err();
    assert_eq!(e.errc(), ptxspec::Errc::NdRange, "{e}");
    let cfg = LaunchConfig::new((1, 1, 1), (64, 1, 1));
    let fresh: DeviceBuffer<u32> = q.upload(&[u32::MAX; 64]).unwrap();
    for (args, what) in [
        (vec![Arg::buffer(&fresh), Arg::value(1u32)], "1 arguments"),
        (vec![Arg::value(7u32)], "argument 0: 4 bytes given"),
    ] {
        let e = q
            .submit(|h| {
                h.use_kernel_bundle(&exe)?;
                h.launch("fixed64", cfg, &args)
            })
            .unwrap_err();
        assert_eq!(e.errc(), ptxspec::Errc::KernelArgument, "{e}");
        assert!(e.to_string().contains(what), "{e}");
    }
    assert_eq!(q.download(&fresh).unwrap(), [u32::MAX; 64]);
    launch(64).unwrap();
    q.submit(|h| {
        h.use_kernel_bundle(&exe)?;
        h.launch("fixed64", cfg, &[Arg::buffer(&fresh)])
    })
    .unwrap();
    assert_eq!(q.download(&fresh).unwrap(), (0..64).collect::<Vec<u32>>());
    // A required size past 32 bits (SYCL-CTS
    // kernel_features_reqd_work_group_size.cpp): kernel_not_supported at
    // submission, before the driver is asked to load it.
    let wide = ".version 7.0\n.target sm_70\n.address_size 64\n\
                .visible .entry wide(.param .u64 out) .reqntid 4294967296, 1, 1\n{\n ret;\n}\n";
    let img = ptxspec_core::postlink::post_link(vec![("wide.ptx".into(), wide.into())], &opts)
        .unwrap()
        .remove(0);
    let image = ptxspec::image::Image::new(img.stem, img.ptx, &img.props.to_text()).unwrap();
    let exe = build(&KernelBundle::from_images(vec![Arc::new(image)])).unwrap();
    for block in [1u32, 1024] {
        let e = q
            .submit(|h| {
                h.use_kernel_bundle(&exe)?;
                h.launch(
                    "wide",
                    LaunchConfig::new((1, 1, 1), (block, 1, 1)),
                    &[Arg::buffer(&fresh)],
                )
            })
            .unwrap_err();
        assert_eq!(e.errc(), ptxspec::Errc::KernelNotSupported, "{e}");
        assert!(e.to_string().contains("4294967296"), "{e}");
    }
}

/// A kernel that waits `spin_ns` nanoseconds (the GPU's global timer), then
/// copies `n` words from `src` to `dst`: long enough for the host to act
/// while it runs.
const SPIN_COPY: &str = ".version 7.0\n.target sm_70\n.address_size 64\n\
    .visible .entry spin_copy(.param .u64 src, .param .u64 dst, .param .u32 n, .param .u64 spin_ns)\n{\n\
    .reg .pred %p<3>; .reg .b32 %r<10>; .reg .b64 %rd<12>;\n\
    ld.param.u64 %rd1, [src]; ld.param.u64 %rd2, [dst]; ld.param.u32 %r1, [n]; ld.param.u64 %rd3, [spin_ns];\n\
    cvta.to.global.u64 %rd1, %rd1; cvta.to.global.u64 %rd2, %rd2;\n\
    mov.u64 %rd4, %globaltimer;\n\
    WAIT: mov.u64 %rd5, %globaltimer; sub.s64 %rd6, %rd5, %rd4; setp.lt.u64 %p1, %rd6, %rd3; @%p1 bra WAIT;\n\
    mov.u32 %r2, %tid.x; mov.u32 %r3, %ctaid.x; mov.u32 %r4, %ntid.x; mov.u32 %r5, %nctaid.x;\n\
    mad.lo.s32 %r6, %r3, %r4, %r2; mul.lo.s32 %r7, %r4, %r5;\n\
    LOOP: setp.ge.u32 %p2, %r6, %r1; @%p2 bra DONE;\n\
    mul.wide.u32 %rd7, %r6, 4; add.s64 %rd8, %rd1, %rd7; ld.global.u32 %r8, [%rd8];\n\
    add.s64 %rd9, %rd2, %rd7; st.global.u32 [%rd9], %r8;\n\
    add.s32 %r6, %r6, %r7; bra LOOP;\n\
    DONE: ret;\n}\n";

fn spin_copy_bundle() -> KernelBundle<Executable> {
    let opts = ptxspec_core::postlink::Options::default();
    let img = ptxspec_core::postlink::post_link(vec![("spin.ptx".into(), SPIN_COPY.into())], &opts)
        .unwrap()
        .remove(0);
    let image = Image::new(img.stem, img.ptx, &img.props.to_text()).unwrap();
    build(&KernelBundle::from_images(vec![Arc::new(image)])).unwrap()
}

fn spin_copy<'a>(
    q: &Queue,
    exe: &KernelBundle<Executable>,
    src: Arg<'a>,
    dst: Arg<'a>,
    n: usize,
    spin_ms: u64,
) {
    q.submit(|h| {
        h.use_kernel_bundle(exe)?;
        h.launch(
            "spin_copy",
            LaunchConfig::new((1024, 1, 1), (256, 1, 1)),
            &[
                src,
                dst,
                Arg::value(n as u32),
                Arg::value(spin_ms * 1_000_000),
            ],
        )
    })
    .unwrap();
}

/// A buffer made on one queue and read by a kernel on another: the launch
/// waits for the upload, and dropping the buffer (then reusing its memory on
/// its own queue) waits for the kernel.
fn buffers_used_across_queues(_: &Arc<Queue>) {
    let (qa, qb) = (Queue::new(0).unwrap(), Queue::new(0).unwrap());
    let exe = spin_copy_bundle();
    const N: usize = 64 << 20; // 256 MiB of words
    let data: Vec<u32> = (0..N as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    // A large upload on A, read at once by a kernel on B.
    let src = qa.upload(&data).unwrap();
    let dst: DeviceBuffer<u32> = qb.alloc_zeros(N).unwrap();
    spin_copy(&qb, &exe, Arg::buffer(&src), Arg::buffer(&dst), N, 0);
    assert!(
        qb.download(&dst).unwrap() == data,
        "the kernel on B ran before A's upload ended"
    );
    // Dropped while a kernel on B still waits to read it; its memory is then
    // reused by an upload on A of other contents.
    let small: Vec<u32> = (0..1u32 << 20).collect();
    let other: Vec<u32> = vec![0xdead_beef; small.len()];
    let src = qa.upload(&small).unwrap();
    let dst: DeviceBuffer<u32> = qb.alloc_zeros(small.len()).unwrap();
    qa.wait().unwrap();
    spin_copy(
        &qb,
        &exe,
        Arg::buffer(&src),
        Arg::buffer(&dst),
        small.len(),
        300,
    );
    drop(src);
    let reuse = qa.upload(&other).unwrap();
    qa.wait().unwrap();
    let got = qb.download(&dst).unwrap();
    let wrong = got.iter().zip(&small).filter(|(g, w)| g != w).count();
    assert_eq!(
        wrong, 0,
        "{wrong} words read after the buffer was freed under the kernel"
    );
    drop(reuse);
    // A buffer of another device is refused (only with two GPUs).
    if runtime::devices().map_or(0, |d| d.len()) >= 2 {
        let q1 = Queue::new(1).unwrap();
        let far = q1.upload(&[1u32]).unwrap();
        let e = qa
            .submit(|h| {
                h.use_kernel_bundle(&exe)?;
                h.launch(
                    "spin_copy",
                    LaunchConfig::new((1, 1, 1), (1, 1, 1)),
                    &[
                        Arg::buffer(&far),
                        Arg::buffer(&far),
                        Arg::value(1u32),
                        Arg::value(0u64),
                    ],
                )
            })
            .unwrap_err();
        assert_eq!(e.errc(), ptxspec::Errc::Invalid, "{e}");
    }
}

/// `Queue::write` and `Queue::fill`: a range written into a buffer, a fill
/// of elements whose bytes are all equal (a memset) and of elements whose
/// bytes differ (a pattern, past one piece), the same on a buffer of
/// another queue (ordered after its upload), and ranges past the end
/// refused with nothing written.
fn buffers_are_written_and_filled(q: &Arc<Queue>) {
    let buf = q.alloc_zeros::<u32>(10).unwrap();
    q.write(&buf, 3, &[7, 8, 9]).unwrap();
    assert_eq!(q.download(&buf).unwrap(), [0, 0, 0, 7, 8, 9, 0, 0, 0, 0]);
    q.write(&buf, 10, &[]).unwrap();
    for (offset, len) in [(8, 3), (11, 0), (usize::MAX, 2)] {
        let e = q.write(&buf, offset, &vec![1u32; len]).unwrap_err();
        assert_eq!(e.errc(), ptxspec::Errc::Invalid, "{e}");
    }
    assert_eq!(q.download(&buf).unwrap(), [0, 0, 0, 7, 8, 9, 0, 0, 0, 0]);
    q.fill(&buf, 0x0101_0101u32).unwrap();
    assert_eq!(q.download(&buf).unwrap(), [0x0101_0101; 10]);
    // 12-byte elements, more than one piece of the pattern.
    let n = (3 << 20) / 12 + 5;
    let big = q.alloc_zeros::<[u32; 3]>(n).unwrap();
    q.fill(&big, [1, 2, 3]).unwrap();
    let got = q.download(&big).unwrap();
    assert!(got.iter().all(|e| *e == [1, 2, 3]), "a pattern fill");
    let floats = q.alloc_zeros::<f32>(1000).unwrap();
    q.fill(&floats, 3.5f32).unwrap();
    assert_eq!(q.download(&floats).unwrap(), vec![3.5f32; 1000]);
    // A buffer of another queue: written after its home's upload.
    let other = Queue::new(0).unwrap();
    let theirs = other.upload(&vec![5u32; 1 << 20]).unwrap();
    q.write(&theirs, 0, &[6, 6]).unwrap();
    let got = other.download(&theirs).unwrap();
    assert_eq!(&got[..3], &[6, 6, 5]);
}

/// A program's own cudarc context, stream and slices: a queue over its
/// stream, slices as arguments (read and written), a slice of another of
/// its streams, results read back through cudarc.
fn bring_your_own_cudarc(_: &Arc<Queue>) {
    use cudarc::driver::CudaContext;
    let ctx = CudaContext::new(0).unwrap();
    let (mine, other) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let q = Queue::from_stream(Arc::clone(&mine)).unwrap();
    assert_eq!(q.stream().cu_stream(), mine.cu_stream());
    let exe = spin_copy_bundle();
    let data: Vec<u32> = (0..1u32 << 20).map(|i| i ^ 0x5a5a).collect();
    // Made on the other stream; the queue's launch waits for it.
    let src = other.clone_htod(&data).unwrap();
    let mut dst = mine.alloc_zeros::<u32>(data.len()).unwrap();
    spin_copy(
        &q,
        &exe,
        Arg::slice(&src),
        Arg::slice_mut(&mut dst),
        data.len(),
        50,
    );
    // Read on the other stream: cudarc waits for the kernel's write.
    assert!(other.clone_dtoh(&dst).unwrap() == data);
    // The example kernels too, on the program's stream.
    let out = mine.alloc_zeros::<i64>(9).unwrap();
    let mut out = out;
    q.submit(|h| {
        h.launch(
            "scalars",
            LaunchConfig::new((1, 1, 1), (1, 1, 1)),
            &[Arg::slice_mut(&mut out)],
        )
    })
    .unwrap();
    assert_eq!(mine.clone_dtoh(&out).unwrap().len(), 9);
}

fn conv_launch(
    q: &Queue,
    exe: &KernelBundle<Executable>,
    h: usize,
    w: usize,
    din: &DeviceBuffer<f32>,
) -> Vec<f32> {
    let out: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; h * w]).unwrap();
    let cfg = LaunchConfig::new(
        (w.div_ceil(16) as u32, h.div_ceil(16) as u32, 1),
        (16, 16, 1),
    );
    q.submit(|hd| {
        hd.use_kernel_bundle(exe)?;
        hd.launch(
            "conv3x3",
            cfg,
            &[
                Arg::buffer(din),
                Arg::buffer(&out),
                Arg::value(h as i32),
                Arg::value(w as i32),
            ],
        )
    })
    .unwrap();
    q.download(&out).unwrap()
}

fn global_and_param_buffers_with_handler_values(q: &Arc<Queue>) {
    let (h, w) = (40usize, 70usize);
    let img = pseudo_random(h * w, 3);
    let din = q.upload(&img).unwrap();
    let sobel = [[1.0, 0.0, -1.0], [2.0, 0.0, -2.0], [1.0, 0.0, -1.0]];
    for (buffer, delivery) in [
        (BufferPlacement::Global, Delivery::GlobalBuffer),
        (BufferPlacement::Param, Delivery::ParamSpace),
    ] {
        let mut input = KernelBundle::from_images(images_placed(&["conv3x3"], buffer))
            .with_mode(SpecMode::Emulated);
        input.set_specialization_constant(&COEFF, sobel).unwrap();
        let exe = build(&input).unwrap();
        assert_eq!(
            exe.built_image(&KernelId::new("conv3x3"))
                .unwrap()
                .delivery(),
            delivery
        );
        let err = max_rel_err(
            &conv_launch(q, &exe, h, w, &din),
            &reference::conv3x3(&img, h, w, &sobel),
        );
        assert!(err < 1e-5, "{buffer:?}: relative error {err}");
        // Native from the same images.
        let exe = build(&input.clone().with_mode(SpecMode::Native)).unwrap();
        let err = max_rel_err(
            &conv_launch(q, &exe, h, w, &din),
            &reference::conv3x3(&img, h, w, &sobel),
        );
        assert!(err < 1e-5, "{buffer:?} native: relative error {err}");
    }
}

/// More value sets of one global-buffer image than a queue keeps buffers
/// for (8), launched in turn: each launch reads its own values — also a
/// bundle launched again after others wrote over its buffer (its plan then
/// takes the buffer's address anew rather than the one it kept).
fn global_buffers_written_over_give_each_launch_its_values(q: &Arc<Queue>) {
    let input = KernelBundle::from_images(images_placed(&["scalars"], BufferPlacement::Global))
        .with_mode(SpecMode::Emulated);
    let exes: Vec<_> = (0..12i16)
        .map(|v| {
            let mut b = input.clone();
            b.set_specialization_constant(&SHORT, 100 + v).unwrap();
            build(&b).unwrap()
        })
        .collect();
    assert_eq!(
        exes[0]
            .built_image(&KernelId::new("scalars"))
            .unwrap()
            .delivery(),
        Delivery::GlobalBuffer
    );
    let read = |exe: &KernelBundle<Executable>| run_scalars(q, exe)[3];
    // The first twice (its plan keeps its address), then every set in turn,
    // three times: from the ninth on, each writes over another's buffer.
    assert_eq!(read(&exes[0]), 100);
    assert_eq!(read(&exes[0]), 100);
    for round in 0..3 {
        for (v, exe) in exes.iter().enumerate() {
            assert_eq!(read(exe), 100 + v as i64, "round {round}, value set {v}");
        }
    }
}

fn selector_chooses_between_native_and_emulated_images(q: &Arc<Queue>) {
    let input = get_kernel_bundle_for(&[KernelId::new("scalars")]).unwrap();
    let mut set = input.clone();
    set.set_specialization_constant(&SHORT, 1234).unwrap();
    let native = build(&set).unwrap();
    let emulated = build(&set.clone().with_mode(SpecMode::Emulated)).unwrap();
    let both = ptxspec::join(&[native, emulated]).unwrap();
    assert_eq!(both.device_images().len(), 2);
    for want_native in [true, false] {
        let out: DeviceBuffer<i64> = q.alloc_zeros(9).unwrap();
        let mut chosen = None;
        q.submit(|h| {
            h.use_kernel_bundle_with(&both, |img| {
                img.native_specialization_constant() == want_native
            })?;
            h.launch(
                "scalars",
                LaunchConfig::new((1, 1, 1), (1, 1, 1)),
                &[Arg::buffer(&out)],
            )
        })
        .unwrap();
        for d in both.device_images() {
            if d.native_specialization_constant() == want_native {
                chosen = Some(d.mode());
            }
        }
        assert_eq!(q.download(&out).unwrap()[3], 1234, "{chosen:?}");
    }
    let e = q
        .submit(|h| {
            h.use_kernel_bundle_with(&both, |_| false)?;
            h.launch(
                "scalars",
                LaunchConfig::new((1, 1, 1), (1, 1, 1)),
                &[Arg::buffer(&q.alloc_zeros::<i64>(9)?)],
            )
        })
        .unwrap_err();
    assert!(matches!(e, ptxspec::Error::KernelNotFound(_)), "{e}");
}

fn bundles_bound_to_devices_logs_and_jit_errors(q: &Arc<Queue>) {
    let dev = q.device().clone();
    let logged = Arc::new(std::sync::Mutex::new(String::new()));
    let sink = Arc::clone(&logged);
    let opts = BuildOptions::default()
        .with_debug(true)
        .with_log(move |s: &str| sink.lock().unwrap().push_str(s));
    let mut input = get_kernel_bundle_for(&[KernelId::new("matmul")])
        .unwrap()
        .with_mode(SpecMode::Lto);
    input.set_specialization_constant(&BLOCK, 8).unwrap();
    let exe = build_with(&input, std::slice::from_ref(&dev), &opts).unwrap();
    assert_eq!(exe.devices(), Some(&[dev.ordinal][..]));
    let n = 64usize;
    let (a, b) = (pseudo_random(n * n, 5), pseudo_random(n * n, 6));
    let (da, db) = (q.upload(&a).unwrap(), q.upload(&b).unwrap());
    let dc: DeviceBuffer<f32> = q.alloc_zeros(n * n).unwrap();
    q.submit(|h| {
        h.use_kernel_bundle(&exe)?;
        h.launch(
            "matmul",
            LaunchConfig::new((8, 8, 1), (8, 8, 1)).with_shared_mem(2 * 64 * 4),
            &[
                Arg::buffer(&da),
                Arg::buffer(&db),
                Arg::buffer(&dc),
                Arg::value(n as i32),
            ],
        )
    })
    .unwrap();
    let err = max_rel_err(&q.download(&dc).unwrap(), &reference::matmul(&a, &b, n));
    assert!(err < 1e-5, "debug LTO build: {err}");
    eprintln!("build log of a debug LTO build: {:?}", exe.build_log());
    assert!(
        !exe.build_log().is_empty(),
        "a debug build logs what the linker and JIT did"
    );
    assert_eq!(
        *logged.lock().unwrap(),
        exe.build_log(),
        "the sink saw what the bundle kept"
    );
    // A bundle built for another device is refused on this queue.
    let mut other = dev.clone();
    other.ordinal += 100;
    let elsewhere = build_with(
        &input.clone().with_mode(SpecMode::Native),
        &[other],
        &BuildOptions::default(),
    )
    .unwrap();
    let e = q.submit(|h| h.use_kernel_bundle(&elsewhere)).unwrap_err();
    assert_eq!(e.errc(), ptxspec::Errc::Invalid, "{e}");
    assert!(e.to_string().contains("not for device"), "{e}");
    // PTX that parses but that the JIT rejects: a typed error with its log.
    let bad = ".version 7.0\n.target sm_70\n.address_size 64\n\
               .visible .entry broken(.param .u64 p)\n{\n .reg .b32 %r<2>;\n mov.b32 %r1, %undefined_reg;\n ret;\n}\n";
    let post = ptxspec_core::postlink::post_link(
        vec![("broken.ptx".into(), bad.into())],
        &Options::default(),
    )
    .unwrap()
    .remove(0);
    let img = Image::new(post.stem, post.ptx, &post.props.to_text()).unwrap();
    let exe = build(&KernelBundle::from_images(vec![Arc::new(img)])).unwrap();
    let e = q
        .submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch(
                "broken",
                LaunchConfig::new((1, 1, 1), (1, 1, 1)),
                &[Arg::value(0u64)],
            )
        })
        .unwrap_err();
    match &e {
        ptxspec::Error::Build { log, .. } => assert!(log.contains("undefined_reg"), "{log}"),
        other => panic!("expected a build error with the JIT's log, got {other}"),
    }
    assert!(
        exe.build_log().contains("undefined_reg"),
        "{}",
        exe.build_log()
    );
}

/// Compiles a source with NVRTC here (the GPU machine has it) and makes
/// its images.
fn compiled(name: &str, source: &str, extra: &[&str]) -> Vec<Arc<Image>> {
    // compute_80: accepted by NVRTC 12 and 13 alike (13 dropped Volta).
    let opts = ptxspec_core::compile::CompileOptions {
        extra: extra.iter().map(|s| s.to_string()).collect(),
        arch: "compute_80".into(),
        ..Default::default()
    };
    let header = ptxspec_core::compile::header_dir(None).unwrap();
    let unit = ptxspec_core::compile::compile_unit(name, source, &opts, &header).unwrap();
    ptxspec_core::compile::post_link_units(&[unit], &Options::default())
        .unwrap()
        .into_iter()
        .map(|i| Arc::new(Image::new(i.stem, i.ptx, &i.props.to_text()).unwrap()))
        .collect()
}

fn debug_build_of_the_convolution(q: &Arc<Queue>) {
    let src = include_str!("../kernels/conv3x3.cu");
    let images = compiled("conv3x3_debug.cu", src, &["-G"]);
    assert!(images[0].ptx().contains(", debug"), "a -G build");
    let (h, w) = (33usize, 47usize);
    let img = pseudo_random(h * w, 9);
    let din = q.upload(&img).unwrap();
    let sharpen = [[0.0, -1.0, 0.0], [-1.0, 5.0, -1.0], [0.0, -1.0, 0.0]];
    for mode in [SpecMode::Native, SpecMode::Emulated] {
        let mut input = KernelBundle::from_images(images.clone()).with_mode(mode);
        input.set_specialization_constant(&COEFF, sharpen).unwrap();
        let exe = build(&input).unwrap();
        let err = max_rel_err(
            &conv_launch(q, &exe, h, w, &din),
            &reference::conv3x3(&img, h, w, &sharpen),
        );
        assert!(err < 1e-5, "-G {mode:?}: relative error {err}");
    }
}

fn dynamic_parallelism_links_the_device_runtime(q: &Arc<Queue>) {
    let src = include_str!("../crates/ptxspec-cli/tests/corpus/dynamic_parallelism.cu");
    let images = compiled("dynamic_parallelism.cu", src, &[]);
    assert!(images[0].info().needs_device_runtime);
    let scale: SpecId<i32> = SpecId::new("child_scale_id");
    let out: DeviceBuffer<i32> = q.alloc_zeros(64).unwrap();
    for mode in [SpecMode::Native, SpecMode::Emulated] {
        let mut input = KernelBundle::from_images(images.clone()).with_mode(mode);
        input.set_specialization_constant(&scale, 7).unwrap();
        let exe = build(&input).unwrap();
        q.submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch(
                "parent",
                LaunchConfig::new((1, 1, 1), (1, 1, 1)),
                &[Arg::buffer(&out)],
            )
        })
        .unwrap();
        let got = q.download(&out).unwrap();
        assert_eq!(
            got,
            (0..64).map(|i| i * 7).collect::<Vec<i32>>(),
            "{mode:?}"
        );
    }
}

/// With two or more GPUs: one bundle on two devices, 4 threads, 10 000
/// launches alternating values, every result checked, no growth in device
/// memory.
fn one_bundle_on_two_gpus_from_four_threads(q0: &Arc<Queue>) {
    let q1 = Arc::new(Queue::new(1).unwrap());
    let queues = [Arc::clone(q0), q1];
    let mut native_in = get_kernel_bundle_for(&[KernelId::new("scalars")]).unwrap();
    native_in.set_specialization_constant(&U64, 77).unwrap();
    let devices: Vec<_> = queues.iter().map(|q| q.device().clone()).collect();
    let native = build_with(&native_in, &devices, &BuildOptions::default()).unwrap();
    // One launch of each kind per device first: modules load once, and
    // what they take is not growth.
    for q in &queues {
        let out: DeviceBuffer<i64> = q.alloc_zeros(9).unwrap();
        let one = LaunchConfig::new((1, 1, 1), (1, 1, 1));
        q.submit(|h| {
            h.set_specialization_constant(&SHORT, 1)?;
            h.launch("scalars", one, &[Arg::buffer(&out)])
        })
        .unwrap();
        q.submit(|h| {
            h.use_kernel_bundle(&native)?;
            h.launch("scalars", one, &[Arg::buffer(&out)])
        })
        .unwrap();
        q.wait().unwrap();
    }
    let before: Vec<usize> = queues.iter().map(|q| q.memory_info().unwrap().0).collect();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let q = Arc::clone(&queues[t % 2]);
            let native = native.clone();
            std::thread::spawn(move || {
                let one = LaunchConfig::new((1, 1, 1), (1, 1, 1));
                let out: DeviceBuffer<i64> = q.alloc_zeros(9).unwrap();
                for i in 0..2500i32 {
                    let v = (t as i32 * 10_000 + i) as i16;
                    if i % 2 == 0 {
                        q.submit(|h| {
                            h.set_specialization_constant(&SHORT, v)?;
                            h.launch("scalars", one, &[Arg::buffer(&out)])
                        })
                        .unwrap();
                        let got = q.download(&out).unwrap();
                        assert_eq!(
                            got[3],
                            v as i64,
                            "thread {t} launch {i} on device {}",
                            q.device().ordinal
                        );
                    } else {
                        q.submit(|h| {
                            h.use_kernel_bundle(&native)?;
                            h.launch("scalars", one, &[Arg::buffer(&out)])
                        })
                        .unwrap();
                        assert_eq!(q.download(&out).unwrap()[4], 77, "thread {t} launch {i}");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for (q, b) in queues.iter().zip(before) {
        q.wait().unwrap();
        let after = q.memory_info().unwrap().0;
        let lost = b as i64 - after as i64;
        eprintln!(
            "device {}: {b} bytes free before, {after} after 5000 launches",
            q.device().ordinal
        );
        assert!(
            lost < 4 << 20,
            "device {} lost {lost} bytes",
            q.device().ordinal
        );
    }
}

use gpu_harness::GpuTest;

/// How many GPUs a test needs; with fewer it is reported as ignored, not
/// as passed.
fn gpus_needed(name: &str) -> usize {
    if name == "one_bundle_on_two_gpus_from_four_threads" {
        2
    } else {
        1
    }
}

const TESTS: &[(&str, GpuTest)] = &[
    (
        "launches_beside_a_link_on_the_same_queue_never_wait",
        launches_beside_a_link_on_the_same_queue_never_wait,
    ),
    (
        "handler_values_and_defaults_launch_after_launch",
        handler_values_and_defaults_launch_after_launch,
    ),
    (
        "global_buffers_written_over_give_each_launch_its_values",
        global_buffers_written_over_give_each_launch_its_values,
    ),
    ("buffers_used_across_queues", buffers_used_across_queues),
    (
        "buffers_are_written_and_filled",
        buffers_are_written_and_filled,
    ),
    ("bring_your_own_cudarc", bring_your_own_cudarc),
    (
        "vec_and_marray_values_in_every_mode",
        vec_and_marray_values_in_every_mode,
    ),
    (
        "each_cpp_entity_reads_its_own_value",
        each_cpp_entity_reads_its_own_value,
    ),
    (
        "tiered_bundles_switch_to_the_specialized_tier",
        tiered_bundles_switch_to_the_specialized_tier,
    ),
    (
        "a_second_queue_never_waits_for_a_tier_link",
        a_second_queue_never_waits_for_a_tier_link,
    ),
    (
        "kernel_handler_without_constants",
        kernel_handler_without_constants,
    ),
    (
        "handler_values_for_other_kernels_and_handler_get",
        handler_values_for_other_kernels_and_handler_get,
    ),
    (
        "scalars_and_composites_in_both_modes",
        scalars_and_composites_in_both_modes,
    ),
    ("seed000_pod", seed000_pod),
    (
        "convolution_matches_cpu_with_values_changed_between_launches",
        convolution_matches_cpu_with_values_changed_between_launches,
    ),
    (
        "blocked_matmul_for_each_block_size",
        blocked_matmul_for_each_block_size,
    ),
    (
        "two_translation_units_on_the_gpu",
        two_translation_units_on_the_gpu,
    ),
    (
        "handler_values_errors_and_eight_threads",
        handler_values_errors_and_eight_threads,
    ),
    (
        "ten_thousand_launches_with_changing_values_leak_nothing",
        ten_thousand_launches_with_changing_values_leak_nothing,
    ),
    ("devices_are_listed", devices_are_listed),
    (
        "optional_features_run_where_supported",
        optional_features_run_where_supported,
    ),
    (
        "reqntid_kernel_with_the_wrong_block_size",
        reqntid_kernel_with_the_wrong_block_size,
    ),
    (
        "global_and_param_buffers_with_handler_values",
        global_and_param_buffers_with_handler_values,
    ),
    (
        "selector_chooses_between_native_and_emulated_images",
        selector_chooses_between_native_and_emulated_images,
    ),
    (
        "bundles_bound_to_devices_logs_and_jit_errors",
        bundles_bound_to_devices_logs_and_jit_errors,
    ),
    (
        "debug_build_of_the_convolution",
        debug_build_of_the_convolution,
    ),
    (
        "dynamic_parallelism_links_the_device_runtime",
        dynamic_parallelism_links_the_device_runtime,
    ),
    (
        "one_bundle_on_two_gpus_from_four_threads",
        one_bundle_on_two_gpus_from_four_threads,
    ),
    (
        "kernels_from_source_in_every_mode_and_extern_c_handlers",
        kernels_from_source_in_every_mode_and_extern_c_handlers,
    ),
    (
        "kernels_launch_by_their_cpp_names",
        kernels_launch_by_their_cpp_names,
    ),
];

/// A bundle compiled from source at run time (issue 33) in every mode,
/// tiered too, with bundle values and handler values, read back; and an
/// `extern "C"` kernel that takes a handler and reads no constant, launched
/// with the caller's arguments alone.
fn kernels_from_source_in_every_mode_and_extern_c_handlers(q: &Arc<Queue>) {
    let source = r#"#include "ptxspec.cuh"
constexpr ptxspec::specialization_id<int> add{5};
extern "C" __global__ void added(int *x, ptxspec::kernel_handler h) {
  x[threadIdx.x] = threadIdx.x + h.get_specialization_constant<add>();
}
extern "C" __global__ void untouched(int *x, int v, ptxspec::kernel_handler h) {
  x[threadIdx.x] = v;
}
"#;
    const ADD: SpecId<i32> = SpecId::new("add");
    let block = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    let mut input =
        ptxspec::kernel_bundle_from_source(&[("gpu_source.cu", source)], &Default::default())
            .unwrap();
    input.set_specialization_constant(&ADD, 40).unwrap();
    let plus = |v: i32| (0..32).map(|i| v + i).collect::<Vec<i32>>();
    let run = |exe: &ptxspec::KernelBundle<ptxspec::Executable>, value: Option<i32>| {
        let out: DeviceBuffer<i32> = q.alloc_zeros(32).unwrap();
        q.submit(|h| {
            h.use_kernel_bundle(exe)?;
            if let Some(v) = value {
                h.set_specialization_constant(&ADD, v)?;
            }
            h.launch("added", block, &[Arg::buffer(&out)])
        })
        .unwrap();
        q.download(&out).unwrap()
    };
    for mode in MODES.into_iter().chain([SpecMode::Tiered]) {
        let exe = build(&input.clone().with_mode(mode)).unwrap();
        assert_eq!(run(&exe, None), plus(40), "{mode:?}");
        let out: DeviceBuffer<i32> = q.alloc_zeros(32).unwrap();
        q.submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch("untouched", block, &[Arg::buffer(&out), Arg::value(9i32)])
        })
        .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        assert_eq!(q.download(&out).unwrap(), vec![9; 32], "{mode:?}");
    }
    // Handler values: the source's images joined the registered kernels,
    // so a launch by name without a bundle finds them.
    for v in [-3, 11, 5] {
        let out: DeviceBuffer<i32> = q.alloc_zeros(32).unwrap();
        q.submit(|h| {
            if v != 5 {
                h.set_specialization_constant(&ADD, v)?;
            }
            h.launch("added", block, &[Arg::buffer(&out)])
        })
        .unwrap();
        assert_eq!(q.download(&out).unwrap(), plus(v), "handler value {v}");
    }
}

/// A kernel declared without `extern "C"` launches by its C++ name —
/// from a bundle in every mode, and with handler values from the
/// registered images — again and again (past the fast path, which keeps
/// the image's name), and reads its values each time.
fn kernels_launch_by_their_cpp_names(q: &Arc<Queue>) {
    let source = r#"#include "ptxspec.cuh"
constexpr ptxspec::specialization_id<int> offset_cpp{7};
__global__ void shifted_cpp(int *x, ptxspec::kernel_handler h) {
  x[threadIdx.x] = threadIdx.x + h.get_specialization_constant<offset_cpp>();
}
"#;
    const OFFSET: SpecId<i32> = SpecId::new("offset_cpp");
    let block = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    let input =
        ptxspec::kernel_bundle_from_source(&[("gpu_cpp_names.cu", source)], &Default::default())
            .unwrap();
    assert!(input.kernel_ids()[0].name().starts_with("_Z11shifted_cpp"));
    let plus = |v: i32| (0..32).map(|i| v + i).collect::<Vec<i32>>();
    for mode in MODES.into_iter().chain([SpecMode::Tiered]) {
        for v in [3, 3, -4] {
            let mut values = input.clone();
            values.set_specialization_constant(&OFFSET, v).unwrap();
            let exe = build(&values.with_mode(mode)).unwrap();
            let out: DeviceBuffer<i32> = q.alloc_zeros(32).unwrap();
            q.submit(|h| {
                h.use_kernel_bundle(&exe)?;
                h.launch("shifted_cpp", block, &[Arg::buffer(&out)])
            })
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
            assert_eq!(q.download(&out).unwrap(), plus(v), "{mode:?} {v}");
        }
    }
    for v in [-3, 11, 11, 7] {
        let out: DeviceBuffer<i32> = q.alloc_zeros(32).unwrap();
        q.submit(|h| {
            if v != 7 {
                h.set_specialization_constant(&OFFSET, v)?;
            }
            h.launch("shifted_cpp", block, &[Arg::buffer(&out)])
        })
        .unwrap();
        assert_eq!(q.download(&out).unwrap(), plus(v), "handler value {v}");
    }
}

fn main() {
    gpu_harness::run(TESTS, gpus_needed);
}
