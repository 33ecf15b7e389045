use std::collections::HashMap;

use super::*;
use crate::layout::{Layout, Numbering, ScalarKind::*, SpecConstant};
use crate::props::SpecConstProps;

fn s(k: crate::layout::ScalarKind) -> SpecType {
    SpecType::Scalar(k)
}

/// The SYCL 2020 spec-constant design (DPC++): id_int(42), id_A(1, 2.0, 3.0) with Nested adding 1.0, and a
/// bool and a char then a double to cover narrow types and alignment.
fn seed_layout() -> Layout {
    let nested = SpecType::c_struct([s(F32), s(F32)]);
    let a = SpecType::c_struct([s(I32), nested]);
    let le = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    Layout::build(
        Numbering::Native,
        [
            SpecConstant::typed("id_int", s(I32), le(&[42])).unwrap(),
            SpecConstant::typed("id_A", a, le(&[1, 3.0f32.to_bits(), 4.0f32.to_bits()])).unwrap(),
            SpecConstant::typed("flag", s(Bool), vec![1]).unwrap(),
            SpecConstant::typed("c", s(I8), vec![0xfb]).unwrap(),
            SpecConstant::typed("d", s(F64), 2.5f64.to_le_bytes().to_vec()).unwrap(),
        ],
    )
    .unwrap()
}

fn layout_sets(l: &Layout) -> crate::props::PropertySets {
    let mut sets = crate::props::PropertySets::default();
    SpecConstProps::write(l, &mut sets);
    sets
}

#[test]
fn written_module_reads_back_as_the_layout() {
    let layout = seed_layout();
    let spv = write(&layout).unwrap();
    let constants = read(&spv, &HashMap::new()).unwrap();
    let names: Vec<&str> = constants.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["id_int", "id_A", "flag", "c", "d"]);
    // DPC++'s SYCL 2020 spec-constant design's IDs: id_int {0}, id_A {1, 2, 3}.
    assert_eq!(
        constants[1].descriptors,
        layout.get("id_A").unwrap().descriptors
    );
    assert_eq!(
        constants[1]
            .descriptors
            .iter()
            .map(|d| d.id)
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(
        constants[3].default,
        [0xfb],
        "a negative char survives the 32-bit literal"
    );
    // Property sets byte for byte: read → (the PTX side's) layout → equal.
    assert_eq!(
        property_sets(&constants).to_text(),
        layout_sets(&layout).to_text()
    );
}

#[test]
fn read_write_read_is_the_identity_on_property_sets() {
    let spv = write(&seed_layout()).unwrap();
    let first = read(&spv, &HashMap::new()).unwrap();
    let relayout = Layout::build(
        Numbering::Native,
        first
            .iter()
            .map(|c| SpecConstant::typed(c.name.clone(), c.ty.clone(), c.default.clone()).unwrap()),
    )
    .unwrap();
    let second = read(&write(&relayout).unwrap(), &HashMap::new()).unwrap();
    assert_eq!(
        property_sets(&first).to_text(),
        property_sets(&second).to_text()
    );
}

#[test]
fn specialize_sets_defaults_or_freezes() {
    let spv = write(&seed_layout()).unwrap();
    let v = |x: &[u32]| x.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
    let values = vec![
        (
            "id_A".to_string(),
            v(&[7, 0.5f32.to_bits(), (-1.0f32).to_bits()]),
        ),
        ("flag".to_string(), vec![0]),
        ("c".to_string(), vec![0x80]),
    ];
    let out = specialize(&spv, &values, false).unwrap();
    let back = read(&out, &HashMap::new()).unwrap();
    let get = |n: &str| back.iter().find(|c| c.name == n).unwrap().default.clone();
    assert_eq!(get("id_A"), values[0].1);
    assert_eq!(get("flag"), [0]);
    assert_eq!(get("c"), [0x80]);
    assert_eq!(
        get("id_int"),
        42i32.to_le_bytes(),
        "untouched constants keep their defaults"
    );
    // Frozen: no specialization constants remain.
    let frozen = specialize(&spv, &values, true).unwrap();
    assert!(read(&frozen, &HashMap::new()).unwrap().is_empty());
    // Errors name the constant.
    let e = specialize(&spv, &[("nope".into(), vec![0])], false).unwrap_err();
    assert_eq!(
        e.to_string(),
        "specialization constant 'nope' is not in the module"
    );
    let e = specialize(&spv, &[("id_int".into(), vec![0; 8])], false).unwrap_err();
    assert!(e.to_string().contains("8 bytes given"), "{e}");
    assert!(matches!(
        read(&[1, 2, 3], &HashMap::new()),
        Err(SpirvError::Load(_))
    ));
}

