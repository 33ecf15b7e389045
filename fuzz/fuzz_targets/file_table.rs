//! A DPC++ file table (`table.txt`): what was read writes back to text
//! that reads back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptxspec_core::props::FileTable;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(table) = FileTable::parse(text) else {
        return;
    };
    let written = table.to_text();
    let again = FileTable::parse(&written).expect("a written table reads back");
    assert_eq!(
        again.to_text(),
        written,
        "a written table reads back the same"
    );
});
