//! Bundles without a GPU: states, joins, errors, values and the blobs and
//! PTX that executable images would load.

use super::*;
use crate::postlink::{Mode, Options, Split};

/// Images post-linked from the committed example PTX.
fn images() -> Vec<Arc<Image>> {
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
    postlink::post_link(inputs, &opts)
        .unwrap()
        .into_iter()
        .map(|i| Arc::new(Image::new(i.stem, i.ptx, &i.props.to_text()).unwrap()))
        .collect()
}

const BLOCK: SpecId<i32> = SpecId::new("block_size_id");
const CHAR: SpecId<i8> = SpecId::new("char_id");
const DOUBLE: SpecId<f64> = SpecId::new("double_id");

#[test]
fn states_and_kernels() {
    let input = KernelBundle::from_images(images());
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
    assert_eq!(k.signature.buffer_param(), Some(4));
    assert!(matches!(
        exe.get_kernel(&KernelId::new("nope")),
        Err(Error::KernelNotFound(_))
    ));
    fn send_sync<T: Send + Sync>() {}
    send_sync::<KernelBundle<Input>>();
    send_sync::<KernelBundle<Executable>>();
}

#[test]
fn values_defaults_and_errors() {
    let mut input = KernelBundle::from_images(images());
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
        matches!(e, Error::SpecConst(_)) && e.errc() == crate::Errc::Invalid,
        "{e}"
    );
    let unknown: SpecId<i32> = SpecId::new("nope");
    assert!(matches!(
        input.get_specialization_constant(&unknown),
        Err(Error::SpecConst(_))
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
    let mut input = KernelBundle::from_images(images()).with_mode(SpecMode::Emulated);
    input.set_specialization_constant(&DOUBLE, -1.5).unwrap();
    let exe = build(&input).unwrap();
    let built = exe.built_image(&KernelId::new("scalars")).unwrap();
    // scalars' layout: char@0, double@8, bool@16, short@18, u64@24, padded@32.
    let mut want = built.image.default_blob().to_vec();
    want[8..16].copy_from_slice(&(-1.5f64).to_le_bytes());
    assert_eq!(built.blob.as_slice(), want.as_slice());
    assert_eq!(built.blob[0], (-5i8) as u8, "the char keeps its default");
    // Emulated images load their PTX as it is.
    assert!(Arc::ptr_eq(&built.ptx, &built.image.ptx));
    assert!(!exe.native_specialization_constant());
}

#[test]
fn native_ptx_has_the_values_and_is_cached() {
    let mut input = KernelBundle::from_images(images());
    input.set_specialization_constant(&BLOCK, 32).unwrap();
    let a = build(&input).unwrap();
    let b = build(&input).unwrap();
    let ka = a.built_image(&KernelId::new("matmul")).unwrap();
    let kb = b.built_image(&KernelId::new("matmul")).unwrap();
    assert!(ka.ptx.contains("mov.b32 %r"), "{}", ka.ptx);
    assert!(
        ka.ptx.contains(", 0x00000020;"),
        "block size 32 as an immediate"
    );
    assert!(!ka.ptx.contains("%ptxspec_buf"));
    assert!(
        Arc::ptr_eq(&ka.ptx, &kb.ptx),
        "a repeat build reuses the specialized PTX"
    );
}

#[test]
fn joins_and_links() {
    let imgs = images();
    let a = KernelBundle::from_images(vec![Arc::clone(&imgs[0])]);
    let b = KernelBundle::from_images(vec![Arc::clone(&imgs[1])]);
    let j = join(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(j.kernel_ids().len(), 3); // scalars; matmul and matmul_rolled
    assert!(matches!(join::<Input>(&[]), Err(Error::InvalidObject(_))));
    assert!(matches!(link(&[]), Err(Error::InvalidObject(_))));
    // Two values for one constant cannot be linked together.
    let mut x = b.clone();
    x.set_specialization_constant(&BLOCK, 8).unwrap();
    let mut y = b;
    y.set_specialization_constant(&BLOCK, 16).unwrap();
    let e = link(&[compile(&x).unwrap(), compile(&y).unwrap()]).unwrap_err();
    assert!(matches!(e, Error::InvalidObject(_)), "{e}");
    // Executable bundles join with their built images.
    let je = join(&[build(&a).unwrap(), build(&x).unwrap()]).unwrap();
    assert_eq!(je.get_specialization_constant(&BLOCK).unwrap(), 8);
    assert!(je.get_kernel(&KernelId::new("scalars")).is_ok());
}

#[test]
fn unknown_kernels_are_not_found() {
    // This unit-test binary registers no images.
    let e = get_kernel_bundle_for(&[KernelId::new("conv3x3")]).unwrap_err();
    assert!(matches!(e, Error::KernelNotFound(_)), "{e}");
}

#[test]
fn bad_images_are_named() {
    let e = Image::new("x", "", "[SYCL/specialization constants]\nid=1|4\n").unwrap_err();
    assert!(e.to_string().contains("device image x"), "{e}");
}