#[test]
fn vulkan_entries_widen_bools() {
    let constants = read(&write(&seed_layout()).unwrap(), &HashMap::new()).unwrap();
    let (entries, data) = vulkan_map_entries(&constants, &HashMap::new()).unwrap();
    let e = |id, offset, size| MapEntry {
        constant_id: id,
        offset,
        size,
    };
    assert_eq!(
        entries,
        [
            e(0, 0, 4),
            e(1, 4, 4),
            e(2, 8, 4),
            e(3, 12, 4),
            e(4, 16, 4),
            e(5, 20, 1),
            e(6, 21, 8)
        ]
    );
    assert_eq!(&data[16..20], &1u32.to_le_bytes(), "bool as VkBool32");
    assert_eq!(data[20], 0xfb);
}

#[test]
fn names_from_a_map_override_op_name() {
    let spv = write(&seed_layout()).unwrap();
    let names = HashMap::from([(1u32, "renamed_A".to_string())]);
    let c = read(&spv, &names).unwrap();
    assert_eq!(c[1].name, "renamed_A");
}

/// A small module whose types and composites reuse each other: `Sk = {Sk-1,
/// Sk-1}` and `Ck = {Ck-1, Ck-1}` describe 2^depth values in a few hundred
/// bytes. Before the sizes were bounded first, depth 30 ran without end.
fn doubling_module(depth: u32) -> Vec<u8> {
    use rspirv::binary::Assemble;
    use rspirv::spirv::{Decoration, Op};
    let mut b = rspirv::dr::Builder::new();
    b.capability(rspirv::spirv::Capability::Kernel);
    b.capability(rspirv::spirv::Capability::Addresses);
    b.memory_model(
        rspirv::spirv::AddressingModel::Physical64,
        rspirv::spirv::MemoryModel::OpenCL,
    );
    let int = b.type_int(32, 1);
    let leaf = b.spec_constant_bit32(int, 7);
    b.decorate(
        leaf,
        Decoration::SpecId,
        [rspirv::dr::Operand::LiteralBit32(0)],
    );
    let (mut ty, mut value) = (int, leaf);
    for _ in 0..depth {
        ty = b.type_struct([ty, ty]);
        value = b.spec_constant_composite(ty, [value, value]);
    }
    let _ = Op::Nop;
    b.module()
        .assemble()
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

#[test]
fn composites_that_reuse_each_other_are_bounded_before_expanding() {
    // Small: read as one constant of 2^4 values.
    let small = read(&doubling_module(4), &HashMap::new()).unwrap();
    assert_eq!(small.len(), 1);
    assert_eq!(small[0].default.len(), 16 * 4);
    // Large: an error naming the composite, at once.
    let bytes = doubling_module(30);
    assert!(bytes.len() < 2048, "{} bytes", bytes.len());
    let start = std::time::Instant::now();
    let e = read(&bytes, &HashMap::new()).unwrap_err();
    assert!(
        e.to_string().contains("is not a value ptxspec lays out"),
        "{e}"
    );
    // Generous for a debug build: the unbounded expansion took 28 s at depth 30.
    assert!(start.elapsed().as_secs_f64() < 2.0, "{:?}", start.elapsed());
    // The same through specialize and vulkan_map_entries.
    assert!(specialize(&bytes, &[], false).is_err());
}

/// The module the SPIR-V fuzz target found (472 bytes, hexadecimal): a
/// constant typed by a function's id, the function amid the constants.
const FOUND_RESULT_TYPE_OF_A_FUNCTION: &str = concat!(
    "03022307000001000000000000000e00000000001100020001000000110002000a0000000e0003000000000001000000",
    "0f00050005000000100000006d61696e0000000010000600100000001100000001000000010000000100000005000300",
    "0200000062000000050003000d0000006300000047000400020000000100000000000000480005000800000000000000",
    "230000000000000048000500080000000100000023000000080000004700040009000000010000000100000047000400",
    "0a0000000100000000000000470004000b00000001000000030000001400020001000000300003000100000002000000",
    "160003000300000020000000160003000400000040000000150004000500000020000000000000002b00040005000000",
    "06000000020000001c0004000700040004000000060000001e0004000800000003000000070000003300040003000000",
    "090000000000000036000500040000000a000000000000000000000032000500040000000b0000000000000000000000",
    "33000500070000000c0000000a0000000b00000033000500080000000d000000090000000c000000210003000f000000",
    "0e000000320005000a00000010000000000000000ffb0000f800020011000000fd00010038000100",
);

fn from_hex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// A module whose constants' result types are not types declared before
/// them decodes differently once its sections are written back (rspirv
/// reads a literal by whatever its result type names at that point): the
/// module the fuzzer found (a constant typed by a function's id, and the
/// function amid the constants), and a generated family — a constant typed
/// by another constant, by an id never declared, by a type declared after
/// it — are each refused by `read` and `specialize` alike, naming the
/// constant; a module that keeps the rule still reads.
#[test]
fn constants_typed_by_what_is_not_a_type_declared_before_are_refused() {
    use rspirv::binary::Assemble;
    use rspirv::dr::{Instruction, Operand};
    use rspirv::spirv::{Decoration, Op};
    let found = from_hex(FOUND_RESULT_TYPE_OF_A_FUNCTION);
    assert_eq!(found.len(), 472);
    let names = HashMap::new();
    let e = read(&found, &names).unwrap_err().to_string();
    assert!(e.contains("is not a type declared before it"), "{e}");
    for freeze in [false, true] {
        assert!(specialize(&found, &[], freeze).is_err());
    }
    // (how the constant's result type is broken, what it is then)
    let module = |breaking: u8| -> Vec<u8> {
        let mut b = rspirv::dr::Builder::new();
        b.capability(rspirv::spirv::Capability::Kernel);
        b.memory_model(
            rspirv::spirv::AddressingModel::Physical64,
            rspirv::spirv::MemoryModel::OpenCL,
        );
        // 32-bit literals: rspirv decodes them whatever the result type
        // names, so only the rule refuses these modules.
        let int = b.type_int(32, 1);
        let float = b.type_float(32, None);
        let other = b.spec_constant_bit32(int, 1);
        let sc = b.spec_constant_bit32(float, 7);
        b.decorate(sc, Decoration::SpecId, [Operand::LiteralBit32(0)]);
        let mut m = b.module();
        let at = m
            .types_global_values
            .iter()
            .position(|i| i.result_id == Some(sc))
            .unwrap();
        match breaking {
            0 => {}
            1 => m.types_global_values[at].result_type = Some(other),
            2 => m.types_global_values[at].result_type = Some(999),
            _ => {
                // The float type moved after the constant.
                let ty = m
                    .types_global_values
                    .iter()
                    .position(|i| i.result_id == Some(float))
                    .unwrap();
                let t: Instruction = m.types_global_values.remove(ty);
                m.types_global_values.push(t);
                let _ = Op::Nop;
            }
        }
        m.header.as_mut().unwrap().bound = 1000;
        m.assemble().iter().flat_map(|w| w.to_le_bytes()).collect()
    };
    assert_eq!(
        read(&module(0), &names).unwrap().len(),
        1,
        "the rule kept: it reads"
    );
    for breaking in 1..=3 {
        let bytes = module(breaking);
        let e = read(&bytes, &names).unwrap_err().to_string();
        assert!(
            e.contains("is not a type declared before it"),
            "{breaking}: {e}"
        );
        for freeze in [false, true] {
            assert!(specialize(&bytes, &[], freeze).is_err(), "{breaking}");
        }
    }
}
