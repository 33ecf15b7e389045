//! Bundles without a GPU: states, joins, errors, values and the blobs and
//! PTX that executable images would load.

use super::*;
use crate::image::Delivery;
use ptxspec_core::postlink::{self, BufferPlacement, Mode, Options, Split};

/// The PTX a built image loads (native and emulated builds).
fn ptx(b: &BuiltImage) -> &Arc<String> {
    match &b.code() {
        Code::Ptx(p) => p,
        Code::Lto(_) => panic!("an LTO build"),
    }
}

/// Images post-linked from the committed example PTX.
pub(crate) fn images() -> Vec<Arc<ImageData>> {
    post_linked()
        .into_iter()
        .map(|i| Arc::new(ImageData::new(i.stem, i.ptx, &i.props.to_text()).unwrap()))
        .collect()
}

/// The post-link's images of the committed example PTX (scalars, matmul).
fn post_linked() -> Vec<postlink::PostLinkedImage> {
    let inputs = vec![
        (
            "scalars.ptx".to_string(),
            include_str!("../../kernels/ptx/scalars.ptx").to_string(),
        ),
        (
            "matmul.ptx".to_string(),
            include_str!("../../kernels/ptx/matmul.ptx").to_string(),
        ),
    ];
    let opts = Options {
        mode: Mode::Emulated,
        split: Split::PerSource,
        ..Default::default()
    };
    postlink::post_link(inputs, &opts).unwrap()
}

const BLOCK: SpecId<i32> = SpecId::new("block_size_id");
const CHAR: SpecId<i8> = SpecId::new("char_id");
const DOUBLE: SpecId<f64> = SpecId::new("double_id");

#[test]
fn states_and_kernels() {
    let input = KernelBundle::from_image_data(images());
    assert_eq!(
        input.kernel_ids(),
        [
            KernelId::new("scalars"),
            KernelId::new("matmul"),
            KernelId::new("matmul_rolled")
        ]
    );
    assert!(input.has_kernel(&KernelId::new("matmul")));
    assert!(!input.has_kernel(&KernelId::new("conv3x3")));
    assert!(input.contains_specialization_constants());
    assert!(
        input.native_specialization_constant(),
        "native is the default"
    );
    let exe = build(&input).unwrap();
    let k = exe.get_kernel(&KernelId::new("matmul")).unwrap();
    assert_eq!(k.signature().buffer_param(), Some(4));
    assert!(matches!(
        exe.get_kernel(&KernelId::new("nope")),
        Err(Error::KernelNotFound { .. })
    ));
    fn send_sync<T: Send + Sync>() {}
    send_sync::<KernelBundle<Input>>();
    send_sync::<KernelBundle<Executable>>();
    send_sync::<crate::Queue>();
    send_sync::<crate::runtime::DeviceBuffer<f32>>();
}

#[test]
fn values_defaults_and_errors() {
    let mut input = KernelBundle::from_image_data(images());
    // Unset: the default from the blob.
    assert_eq!(input.get_specialization_constant(&BLOCK).unwrap(), 16);
    assert_eq!(input.get_specialization_constant(&DOUBLE).unwrap(), 2.5);
    input.set_specialization_constant(&BLOCK, 32).unwrap();
    input.set_specialization_constant(&CHAR, -7).unwrap();
    assert_eq!(input.get_specialization_constant(&BLOCK).unwrap(), 32);
    // Wrong size and unknown ID are spec_const_error.
    let wrong: SpecId<i64> = SpecId::new("block_size_id");
    let e = input.set_specialization_constant(&wrong, 1).unwrap_err();
    assert!(
        matches!(&e, Error::SpecConst { id, .. } if id == "block_size_id")
            && e.errc() == crate::Errc::Invalid,
        "{e}"
    );
    let unknown: SpecId<i32> = SpecId::new("nope");
    assert!(matches!(
        input.get_specialization_constant(&unknown),
        Err(Error::SpecConst { id, .. }) if id == "nope"
    ));
    assert!(!input.has_specialization_constant(&unknown));
    // Values survive compile, link and join; get works on every state.
    let obj = compile(&input).unwrap();
    assert_eq!(obj.get_specialization_constant(&BLOCK).unwrap(), 32);
    let exe = link(&[obj]).unwrap();
    assert_eq!(exe.get_specialization_constant(&CHAR).unwrap(), -7);
}

