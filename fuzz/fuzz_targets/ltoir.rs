//! An `.ltoir` container (the LTO-IR of an image's units): what was read
//! writes back to bytes that read back to the same units.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptxspec_core::lto::LtoIr;

fuzz_target!(|data: &[u8]| {
    let Ok(ir) = LtoIr::from_bytes(data) else {
        return;
    };
    let written = ir.to_bytes();
    let again = LtoIr::from_bytes(&written).expect("a written container reads back");
    assert_eq!(
        again.units, ir.units,
        "a written container reads back the same"
    );
});
