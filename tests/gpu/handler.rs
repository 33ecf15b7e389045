//! Values set on the handler: errors, eight threads, other kernels' values, kernel handlers without constants, ten thousand launches, defaults between launches.

use super::*;

pub(super) fn handler_values_errors_and_eight_threads(q: &Arc<Queue>) {
    // Errors: unknown kernel; kernel outside the bundle; wrong arguments.
    let out: DeviceBuffer<i64> = q.alloc_zeros(9).unwrap();
    let one = LaunchConfig::new((1, 1, 1), (1, 1, 1));
    let e = q.submit(|h| h.launch("nope", one, &[])).unwrap_err();
    assert!(matches!(e, ptxspec::Error::KernelNotFound { .. }), "{e}");
    let pod_only = build(&get_kernel_bundle_for(&[KernelId::new("pod")]).unwrap()).unwrap();
    let e = q
        .submit(|h| {
            h.use_kernel_bundle(&pod_only)?;
            h.launch("scalars", one, &[Arg::buffer(&out)])
        })
        .unwrap_err();
    // SYCL-CTS use_kernel_bundle_invoke_kernel_without_bundle_no_second_queue.cpp.
    assert!(
        matches!(&e, ptxspec::Error::KernelNotSupported { kernel: Some(k), .. } if k == "scalars"),
        "{e}"
    );
    assert_eq!(e.errc(), ptxspec::Errc::KernelNotSupported, "{e}");
    // One argument, as many as the kernel takes, of the wrong size: the
    // error names it.
    let e = q
        .submit(|h| h.launch("scalars", one, &[Arg::value(1i32)]))
        .unwrap_err();
    assert!(
        matches!(&e, ptxspec::Error::KernelArgument { kernel, argument: Some(0), .. } if kernel == "scalars"),
        "{e}"
    );
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
pub(super) fn handler_values_for_other_kernels_and_handler_get(q: &Arc<Queue>) {
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
pub(super) fn kernel_handler_without_constants(q: &Arc<Queue>) {
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
    let images: Vec<Image> = ptxspec_core::postlink::post_link(
        vec![(
            "handler_only.ptx".into(),
            include_str!("../../kernels/ptx/handler_only.ptx").into(),
        )],
        &opts,
    )
    .unwrap()
    .into_iter()
    .map(|i| Image::new(i.stem, i.ptx, &i.props.to_text()).unwrap())
    .collect();
    let exe = build(&KernelBundle::from_images(images)).unwrap();
    assert_eq!(run(WITHOUT, Some(&exe), None), doubled);
    assert_eq!(run(READS, Some(&exe), None), plus(40));
}

pub(super) fn ten_thousand_launches_with_changing_values_leak_nothing(q: &Arc<Queue>) {
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
pub(super) fn handler_values_and_defaults_launch_after_launch(q: &Arc<Queue>) {
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

/// A generated family of programs whose launches go round many kernels:
/// each bundle's kernel is a kernel of its own to the queue. Up to the
/// number of plans a queue keeps (64), going round them again makes no
/// plan (each plan made was a code look-up, a layout, and where the module
/// had gone, a module load, on the launch's path) — native and emulated
/// builds; and a program's hot kernels stay planned while one-off kernels
/// come and go past that number (the queue let the least recently launched
/// go, not the first made). Every launch reads back its own value.
pub(super) fn launches_going_round_many_kernels_make_each_plan_once(q: &Arc<Queue>) {
    let one = LaunchConfig::new((1, 1, 1), (1, 1, 1));
    let input = get_kernel_bundle_for(&[KernelId::new("scalars")]).unwrap();
    let bundles =
        |mode: SpecMode, values: std::ops::Range<i16>| -> Vec<(i16, KernelBundle<Executable>)> {
            values
                .map(|v| {
                    let mut b = input.clone().with_mode(mode);
                    b.set_specialization_constant(&SHORT, v).unwrap();
                    (v, build(&b).unwrap())
                })
                .collect()
        };
    let out: DeviceBuffer<i64> = q.alloc_zeros(9).unwrap();
    let launch = |exe: &KernelBundle<Executable>| {
        q.submit(|h| {
            h.use_kernel_bundle(exe)?;
            h.launch("scalars", one, &[Arg::buffer(&out)])
        })
        .unwrap()
    };
    let plans_made = || ptxspec::stats().launch_plans_made;
    for (mode, kernels) in [
        (SpecMode::Native, 40i16),
        (SpecMode::Native, 64),
        (SpecMode::Emulated, 64),
    ] {
        let exes = bundles(mode, 1..kernels + 1);
        for (_, exe) in &exes {
            launch(exe);
        }
        let before = plans_made();
        let paths = q.launch_paths();
        for round in 0..3 {
            for (v, exe) in &exes {
                launch(exe);
                if (*v + round) % 16 == 0 {
                    assert_eq!(q.download(&out).unwrap()[3], i64::from(*v), "{mode:?}");
                }
            }
        }
        assert_eq!(
            plans_made() - before,
            0,
            "{mode:?}: three rounds of {kernels} kernels made plans again"
        );
        // Each found by the queue's index, past the two recent plans.
        let now = q.launch_paths();
        assert_eq!(
            (now.short - paths.short, now.whole - paths.whole),
            (3 * kernels as u64, 0),
            "{mode:?}: launches going round {kernels} kernels, (short, whole)"
        );
    }
    // 40 hot kernels launched every round, and 10 new ones each round that
    // never come back: 90 kernels in five rounds.
    let hot = bundles(SpecMode::Native, 1000..1040);
    for (_, exe) in &hot {
        launch(exe);
    }
    let mut hot_plans = 0;
    for round in 0..5i16 {
        let one_offs = bundles(SpecMode::Native, 2000 + 10 * round..2010 + 10 * round);
        for (v, exe) in &one_offs {
            launch(exe);
            assert_eq!(q.download(&out).unwrap()[3], i64::from(*v));
        }
        let before = plans_made();
        let paths = q.launch_paths();
        for (v, exe) in &hot {
            launch(exe);
            if *v % 8 == 0 {
                assert_eq!(q.download(&out).unwrap()[3], i64::from(*v));
            }
        }
        hot_plans += plans_made() - before;
        assert_eq!(
            q.launch_paths().whole - paths.whole,
            0,
            "round {round}: hot kernels took the whole path after new plans came"
        );
    }
    assert_eq!(
        hot_plans, 0,
        "the hot kernels were planned again as one-off kernels came"
    );
}