#[test]
fn emulated_blob_is_defaults_patched_with_values() {
    let mut input = KernelBundle::from_image_data(images()).with_mode(SpecMode::Emulated);
    input.set_specialization_constant(&DOUBLE, -1.5).unwrap();
    let exe = build(&input).unwrap();
    let built = exe.built_image(&KernelId::new("scalars")).unwrap();
    // scalars' layout: char@0, double@8, bool@16, short@18, u64@24, padded@32.
    let mut want = built.image_data().default_blob().to_vec();
    want[8..16].copy_from_slice(&(-1.5f64).to_le_bytes());
    assert_eq!(built.blob(), want.as_slice());
    assert_eq!(built.blob()[0], (-5i8) as u8, "the char keeps its default");
    // Emulated images load their PTX as it is; the post-link put the
    // buffer in the parameter space (auto), so the values travel with the
    // launch.
    assert!(Arc::ptr_eq(ptx(built), built.image_data().ptx()));
    assert_eq!(built.delivery(), Delivery::ParamSpace);
    assert!(!exe.native_specialization_constant());
}

/// A build of the values of a built image that lives shares it (its code
/// and linked cubins): a repeat build is a lookup. Other values, another
/// mode, or a build after the first one was dropped make their own.
#[test]
fn repeat_builds_share_the_built_image_while_it_lives() {
    let scalars = KernelId::new("scalars");
    let base = KernelBundle::from_image_data(images()).with_mode(SpecMode::Emulated);
    let with = |c: i8, mode: SpecMode| {
        let mut input = base.clone().with_mode(mode);
        input.set_specialization_constant(&CHAR, c).unwrap();
        build(&input).unwrap()
    };
    let first = with(41, SpecMode::Emulated);
    let again = with(41, SpecMode::Emulated);
    let image = |b: &KernelBundle<Executable>| Arc::clone(b.built_image(&scalars).unwrap());
    assert!(Arc::ptr_eq(&image(&first), &image(&again)));
    assert!(!Arc::ptr_eq(
        &image(&first),
        &image(&with(42, SpecMode::Emulated))
    ));
    assert!(!Arc::ptr_eq(
        &image(&first),
        &image(&with(41, SpecMode::Native))
    ));
    // Once no bundle holds it, a build makes it again, with the values.
    drop((first, again));
    let later = with(41, SpecMode::Emulated);
    assert_eq!(later.built_image(&scalars).unwrap().blob()[0], 41);
}

#[test]
fn native_ptx_has_the_values_and_is_cached() {
    let mut input = KernelBundle::from_image_data(images());
    input.set_specialization_constant(&BLOCK, 32).unwrap();
    let a = build(&input).unwrap();
    let b = build(&input).unwrap();
    let ka = a.built_image(&KernelId::new("matmul")).unwrap();
    let kb = b.built_image(&KernelId::new("matmul")).unwrap();
    assert!(ptx(ka).contains("mov.b32 %r"), "{}", ptx(ka));
    assert!(
        ptx(ka).contains(", 0x00000020;"),
        "block size 32 as an immediate"
    );
    assert!(!ptx(ka).contains("%ptxspec_buf"));
    assert!(
        Arc::ptr_eq(ptx(ka), ptx(kb)),
        "a repeat build reuses the specialized PTX"
    );
}

#[test]
fn images_sharing_a_name_are_specialized_from_their_own_code() {
    let opts = Options::default();
    let src = include_str!("../../kernels/ptx/matmul.ptx");
    let img = postlink::post_link(vec![("matmul.ptx".into(), src.to_string())], &opts)
        .unwrap()
        .remove(0);
    let props = img.props.to_text();
    let marked = format!("{}// version two\n", img.ptx);
    let one = Arc::new(ImageData::new("matmul", img.ptx.clone(), &props).unwrap());
    let two = Arc::new(ImageData::new("matmul", marked, &props).unwrap());
    let built = |image: &Arc<ImageData>| {
        let mut input = KernelBundle::from_image_data(vec![Arc::clone(image)]);
        input.set_specialization_constant(&BLOCK, 16).unwrap();
        let exe = build(&input.with_mode(SpecMode::Native)).unwrap();
        Arc::clone(ptx(exe.built_image(&KernelId::new("matmul")).unwrap()))
    };
    assert!(!built(&one).contains("// version two"));
    assert!(
        built(&two).contains("// version two"),
        "the second image's own PTX, not the first's from the cache"
    );
}

