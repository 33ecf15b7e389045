//! SYCL 2020's kernel-bundle API where SYCL's conformance tests check it
//! (KhronosGroup/SYCL-CTS `tests/kernel_bundle/`,
//! `tests/optional_kernel_features/`; intel/llvm `KernelAndProgram/`,
//! `OptionalKernelFeatures/`), ported to this crate's API: each test names
//! the files it follows, whose expectations are the specification's. No
//! GPU needed: the example kernels are registered, devices are profiles
//! of a compute capability (with aspects taken away where a test needs a
//! device that lacks one), bundles are built natively.

#[path = "support/child.rs"]
mod child;

use ptxspec::features::Aspect;
use ptxspec::{
    BuildOptions, Device, Errc, Error, Executable, Input, KernelBundle, KernelId, Object, SpecId,
    SpecMode, build_with, compile_with, get_kernel_bundle_for, get_kernel_bundle_on,
    get_kernel_bundle_selected_on, has_kernel_bundle, has_kernel_bundle_in, has_kernel_bundle_of,
    join, link_with,
};

ptxspec_kernels::register_example_kernels!();

/// An H100's profile as device `ordinal`.
fn h100(ordinal: usize) -> Device {
    Device::profile(ordinal, (9, 0))
}

/// An H100's profile without `aspect`.
fn h100_without(ordinal: usize, aspect: Aspect) -> Device {
    let mut d = h100(ordinal);
    d.aspects.retain(|a| *a != aspect);
    d.name = format!("{} without {aspect}", d.name);
    d
}

fn id(name: &str) -> KernelId {
    KernelId::new(name)
}

/// That `r` failed with SYCL's `errc::invalid`.
fn invalid<T>(r: Result<T, Error>, what: &str) {
    match r {
        Ok(_) => panic!("{what}: succeeded"),
        Err(e) => assert_eq!(e.errc(), Errc::Invalid, "{what}: {e}"),
    }
}

/// SYCL-CTS `sycl_join_zero_kernel_bundles.cpp`: joining no bundles is an
/// empty bundle of that state, not an error.
#[test]
fn a_join_of_no_bundles_is_an_empty_bundle() {
    let input = join::<Input>(&[]).unwrap();
    let object = join::<Object>(&[]).unwrap();
    let exe = join::<Executable>(&[]).unwrap();
    assert!(input.is_empty() && object.is_empty() && exe.is_empty());
    assert!(input.kernel_ids().is_empty() && exe.kernel_ids().is_empty());
    assert_eq!(exe.devices(), None, "for any device");
    assert!(!exe.has_kernel(&id("matmul")));
    // It joins as any bundle does.
    let matmul = get_kernel_bundle_for(&[id("matmul")]).unwrap();
    let joined = join(&[input, matmul]).unwrap();
    assert_eq!(joined.kernel_ids(), [id("matmul")]);
}

/// SYCL-CTS `get_kernel_bundle_zero_device.cpp`,
/// `has_kernel_bundle_zero_device.h`, `sycl_build_zero_device.cpp`,
/// `sycl_compile_exception_for_zero_devices.cpp`,
/// `sycl_link_zero_device.cpp`: every call that takes devices refuses an
/// empty list with `errc::invalid`.
#[test]
fn an_empty_device_list_is_invalid_everywhere() {
    let input = get_kernel_bundle_for(&[id("matmul")]).unwrap();
    let object = ptxspec::compile(&input).unwrap();
    let options = BuildOptions::default();
    invalid(
        get_kernel_bundle_selected_on(&[], |_| true),
        "get_kernel_bundle_selected_on",
    );
    invalid(
        get_kernel_bundle_on(&[], &[id("matmul")]),
        "get_kernel_bundle_on",
    );
    invalid(has_kernel_bundle(&[]), "has_kernel_bundle");
    invalid(
        has_kernel_bundle_in::<Input>(&[]),
        "has_kernel_bundle_in input",
    );
    invalid(
        has_kernel_bundle_in::<Object>(&[]),
        "has_kernel_bundle_in object",
    );
    invalid(
        has_kernel_bundle_in::<Executable>(&[]),
        "has_kernel_bundle_in executable",
    );
    invalid(
        has_kernel_bundle_of::<Executable>(&[], &[id("matmul")]),
        "has_kernel_bundle_of",
    );
    invalid(build_with(&input, &[], &options), "build_with");
    invalid(compile_with(&input, &[], &options), "compile_with");
    invalid(link_with(&[object], &[], &options), "link_with");
}

