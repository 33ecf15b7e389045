//! Layout tests: every expected byte and descriptor below is written out by
//! hand from the seeds and the C layout rules, not computed by the code.

use super::*;
use ScalarKind::*;

fn s(k: ScalarKind) -> SpecType {
    SpecType::Scalar(k)
}
fn d(id: u32, offset: u32, size: u32) -> Descriptor {
    Descriptor::new(id, offset, size)
}
fn le32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn f32b(v: f32) -> u32 {
    v.to_bits()
}

/// The SYCL 2020 spec-constant design (DPC++): `struct Nested { float a, b; }; struct A { int x; Nested n; };`
fn nested() -> SpecType {
    SpecType::c_struct([s(F32), s(F32)])
}
fn a() -> SpecType {
    SpecType::c_struct([s(I32), nested()])
}

/// DPC++'s SYCL 2020 spec-constant design's three constants with the defaults its constructors produce:
/// `id_int(42)`, `id_A(1, 2.0, 3.0)` (Nested adds 1.0 to each float) and
/// `id_Nested(4.0, 5.0)`.
fn seed001_constants() -> Vec<SpecConstant> {
    vec![
        SpecConstant::typed("id_int", s(I32), le32(&[42])).unwrap(),
        SpecConstant::typed("id_A", a(), le32(&[1, f32b(3.0), f32b(4.0)])).unwrap(),
        SpecConstant::typed("id_Nested", nested(), le32(&[f32b(5.0), f32b(6.0)])).unwrap(),
    ]
}

#[test]
fn seed001_native_ids() {
    let l = Layout::build(Numbering::Native, seed001_constants()).unwrap();
    let ids = |n: &str| l.get(n).unwrap().ids().collect::<Vec<_>>();
    assert_eq!(ids("id_int"), [0]);
    assert_eq!(ids("id_A"), [1, 2, 3]);
    assert_eq!(ids("id_Nested"), [4, 5]);
    // DPC++'s SYCL 2020 spec-constant design's property set: id_A -> [{1, 0, 4}, {2, 4, 4}, {3, 8, 4}].
    assert_eq!(
        l.get("id_A").unwrap().descriptors,
        [d(1, 0, 4), d(2, 4, 4), d(3, 8, 4)]
    );
    assert_eq!(l.get("id_int").unwrap().descriptors, [d(0, 0, 4)]);
}

#[test]
fn seed001_emulated_offsets_and_blob() {
    let l = Layout::build(Numbering::Emulated, seed001_constants()).unwrap();
    let offsets: Vec<u32> = l.constants().iter().map(|p| p.offset).collect();
    assert_eq!(offsets, [0, 4, 16]);
    assert_eq!(l.get("id_A").unwrap().descriptors, [d(1, 0, 12)]);
    // 42, 1, 3.0, 4.0, 5.0, 6.0
    let expected = le32(&[42, 1, f32b(3.0), f32b(4.0), f32b(5.0), f32b(6.0)]);
    assert_eq!(l.default_blob(), expected.as_slice());
}

#[test]
fn short_then_int() {
    let l = Layout::build(
        Numbering::Emulated,
        [
            SpecConstant::typed("s", s(I16), vec![0x34, 0x12]).unwrap(),
            SpecConstant::typed("i", s(I32), vec![1, 2, 3, 4]).unwrap(),
        ],
    )
    .unwrap();
    assert_eq!(
        l.get("s").unwrap().descriptors,
        [d(0, 0, 2), d(PADDING_ID, 2, 2)]
    );
    assert_eq!(l.get("i").unwrap().descriptors, [d(1, 0, 4)]);
    assert_eq!(l.get("i").unwrap().offset, 4);
    assert_eq!(l.default_blob(), [0x34, 0x12, 0, 0, 1, 2, 3, 4]);
}

#[test]
fn char_then_double_lands_on_8() {
    let l = Layout::build(
        Numbering::Emulated,
        [
            SpecConstant::typed("c", s(I8), vec![0x7f]).unwrap(),
            SpecConstant::typed("d", s(F64), 1.5f64.to_le_bytes().to_vec()).unwrap(),
        ],
    )
    .unwrap();
    assert_eq!(l.get("d").unwrap().offset, 8);
    assert_eq!(
        l.get("c").unwrap().descriptors,
        [d(0, 0, 1), d(PADDING_ID, 1, 7)]
    );
    let mut expected = vec![0x7f, 0, 0, 0, 0, 0, 0, 0];
    expected.extend_from_slice(&1.5f64.to_le_bytes());
    assert_eq!(l.default_blob(), expected.as_slice());
}