#[test]
fn joins_and_links() {
    let imgs = images();
    let a = KernelBundle::from_image_data(vec![Arc::clone(&imgs[0])]);
    let b = KernelBundle::from_image_data(vec![Arc::clone(&imgs[1])]);
    let j = join(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(j.kernel_ids().len(), 3); // scalars; matmul and matmul_rolled
    // SYCL 2020: a join of none is an empty bundle (a link of none has
    // nothing to link).
    assert!(join::<Input>(&[]).unwrap().is_empty());
    assert!(matches!(
        link(&[]),
        Err(Error::InvalidObject {
            misuse: crate::Misuse::EmptyList,
            ..
        })
    ));
    // Two values for one constant cannot be linked together.
    let mut x = b.clone();
    x.set_specialization_constant(&BLOCK, 8).unwrap();
    let mut y = b;
    y.set_specialization_constant(&BLOCK, 16).unwrap();
    let e = link(&[compile(&x).unwrap(), compile(&y).unwrap()]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidObject {
                misuse: crate::Misuse::Conflict,
                ..
            }
        ),
        "{e}"
    );
    // Executable bundles join with their built images.
    let je = join(&[build(&a).unwrap(), build(&x).unwrap()]).unwrap();
    assert_eq!(je.get_specialization_constant(&BLOCK).unwrap(), 8);
    assert!(je.get_kernel(&KernelId::new("scalars")).is_ok());
}

#[test]
fn unknown_kernels_are_not_found() {
    // This unit-test binary registers no images.
    let e = get_kernel_bundle_for(&[KernelId::new("conv3x3")]).unwrap_err();
    // The kernel is a field a caller can match on, not only words.
    assert!(
        matches!(&e, Error::KernelNotFound { kernel, .. } if kernel == "conv3x3"),
        "{e}"
    );
    assert!(e.to_string().starts_with("invalid: "), "{e}");
}

#[test]
fn bad_images_are_named() {
    let e = ImageData::new("x", "", "[SYCL/specialization constants]\nid=1|4\n").unwrap_err();
    assert!(e.to_string().contains("device image x"), "{e}");
}

fn image_with(opts: &Options, name: &str, ptx_text: &str) -> Arc<ImageData> {
    let img = postlink::post_link(vec![(format!("{name}.ptx"), ptx_text.to_string())], opts)
        .unwrap()
        .remove(0);
    Arc::new(ImageData::new(img.stem, img.ptx, &img.props.to_text()).unwrap())
}

#[test]
fn aot_images_refuse_values() {
    let aot = Options {
        mode: Mode::Aot,
        ..Default::default()
    };
    let img = image_with(&aot, "matmul", include_str!("../../kernels/ptx/matmul.ptx"));
    assert!(img.info().spec_consts_replaced_with_default);
    let mut input = KernelBundle::from_image_data(vec![img]);
    // Reading the (baked-in) default is fine; setting is an error that says why.
    assert_eq!(input.get_specialization_constant(&BLOCK).unwrap(), 16);
    let e = input.set_specialization_constant(&BLOCK, 8).unwrap_err();
    assert!(
        matches!(&e, Error::SpecConst { id, .. } if id == "block_size_id"),
        "{e}"
    );
    assert!(e.to_string().contains("compiled ahead of time"), "{e}");
    // Built in any mode, the code is the AOT PTX and nothing is passed.
    for mode in [SpecMode::Native, SpecMode::Emulated, SpecMode::Lto] {
        let exe = build(&input.clone().with_mode(mode)).unwrap();
        let b = exe.built_image(&KernelId::new("matmul")).unwrap();
        assert_eq!(b.delivery(), Delivery::InCode, "{mode:?}");
        assert!(Arc::ptr_eq(ptx(b), b.image_data().ptx()));
    }
}

