use super::*;

/// A kernel of NVRTC's shape: `k(float *out, int n, float scale, coeff_t c
/// (12 bytes), char flag, long long big)`.
const KERNEL: &str = r#".version 8.0
.target sm_90
.address_size 64

.visible .entry k(
	.param .u64 k_param_0,
	.param .u32 k_param_1,
	.param .f32 k_param_2,
	.param .align 4 .b8 k_param_3[12],
	.param .u8 k_param_4,
	.param .s64 k_param_5
)
{
	.reg .pred 	%p<2>;
	.reg .b16 	%rs<2>;
	.reg .b32 	%r<3>;
	.reg .f32 	%f<6>;
	.reg .b64 	%rd<4>;

	ld.param.u64 	%rd1, [k_param_0];
	ld.param.u32 	%r1, [k_param_1];
	ld.param.f32 	%f1, [k_param_2];
	ld.param.v2.f32 	{%f2, %f3}, [k_param_3];
	ld.param.f32 	%f4, [k_param_3+8];
	ld.param.s8 	%rs1, [k_param_4];
	ld.param.s64 	%rd2, [k_param_5];
	cvta.to.global.u64 	%rd3, %rd1;
	add.f32 	%f5, %f1, %f2;
	st.global.f32 	[%rd3], %f5;
	ret;
}
"#;

fn params() -> KernelParams {
    KernelParams::from_ptx(KERNEL, "k").unwrap()
}

#[test]
fn parameters_are_read_from_the_declaration_and_pointers_from_their_use() {
    assert_eq!(
        params().params(),
        &[
            ParamKind::Pointer,
            ParamKind::Int {
                bits: 32,
                signed: false
            },
            ParamKind::Float { bits: 32 },
            ParamKind::Aggregate { size: 12, align: 4 },
            ParamKind::Int {
                bits: 8,
                signed: false
            },
            ParamKind::Int {
                bits: 64,
                signed: true
            },
        ]
    );
    let e = KernelParams::from_ptx(KERNEL, "other").unwrap_err();
    assert_eq!(
        e.to_string(),
        "no kernel other is defined in the PTX (it defines k)"
    );
}

/// Values of each kind: accepted with their bytes, or refused naming the
/// parameter, what it holds and why.
#[test]
fn values_are_parsed_by_what_the_parameter_holds() {
    let p = params();
    let ok = |i: usize, text: &str| p.value(i, text).unwrap();
    assert_eq!(ok(1, "16"), 16u32.to_le_bytes());
    assert_eq!(ok(1, "0x10"), 16u32.to_le_bytes());
    assert_eq!(ok(1, "-1"), [0xff; 4]);
    assert_eq!(ok(1, "4294967295"), [0xff; 4]);
    assert_eq!(ok(1, "-2147483648"), (-2147483648i32).to_le_bytes());
    assert_eq!(ok(2, "0.5"), 0.5f32.to_le_bytes());
    assert_eq!(ok(4, "-128"), [0x80]);
    assert_eq!(ok(5, "-3"), (-3i64).to_le_bytes());
    assert_eq!(
        ok(3, "bytes:000102030405060708090a0b"),
        (0..12).collect::<Vec<u8>>()
    );
    assert_eq!(ok(1, "bytes:10000000"), 16u32.to_le_bytes());
    for (i, text, says) in [
        (1, "4294967296", "does not fit 32 bits"),
        (1, "-2147483649", "does not fit 32 bits"),
        (4, "256", "does not fit 8 bits"),
        (1, "sixteen", "is not an integer"),
        (1, "1.5", "is not an integer"),
        (2, "half", "is not a number"),
        (3, "7", "write bytes: and its 12 bytes"),
        (3, "bytes:00", "is not 12 bytes"),
        (1, "bytes:zz000000", "not a hexadecimal digit"),
        (0, "0", "holds a pointer"),
        (
            6,
            "1",
            "has 6 parameter(s), numbered from 0: there is no parameter 6",
        ),
    ] {
        let e = p.value(i, text).unwrap_err().to_string();
        assert!(e.contains(says), "{i}={text}: {e}");
        assert!(e.contains("kernel k"), "{e}");
    }
}

