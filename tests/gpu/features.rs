//! Optional kernel features on a real device: the device's aspects, kernels that need them, required work-group sizes.

use super::*;

pub(super) fn devices_are_listed(_q: &Arc<Queue>) {
    let d = runtime::devices().unwrap();
    assert!(!d.is_empty());
    eprintln!("{:?}", d[0]);
    assert_eq!(d[0].sub_group_size, 32);
}

pub(super) fn optional_features_run_where_supported(q: &Arc<Queue>) {
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

pub(super) fn reqntid_kernel_with_the_wrong_block_size(q: &Arc<Queue>) {
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
    let exe = build(&KernelBundle::from_images([image])).unwrap();
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
    assert!(
        matches!(&e, ptxspec::Error::NdRange { kernel, required: [64, 1, 1], given: [32, 1, 1], .. }
            if kernel == "fixed64"),
        "{e:?}"
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
    let exe = build(&KernelBundle::from_images([image])).unwrap();
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
