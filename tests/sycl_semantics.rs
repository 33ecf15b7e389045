//! SYCL 2020's host-side semantics of kernel bundles and specialization
//! constants, as intel/llvm's end-to-end tests (`sycl/test-e2e/SpecConstants/
//! 2020/host_apis.cpp`) and the Khronos conformance tests
//! (`tests/kernel_bundle`, `tests/specialization_constants`) check them,
//! ported to this crate's API. No GPU needed: the example kernels are
//! registered, bundles are built natively or emulated on the CPU.

use ptxspec::{
    SpecId, SpecMode, build, get_kernel_bundle_for, get_kernel_bundle_selected,
    get_kernel_bundle_selected_on, join,
};

ptxspec_kernels::register_example_kernels!();

const BLOCK: SpecId<i32> = SpecId::new("block_size_id");
/// A constant that no example kernel uses, with its declared default.
const UNUSED: SpecId<i32> = SpecId::with_default("declared_but_unused_id", 42);
/// One without a default on the host side.
const UNUSED_NO_DEFAULT: SpecId<i16> = SpecId::new("another_unused_id");

/// intel host_apis.cpp: "Test that unused spec constants are saved" — in
/// a bundle as `get_kernel_bundle` gives it, with nothing asked: SYCL's
/// behaviour is the default (a program asks for the strict check with
/// `rejecting_unknown_constants`: `names_not_found_list_the_near_ones`).
#[test]
fn values_of_constants_no_image_uses_are_kept() {
    let mut input = get_kernel_bundle_for(&[ptxspec::KernelId::new("matmul")]).unwrap();
    assert!(input.contains_specialization_constants());
    assert!(input.has_specialization_constant(&BLOCK));
    // has_specialization_constant stays "some image uses it".
    assert!(!input.has_specialization_constant(&UNUSED));
    // Not set: the default the SpecId carries.
    assert_eq!(input.get_specialization_constant(&UNUSED).unwrap(), 42);
    // Set: read back, though no kernel sees it.
    input.set_specialization_constant(&UNUSED, 1).unwrap();
    assert_eq!(input.get_specialization_constant(&UNUSED).unwrap(), 1);
    input.set_specialization_constant(&BLOCK, 8).unwrap();
    // Neither set nor a default: an error naming the constant.
    let e = input
        .get_specialization_constant(&UNUSED_NO_DEFAULT)
        .unwrap_err();
    assert!(e.to_string().contains("another_unused_id"), "{e}");
    // The values live on in the executable bundle.
    let exe = build(&input.clone().with_mode(SpecMode::Native)).unwrap();
    assert_eq!(exe.get_specialization_constant(&UNUSED).unwrap(), 1);
    assert_eq!(exe.get_specialization_constant(&BLOCK).unwrap(), 8);
    // And through a join with another input bundle (host_apis.cpp's
    // KernelBundle3), which has values of its own.
    let mut other = get_kernel_bundle_for(&[ptxspec::KernelId::new("conv3x3")]).unwrap();
    other
        .set_specialization_constant(&UNUSED_NO_DEFAULT, -5)
        .unwrap();
    let joined = join(&[other, input]).unwrap();
    assert_eq!(joined.get_specialization_constant(&UNUSED).unwrap(), 1);
    assert_eq!(joined.get_specialization_constant(&BLOCK).unwrap(), 8);
    assert_eq!(
        joined
            .get_specialization_constant(&UNUSED_NO_DEFAULT)
            .unwrap(),
        -5
    );
}

