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
    // The loads as NVRTC writes them, as a newer compiler writes them
    // (`ld.param::entry`), and the offset in each way PTX writes an
    // integer (decimal, hexadecimal, octal): the same moves.
    for (load, offset) in [
        ("ld.param", "8"),
        ("ld.param::entry", "8"),
        ("ld.param", "0x8"),
        ("ld.param", "010"),
    ] {
        fixed_loads_become_moves(load, offset);
    }
}

/// [`loads_of_fixed_parameters_become_moves_byte_for_byte`] with the loads
/// spelled `load` and the aggregate's second load at `+offset`.
fn fixed_loads_become_moves(load: &str, offset: &str) {
    let spelled = |text: &str| {
        text.replace("ld.param.", &format!("{load}."))
            .replace("k_param_3+8]", &format!("k_param_3+{offset}]"))
    };
    let kernel = spelled(KERNEL);
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
    let out = fixed.in_ptx(&kernel).unwrap();
    let want = kernel
        .replace(
            &spelled("ld.param.u32 \t%r1, [k_param_1];"),
            "mov.b32 %r1, 0x10;",
        )
        .replace(
            &spelled("ld.param.f32 \t%f1, [k_param_2];"),
            "mov.b32 %f1, 0x3f000000;",
        )
        .replace(
            &spelled("ld.param.v2.f32 \t{%f2, %f3}, [k_param_3];"),
            "mov.b32 %f2, 0x3f800000; mov.b32 %f3, 0x40000000;",
        )
        .replace(
            &spelled("ld.param.f32 \t%f4, [k_param_3+8];"),
            "mov.b32 %f4, 0x40400000;",
        )
        .replace(
            &spelled("ld.param.s8 \t%rs1, [k_param_4];"),
            "mov.b16 %rs1, 0xfffe;",
        )
        .replace(
            &spelled("ld.param.s64 \t%rd2, [k_param_5];"),
            "mov.b64 %rd2, 0xfffffffffffffffd;",
        );
    assert_ne!(want, kernel, "{load} at +{offset}");
    assert_eq!(out, want, "{load} at +{offset}");
}

/// A load wider than a register of the moves (`.b128`), or of a type the
/// moves do not write, is refused as a use other than a load — never a
/// panic, never a wrong value.
#[test]
fn a_fixed_parameter_loaded_as_128_bits_is_refused() {
    let kernel = ".version 8.3\n.target sm_90\n.address_size 64\n\
        .visible .entry k(.param .u64 out, .param .align 16 .b8 s[16])\n{\n\
        .reg .b64 %rd<4>;\n.reg .b128 %rq<2>;\n\
        ld.param.u64 %rd1, [out];\nld.param.b128 %rq1, [s];\n\
        mov.b128 {%rd2, %rd3}, %rq1;\ncvta.to.global.u64 %rd1, %rd1;\n\
        st.global.u64 [%rd1], %rd2;\nret;\n}\n";
    let p = KernelParams::from_ptx(kernel, "k").unwrap();
    let fixed = FixedArguments::new(&p, vec![(1, vec![7; 16])]).unwrap();
    let e = fixed.in_ptx(kernel).unwrap_err();
    assert!(e.to_string().contains("other than by loading"), "{e}");
}

#[test]
fn a_fixed_parameter_used_other_than_by_a_load_is_refused() {
    let taken = KERNEL.replace(
        "ld.param.u32 \t%r1, [k_param_1];",
        "mov.u64 \t%rd2, k_param_1;",
    );
    // Its address taken: the analysis a safe launch asks says it may hold
    // an address (whatever its size), so it is refused before any rewrite.
    let p = KernelParams::from_ptx(&taken, "k").unwrap();
    assert!(p.may_hold_address(1));
    let e = FixedArguments::new(&p, vec![(1, vec![0; 4])])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("parameter 1 of kernel k cannot be fixed") && e.contains("as an address"),
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
    kernel_loading_with(body, "ld.param")
}

/// [`kernel_using`] with its parameters loaded by `load` (`ld.param`, or a
/// newer compiler's `ld.param::entry`: the same loads).
fn kernel_loading_with(body: &str, load: &str) -> String {
    let text = format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n\
         .extern .func g(.param .b64 g_param_0);\n\
         .visible .global .align 8 .u64 kept;\n\
         .visible .entry k(.param .u64 a, .param .u64 b, .param .align 8 .b8 s[16])\n{{\n\
         .reg .pred %p<4>;\n.reg .b16 %rs<10>;\n.reg .b32 %r<8>;\n.reg .f32 %f<4>;\n\
         .reg .f64 %fd<4>;\n.reg .b64 %rd<16>;\n\
         ld.param.u64 %rd1, [a];\nld.param.u64 %rd2, [b];\n\
         ld.param.v2.u64 {{%rd3, %rd4}}, [s];\n{body}\nret;\n}}\n"
    );
    text.replace("ld.param.", &format!("{load}."))
}