/// SYCL-CTS `sycl_build_different_device_for_sycl_build.cpp`,
/// `sycl_compile_exception_if_dev_not_in_set.cpp`: a bundle made for
/// device 0 is not built, compiled or linked for device 1.
#[test]
fn a_bundle_is_built_only_for_its_own_devices() {
    let (d0, d1) = (h100(0), h100(1));
    let options = BuildOptions::default();
    let of_d0 = get_kernel_bundle_selected_on(std::slice::from_ref(&d0), |_| true)
        .unwrap()
        .with_mode(SpecMode::Native);
    assert_eq!(of_d0.devices(), Some(&[0][..]));
    for devices in [vec![d0.clone(), d1.clone()], vec![d1.clone()]] {
        let e = build_with(&of_d0, &devices, &options).unwrap_err();
        assert_eq!(e.errc(), Errc::Invalid, "{e}");
        assert!(e.to_string().contains("device 1"), "names the device: {e}");
        invalid(compile_with(&of_d0, &devices, &options), "compile_with");
    }
    let exe = build_with(&of_d0, std::slice::from_ref(&d0), &options).unwrap();
    assert_eq!(exe.devices(), Some(&[0][..]));
    // Compiled for device 0, linked for device 1: refused too.
    let object = compile_with(&of_d0, std::slice::from_ref(&d0), &options).unwrap();
    invalid(
        link_with(
            std::slice::from_ref(&object),
            std::slice::from_ref(&d1),
            &options,
        ),
        "link_with",
    );
    link_with(&[object], &[d0], &options).unwrap();
    // A bundle for any device builds for any.
    let any = get_kernel_bundle_for(&[id("matmul")])
        .unwrap()
        .with_mode(SpecMode::Native);
    build_with(&any, &[d1], &options).unwrap();
}

/// SYCL-CTS `get_kernel_bundle_with_incompatible_kernels.cpp`: a kernel
/// that none of the devices can run is `errc::invalid`; one that some
/// device can run is in the bundle, which is for those devices.
#[test]
fn get_kernel_bundle_with_devices_and_kernels() {
    let full = h100(0);
    let no_fp64 = h100_without(1, Aspect::FP64);
    let e = get_kernel_bundle_on(std::slice::from_ref(&no_fp64), &[id("fp64_axpy")]).unwrap_err();
    assert_eq!(e.errc(), Errc::Invalid, "{e}");
    assert!(e.to_string().contains("fp64_axpy"), "{e}");
    invalid(
        get_kernel_bundle_on(
            std::slice::from_ref(&no_fp64),
            &[id("matmul"), id("fp64_axpy")],
        ),
        "one incompatible kernel among compatible ones",
    );
    let both = [full.clone(), no_fp64.clone()];
    let b = get_kernel_bundle_on(&both, &[id("fp64_axpy"), id("matmul")]).unwrap();
    assert_eq!(b.kernel_ids(), [id("fp64_axpy"), id("matmul")]);
    assert_eq!(b.devices(), Some(&[0, 1][..]));
    // An unknown kernel is not found, as everywhere.
    let e = get_kernel_bundle_on(&both, &[id("no_such_kernel")]).unwrap_err();
    assert!(
        matches!(&e, Error::KernelNotFound { kernel, .. } if kernel == "no_such_kernel"),
        "{e}"
    );
}

