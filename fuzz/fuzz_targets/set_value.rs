//! A `--set NAME=VALUE` value against a constant's type: the first bytes
//! choose the type (its size and scalars), the rest is the text. A value
//! accepted has exactly the constant's size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptxspec_core::layout::ScalarKind;
use ptxspec_core::layout::text::parse_value;

fuzz_target!(|data: &[u8]| {
    let [a, b, text @ ..] = data else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    // Up to four scalars of one kind, one after another at their size.
    let kind = ScalarKind::ALL[*a as usize % ScalarKind::ALL.len()];
    let count = 1 + (*b as usize % 4);
    let width = kind.size() as usize;
    let leaves: Vec<(u32, ScalarKind)> = (0..count).map(|i| ((i * width) as u32, kind)).collect();
    let size = count * width;
    let base = vec![0u8; size];
    if let Ok(bytes) = parse_value(text, size, &leaves, &base) {
        assert_eq!(
            bytes.len(),
            size,
            "a value accepted has the constant's size"
        );
    }
});