#[test]
fn a_parameter_fixed_twice_or_with_the_wrong_size_is_refused() {
    let p = params();
    let twice = FixedArguments::new(&p, vec![(1, vec![1, 0, 0, 0]), (1, vec![2, 0, 0, 0])]);
    assert!(matches!(twice, Err(ArgumentError::Twice { index: 1, .. })));
    let short = FixedArguments::new(&p, vec![(2, vec![0; 2])]).unwrap_err();
    assert!(short.to_string().contains("are not its 4 bytes"), "{short}");
    let pointer = FixedArguments::new(&p, vec![(0, vec![0; 8])]).unwrap_err();
    assert!(pointer.to_string().contains("pointer"), "{pointer}");
}

/// Each load of a fixed parameter becomes moves of its value into the
/// same registers (vector loads lane by lane, aggregates at their offsets,
/// signed bytes sign-extended to the register); nothing else changes.
#[test]
fn loads_of_fixed_parameters_become_moves_byte_for_byte() {
    let p = params();
    let bytes: Vec<u8> = [1.0f32, 2.0, 3.0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    let fixed = FixedArguments::new(
        &p,
        vec![
            (1, 16u32.to_le_bytes().to_vec()),
            (3, bytes),
            (4, vec![0xfe]),
            (5, (-3i64).to_le_bytes().to_vec()),
            (2, 0.5f32.to_le_bytes().to_vec()),
        ],
    )
    .unwrap();
    let out = fixed.in_ptx(KERNEL).unwrap();
    let want = KERNEL
        .replace("ld.param.u32 \t%r1, [k_param_1];", "mov.b32 %r1, 0x10;")
        .replace(
            "ld.param.f32 \t%f1, [k_param_2];",
            "mov.b32 %f1, 0x3f000000;",
        )
        .replace(
            "ld.param.v2.f32 \t{%f2, %f3}, [k_param_3];",
            "mov.b32 %f2, 0x3f800000; mov.b32 %f3, 0x40000000;",
        )
        .replace(
            "ld.param.f32 \t%f4, [k_param_3+8];",
            "mov.b32 %f4, 0x40400000;",
        )
        .replace("ld.param.s8 \t%rs1, [k_param_4];", "mov.b16 %rs1, 0xfffe;")
        .replace(
            "ld.param.s64 \t%rd2, [k_param_5];",
            "mov.b64 %rd2, 0xfffffffffffffffd;",
        );
    assert_ne!(want, KERNEL);
    assert_eq!(out, want);
}

#[test]
fn a_fixed_parameter_used_other_than_by_a_load_is_refused() {
    let taken = KERNEL.replace(
        "ld.param.u32 \t%r1, [k_param_1];",
        "mov.u64 \t%rd2, k_param_1;",
    );
    let p = KernelParams::from_ptx(&taken, "k").unwrap();
    let fixed = FixedArguments::new(&p, vec![(1, vec![0; 4])]).unwrap();
    let e = fixed.in_ptx(&taken).unwrap_err().to_string();
    assert!(
        e.contains("parameter 1 of kernel k cannot be fixed")
            && e.contains("other than by loading it (mov.u64"),
        "{e}"
    );
}

/// The wrapper's NVVM IR, written out: the kernel's parameters, the fixed
/// ones replaced by literals (an aggregate by a local copy of its bytes),
/// kept by llvm.used, marked a kernel.
#[test]
fn the_wrapper_calls_the_kernel_with_the_literals() {
    let p = params();
    let fixed = FixedArguments::new(
        &p,
        vec![
            (1, 16u32.to_le_bytes().to_vec()),
            (3, (0..12).collect()),
            (2, 0.5f32.to_le_bytes().to_vec()),
            (5, (-3i64).to_le_bytes().to_vec()),
        ],
    )
    .unwrap();
    let ir = fixed.wrapper_ir((2, 0, 3, 2));
    let sig = "i8*, i32, float, [12 x i8]* byval align 4, i8, i64";
    assert!(ir.contains(&format!("declare void @\"k\"({sig})")), "{ir}");
    assert!(
        ir.contains(
            "define void @\"ptxspec_fixed_arguments__k\"(i8* %a0, i32 %a1, float %a2, [12 x i8]* byval align 4 %a3, i8 %a4, i64 %a5) {"
        ),
        "{ir}"
    );
    assert!(
        ir.contains(
            "  store [12 x i8] c\"\\00\\01\\02\\03\\04\\05\\06\\07\\08\\09\\0A\\0B\", [12 x i8]* %c3, align 4"
        ),
        "{ir}"
    );
    assert!(
        ir.contains(
            "  call void @\"k\"(i8* %a0, i32 16, float 0x3FE0000000000000, [12 x i8]* byval align 4 %c3, i8 %a4, i64 -3)"
        ),
        "{ir}"
    );
    assert!(ir.contains("!\"kernel\", i32 1}"), "{ir}");
    assert!(ir.contains("@llvm.used"), "{ir}");
    assert!(ir.ends_with("!0 = !{i32 2, i32 0, i32 3, i32 2}\n"), "{ir}");
}

#[test]
fn the_linked_wrapper_is_renamed_to_the_kernel() {
    let p = params();
    let fixed = FixedArguments::new(&p, vec![(1, vec![1, 0, 0, 0])]).unwrap();
    let w = fixed.wrapper_name();
    let linked = format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n\n\t// .globl\t{w}\n.visible .entry {w}(\n\t.param .u32 {w}_param_0\n)\n{{\n\t.reg .b32 %r<2>;\n\tld.param.u32 %r1, [{w}_param_0];\n\tret;\n}}\n"
    );
    let renamed = fixed.renamed(&linked).unwrap();
    assert_eq!(renamed, linked.replace(&w, "k"));
    assert!(!renamed.contains("ptxspec_fixed"));
    // The kernel itself still there: NVVM did not inline it.
    let both = format!("{linked}\n.visible .entry k()\n{{\n\tret;\n}}\n");
    assert!(
        fixed
            .renamed(&both)
            .unwrap_err()
            .to_string()
            .contains("did not inline")
    );
    let neither = ".version 8.0\n.target sm_90\n.address_size 64\n";
    assert!(
        fixed
            .renamed(neither)
            .unwrap_err()
            .to_string()
            .contains("lacks the wrapper")
    );
}