#[test]
fn every_order_of_three_chars_then_a_composite() {
    // {float, int, char}: offsets 0, 4, 8; size 12; align 4.
    let comp = SpecType::c_struct([s(F32), s(I32), s(I8)]);
    let comp_default: Vec<u8> =
        [f32b(0.5).to_le_bytes(), 7u32.to_le_bytes(), [9, 0, 0, 0]].concat();
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        let names = ["a", "b", "c"];
        let mut consts: Vec<SpecConstant> = order
            .iter()
            .map(|&i| SpecConstant::typed(names[i], s(U8), vec![b'a' + i as u8]).unwrap())
            .collect();
        consts.push(SpecConstant::typed("comp", comp.clone(), comp_default.clone()).unwrap());
        let l = Layout::build(Numbering::Emulated, consts).unwrap();
        // The chars take IDs 0..3 in the given order at offsets 0, 1, 2; the
        // composite lands on 4 with ID 3, and the last char carries the
        // one-byte gap as a padding descriptor.
        for (pos, &i) in order.iter().enumerate() {
            let p = l.get(names[i]).unwrap();
            assert_eq!(p.offset, pos as u32, "{order:?}");
            let mut want = vec![d(pos as u32, 0, 1)];
            if pos == 2 {
                want.push(d(PADDING_ID, 1, 1));
            }
            assert_eq!(p.descriptors, want, "{order:?}");
        }
        assert_eq!(l.get("comp").unwrap().offset, 4);
        assert_eq!(l.get("comp").unwrap().descriptors, [d(3, 0, 12)]);
        let mut blob: Vec<u8> = order.iter().map(|&i| b'a' + i as u8).collect();
        blob.push(0);
        blob.extend_from_slice(&comp_default);
        assert_eq!(l.default_blob(), blob.as_slice(), "{order:?}");
    }
}

#[test]
fn struct_with_middle_and_trailing_padding() {
    // struct { int a; char b; /* pad 3 */ int c; char d; /* pad 3 */ }
    let t = SpecType::c_struct([s(I32), s(I8), s(I32), s(I8)]);
    let default = vec![1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0];
    let native = Layout::build(
        Numbering::Native,
        [SpecConstant::typed("p", t.clone(), default.clone()).unwrap()],
    )
    .unwrap();
    assert_eq!(
        native.get("p").unwrap().descriptors,
        [
            d(0, 0, 4),
            d(1, 4, 1),
            d(2, 8, 4),
            d(3, 12, 1),
            d(PADDING_ID, 13, 3)
        ]
    );
    // Emulated: one descriptor for the whole value; the blob keeps the
    // padding bytes as zeros and is 16 bytes long.
    let emulated = Layout::build(
        Numbering::Emulated,
        [
            SpecConstant::typed("c", s(I8), vec![0xee]).unwrap(),
            SpecConstant::typed("p", t, default.clone()).unwrap(),
        ],
    )
    .unwrap();
    assert_eq!(emulated.get("p").unwrap().descriptors, [d(1, 0, 16)]);
    assert_eq!(
        emulated.get("c").unwrap().descriptors,
        [d(0, 0, 1), d(PADDING_ID, 1, 3)]
    );
    let mut blob = vec![0xee, 0, 0, 0];
    blob.extend_from_slice(&default);
    assert_eq!(emulated.default_blob(), blob.as_slice());
}

#[test]
fn nested_struct_trailing_padding_is_described_at_each_level() {
    // struct In { double x; char c; };  (size 16)   struct Out { In i; char e; };  (size 24)
    let inner = SpecType::c_struct([s(F64), s(I8)]);
    let outer = SpecType::c_struct([inner, s(I8)]);
    let l = Layout::build(
        Numbering::Native,
        [SpecConstant::typed("o", outer, vec![0; 24]).unwrap()],
    )
    .unwrap();
    assert_eq!(
        l.get("o").unwrap().descriptors,
        [
            d(0, 0, 8),
            d(1, 8, 1),
            d(PADDING_ID, 9, 7),
            d(2, 16, 1),
            d(PADDING_ID, 17, 7)
        ]
    );
}

