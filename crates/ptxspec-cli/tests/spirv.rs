//! The SPIR-V side against the real tools: inputs compiled from GLSL with
//! glslang and assembled from the seeds' SPIR-V with spirv-as; every module
//! written or specialized passes spirv-val; the PTX and SPIR-V sides agree.

mod common;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use common::*;
use ptxspec_core::layout::{Descriptor, Layout, Numbering, ScalarKind, SpecConstant, SpecType};
use ptxspec_core::spirv;

fn data(name: &str) -> PathBuf {
    here().join("tests/data/spirv").join(name)
}

/// `spirv-val` accepts the module.
fn validate(bytes: &[u8], what: &str) {
    let dir = tempdir(what);
    let file = dir.join("m.spv");
    std::fs::write(&file, bytes).unwrap();
    run_tool(&spirv_tool("spirv-val"), &[file.as_os_str()], what);
}

fn compile_glsl(name: &str) -> Vec<u8> {
    let out = tempdir(name).join("out.spv");
    let src = data(name);
    run_tool(
        &spirv_tool("glslangValidator"),
        &[
            OsStr::new("-V"),
            src.as_os_str(),
            OsStr::new("-o"),
            out.as_os_str(),
        ],
        name,
    );
    std::fs::read(out).unwrap()
}

fn assemble_spvasm(name: &str) -> Vec<u8> {
    let out = tempdir(name).join("out.spv");
    let src = data(name);
    run_tool(
        &spirv_tool("spirv-as"),
        &[src.as_os_str(), OsStr::new("-o"), out.as_os_str()],
        name,
    );
    std::fs::read(out).unwrap()
}

fn d(id: u32, offset: u32, size: u32) -> Descriptor {
    Descriptor::new(id, offset, size)
}

fn descriptors(c: &[spirv::SpirvConstant]) -> Vec<(&str, Vec<Descriptor>)> {
    c.iter()
        .map(|c| (c.name.as_str(), c.descriptors.clone()))
        .collect()
}

fn seed_modules_give_the_ids_the_seeds_state() {
    // DPC++'s SYCL 2020 spec-constant design's translator example: IDs 42 and {43, 44}.
    let c = spirv::read(&assemble_spvasm("seed001.spvasm"), &HashMap::new()).unwrap();
    assert_eq!(
        descriptors(&c),
        [
            ("get", vec![d(42, 0, 4)]),
            ("get2", vec![d(43, 0, 4), d(44, 4, 4)])
        ]
    );
    // DPC++'s SYCL 1.2.1 spec-constant design's POD: one ID per leaf, 1..6, depth first.
    let c = spirv::read(&assemble_spvasm("seed000_pod.spvasm"), &HashMap::new()).unwrap();
    assert_eq!(
        descriptors(&c),
        [
            ("gold_scalar", vec![d(0, 0, 4)]),
            (
                "gold",
                vec![
                    d(1, 0, 4),
                    d(2, 4, 4),
                    d(3, 8, 4),
                    d(4, 12, 4),
                    d(5, 16, 4),
                    d(6, 20, 4)
                ]
            )
        ]
    );
    let f = |x: f32| x.to_le_bytes();
    let want: Vec<u8> = [
        1i32.to_le_bytes(),
        f(2.0),
        2i32.to_le_bytes(),
        f(3.0),
        44i32.to_le_bytes(),
        44i32.to_le_bytes(),
    ]
    .concat();
    assert_eq!(c[1].default, want);
}

fn glslang_scalars_read_with_their_names() {
    let spv = compile_glsl("scalars.comp");
    let c = spirv::read(&spv, &HashMap::new()).unwrap();
    assert_eq!(
        descriptors(&c),
        [
            ("id_int", vec![d(0, 0, 4)]),
            ("scale", vec![d(3, 0, 4)]),
            ("flag", vec![d(7, 0, 1)]),
            ("count", vec![d(9, 0, 4)])
        ]
    );
    // New defaults keep it specializable and valid; freezing refuses the
    // spec-constant arithmetic glslang emitted, naming it.
    let out = spirv::specialize(
        &spv,
        &[spirv::parse_value(&c, "scale=0.75").unwrap()],
        false,
    )
    .unwrap();
    validate(&out, "scalars specialized");
    let back = spirv::read(&out, &HashMap::new()).unwrap();
    assert_eq!(back[1].default, 0.75f32.to_le_bytes());
    let e = spirv::specialize(&spv, &[], true).unwrap_err();
    assert!(e.to_string().contains("OpSpecConstantOp"), "{e}");
    // Vulkan: a bool leaf is a 4-byte VkBool32.
    let (entries, data) = spirv::vulkan_map_entries(&c, &HashMap::new()).unwrap();
    assert_eq!(
        entries[2],
        spirv::MapEntry {
            constant_id: 7,
            offset: 8,
            size: 4
        }
    );
    assert_eq!(&data[8..12], &1u32.to_le_bytes());
}