/// A C++ kernel asked for by its own name (its image has it mangled) is
/// found; a name that is not found comes with the names near it: a
/// constant's name with a typo — set (kept and said in the build log, as
/// SYCL keeps it; an error in a bundle rejecting unknown constants) or set
/// by bytes (the same), a kernel's.
#[test]
fn names_not_found_list_the_near_ones() {
    let by_cpp_name = get_kernel_bundle_for(&[ptxspec::KernelId::new("reads_a_constant")]).unwrap();
    assert_eq!(by_cpp_name.kernel_ids(), [ptxspec::KernelId::new(READS)]);
    // By the mangled name it is found too.
    get_kernel_bundle_for(&[ptxspec::KernelId::new(READS)]).unwrap();
    let typo: SpecId<i32> = SpecId::new("block_sise_id");
    let mut strict = get_kernel_bundle_for(&[ptxspec::KernelId::new("matmul")])
        .unwrap()
        .rejecting_unknown_constants();
    let e = strict.set_specialization_constant(&typo, 8).unwrap_err();
    assert_eq!(e.errc(), ptxspec::Errc::Invalid);
    assert!(
        e.to_string().contains("'block_sise_id'")
            && e.to_string().contains("near: block_size_id")
            && e.to_string().contains("rejecting_unknown_constants"),
        "{e}"
    );
    assert!(!strict.has_specialization_constant(&typo));
    let e = strict
        .set_specialization_constant_bytes("Block_Size_Id", &8i32.to_le_bytes())
        .unwrap_err();
    assert!(e.to_string().contains("near: block_size_id"), "{e}");
    // A join rejects where one of the bundles it joins does; asked back to
    // SYCL's behaviour, it keeps.
    let mut joined = join(&[
        strict.clone(),
        get_kernel_bundle_for(&[ptxspec::KernelId::new("conv3x3")]).unwrap(),
    ])
    .unwrap();
    assert!(joined.set_specialization_constant(&typo, 8).is_err());
    joined = joined.keeping_unknown_constants();
    joined.set_specialization_constant(&typo, 8).unwrap();
    assert_eq!(joined.get_specialization_constant(&typo).unwrap(), 8);
    let mut input = get_kernel_bundle_for(&[ptxspec::KernelId::new("matmul")]).unwrap();
    input.set_specialization_constant(&typo, 8).unwrap();
    // Set again and again: said once.
    for v in 0..100 {
        input.set_specialization_constant(&typo, v).unwrap();
    }
    // By bytes too, under another name: kept and read back.
    input
        .set_specialization_constant_bytes("Block_Size_Id", &9i32.to_le_bytes())
        .unwrap();
    let by_bytes: SpecId<i32> = SpecId::new("Block_Size_Id");
    assert_eq!(input.get_specialization_constant(&by_bytes).unwrap(), 9);
    assert_eq!(input.get_specialization_constant(&typo).unwrap(), 99);
    let exe = build(&input).unwrap();
    let log = exe.build_log();
    assert!(
        log.contains("'block_sise_id' is set, but no image of this bundle has it")
            && log.contains("near: block_size_id"),
        "{log}"
    );
    assert_eq!(log.matches("'block_sise_id' is set").count(), 1, "{log}");
    let e = exe.built_image_named("matmull").map(|_| ()).unwrap_err();
    assert!(e.to_string().contains("near: matmul"), "{e}");
}

/// SYCL 2020 `get_kernel_bundle(context, selector)`: the images the
/// selector keeps, none included; `kernel_bundle::empty()`. With an empty
/// list of devices (`get_kernel_bundle(context, devices, selector)`):
/// `errc::invalid` (SYCL-CTS `get_kernel_bundle_zero_device.cpp`), and so
/// `has_kernel_bundle` (`has_kernel_bundle_zero_device.h`) and `build`
/// with devices (`sycl_build_zero_device.cpp`).
#[test]
fn a_selector_that_keeps_nothing_gives_an_empty_bundle() {
    for e in [
        get_kernel_bundle_selected_on(&[], |_| true).err(),
        ptxspec::has_kernel_bundle(&[]).err(),
        ptxspec::build_with(
            &get_kernel_bundle_selected(|_| true).unwrap(),
            &[],
            &Default::default(),
        )
        .err(),
    ] {
        let e = e.expect("an empty device list refused");
        assert_eq!(e.errc(), ptxspec::Errc::Invalid, "{e}");
        assert!(e.to_string().contains("empty list of devices"), "{e}");
    }
    let none = get_kernel_bundle_selected(|_| false).unwrap();
    assert!(none.is_empty());
    assert!(none.device_images().is_empty());
    assert!(none.kernel_ids().is_empty());
    let all = get_kernel_bundle_selected(|_| true).unwrap();
    assert!(!all.is_empty());
    // An empty bundle builds to an empty executable bundle.
    assert!(build(&none).unwrap().is_empty());
}

