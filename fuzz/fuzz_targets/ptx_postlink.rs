//! PTX through the whole post-link, as one translation unit and as two
//! (the input cut at its middle line). What must hold beyond "no panic":
//! every image written reads back — its property sets parse to the same
//! text, and its PTX parses again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptxspec_core::postlink::{Options, post_link};
use ptxspec_core::props::PropertySets;

fn check(units: Vec<(String, String)>) {
    let Ok(images) = post_link(units, &Options::default()) else {
        return;
    };
    for img in images {
        let text = img.props.to_text();
        let back = PropertySets::parse(&text).expect("a written .prop reads back");
        assert_eq!(back.to_text(), text, "a written .prop reads back the same");
        ptxspec_core::ptx::parse(format!("{}.ptx", img.stem), img.ptx.clone())
            .expect("a written .ptx parses");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    check(vec![("a.ptx".into(), text.into())]);
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() > 1 {
        let (a, b) = lines.split_at(lines.len() / 2);
        check(vec![
            ("a.ptx".into(), a.join("\n")),
            ("b.ptx".into(), b.join("\n")),
        ]);
    }
});