/// Ways a kernel's code turns the 64-bit value in `%rd1` back into an
/// address: each makes the parameter one that may hold an address. The
/// analysis fails closed (the trust model): the value is followed through
/// every operation, so identity arithmetic, halves put back together, a
/// float round trip and a difference with a real address added to it again
/// are all seen through.
const ESCAPES: &[(&str, &str)] = &[
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
        "passed to a function",
        "{\n.param .b64 param0;\nst.param.b64 [param0], %rd1;\ncall.uni g, (param0);\n}",
    ),
    (
        "spilled to local memory, read back and dereferenced",
        "mov.u64 %rd12, 0;\nst.local.u64 [%rd12], %rd1;\nld.local.u64 %rd13, [%rd12];\n\
         ld.u32 %r1, [%rd13];",
    ),
    (
        "split and put together",
        "mov.b64 {%r1, %r2}, %rd1;\nmov.b64 %rd7, {%r1, %r2};\nld.u32 %r3, [%rd7];",
    ),
    (
        "cut into 32-bit halves, shifted and or-ed back",
        "cvt.u32.u64 %r1, %rd1;\nshr.u64 %rd5, %rd1, 32;\ncvt.u32.u64 %r2, %rd5;\n\
         cvt.u64.u32 %rd6, %r1;\ncvt.u64.u32 %rd7, %r2;\nshl.b64 %rd8, %rd7, 32;\n\
         or.b64 %rd9, %rd8, %rd6;\nld.u32 %r3, [%rd9];",
    ),
    (
        "chosen by selp",
        "setp.eq.s32 %p1, %r4, 0;\nselp.b64 %rd8, %rd1, %rd2, %p1;\nld.u32 %r3, [%rd8];",
    ),
    (
        "used by an instruction the analysis does not know",
        "frobnicate.b64 %rd9, %rd1;",
    ),
    (
        "prefetched",
        "vote.sync.any.pred %p2, %p1, -1;\nmov.b64 %rd9, %rd1;\nprefetch.global.L2 [%rd9];",
    ),
    (
        "widened and carried",
        "cvt.u64.u64 %rd10, %rd1;\nld.u8 %r1, [%rd10];",
    ),
    (
        "multiplied by one",
        "mul.lo.s64 %rd5, %rd1, 1;\nld.u32 %r1, [%rd5];",
    ),
    (
        "shifted by zero",
        "shl.b64 %rd5, %rd1, 0;\nld.u32 %r1, [%rd5];",
    ),
    (
        "divided by one",
        "div.u64 %rd5, %rd1, 1;\nld.u32 %r1, [%rd5];",
    ),
    (
        "multiplied by one and zero added",
        "mad.lo.s64 %rd5, %rd1, 1, 0;\nld.u32 %r1, [%rd5];",
    ),
    (
        "through a double and back",
        "cvt.rn.f64.u64 %fd1, %rd1;\ncvt.rzi.u64.f64 %rd5, %fd1;\nld.u32 %r1, [%rd5];",
    ),
    (
        "a tagged pointer stripped by a shift pair",
        "shl.b64 %rd5, %rd1, 16;\nshr.u64 %rd6, %rd5, 16;\nld.u32 %r1, [%rd6];",
    ),
    (
        "the base plus its difference with the base",
        "cvta.to.global.u64 %rd5, %rd2;\nsub.s64 %rd6, %rd1, %rd5;\nadd.s64 %rd7, %rd5, %rd6;\n\
         ld.global.u32 %r1, [%rd7];",
    ),
    (
        "begin[(end - begin) - 1]",
        "cvta.to.global.u64 %rd5, %rd2;\nsub.s64 %rd6, %rd1, %rd5;\nshr.s64 %rd7, %rd6, 2;\n\
         add.s64 %rd8, %rd7, -1;\nshl.b64 %rd9, %rd8, 2;\nadd.s64 %rd10, %rd5, %rd9;\n\
         ld.global.u32 %r1, [%rd10];",
    ),
    (
        "the end of a range, the base made global after the difference",
        "sub.s64 %rd6, %rd1, %rd2;\nshr.s64 %rd7, %rd6, 2;\nadd.s64 %rd8, %rd7, -1;\n\
         shl.b64 %rd9, %rd8, 2;\ncvta.to.global.u64 %rd5, %rd2;\nadd.s64 %rd10, %rd5, %rd9;\n\
         ld.global.u32 %r1, [%rd10];",
    ),
    (
        "added to another parameter, dereferenced",
        "add.s64 %rd5, %rd1, %rd2;\nld.u32 %r1, [%rd5];",
    ),
    (
        "indexed, then the base taken away",
        "cvta.to.global.u64 %rd5, %rd2;\nadd.s64 %rd6, %rd5, %rd1;\nsub.s64 %rd7, %rd6, %rd5;\n\
         ld.u32 %r1, [%rd7];",
    ),
    (
        "indexed, then an address's negation added",
        "cvta.to.global.u64 %rd5, %rd2;\nneg.s64 %rd6, %rd5;\nadd.s64 %rd7, %rd5, %rd1;\n\
         add.s64 %rd8, %rd7, %rd6;\nld.u32 %r1, [%rd8];",
    ),
];

