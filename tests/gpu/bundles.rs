//! Bundles and images: selectors, bundles bound to devices, logs and JIT errors, a debug build, dynamic parallelism, one bundle on two GPUs.

use super::*;

pub(super) fn selector_chooses_between_native_and_emulated_images(q: &Arc<Queue>) {
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
            h.use_kernel_bundle_selected(&both, |img| {
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
            h.use_kernel_bundle_selected(&both, |_| false)?;
            h.launch(
                "scalars",
                LaunchConfig::new((1, 1, 1), (1, 1, 1)),
                &[Arg::buffer(&q.alloc_zeros::<i64>(9)?)],
            )
        })
        .unwrap_err();
    assert!(matches!(e, ptxspec::Error::KernelNotFound { .. }), "{e}");
}

pub(super) fn bundles_bound_to_devices_logs_and_jit_errors(q: &Arc<Queue>) {
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
    let exe = build(&KernelBundle::from_images([img])).unwrap();
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

pub(super) fn debug_build_of_the_convolution(q: &Arc<Queue>) {
    let src = include_str!("../../kernels/conv3x3.cu");
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

pub(super) fn dynamic_parallelism_links_the_device_runtime(q: &Arc<Queue>) {
    let src = include_str!("../../crates/ptxspec-cli/tests/corpus/dynamic_parallelism.cu");
    let images = compiled("dynamic_parallelism.cu", src, &[]);
    assert!(images[0].needs_device_runtime());
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
pub(super) fn one_bundle_on_two_gpus_from_four_threads(q0: &Arc<Queue>) {
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
