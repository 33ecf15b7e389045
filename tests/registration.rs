//! What ptxspec-build's generated registrations tell ahead of time (an
//! image's kernels, whether its PTX declares an external function, its
//! LTO-IR's hash) is what the runtime would find out itself: checked for
//! every example image this crate embeds. No GPU needed.

use ptxspec_core::digest::Digest;
use ptxspec_core::image::ImageData;

ptxspec_kernels::register_example_kernels!();

#[test]
fn every_registration_tells_what_its_image_is() {
    let registered = ptxspec::registry::images();
    assert!(registered.len() >= 10, "the example images are registered");
    for e in registered {
        let image = ImageData::new(e.id, e.ptx, e.props).unwrap();
        let mut signed: Vec<&str> = image.kernels().iter().map(|k| k.name.as_str()).collect();
        let mut listed = e.kernels.to_vec();
        signed.sort_unstable();
        listed.sort_unstable();
        assert_eq!(listed, signed, "{}: kernels", e.id);
        // Searched in a fresh image: the registration's word is not used.
        assert_eq!(
            e.declares_extern_function,
            Some(image.declares_extern_function()),
            "{}: external functions",
            e.id
        );
        match e.ltoir {
            [] => assert_eq!(e.ltoir_sha256, None, "{}: no LTO-IR, no hash", e.id),
            bytes => assert_eq!(
                e.ltoir_sha256,
                Some(Digest::of(bytes).0),
                "{}: LTO-IR hash",
                e.id
            ),
        }
    }
}