/// SYCL-CTS `kernel_bundle_api.cpp`, `device_image_api.cpp`:
/// `has_kernel(kernel_id, device)` of a bundle and of a device image is
/// whether it holds the kernel and the device can run it — for each of the
/// example kernels' shapes of requirement (an aspect used, declared,
/// reached through calls in another unit; a sub-group size; none).
#[test]
fn has_kernel_for_a_device() {
    let full = h100(0);
    let cases: [(&str, Option<Aspect>); 7] = [
        ("fp64_axpy", Some(Aspect::FP64)),
        ("fp64_two_levels", Some(Aspect::FP64)),
        ("count64", Some(Aspect::ATOMIC64)),
        ("half_add", Some(Aspect::FP16)),
        ("declares_too_little", Some(Aspect::FP16)),
        ("declares_too_little", Some(Aspect::FP64)),
        ("matmul", None),
    ];
    let bundle = get_kernel_bundle_for(&cases.map(|(k, _)| id(k))).unwrap();
    for (kernel, needs) in cases {
        let k = id(kernel);
        assert!(bundle.has_kernel_on(&k, &full), "{kernel}");
        let lacking = needs.map_or_else(|| h100_without(1, Aspect::FP64), |a| h100_without(1, a));
        assert_eq!(
            bundle.has_kernel_on(&k, &lacking),
            needs.is_none(),
            "{kernel} on {}",
            lacking.name
        );
        let images = bundle.device_images();
        let image = images.iter().find(|i| i.has_kernel(&k)).unwrap();
        assert!(image.has_kernel_on(&k, &full), "{kernel}");
        assert_eq!(
            image.has_kernel_on(&k, &lacking),
            needs.is_none(),
            "{kernel}"
        );
        // Images that do not hold it hold it for no device.
        assert!(
            images
                .iter()
                .filter(|i| !i.has_kernel(&k))
                .all(|i| !i.has_kernel_on(&k, &full))
        );
    }
    // The warp reduction needs a sub-group size of 32.
    let mut warp16 = h100(1);
    warp16.sub_group_size = 16;
    assert!(bundle.has_kernel_on(&id("matmul"), &warp16));
    let warp = get_kernel_bundle_for(&[id("warp_sum")]).unwrap();
    assert!(warp.has_kernel_on(&id("warp_sum"), &full));
    assert!(!warp.has_kernel_on(&id("warp_sum"), &warp16));
    // A bundle made for device 0 holds nothing for device 1.
    let of_d0 = get_kernel_bundle_on(std::slice::from_ref(&full), &[id("matmul")]).unwrap();
    assert!(of_d0.has_kernel_on(&id("matmul"), &full));
    assert!(!of_d0.has_kernel_on(&id("matmul"), &h100(1)));
    assert!(!of_d0.has_kernel_on(&id("conv3x3"), &full));
}

/// SYCL-CTS `has_kernel_bundle_core_*_k_id`: whether bundles holding the
/// kernels exist for the devices — each kernel run by some device.
#[test]
fn has_kernel_bundle_with_kernels() {
    let full = h100(0);
    let no_fp64 = h100_without(1, Aspect::FP64);
    let ask = |devices: &[Device], kernels: &[&str]| {
        let ids: Vec<KernelId> = kernels.iter().map(|k| id(k)).collect();
        has_kernel_bundle_of::<Executable>(devices, &ids).unwrap()
    };
    assert!(ask(std::slice::from_ref(&full), &["fp64_axpy", "matmul"]));
    assert!(!ask(std::slice::from_ref(&no_fp64), &["fp64_axpy"]));
    assert!(ask(std::slice::from_ref(&no_fp64), &["matmul", "conv3x3"]));
    assert!(ask(&[no_fp64.clone(), full.clone()], &["fp64_axpy"]));
    assert!(!ask(std::slice::from_ref(&full), &["no_such_kernel"]));
    assert!(ask(std::slice::from_ref(&full), &[]));
}

/// SYCL-CTS `has_kernel_bundle_core_all_states_dev.cpp`: a bundle in the
/// input state needs devices with `online_compiler`, in the object state
/// `online_linker` — here, what the process can load (NVRTC, nvJitLink).
/// In a child process whose NVRTC does not load (PTXSPEC_NVRTC names a
/// file that is no library): input false, object and executable true.
#[test]
fn has_kernel_bundle_by_state_follows_the_online_aspects() {
    const CHILD: &str = "PTXSPEC_TEST_STATES_CHILD";
    let d = h100(0);
    let answers = || {
        let devices = std::slice::from_ref(&d);
        format!(
            "states: {} {} {} {} {}",
            d.has(Aspect::ONLINE_COMPILER),
            d.has(Aspect::ONLINE_LINKER),
            has_kernel_bundle_in::<Input>(devices).unwrap(),
            has_kernel_bundle_in::<Object>(devices).unwrap(),
            has_kernel_bundle_in::<Executable>(devices).unwrap(),
        )
    };
    if std::env::var_os(CHILD).is_some() {
        println!("{}", answers());
        return;
    }
    let nvrtc = ptxspec_core::toolkit::require(ptxspec_core::toolkit::Lib::Nvrtc).is_ok();
    let nvjitlink = ptxspec_core::toolkit::require(ptxspec_core::toolkit::Lib::NvJitLink).is_ok();
    assert_eq!(
        answers(),
        format!("states: {nvrtc} {nvjitlink} {nvrtc} {nvjitlink} true")
    );
    // The aspects are asked, not listed: a device's list is the card's.
    assert!(!d.aspects.contains(&Aspect::ONLINE_COMPILER));
    let not_a_library = std::env::current_exe().unwrap();
    let out = child::this_test_again("has_kernel_bundle_by_state_follows_the_online_aspects")
        .env(CHILD, "1")
        .env("PTXSPEC_NVRTC", &not_a_library)
        .output()
        .unwrap();
    assert_eq!(
        child::said(&out, "states:"),
        format!("states: false {nvjitlink} false {nvjitlink} true")
    );
}

