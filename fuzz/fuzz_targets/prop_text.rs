//! A `.prop` file's text (DPC++'s property-set format). What was read
//! writes back to text that reads back the same; the schema readers
//! (constants, requirements, the image's own sets) refuse or accept, never
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptxspec_core::features::Requirements;
use ptxspec_core::props::{ImageProps, PropertySets, SpecConstProps};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(sets) = PropertySets::parse(text) else {
        return;
    };
    let written = sets.to_text();
    let again = PropertySets::parse(&written).expect("written sets read back");
    assert_eq!(again.to_text(), written, "written sets read back the same");
    let _ = SpecConstProps::read(&sets);
    let _ = Requirements::read(&sets);
    let _ = ImageProps::read(&sets);
});