/// Ways a kernel's code uses the 64-bit value in `%rd1` as a number: none
/// makes the parameter one that may hold an address (the controls of the
/// fail-closed analysis: a bound, an offset, data written to memory).
const NUMBERS: &[(&str, &str)] = &[
    ("compared", "setp.lt.u64 %p1, %rd1, 100;"),
    (
        "an index into a variable",
        "mov.u64 %rd5, kept;\nadd.s64 %rd6, %rd5, %rd1;\nld.global.u32 %r1, [%rd6];",
    ),
    (
        "an index into a variable past its start",
        "mov.u64 %rd5, kept+8;\nadd.s64 %rd6, %rd5, %rd1;\nld.global.u32 %r1, [%rd6];",
    ),
    (
        "a loop's bound",
        "mov.u64 %rd5, 0;\n$L_loop:\nadd.s64 %rd5, %rd5, 1;\nsetp.lt.u64 %p1, %rd5, %rd1;\n\
         @%p1 bra $L_loop;",
    ),
    (
        "scaled into an offset",
        "shl.b64 %rd5, %rd1, 2;\ncvta.to.global.u64 %rd6, %rd2;\nadd.s64 %rd7, %rd6, %rd5;\n\
         ld.global.u32 %r1, [%rd7];",
    ),
    (
        "multiplied",
        "mul.lo.s64 %rd5, %rd1, 12;\ncvta.to.global.u64 %rd6, %rd2;\nadd.s64 %rd7, %rd6, %rd5;\n\
         st.global.u32 [%rd7], %r1;",
    ),
    (
        "added to a global address as its offset",
        "cvta.to.global.u64 %rd6, %rd2;\nadd.s64 %rd7, %rd6, %rd1;\nld.global.u8 %r1, [%rd7];",
    ),
    (
        "an index from the end",
        "add.s64 %rd5, %rd1, -1;\nshl.b64 %rd6, %rd5, 2;\ncvta.to.global.u64 %rd7, %rd2;\n\
         add.s64 %rd8, %rd7, %rd6;\nld.global.u32 %r1, [%rd8];",
    ),
    ("truncated", "cvt.u32.u64 %r1, %rd1;\nmov.u32 %r2, %r1;"),
    ("converted to a float", "cvt.rn.f32.u64 %f1, %rd1;"),
    ("divided", "div.u64 %rd5, %rd1, 3;\nrem.u64 %rd6, %rd1, 3;"),
    ("multiplied and added", "mad.lo.s64 %rd5, %rd1, 4, %rd2;"),
    (
        "stored as a value",
        "cvta.to.global.u64 %rd5, %rd2;\nst.global.u64 [%rd5], %rd1;",
    ),
    ("stored to a variable", "st.global.u64 [kept], %rd1;"),
    (
        "added atomically",
        "cvta.to.global.u64 %rd5, %rd2;\natom.global.add.u64 %rd9, [%rd5], %rd1;",
    ),
    (
        "exchanged atomically",
        "cvta.to.global.u64 %rd5, %rd2;\natom.global.exch.b64 %rd9, [%rd5], %rd1;",
    ),
    (
        "reduced",
        "cvta.to.global.u64 %rd5, %rd2;\nred.global.add.u64 [%rd5], %rd1;",
    ),
    (
        "a product stored",
        "mul.lo.s64 %rd5, %rd1, %rd1;\ncvta.to.global.u64 %rd6, %rd2;\nst.global.u64 [%rd6+8], %rd5;",
    ),
];