/// SYCL-CTS `sycl_build_verify_kernel_invoked_and_kernel_in_result_bundle.cpp`
/// and intel `KernelAndProgram` (values after `link`): compiled and linked
/// for a device, the result holds the kernels and the values set on the
/// input.
#[test]
fn compile_and_link_for_devices_keep_kernels_and_values() {
    const BLOCK: SpecId<i32> = SpecId::new("block_size_id");
    let d = h100(0);
    let options = BuildOptions::default();
    let mut input = get_kernel_bundle_on(std::slice::from_ref(&d), &[id("matmul")])
        .unwrap()
        .with_mode(SpecMode::Native);
    input.set_specialization_constant(&BLOCK, 8).unwrap();
    let object = compile_with(&input, std::slice::from_ref(&d), &options).unwrap();
    assert_eq!(object.devices(), Some(&[0][..]));
    let other = compile_with(
        &get_kernel_bundle_on(std::slice::from_ref(&d), &[id("conv3x3")])
            .unwrap()
            .with_mode(SpecMode::Native),
        std::slice::from_ref(&d),
        &options,
    )
    .unwrap();
    let exe: KernelBundle<Executable> = link_with(&[object, other], &[d], &options).unwrap();
    assert_eq!(exe.kernel_ids(), [id("matmul"), id("conv3x3")]);
    assert_eq!(exe.get_specialization_constant(&BLOCK).unwrap(), 8);
    assert!(exe.built_image(&id("matmul")).is_ok());
    assert!(exe.built_image(&id("conv3x3")).is_ok());
    assert_eq!(exe.devices(), Some(&[0][..]));
}

/// SYCL-CTS `kernel_features_reqd_work_group_size.cpp`, intel
/// `large-reqd-work-group-size.cpp`: a required work-group size is kept at
/// its 64 bits from the PTX to the property set and back — never cut to
/// 32 (4 294 967 296 read as 0 passed the device check) — and one that no
/// device has is `kernel_not_supported` when checked, built or asked for.
#[test]
fn large_required_work_group_sizes_are_not_supported_never_narrowed() {
    let d = h100(0);
    for (dims, runs) in [
        ([64u64, 1, 1], true),
        ([1024, 1, 1], true),
        ([1025, 1, 1], false),
        ([4_294_967_296, 1, 1], false),
        ([4_294_967_297, 1, 1], false),
        ([1, 4_294_967_296, 1], false),
        ([65_536, 65_536, 65_536], false),
        ([4_294_967_296, 4_294_967_296, 4_294_967_296], false),
        ([u64::MAX, u64::MAX, 2], false),
    ] {
        let ptx = format!(
            ".version 7.0\n.target sm_70\n.address_size 64\n\
             .visible .entry wide(.param .u64 out) .reqntid {}, {}, {}\n{{\n ret;\n}}\n",
            dims[0], dims[1], dims[2]
        );
        let img = ptxspec_core::postlink::post_link(
            vec![("wide.ptx".into(), ptx)],
            &ptxspec_core::postlink::Options::default(),
        )
        .unwrap()
        .remove(0);
        assert_eq!(img.requirements.reqd_work_group_size, Some(dims.to_vec()));
        // Read back from the property set DPC++'s format writes.
        let image = ptxspec::image::Image::new(img.stem, img.ptx, &img.props.to_text()).unwrap();
        assert_eq!(
            image.requirements().reqd_work_group_size,
            Some(dims.to_vec()),
            "{dims:?} read back"
        );
        let checked = d.check(image.requirements());
        assert_eq!(checked.is_ok(), runs, "{dims:?}: {checked:?}");
        let bundle = KernelBundle::from_images(vec![image]).with_mode(SpecMode::Native);
        assert_eq!(bundle.has_kernel_on(&id("wide"), &d), runs, "{dims:?}");
        let built = build_with(&bundle, std::slice::from_ref(&d), &BuildOptions::default());
        match built {
            Ok(_) => assert!(runs, "{dims:?}: built"),
            Err(e) => {
                assert!(!runs, "{dims:?}: {e}");
                assert_eq!(e.errc(), Errc::KernelNotSupported, "{dims:?}: {e}");
                assert!(
                    e.to_string().contains(&dims[0].to_string()),
                    "the size as given: {e}"
                );
            }
        }
    }
}