#[test]
fn delivery_follows_mode_and_placement() {
    let src = include_str!("../../kernels/ptx/matmul.ptx");
    for (buffer, emulated) in [
        (BufferPlacement::Global, Delivery::GlobalBuffer),
        (BufferPlacement::Param, Delivery::ParamSpace),
    ] {
        let opts = Options {
            buffer,
            ..Default::default()
        };
        let input = KernelBundle::from_image_data(vec![image_with(&opts, "matmul", src)]);
        let of = |mode| {
            let exe = build(&input.clone().with_mode(mode)).unwrap();
            exe.built_image(&KernelId::new("matmul"))
                .unwrap()
                .delivery()
        };
        assert_eq!(of(SpecMode::Emulated), emulated);
        assert_eq!(of(SpecMode::Native), Delivery::InCode);
        // No LTO-IR: an LTO build says so.
        let e = build(&input.clone().with_mode(SpecMode::Lto)).unwrap_err();
        assert!(e.to_string().contains("has no LTO-IR"), "{e}");
    }
}

#[test]
fn join_keeps_one_image_built_two_ways_and_device_images_show_them() {
    let imgs = images();
    let input = KernelBundle::from_image_data(vec![Arc::clone(&imgs[1])]);
    let native = build(&input).unwrap();
    let emulated = build(&input.clone().with_mode(SpecMode::Emulated)).unwrap();
    let both = join(&[native, emulated]).unwrap();
    let id = KernelId::new("matmul");
    let dis = both.device_images();
    assert_eq!(dis.len(), 2);
    assert!(dis.iter().all(|d| d.has_kernel(&id)));
    assert_eq!(
        dis.iter()
            .map(|d| d.native_specialization_constant())
            .collect::<Vec<_>>(),
        [true, false]
    );
    assert_eq!(both.built_images(&id).unwrap().count(), 2);
    assert_eq!(
        dis[0].kernel_ids(),
        [KernelId::new("matmul"), KernelId::new("matmul_rolled")]
    );
}

#[test]
fn link_names_functions_no_image_defines() {
    // Hand-written images: one calls helper(), which only the other defines.
    let caller = ".version 8.0\n.target sm_70\n.address_size 64\n\
        .extern .func helper();\n\
        .visible .entry k(.param .u64 p)\n{\n call helper;\n ret;\n}\n";
    let callee = ".version 8.0\n.target sm_70\n.address_size 64\n\
        .visible .func helper()\n{\n ret;\n}\n";
    let props = "[SYCL/device requirements]\naspects=2|AAAAAAAAAAA\n";
    let a = Arc::new(ImageData::new("caller", caller, props).unwrap());
    let b = Arc::new(ImageData::new("callee", callee, props).unwrap());
    let e = link(&[compile(&KernelBundle::from_image_data(vec![Arc::clone(&a)])).unwrap()])
        .unwrap_err();
    assert_eq!(e.errc(), crate::Errc::Build);
    assert_eq!(
        e.to_string(),
        "build: link_program_error: undefined function helper (called by image caller)"
    );
    // Linked with the image that defines it: fine.
    link(&[
        compile(&KernelBundle::from_image_data(vec![a])).unwrap(),
        compile(&KernelBundle::from_image_data(vec![b])).unwrap(),
    ])
    .unwrap();
}

fn profile(ordinal: usize, aspects: Vec<ptxspec_core::features::Aspect>) -> Device {
    let mut d = Device::profile(ordinal, (9, 0));
    d.name = format!("profile {ordinal}");
    d.aspects = aspects;
    d
}

#[test]
fn bundles_built_for_devices_remember_them() {
    let input = KernelBundle::from_image_data(images());
    let d1 = profile(1, Device::aspects_of((9, 0)));
    let exe = build_with(&input, std::slice::from_ref(&d1), &BuildOptions::default()).unwrap();
    assert_eq!(exe.devices(), Some(&[1][..]));
    assert!(exe.runs_on(1) && !exe.runs_on(0));
    assert!(
        build(&input).unwrap().runs_on(7),
        "unbound bundles run anywhere"
    );
    // An image with fp64 arithmetic on a device without fp64.
    let fp64 = ".version 8.0\n.target sm_70\n.address_size 64\n\
        .visible .entry d(.param .u64 p)\n{\n .reg .f64 %fd<3>;\n add.f64 %fd1, %fd2, %fd2;\n ret;\n}\n";
    let input = KernelBundle::from_image_data(vec![image_with(&Options::default(), "dbl", fp64)]);
    let no_fp64 = profile(2, vec![ptxspec_core::features::Aspect::GPU]);
    let e = build_with(&input, &[no_fp64], &BuildOptions::default()).unwrap_err();
    assert_eq!(e.errc(), crate::Errc::KernelNotSupported, "{e}");
    assert!(e.to_string().contains("image dbl on profile 2"), "{e}");
}

