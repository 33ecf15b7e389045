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

/// The kernel of [`KERNEL`] with its aggregate an empty tag (one byte,
/// aligned to one).
fn with_a_tag() -> String {
    KERNEL
        .replace(
            ".param .align 4 .b8 k_param_3[12]",
            ".param .align 1 .b8 k_param_3[1]",
        )
        .replace(
            "\tld.param.v2.f32 \t{%f2, %f3}, [k_param_3];\n",
            "\tld.param.u8 \t%rs1, [k_param_3];\n",
        )
        .replace("\tld.param.f32 \t%f4, [k_param_3+8];\n", "")
}

/// The wrapper's NVVM IR, written out: the kernel's parameters, the fixed
/// ones replaced by literals (an empty tag by a value of the tag type,
/// passed by value as NVVM IR passes a kernel's aggregates), kept by
/// llvm.used, marked a kernel.
#[test]
fn the_wrapper_calls_the_kernel_with_the_literals() {
    let ptx = with_a_tag();
    let p = KernelParams::from_ptx(&ptx, "k").unwrap();
    assert_eq!(p.params()[3], ParamKind::Aggregate { size: 1, align: 1 });
    let fixed = FixedArguments::new(
        &p,
        vec![
            (1, 16u32.to_le_bytes().to_vec()),
            (3, vec![1]),
            (2, 0.5f32.to_le_bytes().to_vec()),
            (5, (-3i64).to_le_bytes().to_vec()),
        ],
    )
    .unwrap();
    assert_eq!(fixed.check_lto(), Ok(()), "a tag passes through LTO");
    let ir = fixed.wrapper_ir((2, 0, 3, 2));
    assert!(ir.contains("%ptxspec.tag = type { i8 }\n"), "{ir}");
    let sig = "i8*, i32, float, %ptxspec.tag, i8, i64";
    assert!(ir.contains(&format!("declare void @\"k\"({sig})")), "{ir}");
    assert!(
        ir.contains(
            "define void @\"ptxspec_fixed_arguments__k\"(i8* %a0, i32 %a1, float %a2, %ptxspec.tag %a3, i8 %a4, i64 %a5) {"
        ),
        "{ir}"
    );
    assert!(
        ir.contains(
            "  call void @\"k\"(i8* %a0, i32 16, float 0x3FE0000000000000, %ptxspec.tag { i8 1 }, i8 %a4, i64 -3)"
        ),
        "{ir}"
    );
    assert!(
        ir.contains(&format!(
            "void ({sig})* @\"ptxspec_fixed_arguments__k\", !\"kernel\", i32 1}}"
        )),
        "{ir}"
    );
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
        e.contains("parameter 3 is an aggregate of 12 bytes passed by value")
            && e.contains("does not record")
            && e.contains("--via ptx"),
        "{e}"
    );
    // Aggregates of every other shape are refused too; a tag is not.
    for (decl, ok) in [
        (".param .align 1 .b8 k_param_3[1]", true),
        (".param .align 1 .b8 k_param_3[2]", false),
        (".param .align 4 .b8 k_param_3[4]", false),
        (".param .align 8 .b8 k_param_3[8]", false),
        (".param .align 2 .b8 k_param_3[1]", false),
    ] {
        let ptx = KERNEL
            .replace(".param .align 4 .b8 k_param_3[12]", decl)
            .replace("\tld.param.v2.f32 \t{%f2, %f3}, [k_param_3];\n", "")
            .replace("\tld.param.f32 \t%f4, [k_param_3+8];\n", "");
        let p = KernelParams::from_ptx(&ptx, "k").unwrap();
        let fixed = FixedArguments::new(&p, vec![(1, vec![1, 0, 0, 0])]).unwrap();
        assert_eq!(fixed.check_lto().is_ok(), ok, "{decl}");
    }
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

