//! The contract of the code `ptxspec-build` generates: the registrations of
//! every released form — the struct literal of 0.1.0 and
//! `EmbeddedImage::v1` — compiled against today's crate, and registering
//! their images. Semver checks skip the hidden items that code names, so
//! this test is that contract's check; a new form adds a file here, and no
//! file is ever removed.

include!("generated/registration_0_1_0_literal.rs");
include!("generated/registration_v1.rs");

#[test]
fn every_generated_form_still_registers() {
    let ids: Vec<&str> = ptxspec::registry::images().iter().map(|e| e.id).collect();
    for id in ["generated_literal", "generated_v1"] {
        assert!(ids.contains(&id), "{id} not registered: {ids:?}");
    }
    let v1 = ptxspec::registry::images()
        .into_iter()
        .find(|e| e.id == "generated_v1")
        .unwrap();
    assert_eq!(
        (v1.kernels, v1.declares_extern_function),
        (&["v1k"][..], Some(false))
    );
}