#[test]
fn kernels_with_an_aggregate_parameter_are_fixed_the_ptx_way_only() {
    let p = params();
    let fixed = FixedArguments::new(&p, vec![(1, vec![1, 0, 0, 0])]).unwrap();
    let e = fixed.check_lto().unwrap_err().to_string();
    assert!(
        e.contains("parameter 3 is an aggregate") && e.contains("--via ptx"),
        "{e}"
    );
    let without = KERNEL
        .replace("\t.param .align 4 .b8 k_param_3[12],\n", "")
        .replace("\tld.param.v2.f32 \t{%f2, %f3}, [k_param_3];\n", "")
        .replace("\tld.param.f32 \t%f4, [k_param_3+8];\n", "");
    let p = KernelParams::from_ptx(&without, "k").unwrap();
    assert_eq!(p.params().len(), 5);
    let fixed = FixedArguments::new(&p, vec![(1, vec![1, 0, 0, 0])]).unwrap();
    assert_eq!(fixed.check_lto(), Ok(()));
}

/// Reading every kernel of a module at once (a runtime's per-image cache)
/// gives each kernel what reading it alone gives, for modules of one
/// kernel and of several, with pointers, scalars, aggregates and handlers.
#[test]
fn every_kernel_at_once_is_each_kernel_alone() {
    for ptx in [
        KERNEL,
        include_str!("../../../../kernels/ptx/matmul.ptx"),
        include_str!("../../../../kernels/ptx/scalars.ptx"),
        include_str!("../../../../kernels/ptx/conv3x3.ptx"),
        include_str!("../../../../kernels/ptx/features.ptx"),
        include_str!("../../../../kernels/ptx/handler_only.ptx"),
    ] {
        let all = KernelParams::all_from_ptx(ptx).unwrap();
        assert!(!all.is_empty());
        for params in &all {
            assert_eq!(
                &KernelParams::from_ptx(ptx, params.kernel()).unwrap(),
                params
            );
        }
        let defined = ptx.matches(".entry ").count();
        assert_eq!(all.len(), defined, "one per kernel defined");
    }
    assert!(KernelParams::all_from_ptx("not ptx {").is_err());
}