#[test]
fn auto_says_why_it_did_not_link_by_lto() {
    // These images carry no LTO-IR: Auto builds them natively and says so,
    // in the built image and once in the build log.
    let input = KernelBundle::from_image_data(images()).with_mode(SpecMode::Auto);
    let exe = build(&input).unwrap();
    let matmul = exe.built_image(&KernelId::new("matmul")).unwrap();
    assert_eq!(matmul.mode(), SpecMode::Native);
    let why = matmul.fallback().expect("a reason");
    assert!(
        why.starts_with("image matmul: SpecMode::Auto built it natively")
            && why.contains("carries no LTO-IR"),
        "{why}"
    );
    let log = exe.build_log();
    assert_eq!(log.matches(why).count(), 1, "{log}");
    // A mode the caller chose needs no reason.
    let native = build(&input.clone().with_mode(SpecMode::Native)).unwrap();
    let matmul = native.built_image(&KernelId::new("matmul")).unwrap();
    assert_eq!(matmul.fallback(), None);
}

crate::spec_struct! {
    /// `struct Padded { int a; char b; int c; char d; }` as the scalars kernel declares it.
    struct PaddedSigned { a: i32, b: i8, _p0: crate::Pad<3>, c: i32, d: i8, _p1: crate::Pad<3> }
}
crate::spec_struct! {
    /// The same bytes with unsigned members: PTX does not record a member's signedness.
    struct PaddedUnsigned { a: u32, b: u8, _p0: crate::Pad<3>, c: u32, d: u8, _p1: crate::Pad<3> }
}
crate::spec_struct! {
    /// The same size, a float where the image reads an int.
    struct PaddedFloat { a: f32, b: i8, _p0: crate::Pad<3>, c: i32, d: i8, _p1: crate::Pad<3> }
}

#[test]
fn a_value_type_is_checked_against_the_types_the_image_records() {
    let mut input = KernelBundle::from_image_data(images());
    // Sizes agree (8 bytes); the kernel reads a double.
    let e = input
        .set_specialization_constant(&SpecId::<i64>::new("double_id"), 1)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("holds double at byte 0, but i64 has int64_t there"),
        "{e}"
    );
    assert!(
        input
            .get_specialization_constant(&SpecId::<u64>::new("double_id"))
            .is_err()
    );
    input
        .set_specialization_constant(&SpecId::<f64>::new("double_id"), 1.5)
        .unwrap();
    // A struct's members: either signedness of an int, never a float.
    const SIGNED: SpecId<PaddedSigned> = SpecId::new("padded_id");
    const UNSIGNED: SpecId<PaddedUnsigned> = SpecId::new("padded_id");
    const FLOAT: SpecId<PaddedFloat> = SpecId::new("padded_id");
    input.get_specialization_constant(&SIGNED).unwrap();
    input.get_specialization_constant(&UNSIGNED).unwrap();
    let e = input.get_specialization_constant(&FLOAT).unwrap_err();
    assert!(
        e.to_string()
            .contains("holds int32_t or uint32_t at byte 0, but"),
        "{e}"
    );
    // Sixteen bytes where the kernel reads ints: a uint8_t at byte 0 is not
    // the int32_t the image reads there.
    let e = input
        .set_specialization_constant(&SpecId::<[u8; 16]>::new("padded_id"), [0; 16])
        .unwrap_err();
    assert!(e.to_string().contains("has uint8_t there"), "{e}");
    // A scalar's signedness is recorded (the getter's template argument).
    let e = input
        .set_specialization_constant(&SpecId::<u8>::new("char_id"), 1)
        .unwrap_err();
    assert!(e.to_string().contains("holds int8_t at byte 0"), "{e}");
}