fn frozen_modules_are_valid_and_constant() {
    let spv = compile_glsl("direct.comp");
    let c = spirv::read(&spv, &HashMap::new()).unwrap();
    let frozen = spirv::specialize(
        &spv,
        &[spirv::parse_value(&c, "offset_v=17").unwrap()],
        true,
    )
    .unwrap();
    validate(&frozen, "direct frozen");
    assert!(spirv::read(&frozen, &HashMap::new()).unwrap().is_empty());
}

/// The example kernels' declared types, as the PTX tests declare them.
fn s(k: ScalarKind) -> SpecType {
    SpecType::Scalar(k)
}

fn written_modules_are_valid_and_agree_with_the_ptx_side() {
    // The PTX side's constants for the examples, typed as declared.
    let a = SpecType::c_struct([s(ScalarKind::I32), s(ScalarKind::F32)]);
    let pod = SpecType::c_struct([SpecType::array(a, 2), SpecType::vector(ScalarKind::I32, 2)]);
    let padded = SpecType::c_struct([
        s(ScalarKind::I32),
        s(ScalarKind::I8),
        s(ScalarKind::I32),
        s(ScalarKind::I8),
    ]);
    let types: HashMap<&str, SpecType> = HashMap::from([
        ("pod_id", pod),
        ("char_id", s(ScalarKind::I8)),
        ("double_id", s(ScalarKind::F64)),
        ("bool_id", s(ScalarKind::Bool)),
        ("short_id", s(ScalarKind::I16)),
        ("u64_id", s(ScalarKind::U64)),
        ("padded_id", padded),
        // SYCL's vec (OpenCL's vectors in SPIR-V; a 1-element one is its
        // scalar there) and marray.
        ("vec_f3_id", SpecType::sycl_vec(ScalarKind::F32, 3)),
        ("marray_f3_id", SpecType::array(s(ScalarKind::F32), 3)),
        ("vec_i1_id", SpecType::sycl_vec(ScalarKind::I32, 1)),
        ("vec_s2_id", SpecType::sycl_vec(ScalarKind::I16, 2)),
        ("vec_d4_id", SpecType::sycl_vec(ScalarKind::F64, 4)),
        ("vec_u8_id", SpecType::sycl_vec(ScalarKind::U8, 8)),
        ("vec_i16_id", SpecType::sycl_vec(ScalarKind::I32, 16)),
        ("vec_d16_id", SpecType::sycl_vec(ScalarKind::F64, 16)),
        ("marray_c5_id", SpecType::array(s(ScalarKind::I8), 5)),
    ]);
    for example in ["pod", "scalars", "vec_types"] {
        let img = post_link(
            vec![kernel_ptx(example)],
            ptxspec_core::postlink::Mode::Emulated,
            ptxspec_core::postlink::Split::Off,
        )
        .remove(0);
        // Native layout of the same constants with the PTX side's defaults.
        let native = Layout::build(
            Numbering::Native,
            img.layout.constants().iter().map(|p| {
                let id = p.constant.symbolic_id();
                SpecConstant::typed(id, types[id].clone(), p.constant.default_value().to_vec())
                    .unwrap()
            }),
        )
        .unwrap();
        let spv = spirv::write(&native).unwrap();
        validate(&spv, example);
        let back = spirv::read(&spv, &HashMap::new()).unwrap();
        for (p, c) in img.layout.constants().iter().zip(&back) {
            assert_eq!(c.name, p.constant.symbolic_id());
            assert_eq!(
                c.default,
                p.constant.default_value(),
                "{example}: {}",
                c.name
            );
            assert_eq!(
                c.descriptors,
                native.get(&c.name).unwrap().descriptors,
                "{example}: {}",
                c.name
            );
        }
        // Specialized and frozen variants stay valid.
        let first = back[0].name.clone();
        let v = back[0].default.clone();
        validate(
            &spirv::specialize(&spv, &[(first.clone(), v.clone())], false).unwrap(),
            "specialized",
        );
        validate(
            &spirv::specialize(&spv, &[(first, v)], true).unwrap(),
            "frozen",
        );
    }
}

fn cli_inspects_and_specializes() {
    let dir = tempdir("spirv-cli");
    let input = dir.join("seed.spv");
    std::fs::write(&input, assemble_spvasm("seed001.spvasm")).unwrap();
    let out = dir.join("out.spv");
    let set = |v: &'static str| -> [&OsStr; 2] { ["--set".as_ref(), v.as_ref()] };
    let specialize = |sets: &[[&OsStr; 2]], to: &Path| {
        let mut args: Vec<&OsStr> = vec!["specialize".as_ref(), input.as_os_str()];
        args.extend(sets.iter().flatten());
        args.extend(["-o".as_ref(), to.as_os_str()]);
        cli(&args)
    };
    let st = specialize(&[set("get=7"), set("get2=-1,2.5")], &out);
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    validate(&std::fs::read(&out).unwrap(), "cli specialized");
    let json = cli_ok(&["inspect".as_ref(), "--json".as_ref(), out.as_os_str()]);
    assert_eq!(
        String::from_utf8_lossy(&json.stdout),
        "{\"specialization_constants\":{\"get\":[[42,0,4]],\"get2\":[[43,0,4],[44,4,4]]},\
         \"default_values\":\"07000000ffffffff00002040\"}\n"
    );
    // A wrong value is an error naming the constant; nothing is written.
    let bad = dir.join("bad.spv");
    let st = specialize(&[set("get2=1")], &bad);
    assert!(!st.status.success());
    assert!(String::from_utf8_lossy(&st.stderr).contains("'get2'"));
    assert!(!Path::new(&bad).exists());
}