/// SYCL 2020 `kernel_bundle::native_specialization_constant()`: true only
/// if every device image uses native specialization constants, false for a
/// bundle with none (both suites check the empty bundle).
#[test]
fn native_specialization_constant_needs_every_image_native() {
    let empty = get_kernel_bundle_selected(|_| false).unwrap();
    assert!(!empty.native_specialization_constant());
    assert!(!build(&empty).unwrap().native_specialization_constant());
    let input = get_kernel_bundle_for(&[ptxspec::KernelId::new("matmul")]).unwrap();
    let native = build(&input.clone().with_mode(SpecMode::Native)).unwrap();
    let emulated = build(&input.clone().with_mode(SpecMode::Emulated)).unwrap();
    assert!(native.native_specialization_constant());
    assert!(!emulated.native_specialization_constant());
    // A join holds both images each as built: not native, in either order.
    assert!(
        !join(&[native.clone(), emulated.clone()])
            .unwrap()
            .native_specialization_constant()
    );
    assert!(
        !join(&[emulated, native.clone()])
            .unwrap()
            .native_specialization_constant()
    );
    assert!(
        join(&[native.clone(), native])
            .unwrap()
            .native_specialization_constant()
    );
    // Input bundles: as the mode they will be built in.
    assert!(
        input
            .clone()
            .with_mode(SpecMode::Native)
            .native_specialization_constant()
    );
    assert!(
        !input
            .with_mode(SpecMode::Emulated)
            .native_specialization_constant()
    );
}

const WITHOUT: &str = "_Z25handler_without_constantsPiN7ptxspec14kernel_handlerE";
const READS: &str = "_Z16reads_a_constantPiN7ptxspec14kernel_handlerE";

/// intel aot_w_kernel_handler_wo_spec_consts.cpp: a kernel that takes a
/// kernel_handler and reads no constant still has it passed by the
/// runtime (its signature marks it), beside a kernel that reads one.
#[test]
fn a_kernel_handler_without_constants_is_marked() {
    // The handler's index and whether the kernel reads it.
    let unread = Some((1, false));
    let handler = |h: Option<ptxspec::image::HandlerParam>| h.map(|h| (h.index, h.reads_constants));
    let input = get_kernel_bundle_for(&[ptxspec::KernelId::new(WITHOUT)]).unwrap();
    let images = input.images();
    let image = images
        .iter()
        .find(|i| i.kernels().iter().any(|k| k.name == WITHOUT))
        .unwrap();
    let sig = image.kernels().iter().find(|k| k.name == WITHOUT).unwrap();
    assert_eq!(handler(sig.handler), unread);
    assert!(!sig.reads_constants());
    let reads = image.kernels().iter().find(|k| k.name == READS).unwrap();
    assert!(reads.reads_constants());
    // The same in an image of its own, and ahead of time.
    for mode in [
        ptxspec_core::postlink::Mode::Emulated,
        ptxspec_core::postlink::Mode::Aot,
    ] {
        let opts = ptxspec_core::postlink::Options {
            mode,
            split: ptxspec_core::postlink::Split::PerKernel,
            ..Default::default()
        };
        let images = ptxspec_core::postlink::post_link(
            vec![(
                "handler_only.ptx".into(),
                include_str!("../kernels/ptx/handler_only.ptx").into(),
            )],
            &opts,
        )
        .unwrap();
        let own = images
            .iter()
            .find(|i| i.props.to_text().contains(WITHOUT))
            .unwrap();
        let image =
            ptxspec::image::Image::new(own.stem.clone(), own.ptx.clone(), &own.props.to_text())
                .unwrap();
        assert_eq!(image.specialization_constants().count(), 0, "{mode:?}");
        assert_eq!(handler(image.kernels()[0].handler), unread, "{mode:?}");
    }
}