/// `code` with register `from` (not `from` followed by digits) renamed `to`.
fn renamed(code: &str, from: &str, to: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find(from) {
        let after = &rest[at + from.len()..];
        out.push_str(&rest[..at]);
        match after.starts_with(|c: char| c.is_ascii_digit()) {
            true => out.push_str(from),
            false => out.push_str(to),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The escapes and the controls, for `a` (a scalar) and, moved into `%rd1`
/// from the aggregate's first half, for `s`: each escape makes the
/// parameter one that may hold an address (a pointer: never fixed, never
/// given a number at a launch), each control keeps it a number.
#[test]
fn a_parameter_that_may_become_an_address_is_a_pointer_whatever_the_route() {
    for load in ["ld.param", "ld.param::entry"] {
        the_escapes_and_the_controls_loaded_by(load);
    }
}

/// [`a_parameter_that_may_become_an_address_is_a_pointer_whatever_the_route`]
/// with the parameters loaded by `load`.
fn the_escapes_and_the_controls_loaded_by(load: &str) {
    let kernel_using = |code: &str| kernel_loading_with(code, load);
    for (what, code) in ESCAPES {
        let p = KernelParams::from_ptx(&kernel_using(code), "k").unwrap();
        assert!(p.may_hold_address(0), "a parameter {what}: {code}");
        assert_eq!(p.params()[0], ParamKind::Pointer, "a parameter {what}");
        let in_aggregate = renamed(code, "%rd1", "%rd3");
        let p = KernelParams::from_ptx(&kernel_using(&in_aggregate), "k").unwrap();
        assert!(
            p.may_hold_address(2),
            "an aggregate's half {what}: {in_aggregate}"
        );
    }
    for (what, code) in NUMBERS {
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
        let in_aggregate = renamed(code, "%rd1", "%rd3");
        let p = KernelParams::from_ptx(&kernel_using(&in_aggregate), "k").unwrap();
        assert!(!p.may_hold_address(2), "an aggregate's half {what}");
    }
    // Its address taken: whatever is done with it.
    let p = KernelParams::from_ptx(
        &kernel_using("mov.u64 %rd11, a;\nld.u32 %r1, [%rd11];"),
        "k",
    )
    .unwrap();
    assert!(p.may_hold_address(0), "a parameter whose address is taken");
    // Without a body to read, every parameter may.
    let declared = ".version 8.0\n.target sm_90\n.address_size 64\n\
        .extern .entry k(.param .u64 a, .param .u32 n, .param .f64 d);\n";
    let m = crate::ptx::parse("k.ptx", declared.to_string()).unwrap();
    let crate::ptx::ItemKind::Function(f) = &m.items.last().unwrap().kind else {
        panic!("no function")
    };
    assert_eq!(
        crate::image::addresses::may_hold_address(&m, f),
        [true, true, true]
    );
}

/// A pointer read other than as one 64-bit integer is still one: two 32-bit
/// loads, a vector load, a float load, a packed struct's bytes — for the
/// scalar `a` and the aggregate `s`; read that way but only compared, each
/// stays a number.
#[test]
fn a_pointer_read_in_pieces_is_still_one() {
    let loads: &[(&str, &str, &str)] = &[
        (
            "two 32-bit loads",
            "ld.param.u32 %r1, [P];\nld.param.u32 %r2, [P+4];\n",
            "mov.b64 %rd9, {%r1, %r2};",
        ),
        (
            "a vector load",
            "ld.param.v2.u32 {%r1, %r2}, [P];\n",
            "mov.b64 %rd9, {%r1, %r2};",
        ),
        (
            "a float load",
            "ld.param.f64 %fd1, [P];\n",
            "mov.b64 %rd9, %fd1;",
        ),
        (
            "byte by byte",
            "ld.param.u8 %rs1, [P];\nld.param.u8 %rs2, [P+1];\nld.param.u8 %rs3, [P+2];\n\
             ld.param.u8 %rs4, [P+3];\n",
            "cvt.u64.u16 %rd5, %rs1;\ncvt.u64.u16 %rd6, %rs2;\nshl.b64 %rd6, %rd6, 8;\n\
             or.b64 %rd7, %rd5, %rd6;\ncvt.u64.u16 %rd8, %rs3;\nshl.b64 %rd8, %rd8, 16;\n\
             cvt.u64.u16 %rd10, %rs4;\nshl.b64 %rd10, %rd10, 24;\nor.b64 %rd11, %rd7, %rd8;\n\
             or.b64 %rd9, %rd11, %rd10;",
        ),
    ];
    for (what, load, combine) in loads {
        for (param, index) in [("a", 0), ("s", 2)] {
            let load = load.replace('P', param);
            let used = format!("{load}{combine}\nld.u32 %r3, [%rd9];");
            let p = KernelParams::from_ptx(&kernel_using(&used), "k").unwrap();
            assert!(p.may_hold_address(index), "{param} read as {what}");
            let compared = format!("{load}{combine}\nsetp.eq.u64 %p1, %rd9, 0;");
            let p = KernelParams::from_ptx(&kernel_using(&compared), "k").unwrap();
            assert!(
                !p.may_hold_address(index),
                "{param} read as {what}, compared"
            );
        }
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

/// The fail-closed analysis stays useful on real code: in every
/// `extern "C"` kernel of this repository's CUDA sources (the examples, the
/// transformer and baseline bench kernels), compiled by NVRTC (the
/// committed PTX), no parameter the C++ declares as a scalar (`int`,
/// `unsigned`, `float`, `double`, `long long`, `size_t` …) may hold an
/// address: each can still be given as a number and fixed. Pointer
/// parameters the kernel dereferences are addresses.
#[test]
fn scalar_parameters_of_real_kernels_stay_numbers() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../kernels");
    let sources = [
        ("matmul.cu", "ptx/matmul.ptx"),
        ("conv3x3.cu", "ptx/conv3x3.ptx"),
        ("scalars.cu", "ptx/scalars.ptx"),
        ("features.cu", "ptx/features.ptx"),
        ("tiny.cu", "ptx/tiny.ptx"),
        ("pod.cu", "ptx/pod.ptx"),
        ("vec_types.cu", "ptx/vec_types.ptx"),
        ("bench/transformer.cu", "ptx/bench/transformer.ptx"),
        ("bench/baselines.cu", "ptx/bench/baselines.ptx"),
    ];
    let (mut numbers, mut pointers) = (0, 0);
    // As NVRTC wrote them, and as every post-link form rewrote them: the
    // getters made loads from a global buffer or the parameter space, or
    // immediates of the defaults (ahead of time).
    use crate::postlink::{BufferPlacement, Mode, Options};
    let forms = [
        None,
        Some((Mode::Emulated, BufferPlacement::Global)),
        Some((Mode::Emulated, BufferPlacement::Param)),
        Some((Mode::Aot, BufferPlacement::Auto)),
    ];
    for (cu, ptx) in sources {
        let cu_text = std::fs::read_to_string(root.join(cu)).unwrap();
        let ptx_text = std::fs::read_to_string(root.join(ptx)).unwrap();
        let texts: Vec<(String, String)> = forms
            .iter()
            .flat_map(|form| match form {
                None => vec![("as compiled".to_string(), ptx_text.clone())],
                Some((mode, buffer)) => {
                    let opts = Options {
                        mode: *mode,
                        buffer: *buffer,
                        ..Default::default()
                    };
                    crate::postlink::post_link(vec![(ptx.to_string(), ptx_text.clone())], &opts)
                        .map(|images| {
                            images
                                .into_iter()
                                .map(|i| (format!("{mode:?} {buffer:?}"), i.ptx))
                                .collect()
                        })
                        .unwrap_or_default()
                }
            })
            .collect();
        for (form, ptx_text) in &texts {
            for (kernel, params) in extern_c_kernels(&cu_text) {
                let Ok(p) = KernelParams::from_ptx(ptx_text, &kernel) else {
                    continue;
                };
                for (i, declared) in params.iter().enumerate() {
                    let is_pointer = declared.contains('*');
                    let scalar = !is_pointer
                        && declared
                            .split_whitespace()
                            .any(|w| SCALARS.contains(&w.trim_start_matches("const")));
                    if scalar {
                        assert!(
                            !p.may_hold_address(i),
                            "{cu} ({form}): {kernel}'s parameter {i} ({declared}) is taken for an address"
                        );
                        numbers += 1;
                    } else if is_pointer && p.may_hold_address(i) {
                        pointers += 1;
                    }
                }
            }
        }
    }
    assert!(
        numbers >= 30 && pointers >= 60,
        "{numbers} numbers, {pointers} pointers"
    );
}

/// The same over every PTX input of the filetests (debug builds among them,
/// whose pointers are used without `cvta`, and kernels calling functions
/// they do not inline), as compiled and post-linked in each form: no 4-byte
/// parameter — an `int` or a `float`, never a pointer in 64-bit code — may
/// hold an address.
#[test]
fn four_byte_parameters_of_the_filetests_stay_numbers() {
    use crate::postlink::{BufferPlacement, Mode, Options};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../filetests");
    let mut checked = 0;
    let mut cases: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    for case in cases.iter().filter(|c| c.is_dir()) {
        let mut inputs: Vec<(String, String)> = std::fs::read_dir(case)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "ptx"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&p).unwrap())
            })
            .collect();
        inputs.sort();
        // Each text with the parameters the runtime fills (a post-linked
        // kernel's handler, which holds the values or their buffer's
        // address): not the caller's, and not asked about here.
        let mut texts: Vec<(String, Vec<(String, usize)>)> = inputs
            .iter()
            .map(|(_, t)| (t.clone(), Vec::new()))
            .collect();
        for (mode, buffer) in [
            (Mode::Emulated, BufferPlacement::Global),
            (Mode::Emulated, BufferPlacement::Param),
            (Mode::Aot, BufferPlacement::Auto),
        ] {
            let opts = Options {
                mode,
                buffer,
                ..Default::default()
            };
            if let Ok(images) = crate::postlink::post_link(inputs.clone(), &opts) {
                texts.extend(images.into_iter().map(|i| {
                    let handlers = i
                        .kernels
                        .iter()
                        .filter_map(|k| Some((k.name.clone(), k.buffer_param()?)))
                        .collect();
                    (i.ptx, handlers)
                }));
            }
        }
        for (text, handlers) in &texts {
            let Ok(all) = KernelParams::all_from_ptx(text) else {
                continue;
            };
            for params in &all {
                for (i, kind) in params.params().iter().enumerate() {
                    let handler = handlers
                        .iter()
                        .any(|(k, at)| k == params.kernel() && *at == i);
                    if kind.size() == 4 && !handler {
                        assert!(
                            !params.may_hold_address(i),
                            "{}: kernel {}'s 4-byte parameter {i} is taken for an address",
                            case.display(),
                            params.kernel()
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 100, "{checked}");
}

/// The C++ scalar type words.
const SCALARS: &[&str] = &[
    "int", "unsigned", "float", "double", "long", "short", "char", "size_t", "int64_t", "uint64_t",
    "int32_t", "uint32_t", "bool",
];

/// `extern "C" __global__ void NAME(PARAMS)` of a CUDA source: each kernel's
/// name and its parameters' declarations, split at top-level commas.
fn extern_c_kernels(src: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(at) = rest.find("extern \"C\" __global__ void ") {
        rest = &rest[at + "extern \"C\" __global__ void ".len()..];
        let Some(open) = rest.find('(') else { break };
        let name = rest[..open].trim().to_string();
        let mut depth = 0;
        let mut params = vec![String::new()];
        for c in rest[open + 1..].chars() {
            match c {
                '(' | '<' => depth += 1,
                '>' => depth -= 1,
                ')' if depth == 0 => break,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    params.push(String::new());
                    continue;
                }
                _ => {}
            }
            if let Some(last) = params.last_mut() {
                last.push(c);
            }
        }
        let params = params
            .into_iter()
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect();
        out.push((name, params));
    }
    out
}

/// Calls are followed into the functions the module defines: the value
/// passed to a function that dereferences it, or returned by one and then
/// dereferenced, is an address; passed to one that only compares it, or
/// returned and compared, a number. A call the analysis cannot read — a
/// recursive one, through a register, to a function only declared — takes
/// the value as an address.
#[test]
fn calls_are_followed_into_the_functions_they_reach() {
    let functions = "\
.visible .func (.param .b64 deref_r) deref(.param .b64 deref_x)\n{\n.reg .b64 %rd<4>;\n\
ld.param.u64 %rd1, [deref_x];\nld.u64 %rd2, [%rd1];\nst.param.b64 [deref_r], %rd2;\nret;\n}\n\
.visible .func (.param .b64 ident_r) ident(.param .b64 ident_x)\n{\n.reg .b64 %rd<4>;\n\
ld.param.u64 %rd1, [ident_x];\nst.param.b64 [ident_r], %rd1;\nret;\n}\n\
.visible .func (.param .b32 cmp_r) cmp(.param .b64 cmp_x)\n{\n.reg .pred %p<2>;\n.reg .b32 %r<2>;\n\
.reg .b64 %rd<2>;\nld.param.u64 %rd1, [cmp_x];\nsetp.lt.u64 %p1, %rd1, 10;\nselp.u32 %r1, 1, 0, %p1;\n\
st.param.b32 [cmp_r], %r1;\nret;\n}\n\
.visible .func rec(.param .b64 rec_x)\n{\n.reg .b64 %rd<2>;\nld.param.u64 %rd1, [rec_x];\n\
{\n.param .b64 param0;\nst.param.b64 [param0], %rd1;\ncall.uni rec, (param0);\n}\nret;\n}\n";
    let kernel = |body: &str| {
        kernel_using(body).replace(
            ".visible .entry k(",
            &format!("{functions}.visible .entry k("),
        )
    };
    let call = |f: &str, ret: &str| {
        format!(
            "{{\n.param .b64 param0;\nst.param.b64 [param0], %rd1;\n.param .b64 retval0;\n\
             call.uni (retval0), {f}, (param0);\nld.param.{ret} %rd5, [retval0];\n}}\n"
        )
    };
    let cases: &[(&str, String, bool)] = &[
        (
            "passed to a function that dereferences it",
            call("deref", "b64"),
            true,
        ),
        (
            "returned by a function, then dereferenced",
            format!("{}ld.u32 %r1, [%rd5];", call("ident", "b64")),
            true,
        ),
        (
            "returned by a function, then compared",
            format!("{}setp.eq.u64 %p1, %rd5, 0;", call("ident", "b64")),
            false,
        ),
        (
            "passed to a function that compares it",
            call("cmp", "b32"),
            false,
        ),
        (
            "passed to a recursive function",
            "{\n.param .b64 param0;\nst.param.b64 [param0], %rd1;\ncall.uni rec, (param0);\n}"
                .into(),
            true,
        ),
        (
            "passed to a function called through a register",
            "mov.u64 %rd9, ident;\n{\n.param .b64 param0;\nst.param.b64 [param0], %rd1;\n\
             .param .b64 retval0;\ncall.uni (retval0), %rd9, (param0), proto;\n}"
                .into(),
            true,
        ),
        ("passed to a function only declared", call("g", "b64"), true),
    ];
    for (what, body, address) in cases {
        let ptx = kernel(body);
        let p = KernelParams::from_ptx(&ptx, "k").unwrap();
        assert_eq!(
            p.may_hold_address(0),
            *address,
            "a parameter {what}:\n{body}"
        );
        // The other parameters are untouched by it.
        assert!(!p.may_hold_address(1), "{what}: b");
    }
}

/// `a` read only through the non-coherent cache, `b` written: the base of
/// the read-only family ([`kernel_using`]: `%rd1` holds `a`, `%rd2` `b`).
const READ_THROUGH_NC: &str = "cvta.to.global.u64 %rd5, %rd1;\n\
     mul.wide.s32 %rd7, %r1, 4;\nadd.s64 %rd8, %rd5, %rd7;\n\
     ld.global.nc.f32 %f1, [%rd8];\nld.global.nc.v2.f32 {%f2, %f3}, [%rd8+16];\n\
     setp.eq.s64 %p1, %rd5, 0;\n\
     cvta.to.global.u64 %rd6, %rd2;\nst.global.f32 [%rd6], %f1;";

/// Whether the kernel reads parameter `index` of [`kernel_using`] `body`
/// only through the non-coherent cache.
fn read_only(body: &str, index: usize) -> bool {
    KernelParams::from_ptx(&kernel_using(body), "k")
        .unwrap()
        .read_only(index)
}

/// A pointer is read-only (for the LTO wrapper's `noalias readonly`) where
/// every access based on it is an `ld.global.nc` — followed through
/// arithmetic and comparisons — and there is one. A generated family: each
/// other way the pointer, or an address made from it, can reach memory,
/// another thread or code the analysis does not read makes it not, alone
/// and after any other instruction of the base.
#[test]
fn a_pointer_is_read_only_where_every_access_is_a_non_coherent_load() {
    assert!(read_only(READ_THROUGH_NC, 0), "a: only ld.global.nc");
    assert!(!read_only(READ_THROUGH_NC, 1), "b: written");
    assert!(!read_only("", 0), "a: never read — no evidence");
    assert!(!read_only(READ_THROUGH_NC, 2), "an aggregate is no pointer");
    let escapes = [
        ("a plain global load", "ld.global.f32 %f2, [%rd8+4];"),
        ("a generic load", "ld.f32 %f2, [%rd1];"),
        ("a load that is not global", "ld.nc.f32 %f2, [%rd8];"),
        ("ldu", "ldu.global.f32 %f2, [%rd8];"),
        ("a store through it", "st.global.f32 [%rd8], %f1;"),
        (
            "a store at an offset of a copy",
            "mov.u64 %rd9, %rd8;\nadd.s64 %rd10, %rd9, 64;\nst.global.v2.f32 [%rd10], {%f1, %f2};",
        ),
        ("an atomic", "atom.global.add.f32 %f2, [%rd8], %f1;"),
        ("a reduction", "red.global.add.f32 [%rd8], %f1;"),
        ("a prefetch", "prefetch.global.L2 [%rd8];"),
        ("cp.async", "cp.async.ca.shared.global [%r2], [%rd8], 4;"),
        ("its value stored", "st.global.u64 [%rd6], %rd8;"),
        ("spilled to local memory", "st.local.u64 [%rd12], %rd1;"),
        (
            "passed to a call",
            "{\n.param .b64 p0;\nst.param.b64 [p0], %rd5;\ncall.uni g, (p0);\n}",
        ),
        (
            "half of it shuffled to another lane",
            "cvt.u32.u64 %r3, %rd5;\nshfl.sync.idx.b32 %r4, %r3, 0, 31, -1;",
        ),
        (
            "an opcode the model does not know",
            "frobnicate.u64 %rd9, %rd5;",
        ),
        ("its address taken", "mov.u64 %rd9, a;"),
        (
            "a register also written from it elsewhere, then stored through",
            "mov.u64 %rd11, %rd6;\nmov.u64 %rd11, %rd8;\nst.global.f32 [%rd11], %f1;",
        ),
        (
            "a texture fetch",
            "tex.1d.v4.f32.s32 {%f1, %f2, %f3, %f4}, [%rd5, {%r1}];",
        ),
    ];
    for (what, escape) in escapes {
        assert!(
            !read_only(&format!("{READ_THROUGH_NC}\n{escape}"), 0),
            "{what}"
        );
        assert!(
            !read_only(&format!("{escape}\n{READ_THROUGH_NC}"), 0),
            "{what}, before the loads"
        );
    }
    // Through another parameter's pointer: both read-only where both are
    // read so; a select between them makes both based on the load.
    let both = "cvta.to.global.u64 %rd5, %rd1;\ncvta.to.global.u64 %rd6, %rd2;\n\
                selp.b64 %rd7, %rd5, %rd6, %p1;\nld.global.nc.f32 %f1, [%rd7];";
    assert!(read_only(both, 0) && read_only(both, 1), "{both}");
    let stored = format!("{both}\nst.global.f32 [%rd6], %f1;");
    assert!(read_only(&stored, 0) && !read_only(&stored, 1), "{stored}");
}

/// The wrapper declares a read-only pointer `noalias readonly` (and the
/// kernel it calls as the kernel is declared); the attributes are part of
/// the cubin's key.
#[test]
fn the_wrapper_carries_read_only_pointers() {
    let ptx = kernel_using(READ_THROUGH_NC).replace(".param .align 8 .b8 s[16]", ".param .u32 n");
    let ptx = ptx.replace(
        "ld.param.v2.u64 {%rd3, %rd4}, [s];",
        "ld.param.u32 %r1, [n];",
    );
    let p = KernelParams::from_ptx(&ptx, "k").unwrap();
    assert_eq!(
        (p.read_only(0), p.read_only(1), p.read_only(2)),
        (true, false, false)
    );
    let fixed = FixedArguments::new(&p, vec![(2, 7u32.to_le_bytes().to_vec())]).unwrap();
    let ir = fixed.wrapper_ir((2, 0, 3, 2));
    assert!(ir.contains("declare void @\"k\"(i8*, i8*, i32)"), "{ir}");
    assert!(
        ir.contains(
            "define void @\"ptxspec_fixed_arguments__k\"(i8* noalias readonly %a0, i8* %a1, i32 %a2) {"
        ),
        "{ir}"
    );
    assert!(
        ir.contains("call void @\"k\"(i8* %a0, i8* %a1, i32 7)"),
        "{ir}"
    );
    let key = |f: &FixedArguments| {
        let mut k = KeyEncoder::new("test");
        f.key(&mut k);
        k.encoded().to_vec()
    };
    let written = ptx.replace("st.global.f32 [%rd6], %f1;", "st.global.f32 [%rd8], %f1;");
    let plain = KernelParams::from_ptx(&written, "k").unwrap();
    assert!(!plain.read_only(0));
    let plain = FixedArguments::new(&plain, vec![(2, 7u32.to_le_bytes().to_vec())]).unwrap();
    assert!(
        plain
            .wrapper_ir((2, 0, 3, 2))
            .contains("(i8* %a0, i8* %a1, i32 %a2)")
    );
    assert_ne!(key(&fixed), key(&plain), "the attributes are in the key");
}

/// On the repository's kernels as NVRTC compiled them: every used
/// `const T *__restrict__` parameter is read-only, and no pointer the
/// kernel may write (not `const`) is.
#[test]
fn restrict_const_pointers_of_real_kernels_are_read_only() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../kernels");
    let (mut read_only, mut written) = (0, 0);
    for (cu, ptx) in [
        ("bench/transformer.cu", "ptx/bench/transformer.ptx"),
        ("bench/baselines.cu", "ptx/bench/baselines.ptx"),
        ("matmul.cu", "ptx/matmul.ptx"),
        ("conv3x3.cu", "ptx/conv3x3.ptx"),
    ] {
        let cu_text = std::fs::read_to_string(root.join(cu)).unwrap();
        let ptx_text = std::fs::read_to_string(root.join(ptx)).unwrap();
        for (kernel, params) in extern_c_kernels(&cu_text) {
            let Ok(p) = KernelParams::from_ptx(&ptx_text, &kernel) else {
                continue;
            };
            for (i, declared) in params.iter().enumerate() {
                if !declared.contains('*') {
                    continue;
                }
                let restrict_const =
                    declared.starts_with("const") && declared.contains("__restrict__");
                if restrict_const {
                    assert!(p.read_only(i), "{cu}: {kernel}'s {declared}");
                    read_only += 1;
                } else if !declared.starts_with("const") {
                    assert!(!p.read_only(i), "{cu}: {kernel}'s {declared}");
                    written += 1;
                }
            }
        }
    }
    assert!(
        read_only >= 10 && written >= 10,
        "{read_only} read-only, {written} written"
    );
}

/// A kernel's `kernel_handler` (8 bytes in PTX, ptxspec's one-pointer
/// class in NVVM IR) passes through the LTO wrapper as that class, once the
/// signature names it; without that, or for another 8-byte aggregate, the
/// LTO way is refused; the handler is never fixed.
#[test]
fn the_handler_passes_through_the_wrapper() {
    let ptx = kernel_using("ld.param.u32 %r1, [n];")
        .replace(".param .u64 b,", ".param .u32 n,")
        .replace("ld.param.u64 %rd2, [b];", "")
        .replace(".param .align 8 .b8 s[16]", ".param .align 8 .b8 s[8]")
        .replace(
            "ld.param.v2.u64 {%rd3, %rd4}, [s];",
            "ld.param.u64 %rd3, [s];",
        );
    let p = KernelParams::from_ptx(&ptx, "k").unwrap();
    assert_eq!(p.params()[2], ParamKind::Aggregate { size: 8, align: 8 });
    let fixed = FixedArguments::new(&p, vec![(1, 64u32.to_le_bytes().to_vec())]).unwrap();
    let refused = fixed.check_lto().unwrap_err().to_string();
    assert!(
        refused.contains("parameter 2 is an aggregate of 8 bytes"),
        "{refused}"
    );
    let fixed = fixed.with_handler(Some(2)).unwrap();
    assert_eq!(fixed.check_lto(), Ok(()));
    let ir = fixed.wrapper_ir((2, 0, 3, 2));
    assert!(ir.contains("%ptxspec.handler = type { i8* }\n"), "{ir}");
    assert!(
        ir.contains("declare void @\"k\"(i64, i32, %ptxspec.handler)"),
        "{ir}"
    );
    assert!(
        ir.contains("call void @\"k\"(i64 %a0, i32 64, %ptxspec.handler %a2)"),
        "{ir}"
    );
    let handler_fixed = FixedArguments::new(&p, vec![(2, vec![0; 8])])
        .unwrap()
        .with_handler(Some(2));
    assert!(
        handler_fixed
            .unwrap_err()
            .to_string()
            .contains("kernel_handler"),
        "the handler is never fixed"
    );
}

/// The read-only analysis follows a value through a chain of moves
/// written in reverse order (each derived only after the one below it) in
/// one pass a register, to its load or its store — the same answers as a
/// short chain (hostile code: a pass over the whole body per link would be
/// quadratic).
#[test]
fn a_long_chain_written_backwards_is_followed() {
    let n = 5000;
    let chain = |last: &str| {
        let mut body = format!(".reg .b64 %c<{}>;\n{last}\n", n + 2);
        // %c1 from %c2 first, …, %c<n+1> from the parameter last: each
        // link's source is derived only after the link is read.
        for k in 1..=n {
            body.push_str(&format!("mov.u64 %c{k}, %c{};\n", k + 1));
        }
        body.push_str(&format!("cvta.to.global.u64 %c{}, %rd1;\n", n + 1));
        body
    };
    assert!(read_only(&chain("ld.global.nc.f32 %f1, [%c1];"), 0));
    assert!(!read_only(
        &chain("ld.global.nc.f32 %f1, [%c1];\nst.global.f32 [%c1+4], %f1;"),
        0
    ));
}
