use super::sycl::decode_descriptors;
use super::*;
use crate::layout::{Descriptor, Layout, Numbering, PADDING_ID, SpecConstant};
use crate::test_util::Rng;

/// From DPC++'s sycl-post-link test of padded composite constants: the file
/// its emulation mode writes, checked there by hand.
const DPCPP_PADDING_PROP: &str = "[SYCL/specialization constants]\n\
9d329ad59055e972____ZL12StructSpecId=2|gBAAAAAAAAAAAAAAAAAAAgAAAAA\n\
9d329ad59055e972____ZL10BoolSpecId=2|gBAAAAAAAAQAAAAAAAAAAEAAAAA\n\
[SYCL/specialization constants default values]\n\
all=2|IBAAAAAAAAAFAAAAjBAAAEA\n";

#[test]
fn reads_a_dpcpp_file_and_writes_it_back_byte_for_byte() {
    let sets = PropertySets::parse(DPCPP_PADDING_PROP).unwrap();
    let sc = SpecConstProps::read(&sets).unwrap();
    assert_eq!(
        sc.constants,
        [
            (
                "9d329ad59055e972____ZL12StructSpecId".to_string(),
                vec![Descriptor::new(0, 0, 8)]
            ),
            (
                "9d329ad59055e972____ZL10BoolSpecId".to_string(),
                vec![Descriptor::new(1, 0, 1)]
            ),
        ]
    );
    assert_eq!(sc.default_values.unwrap(), [20, 0, 0, 0, b'c', 0, 0, 0, 1]);
    assert_eq!(sets.to_text(), DPCPP_PADDING_PROP);
}

#[test]
fn our_layout_writes_what_dpcpp_writes_for_the_same_constants() {
    // The same two constants: struct {int; char} = {20, 'c'} and bool true.
    let layout = Layout::build(
        Numbering::Emulated,
        [
            SpecConstant::opaque(
                "9d329ad59055e972____ZL12StructSpecId",
                8,
                4,
                vec![20, 0, 0, 0, b'c', 0, 0, 0],
            )
            .unwrap(),
            SpecConstant::opaque("9d329ad59055e972____ZL10BoolSpecId", 1, 1, vec![1]).unwrap(),
        ],
    )
    .unwrap();
    let mut sets = PropertySets::default();
    SpecConstProps::write(&layout, &mut sets);
    assert_eq!(sets.to_text(), DPCPP_PADDING_PROP);
}

#[test]
fn u32_properties_and_padding_descriptors() {
    let text = "[SYCL/device requirements]\nreqd_sub_group_size=1|32\n";
    let sets = PropertySets::parse(text).unwrap();
    assert_eq!(
        sets.get(DEVICE_REQUIREMENTS_SET)
            .unwrap()
            .get("reqd_sub_group_size"),
        Some(&PropertyValue::U32(32))
    );
    assert_eq!(sets.to_text(), text);
    // A padding descriptor survives the trip with its full 32-bit ID.
    let d = [Descriptor::new(0, 0, 1), Descriptor::new(PADDING_ID, 1, 7)];
    assert_eq!(decode_descriptors(&encode_descriptors(&d)).unwrap(), d);
}

#[test]
fn generated_property_sets_round_trip_byte_for_byte() {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    const NAME_CHARS: &[u8] = b"abcXYZ_09$./ -";
    for _ in 0..500 {
        let mut sets = PropertySets::default();
        for s in 0..1 + rng.below(4) {
            let set = sets.set_mut(&format!("SYCL/set {s}"));
            for p in 0..rng.below(6) {
                let mut name: String = (0..1 + rng.below(12))
                    .map(|_| NAME_CHARS[rng.below(NAME_CHARS.len() as u64) as usize] as char)
                    .collect();
                name.push_str(&p.to_string()); // unique within the set
                let value = if rng.below(3) == 0 {
                    PropertyValue::U32(rng.next() as u32)
                } else {
                    let len = rng.below(40) as usize;
                    let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                    if len > 0 && rng.below(4) == 0 {
                        // A bit size that is not a multiple of 8.
                        let bits = len as u64 * 8 - rng.below(7);
                        PropertyValue::Bytes { bits, data }
                    } else {
                        PropertyValue::bytes(data)
                    }
                };
                set.insert(name, value);
            }
        }
        let text = sets.to_text();
        let back = PropertySets::parse(&text).unwrap();
        assert_eq!(back, sets);
        assert_eq!(back.to_text(), text);
    }
}

