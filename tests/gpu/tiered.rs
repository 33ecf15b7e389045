//! Tiered bundles: launches never wait for a link (on the same queue or another), and switch to the specialized tier.

use super::*;

/// Calls `launch` (2 ms apart) until one runs the LTO code, at most for two
/// minutes (`what` names what never switched): how many launches that took
/// and the milliseconds since the first.
pub(super) fn launches_until_lto(
    what: &str,
    launch: impl Fn() -> Option<SpecMode>,
) -> (usize, f64) {
    launches_until(SpecMode::Lto, what, launch)
}

/// Launches until one runs `tier` (within 120 s): how many, and the ms.
pub(super) fn launches_until(
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
pub(super) fn a_second_queue_never_waits_for_a_tier_link(q: &Arc<Queue>) {
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
        let cfg = crate::matmul::config(n, bs);
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
pub(super) fn launches_beside_a_link_on_the_same_queue_never_wait(q: &Arc<Queue>) {
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
pub(super) fn tiered_bundles_switch_to_the_specialized_tier(q: &Arc<Queue>) {
    // n = 96: block sizes that divide it and that no other test links (a
    // value set linked before starts at its tier, which the first part does
    // not want).
    let n = 96usize;
    let (a, b) = (pseudo_random(n * n, 3), pseudo_random(n * n, 4));
    let want = reference::matmul(&a, &b, n);
    let (da, db) = (q.upload(&a).unwrap(), q.upload(&b).unwrap());
    let arch = q.device().arch();
    let matmul = KernelId::new("matmul");
    let without_ltoir: Vec<Image> = images_placed(&["matmul"], BufferPlacement::Auto);
    assert!(without_ltoir.iter().all(|i| !i.has_ltoir()));
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
    // Values linked before (block 6, above): a new tiered bundle finds the
    // cubin, no worker asked, and runs it once its code is loaded — where
    // the queue has it already, at once; else its first launches run
    // emulated while the loader thread loads it (a load waits for the
    // device's queued work, which a first launch never does).
    let mut input = get_kernel_bundle_for(std::slice::from_ref(&matmul))
        .unwrap()
        .with_mode(SpecMode::Tiered);
    input.set_specialization_constant(&BLOCK, 6).unwrap();
    let exe = build(&input).unwrap();
    assert!(
        exe.built_image(&matmul)
            .unwrap()
            .cubin_is_cached(arch, "matmul")
    );
    let (launches, _) = launches_until_lto("values linked before", || {
        let (c, mode) = matmul_once(q, Some(&exe), (&da, &db), n, 6);
        let err = max_rel_err(&c, &want);
        assert!(
            err < 1e-5,
            "block 6 from the cache ({mode:?}): relative error {err}"
        );
        mode
    });
    assert!(
        launches <= 100,
        "values linked before: {launches} launches to switch"
    );
    // A second bundle of those values: its code is in the queue now, and
    // its first launch runs it.
    let mut input = get_kernel_bundle_for(std::slice::from_ref(&matmul))
        .unwrap()
        .with_mode(SpecMode::Tiered);
    input.set_specialization_constant(&BLOCK, 6).unwrap();
    let again = build(&input).unwrap();
    let (c, mode) = matmul_once(q, Some(&again), (&da, &db), n, 6);
    assert_eq!(mode, Some(SpecMode::Lto), "values linked and loaded before");
    let err = max_rel_err(&c, &want);
    assert!(err < 1e-5, "block 6 loaded before: relative error {err}");
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