#[test]
fn seed000_pod_native_ids() {
    // struct A { int x; float y; }; struct POD { A a[2]; int2 b; };
    let a = SpecType::c_struct([s(I32), s(F32)]);
    let pod = SpecType::c_struct([SpecType::array(a, 2), SpecType::vector(I32, 2)]);
    let l = Layout::build(
        Numbering::Native,
        [
            SpecConstant::typed("gold_scalar", s(I32), le32(&[42])).unwrap(),
            SpecConstant::typed("gold", pod, vec![0; 24]).unwrap(),
        ],
    )
    .unwrap();
    assert_eq!(
        l.get("gold").unwrap().descriptors,
        [
            d(1, 0, 4),
            d(2, 4, 4),
            d(3, 8, 4),
            d(4, 12, 4),
            d(5, 16, 4),
            d(6, 20, 4)
        ]
    );
}

#[test]
fn native_blob_concatenates_without_alignment() {
    let l = Layout::build(
        Numbering::Native,
        [
            SpecConstant::typed("c", s(I8), vec![5]).unwrap(),
            SpecConstant::typed("d", s(F64), vec![1; 8]).unwrap(),
        ],
    )
    .unwrap();
    assert_eq!(l.get("d").unwrap().offset, 1);
    assert_eq!(l.default_blob().len(), 9);
}

#[test]
fn repeated_symbolic_id_keeps_first_placement_and_checks_size_type_and_default() {
    let mut l = Layout::new(Numbering::Emulated);
    assert_eq!(
        l.add(SpecConstant::typed("x", s(I32), vec![1, 0, 0, 0]).unwrap()),
        Ok(0)
    );
    assert_eq!(
        l.add(SpecConstant::opaque("y", 1, 1, vec![2]).unwrap()),
        Ok(1)
    );
    // The same constant again (another getter, another unit): one place.
    assert_eq!(
        l.add(SpecConstant::typed("x", s(I32), vec![1, 0, 0, 0]).unwrap()),
        Ok(0)
    );
    assert_eq!(
        l.add(SpecConstant::opaque("x", 4, 4, vec![1, 0, 0, 0]).unwrap()),
        Ok(0)
    );
    assert_eq!(l.default_blob(), [1, 0, 0, 0, 2]);
    // Another constant under the same ID: refused, never merged.
    let e = l
        .add(SpecConstant::typed("x", s(F32), 1f32.to_le_bytes().to_vec()).unwrap())
        .unwrap_err();
    assert!(
        matches!(&e, LayoutError::Conflicting { symbolic_id, .. } if symbolic_id == "x"),
        "{e}"
    );
    assert!(e.to_string().contains("typed int32_t and float"), "{e}");
    let e = l
        .add(SpecConstant::typed("x", s(I32), vec![9, 9, 9, 9]).unwrap())
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("default values 01000000 and 09090909"),
        "{e}"
    );
    assert!(matches!(
        l.add(SpecConstant::opaque("x", 8, 8, vec![0; 8]).unwrap()),
        Err(LayoutError::InconsistentSize {
            expected: 4,
            got: 8,
            ..
        })
    ));
}

#[test]
fn patch_checks_symbolic_id_and_size() {
    let l = Layout::build(Numbering::Emulated, seed001_constants()).unwrap();
    let mut blob = l.default_blob().to_vec();
    l.patch(&mut blob, "id_Nested", &le32(&[f32b(-1.0), f32b(-2.0)]))
        .unwrap();
    assert_eq!(&blob[16..24], le32(&[f32b(-1.0), f32b(-2.0)]).as_slice());
    assert_eq!(&blob[..16], &l.default_blob()[..16]);
    assert_eq!(
        l.patch(&mut blob, "id_missing", &[0; 4]),
        Err(LayoutError::UnknownSymbolicId("id_missing".into()))
    );
    assert!(matches!(
        l.patch(&mut blob, "id_int", &[0; 8]),
        Err(LayoutError::ValueSizeMismatch {
            expected: 4,
            got: 8,
            ..
        })
    ));
    assert!(matches!(
        l.patch(&mut [0u8; 3], "id_int", &[0; 4]),
        Err(LayoutError::BlobSizeMismatch { .. })
    ));
}

#[test]
fn constructors_reject_bad_input() {
    assert!(matches!(
        SpecConstant::typed("x", s(I32), vec![0; 3]),
        Err(LayoutError::DefaultSizeMismatch {
            expected: 4,
            got: 3,
            ..
        })
    ));
    assert!(matches!(
        SpecConstant::opaque("x", 4, 3, vec![0; 4]),
        Err(LayoutError::BadAlignment { align: 3, .. })
    ));
    assert_eq!(
        Layout::build(
            Numbering::Native,
            [SpecConstant::opaque("x", 4, 4, vec![0; 4]).unwrap()]
        ),
        Err(LayoutError::NativeNeedsType("x".into()))
    );
}