/// Two different images of one ID (two crates embedding kernels of one
/// file stem) are refused when bundles are joined or linked, not one lost
/// silently (issue 32, item 12); the same image twice is one.
#[test]
fn different_images_of_one_id_are_not_merged() {
    let all = post_linked();
    let renamed = |img: &postlink::PostLinkedImage, id: &str| {
        Arc::new(ImageData::new(id, img.ptx.as_str(), &img.props.to_text()).unwrap())
    };
    let a = renamed(&all[0], "x");
    let b = renamed(&all[1], "x");
    let one = KernelBundle::from_image_data(vec![Arc::clone(&a)]);
    let other = KernelBundle::from_image_data(vec![b]);
    let e = join(&[one.clone(), other]).unwrap_err();
    assert!(
        e.to_string()
            .contains("two different device images are named x"),
        "{e}"
    );
    // The same image again, as the same Arc or read again: one image.
    let again = KernelBundle::from_image_data(vec![renamed(&all[0], "x")]);
    let joined = join(&[one.clone(), again, one]).unwrap();
    assert_eq!(joined.image_data().len(), 1);
}

/// Only a declaration of an external function makes a build parse the PTX
/// for its links: `.extern .shared` (dynamic shared memory) does not, a
/// declaration with any white space does, and the post-linked example
/// images, whose getters became loads, declare none.
#[test]
fn extern_functions_are_found_without_a_parse() {
    let declares = |ptx: &str| {
        ImageData::new("x", ptx, "[SYCL/misc properties]\n")
            .unwrap()
            .declares_extern_function()
    };
    assert!(!declares(".extern .shared .align 4 .b8 tiles[];"));
    assert!(declares(".extern .func  (.param .b32 r) f(.param .b64 p);"));
    assert!(declares(".extern\n\t.func g();"));
    assert!(!declares(".visible .func h() { ret; }"));
    assert!(
        declares(include_str!("../../kernels/ptx/matmul.ptx")),
        "the compiler's PTX calls the getter"
    );
    for img in images() {
        assert!(
            !img.declares_extern_function(),
            "post-linked image {} still declares an external function",
            img.id()
        );
    }
}

/// Every `spec_const_error` names its constant in `id`, whichever check
/// refused it: an unknown ID (set in a bundle rejecting unknown constants,
/// get), a value of another size (bytes,
/// a typed value), a value of another type of the same size, a constant of
/// an image compiled ahead of time.
#[test]
fn every_spec_const_error_names_its_constant() {
    let input = KernelBundle::from_image_data(images());
    let set = |id: &str, bytes: &[u8]| {
        let mut b = input.clone().rejecting_unknown_constants();
        b.set_specialization_constant_bytes(id, bytes)
    };
    let mut cases: Vec<(&str, Result<(), Error>)> = vec![
        ("nope", set("nope", &[0; 4])),
        ("block_size_id", set("block_size_id", &[0; 3])),
        ("char_id", set("char_id", &[0; 2])),
        (
            "block_size_id",
            input
                .clone()
                .set_specialization_constant(&SpecId::<i64>::new("block_size_id"), 1),
        ),
        (
            "block_size_id",
            input
                .clone()
                .set_specialization_constant(&SpecId::<f32>::new("block_size_id"), 1.0),
        ),
        (
            "double_id",
            input
                .get_specialization_constant(&SpecId::<u64>::new("double_id"))
                .map(drop),
        ),
        (
            "nope",
            input
                .get_specialization_constant(&SpecId::<i32>::new("nope"))
                .map(drop),
        ),
    ];
    let aot = Options {
        mode: Mode::Aot,
        ..Default::default()
    };
    let img = image_with(&aot, "matmul", include_str!("../../kernels/ptx/matmul.ptx"));
    let mut b = KernelBundle::from_image_data(vec![img]);
    cases.push(("block_size_id", b.set_specialization_constant(&BLOCK, 8)));
    for (want, got) in cases {
        match got {
            Err(Error::SpecConst { id, detail }) => {
                assert_eq!(id, want, "{detail}");
                assert!(detail.contains(want), "the message names it too: {detail}");
            }
            other => panic!("{want}: {other:?}"),
        }
    }
}
