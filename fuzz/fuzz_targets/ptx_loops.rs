//! PTX through the loop half of the optimizer (`ptx::loops`, the address
//! half before it, `ptx::widen`, and `ptx::pointers` after it), as if every
//! value it can know had become known by a specialization (the generic
//! code an empty module): every loop the model counts loses its
//! `nounroll`. What must hold beyond "no panic" and work linear in the
//! input: each count is within the bound, and the text written parses
//! again with the same items, its `nounroll` loops exactly the input's
//! that the model did not count.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptxspec_core::ptx::{self, ItemKind, loops};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(m) = ptx::parse("in.ptx", text.to_string()) else {
        return;
    };
    let loops_of = |m: &ptx::Module| -> Vec<loops::NounrollLoop> {
        m.items
            .iter()
            .filter_map(|item| match &item.kind {
                ItemKind::Function(f) => f.body.as_ref(),
                _ => None,
            })
            .flat_map(|body| loops::nounroll_loops(m, body))
            .collect()
    };
    let before = loops_of(&m);
    for l in &before {
        if let Some(trips) = l.trips {
            assert!((1..=loops::MAX_TRIPS).contains(&trips), "{l:?}");
        }
    }
    let generic = ptx::parse("empty.ptx", String::new()).expect("an empty module parses");
    let out = loops::unroll_where_counts_became_known(&generic, text, |_, _| true)
        .expect("parsed once, parses again");
    let again = ptx::parse("out.ptx", out).expect("the written PTX parses");
    assert_eq!(again.items.len(), m.items.len());
    let kept: Vec<String> = before
        .into_iter()
        .filter(|l| l.trips.is_none())
        .map(|l| l.header)
        .collect();
    let after: Vec<String> = loops_of(&again).into_iter().map(|l| l.header).collect();
    assert_eq!(after, kept, "the loops left nounroll are those not counted");
    // The address half, before it: what it writes parses with the same
    // items, and the loop half takes it.
    let widened = ptx::widen::widen_sums_in_counted_loops(text, |_, _| true)
        .expect("parsed once, parses again");
    let again = ptx::parse("widened.ptx", widened.clone()).expect("the widened PTX parses");
    assert_eq!(again.items.len(), m.items.len());
    loops::unroll_where_counts_became_known(&generic, &widened, |_, _| true)
        .expect("the widened PTX parses");
    // The pointer half, after it: its versioned loops (a guard, the copy
    // after the last statement) parse with the same items, and a second
    // run finds the loops it versioned (their copies included) again.
    let stepped = ptx::pointers::step_addresses_as_pointers(text, |_, _| true)
        .expect("parsed once, parses again");
    let again = ptx::parse("stepped.ptx", stepped.clone()).expect("the stepped PTX parses");
    assert_eq!(again.items.len(), m.items.len());
    ptx::pointers::step_addresses_as_pointers(&stepped, |_, _| true)
        .expect("the stepped PTX parses");
});