#[test]
fn malformed_files_give_the_line() {
    let cases = [
        ("", 0, "no property set"),
        ("all=2|AAAA\n", 1, "before any [category]"),
        ("[A]\nx=1|12\n[B\n", 3, "without ']'"),
        ("[A]\n\nx 1\n", 3, "expected name=TYPE|VALUE"),
        ("[A]\nx=1\n", 2, "expected TYPE|VALUE"),
        ("[A]\nx=3|1\n", 2, "unknown property type"),
        ("[A]\nx=1|-4\n", 2, "invalid u32"),
        ("[A]\nx=1|4294967296\n", 2, "invalid u32"),
        ("[A]\nx=2|AA=A\n", 2, "invalid character"),
        ("[A]\nx=2|AAAA\n", 2, "no 8-byte size prefix"),
        // 8-byte prefix says 16 bits, one data byte follows.
        ("[A]\nx=2|QAAAAAAAAAAB\n", 2, "says 16 bits"),
        ("[A]\n=1|4\n", 2, "empty name"),
    ];
    for (text, line, what) in cases {
        let e = PropertySets::parse(text).unwrap_err();
        assert_eq!(e.line, line, "{text:?}: {e}");
        assert!(e.what.contains(what), "{text:?}: {e}");
    }
}

#[test]
fn wrong_shapes_in_sycl_sets_are_named() {
    let sets = PropertySets::parse("[SYCL/specialization constants]\nid=1|4\n").unwrap();
    let e = SpecConstProps::read(&sets).unwrap_err();
    assert_eq!(e.property.as_deref(), Some("id"));
    assert_eq!(
        e.to_string(),
        "[SYCL/specialization constants] id: not a byte array of <u32 ID, offset, size> triples"
    );
    let sets =
        PropertySets::parse("[SYCL/specialization constants default values]\nx=1|4\n").unwrap();
    let e = SpecConstProps::read(&sets).unwrap_err();
    assert_eq!(
        e.to_string(),
        "[SYCL/specialization constants default values] has no property 'all'"
    );
}

#[test]
fn many_names_are_found_before_and_after_the_index_and_after_removals() {
    // 40 sets of 40 properties: past the count that is looked up by
    // comparing names, so the hash index is built while reading.
    let mut text = String::new();
    for s in 0..40 {
        text.push_str(&format!("[set {s}]\n"));
        for p in 0..40 {
            text.push_str(&format!("p{p}=1|{}\n", s * 100 + p));
        }
    }
    // A property written twice keeps its first place and its last value.
    text.push_str("[set 3]\np7=1|999\n");
    let mut sets = PropertySets::parse(&text).unwrap();
    assert_eq!(sets.iter().count(), 40);
    for s in 0..40 {
        let set = sets.get(&format!("set {s}")).unwrap();
        assert_eq!(set.len(), 40);
        for p in 0..40 {
            let want = if (s, p) == (3, 7) { 999 } else { s * 100 + p };
            assert_eq!(
                set.get(&format!("p{p}")),
                Some(&PropertyValue::U32(want)),
                "set {s} p{p}"
            );
        }
        assert_eq!(set.iter().nth(7).unwrap().0, "p7");
    }
    assert!(sets.get("set 40").is_none());
    // Removing sets moves the later ones up; each is still found.
    assert!(sets.remove("set 0").is_some());
    assert!(sets.remove("set 17").is_some());
    assert!(sets.remove("set 17").is_none());
    let names: Vec<&str> = sets.iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 38);
    assert_eq!(names[0], "set 1");
    assert_eq!(names[16], "set 18");
    for s in (1..40).filter(|&s| s != 17) {
        assert_eq!(
            sets.get(&format!("set {s}")).unwrap().get("p0"),
            Some(&PropertyValue::U32(s * 100))
        );
    }
    // What is written is what was read, but for the removed sets; two
    // reads of one text are equal whatever their indexes.
    let again = PropertySets::parse(&sets.to_text()).unwrap();
    assert_eq!(again, sets);
    let mut few = PropertySets::default();
    few.set_mut("a").insert("x", PropertyValue::U32(1));
    let mut grown = PropertySets::default();
    for i in 0..20 {
        grown.set_mut(&format!("tmp{i}"));
    }
    grown.set_mut("a").insert("x", PropertyValue::U32(1));
    for i in 0..20 {
        grown.remove(&format!("tmp{i}"));
    }
    assert_eq!(few, grown);
    assert_eq!(
        grown.get("a").unwrap().get("x"),
        Some(&PropertyValue::U32(1))
    );
}