/// SYCL's vec and marray as value types (intel marray_vec.cpp): the
/// registered image's defaults read back, values set and checked against
/// the types the image records, and built natively.
#[test]
fn vec_and_marray_values_on_the_host() {
    use ptxspec::{Marray, SyclVec};
    const F3: SpecId<SyclVec<f32, 3>> = SpecId::new("vec_f3_id");
    const MF3: SpecId<Marray<f32, 3>> = SpecId::new("marray_f3_id");
    const D16: SpecId<SyclVec<f64, 16>> = SpecId::new("vec_d16_id");
    let mut input = get_kernel_bundle_for(&[ptxspec::KernelId::new("vec_types")]).unwrap();
    assert_eq!(
        input.get_specialization_constant(&F3).unwrap(),
        SyclVec::new([1.0, 2.0, 3.0])
    );
    assert_eq!(
        input.get_specialization_constant(&MF3).unwrap(),
        Marray([1.0, 2.0, 3.0])
    );
    assert_eq!(
        input.get_specialization_constant(&D16).unwrap().elems[15],
        16.0
    );
    input
        .set_specialization_constant(&F3, SyclVec::new([4.0, 5.0, 6.0]))
        .unwrap();
    // The same bytes as ints, or a vec of 4 where 3 are read: refused or
    // taken as the image's scalars say.
    let e = input
        .set_specialization_constant(
            &SpecId::<SyclVec<i32, 3>>::new("vec_f3_id"),
            SyclVec::new([1, 2, 3]),
        )
        .unwrap_err();
    assert!(e.to_string().contains("holds float at byte 0"), "{e}");
    input
        .set_specialization_constant(&SpecId::<[f32; 4]>::new("vec_f3_id"), [4.0, 5.0, 6.0, 0.0])
        .unwrap();
    let exe = build(&input.with_mode(SpecMode::Native)).unwrap();
    assert_eq!(
        exe.get_specialization_constant(&F3).unwrap(),
        SyclVec::new([4.0, 5.0, 6.0])
    );
    assert!(exe.native_specialization_constant());
}