/// A kernel `k(.u64 a, .u64 b, .align 8 .b8 s[16])` with `body` after the
/// loads of `a` into `%rd1`, `b` into `%rd2` and `s`'s two 8-byte halves
/// into `%rd3` and `%rd4` (and a declaration of a function `g` taking a
/// 64-bit parameter).
fn kernel_using(body: &str) -> String {
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n\
         .extern .func g(.param .b64 g_param_0);\n\
         .visible .global .align 8 .u64 kept;\n\
         .visible .entry k(.param .u64 a, .param .u64 b, .param .align 8 .b8 s[16])\n{{\n\
         .reg .pred %p<4>;\n.reg .b32 %r<8>;\n.reg .f32 %f<4>;\n.reg .b64 %rd<16>;\n\
         ld.param.u64 %rd1, [a];\nld.param.u64 %rd2, [b];\n\
         ld.param.v2.u64 {{%rd3, %rd4}}, [s];\n{body}\nret;\n}}\n"
    )
}

/// Every way a kernel's code can turn a parameter into an address — or
/// lose it where the analysis cannot follow — makes the parameter one that
/// may hold an address (a pointer: never fixed, never given a number at a
/// launch); the ways a number is used keep it a number. Each shape is
/// checked for `a` (a scalar) and, moved into `%rd1` from the aggregate's
/// first half, for `s`.
#[test]
fn a_parameter_that_may_become_an_address_is_a_pointer_whatever_the_route() {
    let addresses = [
        ("dereferenced", "ld.u32 %r1, [%rd1];"),
        ("dereferenced at an offset", "ld.global.u32 %r1, [%rd1+16];"),
        (
            "made global",
            "cvta.to.global.u64 %rd5, %rd1;\nst.global.u32 [%rd5], %r1;",
        ),
        (
            "moved, then dereferenced",
            "mov.b64 %rd6, %rd1;\nst.u32 [%rd6], %r1;",
        ),
        (
            "added to, then dereferenced",
            "add.s64 %rd6, %rd1, 64;\nld.u32 %r1, [%rd6];",
        ),
        (
            "stored as a value",
            "cvta.to.global.u64 %rd5, %rd2;\nst.global.u64 [%rd5], %rd1;",
        ),
        ("stored to a variable", "st.global.u64 [kept], %rd1;"),
        (
            "passed to a function",
            "{\n.param .b64 param0;\nst.param.b64 [param0], %rd1;\ncall.uni g, (param0);\n}",
        ),
        (
            "split and put together",
            "mov.b64 {%r1, %r2}, %rd1;\nmov.b64 %rd7, {%r1, %r2};\nld.u32 %r3, [%rd7];",
        ),
        (
            "chosen by selp",
            "setp.eq.s32 %p1, %r4, 0;\nselp.b64 %rd8, %rd1, %rd2, %p1;\nld.u32 %r3, [%rd8];",
        ),
        (
            "given to an atomic",
            "cvta.to.global.u64 %rd5, %rd2;\natom.global.exch.b64 %rd9, [%rd5], %rd1;",
        ),
        (
            "used by an instruction the analysis does not know",
            "vote.sync.any.pred %p2, %p1, -1;\nmov.b64 %rd9, %rd1;\nprefetch.global.L2 [%rd9];",
        ),
        (
            "widened and carried",
            "cvt.u64.u64 %rd10, %rd1;\nld.u8 %r1, [%rd10];",
        ),
    ];
    for (what, code) in addresses {
        let p = KernelParams::from_ptx(&kernel_using(code), "k").unwrap();
        assert!(p.may_hold_address(0), "a parameter {what}: {code}");
        assert_eq!(p.params()[0], ParamKind::Pointer, "a parameter {what}");
        let in_aggregate = code.replace("%rd1", "%rd3");
        let p = KernelParams::from_ptx(&kernel_using(&in_aggregate), "k").unwrap();
        assert!(
            p.may_hold_address(2),
            "an aggregate's half {what}: {in_aggregate}"
        );
    }
    // Its address taken: whatever is done with it.
    let p = KernelParams::from_ptx(
        &kernel_using("mov.u64 %rd11, a;\nld.u32 %r1, [%rd11];"),
        "k",
    )
    .unwrap();
    assert!(p.may_hold_address(0), "a parameter whose address is taken");
    // Without a body to read, every 8-byte parameter may.
    let declared = ".version 8.0\n.target sm_90\n.address_size 64\n\
        .extern .entry k(.param .u64 a, .param .u32 n, .param .f64 d);\n";
    let m = crate::ptx::parse("k.ptx", declared.to_string()).unwrap();
    let crate::ptx::ItemKind::Function(f) = &m.items.last().unwrap().kind else {
        panic!("no function")
    };
    assert_eq!(
        crate::image::addresses::may_hold_address(&m, f),
        [true, false, true]
    );
    let numbers = [
        ("compared", "setp.lt.u64 %p1, %rd1, 100;"),
        (
            "scaled into an offset",
            "shl.b64 %rd5, %rd1, 2;\ncvta.to.global.u64 %rd6, %rd2;\nadd.s64 %rd7, %rd6, %rd5;\nld.global.u32 %r1, [%rd7];",
        ),
        (
            "multiplied",
            "mul.lo.s64 %rd5, %rd1, 12;\ncvta.to.global.u64 %rd6, %rd2;\nadd.s64 %rd7, %rd6, %rd5;\nst.global.u32 [%rd7], %r1;",
        ),
        (
            "added to a global address as its offset",
            "cvta.to.global.u64 %rd6, %rd2;\nadd.s64 %rd7, %rd6, %rd1;\nld.global.u8 %r1, [%rd7];",
        ),
        ("truncated", "cvt.u32.u64 %r1, %rd1;\nmov.u32 %r2, %r1;"),
        ("converted to a float", "cvt.rn.f32.u64 %f1, %rd1;"),
        ("divided", "div.u64 %rd5, %rd1, 3;\nrem.u64 %rd6, %rd1, 3;"),
        ("multiplied and added", "mad.lo.s64 %rd5, %rd1, 4, %rd2;"),
    ];
    for (what, code) in numbers {
        let p = KernelParams::from_ptx(&kernel_using(code), "k").unwrap();
        assert!(!p.may_hold_address(0), "a parameter {what}: {code}");
        assert_eq!(
            p.params()[0],
            ParamKind::Int {
                bits: 64,
                signed: false
            },
            "a parameter {what}"
        );
    }
}