/// Two composites sharing a leaf (one SpecId), given different values for
/// it: an error naming both, never the last value winning silently (issue
/// 32, item 8). Values that agree are fine.
fn composites_sharing_a_leaf_take_one_value_for_it() {
    let module = assemble_spvasm("shared_leaf.spvasm");
    validate(&module, "shared_leaf");
    let v = |a: i32, b: i32| [a.to_le_bytes(), b.to_le_bytes()].concat();
    let e = spirv::specialize(
        &module,
        &[("p".into(), v(10, 20)), ("q".into(), v(30, 40))],
        false,
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("'q'") && msg.contains("'p'") && msg.contains("one SpecId"),
        "{msg}"
    );
    // s = 20 in both: fine, and every leaf has its value.
    let out = spirv::specialize(
        &module,
        &[("p".into(), v(10, 20)), ("q".into(), v(20, 40))],
        false,
    )
    .unwrap();
    validate(&out, "shared_leaf specialized");
    let read = spirv::read(&out, &Default::default()).unwrap();
    let value = |name: &str| {
        read.iter()
            .find(|c| c.name == name)
            .unwrap()
            .default
            .clone()
    };
    assert_eq!(value("p"), v(10, 20));
    assert_eq!(value("q"), v(20, 40));
}

/// A module on which rspirv's parser panics (an operand kind its grammar
/// lists and its parser does not parse; found by `fuzz/run.sh`, target
/// `spirv`): every reader refuses it with an error, in the library and
/// under the CLI, and nothing is written.
fn a_module_rspirvs_parser_panics_on_is_an_error() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/fuzz/spirv_rspirv_panics.spv");
    let bytes = std::fs::read(&path).unwrap();
    let e = spirv::read(&bytes, &Default::default()).unwrap_err();
    assert!(e.to_string().contains("rspirv could not parse"), "{e}");
    for freeze in [false, true] {
        let e = spirv::specialize(&bytes, &[], freeze).unwrap_err();
        assert!(e.to_string().contains("rspirv could not parse"), "{e}");
    }
    let dir = tempdir("spirv-panic");
    let out = dir.join("out.spv");
    for args in [
        vec!["inspect".as_ref(), path.as_os_str()],
        vec![
            "specialize".as_ref(),
            path.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ],
    ] {
        let o = cli(&args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{stderr}");
        assert!(stderr.contains("rspirv could not parse"), "{stderr}");
        assert!(
            !stderr.contains("panicked"),
            "caught, and said once: {stderr}"
        );
    }
    assert!(!out.exists());
}

/// A struct whose member offset is near 2^32 (found by `fuzz/run.sh`,
/// target `spirv`): the 32-bit layout arithmetic overflowed (a panic in a
/// checked build, a wrong layout in a release one). Refused before any
/// layout arithmetic, by read and specialize alike.
fn a_struct_past_what_ptxspec_lays_out_is_refused() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/fuzz/spirv_struct_offset_near_4gib.spv");
    let bytes = std::fs::read(&path).unwrap();
    let e = spirv::read(&bytes, &Default::default()).unwrap_err();
    assert!(e.to_string().contains("a struct larger than"), "{e}");
    assert!(spirv::specialize(&bytes, &[], false).is_err());
}

fn main() -> std::process::ExitCode {
    harness::run(
        "spirv",
        vec![
            (
                "seed_modules_give_the_ids_the_seeds_state",
                seed_modules_give_the_ids_the_seeds_state as fn(),
                harness::SPIRV,
            ),
            (
                "glslang_scalars_read_with_their_names",
                glslang_scalars_read_with_their_names as fn(),
                harness::SPIRV,
            ),
            (
                "frozen_modules_are_valid_and_constant",
                frozen_modules_are_valid_and_constant as fn(),
                harness::SPIRV,
            ),
            (
                "written_modules_are_valid_and_agree_with_the_ptx_side",
                written_modules_are_valid_and_agree_with_the_ptx_side as fn(),
                harness::SPIRV,
            ),
            (
                "cli_inspects_and_specializes",
                cli_inspects_and_specializes as fn(),
                harness::SPIRV,
            ),
            (
                "composites_sharing_a_leaf_take_one_value_for_it",
                composites_sharing_a_leaf_take_one_value_for_it as fn(),
                harness::SPIRV,
            ),
            (
                "a_module_rspirvs_parser_panics_on_is_an_error",
                a_module_rspirvs_parser_panics_on_is_an_error as fn(),
                harness::NOTHING,
            ),
            (
                "a_struct_past_what_ptxspec_lays_out_is_refused",
                a_struct_past_what_ptxspec_lays_out_is_refused as fn(),
                harness::NOTHING,
            ),
        ],
    )
}