/// SYCL-CTS specialization_constants_same_name_stress and
/// specialization_constants_defined_various_ways: one name in ten scopes,
/// two instantiations of one variable template and every declaration form
/// are each their own constant, named by the C++ entity.
#[test]
fn each_cpp_entity_is_its_own_constant() {
    use ptxspec::KernelId;
    use ptxspec_kernels::same_name::*;
    let mut input = get_kernel_bundle_for(&[KernelId::new(STRESS), KernelId::new(WAYS)]).unwrap();
    let ids: Vec<&str> = SCOPES.iter().chain(&FORMS).copied().collect();
    for (i, id) in ids.iter().enumerate() {
        let sc = SpecId::<i32>::new(id);
        assert!(input.has_specialization_constant(&sc), "{id}");
        assert_eq!(
            input.get_specialization_constant(&sc).unwrap(),
            i as i32,
            "{id}"
        );
        input
            .set_specialization_constant(&sc, 1000 + i as i32)
            .unwrap();
    }
    // The global template's other instantiation.
    let same_float = SpecId::<f32>::new("same<float>");
    assert_eq!(input.get_specialization_constant(&same_float).unwrap(), 0.0);
    input.set_specialization_constant(&same_float, 2.5).unwrap();
    // No constant is named by its bare C++ name.
    for bare in ["same", "outer::same", "member_form", "named_form"] {
        assert!(
            !input.has_specialization_constant(&SpecId::<i32>::new(bare)),
            "{bare}"
        );
    }
    // Emulated: 18 constants of 4 bytes, each value once in the buffer.
    let exe = build(&input.clone().with_mode(SpecMode::Emulated)).unwrap();
    let blob = exe.built_image(&KernelId::new(STRESS)).unwrap().blob();
    assert_eq!(
        blob.len(),
        4 * (ids.len() + 2),
        "with per_unit of the same unit"
    );
    let words: Vec<i32> = blob
        .chunks(4)
        .map(|w| i32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    for i in 0..ids.len() as i32 {
        assert_eq!(words.iter().filter(|&&w| w == 1000 + i).count(), 1, "{i}");
    }
    assert!(words.contains(&2.5f32.to_bits().cast_signed()));
    // Native: each getter became its own value (an immediate in hex).
    let exe = build(&input.with_mode(SpecMode::Native)).unwrap();
    let ptx = exe
        .built_image(&KernelId::new(STRESS))
        .unwrap()
        .ptx()
        .unwrap();
    for i in 0..ids.len() {
        let v = 1000 + i;
        assert_eq!(ptx.matches(&format!(", 0x{v:08X};")).count(), 1, "{v}");
    }
}

/// SYCL-CTS specialization_constants_same_name_internal_linkage: a constant
/// of internal linkage in each of two units, one name: two constants, each
/// unit's kernel reading its own.
#[test]
fn internal_linkage_in_two_units_is_two_constants() {
    use ptxspec::KernelId;
    use ptxspec_kernels::same_name::*;
    let here = SpecId::<i32>::new(HERE_ID);
    let there = SpecId::<i32>::new(THERE_ID);
    let mut input = get_kernel_bundle_for(&[KernelId::new(HERE), KernelId::new(THERE)]).unwrap();
    assert_eq!(input.get_specialization_constant(&here).unwrap(), 20);
    assert_eq!(input.get_specialization_constant(&there).unwrap(), 21);
    input.set_specialization_constant(&there, -21).unwrap();
    assert_eq!(input.get_specialization_constant(&here).unwrap(), 20);
    let exe = build(&input.with_mode(SpecMode::Native)).unwrap();
    let ptx = |k: &str| {
        exe.built_image(&KernelId::new(k))
            .unwrap()
            .ptx()
            .unwrap()
            .to_string()
    };
    assert!(ptx(THERE).contains(&format!(", 0x{:08X};", -21i32)));
    assert!(ptx(HERE).contains(", 0x00000014;"));
}

/// The two internal constants share an LTO key (their C++ text is the
/// same): in one image, its LTO link is refused with both named; in images
/// of their own units (the default split), each links.
#[test]
fn internal_constants_of_one_name_in_one_lto_image_are_refused() {
    use ptxspec_core::image::ImageData;
    use ptxspec_core::postlink::{Options, Split, post_link};
    use ptxspec_kernels::same_name::*;
    let inputs = || {
        vec![
            (
                "same_name.ptx".to_string(),
                include_str!("../kernels/ptx/same_name.ptx").to_string(),
            ),
            (
                "same_name_other.ptx".to_string(),
                include_str!("../kernels/ptx/same_name_other.ptx").to_string(),
            ),
        ]
    };
    let images = |split| {
        let opts = Options {
            split,
            ..Default::default()
        };
        post_link(inputs(), &opts)
            .unwrap()
            .into_iter()
            .map(|i| ImageData::new(i.stem, i.ptx, &i.props.to_text()).unwrap())
            .collect::<Vec<_>>()
    };
    let one = images(Split::Off);
    assert_eq!(one.len(), 1);
    let e = one[0]
        .lto_definitions(one[0].default_blob())
        .unwrap_err()
        .to_string();
    assert!(e.contains(HERE_ID) && e.contains(THERE_ID), "{e}");
    assert!(e.contains("PTXSPEC_SPECIALIZATION_ID_NAMED"), "{e}");
    for img in images(Split::PerSource) {
        let defs = img.lto_definitions(img.default_blob()).unwrap();
        let mut symbols: Vec<&str> = defs.iter().map(|d| d.symbol).collect();
        symbols.sort_unstable();
        symbols.dedup();
        assert_eq!(symbols.len(), defs.len(), "{}", img.id());
    }
}