/// Floats that do not survive as written are refused for `float` and
/// `double` parameters alike — beyond the range (an infinity), or so small
/// they would be zero — while the extremes that fit, zero, and infinities
/// and NaN written as such are taken, bit for bit.
#[test]
fn floats_beyond_their_type_are_refused() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\
        .visible .entry f(.param .f32 a, .param .f64 b)\n{\n.reg .f32 %f<2>;\n.reg .f64 %fd<2>;\n\
        ld.param.f32 %f1, [a];\nld.param.f64 %fd1, [b];\nret;\n}\n";
    let p = KernelParams::from_ptx(ptx, "f").unwrap();
    for (i, text, says) in [
        (0, "1e39", "beyond the range of a 32-bit float"),
        (0, "-1e39", "beyond the range of a 32-bit float"),
        (0, "3.4028236e38", "beyond the range of a 32-bit float"),
        (0, "1e-50", "too small for a 32-bit float"),
        (1, "1e309", "beyond the range of a 64-bit float"),
        (1, "-1e309", "beyond the range of a 64-bit float"),
        (1, "2e-400", "too small for a 64-bit float"),
    ] {
        let e = p.value(i, text).unwrap_err().to_string();
        assert!(e.contains(says), "{i}={text}: {e}");
        assert!(e.contains("kernel f"), "{e}");
    }
    let f32_bits = |i: usize, t: &str| p.value(i, t).unwrap();
    assert_eq!(f32_bits(0, "3.4028235e38"), f32::MAX.to_le_bytes());
    assert_eq!(f32_bits(0, "-3.4028235e38"), f32::MIN.to_le_bytes());
    assert_eq!(f32_bits(0, "1e-45"), f32::from_bits(1).to_le_bytes());
    assert_eq!(f32_bits(0, "0"), 0f32.to_le_bytes());
    assert_eq!(f32_bits(0, "-0.0"), (-0f32).to_le_bytes());
    assert_eq!(f32_bits(0, "inf"), f32::INFINITY.to_le_bytes());
    assert_eq!(f32_bits(0, "-infinity"), f32::NEG_INFINITY.to_le_bytes());
    assert!(f32::from_le_bytes(f32_bits(0, "NaN").try_into().unwrap()).is_nan());
    assert_eq!(
        f32_bits(1, "1.7976931348623157e308"),
        f64::MAX.to_le_bytes()
    );
    assert_eq!(f32_bits(1, "5e-324"), f64::from_bits(1).to_le_bytes());
    assert_eq!(f32_bits(1, "-inf"), f64::NEG_INFINITY.to_le_bytes());
}
