use super::*;
use crate::ptx::interpret::run;
use crate::test_util::Rng;

/// A term of a generated index: what NVVM's address arithmetic adds and
/// multiplies.
#[derive(Clone, Copy, Debug)]
enum Term {
    /// The loop's induction register (from 0, stepped by `step`).
    Induction,
    /// `%tid.x` (at most 1023).
    Thread,
    /// A kernel parameter: any 32 bits.
    Param,
    Imm(i32),
}

/// A kernel whose counted loop (`trips` from the specialized bound, its
/// block marked nounroll) computes, on each trip, `index = a * k + b` (a
/// `mad.lo.s32`), `next = index + c` and both extended (`cvt.s64.s32`),
/// then `mul.wide.s32` of `next` by 4 — the watched registers `%rd1`,
/// `%rd2`, `%rd3`.
fn kernel(a: Term, k: i32, b: Term, c: i32, step: i32, trips: i32) -> String {
    let term = |t: Term, reg: &str| match t {
        Term::Induction => ("".to_string(), "%r20".to_string()),
        Term::Thread => (format!("\tmov.u32 {reg}, %tid.x;\n"), reg.to_string()),
        Term::Param => (
            format!("\tld.param.u32 {reg}, [k_param_0];\n"),
            reg.to_string(),
        ),
        Term::Imm(v) => ("".to_string(), v.to_string()),
    };
    let (def_a, a) = term(a, "%r2");
    let (def_b, b) = term(b, "%r3");
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n\
         .visible .entry k(.param .u32 k_param_0)\n{{\n\
         \t.reg .pred %p<3>;\n\t.reg .b32 %r<30>;\n\t.reg .b64 %rd<9>;\n\
         {def_a}{def_b}\tmov.u32 %r21, {bound};\n\
         \tmov.u32 %r20, 0;\n\tmov.u32 %r22, 0;\n\
         $L__BB0_1:\n\t.pragma \"nounroll\";\n\
         \tmad.lo.s32 %r10, {a}, {k}, {b};\n\tcvt.s64.s32 %rd1, %r10;\n\
         \tadd.s32 %r11, %r10, {c};\n\tcvt.s64.s32 %rd2, %r11;\n\
         \tmul.wide.s32 %rd3, %r11, 4;\n\
         \tadd.s32 %r20, %r20, {step};\n\tadd.s32 %r22, %r22, 1;\n\
         \tsetp.lt.s32 %p1, %r22, %r21;\n\t@%p1 bra $L__BB0_1;\n\tret;\n}}\n",
        bound = trips,
    )
}

/// A generated family of index computations in counted loops — of the
/// induction register, the thread index, a parameter and immediates, with
/// factors and offsets from small to overflowing — widened by the pass and
/// run, before and after, for the thread indices and parameters at their
/// extremes and at random: every extension it distributes gives the same
/// 64-bit values on every trip. Those it may not distribute (a parameter's
/// unbounded value, a sum past 32 bits) it leaves alone; the family holds
/// both kinds.
#[test]
fn distributed_extensions_equal_the_extension_of_the_sum() {
    let mut rng = Rng(0x005e_ed0f_a115);
    let terms = [
        Term::Induction,
        Term::Thread,
        Term::Param,
        Term::Imm(7),
        Term::Imm(-3),
    ];
    let factors = [1, 4, 32, 1024, 1 << 20, -16, i32::MAX / 2];
    let (mut widened, mut left) = (0, 0);
    for round in 0..400 {
        let pick = |rng: &mut Rng, n: usize| rng.below(n as u64) as usize;
        let a = terms[pick(&mut rng, terms.len())];
        let b = terms[pick(&mut rng, terms.len())];
        let k = factors[pick(&mut rng, factors.len())];
        let c = [0, 32, -64, 1 << 30, 96][pick(&mut rng, 5)];
        let step = [1, 4, 16, -8][pick(&mut rng, 4)];
        let trips = [1, 4, 8, 32][pick(&mut rng, 4)];
        let ptx = kernel(a, k, b, c, step, trips);
        let out = widen_sums_in_counted_loops(&ptx, |_, _| true).unwrap();
        if out == ptx {
            left += 1;
            continue;
        }
        widened += 1;
        for sample in 0..12 {
            let tid = match sample {
                0 => 0,
                1 => 1023,
                _ => rng.below(1024),
            };
            let param = match sample {
                0 => 0,
                1 => u64::from(u32::MAX),
                2 => i32::MAX as u64,
                3 => (i32::MIN as u32).into(),
                _ => rng.next() & 0xffff_ffff,
            };
            let inputs = HashMap::from([("%tid.x", tid), ("k_param_0", param)]);
            let watch = ["%rd1", "%rd2", "%rd3"];
            let before = run(&ptx, &inputs, &watch, 10_000);
            let after = run(&out, &inputs, &watch, 10_000);
            assert_eq!(before.len(), 3 * trips as usize, "round {round}");
            assert_eq!(after, before, "round {round}: {a:?} {k} {b:?} {c}\n{out}");
        }
    }
    assert!(widened > 50 && left > 50, "widened {widened}, left {left}");
}

/// NVVM's matmul block loop (unrolled by four for an unknown block, its
/// shared addresses sign-extended sums of the induction register, the
/// thread index and the block): each extension becomes terms, the later
/// ones the first's extension plus the block, and the scaled one a sum of
/// scaled terms.
#[test]
fn the_matmul_block_loop_extends_term_by_term() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\
        .visible .entry k(.param .u32 k_param_0)\n{\n\
        \t.reg .pred %p<5>;\n\t.reg .b32 %r<50>;\n\t.reg .b64 %rd<60>;\n\
        \t{ mov.b32 %r1, 0x00000020; }\n\tmov.u32 %r2, %tid.y;\n\tmov.u32 %r3, %tid.x;\n\
        \tmul.lo.s32 %r7, %r1, %r2;\n\tand.b32 %r9, %r1, 3;\n\tsub.s32 %r10, %r1, %r9;\n\
        \tmov.u32 %r43, 0;\n\tmov.u32 %r42, %r10;\n\
        $L__BB0_5:\n\t.pragma \"nounroll\";\n\
        \tadd.s32 %r32, %r43, %r7;\n\tmul.wide.s32 %rd22, %r32, 4;\n\
        \tmad.lo.s32 %r33, %r43, %r1, %r3;\n\tcvt.s64.s32 %rd25, %r33;\n\
        \tadd.s32 %r34, %r33, %r1;\n\tcvt.s64.s32 %rd29, %r34;\n\
        \tadd.s32 %r43, %r43, 4;\n\tadd.s32 %r42, %r42, -4;\n\
        \tsetp.ne.s32 %p4, %r42, 0;\n\t@%p4 bra $L__BB0_5;\n\tret;\n}\n";
    let out = widen_sums_in_counted_loops(ptx, |_, _| true).unwrap();
    // The temporaries' prefix, as the pass chose it.
    let at = out.find("%pxwd").expect("temporaries");
    let t = &out[at..=at + out[at..].find('_').expect("the prefix's end")];
    for line in [
        format!("mul.wide.s32 {t}0, %r43, 4;"),
        format!("mul.wide.s32 {t}1, %r7, 4;"),
        format!("mul.wide.s32 {t}3, %r43, 32;"),
        format!("cvt.s64.s32 {t}4, %r3;"),
        format!("add.s64 {t}6, %rd25, 32;"),
        format!("mov.b64 %rd29, {t}6;"),
    ] {
        assert!(out.contains(&line), "{line} missing:\n{out}");
    }
    let watch = ["%rd22", "%rd25", "%rd29"];
    for (x, y) in [(0, 0), (1023, 1023), (5, 900)] {
        let inputs = HashMap::from([("%tid.x", x), ("%tid.y", y)]);
        assert_eq!(
            run(&out, &inputs, &watch, 1000),
            run(ptx, &inputs, &watch, 1000)
        );
    }
}

/// What the pass must leave alone: a sum whose terms could overflow (a
/// parameter), a definition before a label (paths join between it and the
/// extension), an operand written again before the extension, a guarded
/// definition, a loop entered again from elsewhere (its induction register's
/// range is not its count's), and a loop whose count is not known.
#[test]
fn extensions_the_ranges_do_not_cover_stay() {
    let base = kernel(Term::Induction, 4, Term::Thread, 32, 1, 8);
    assert_ne!(
        widen_sums_in_counted_loops(&base, |_, _| true).unwrap(),
        base
    );
    let mad = "\tmad.lo.s32 %r10, %r20, 4, %r3;\n";
    let cases = [
        (
            "a parameter",
            kernel(Term::Induction, 4, Term::Param, 32, 1, 8),
        ),
        (
            "a label between",
            base.replace(
                "\tcvt.s64.s32 %rd1, %r10;\n",
                "$L__join:\n\tcvt.s64.s32 %rd1, %r10;\n",
            ),
        ),
        (
            "an operand written again",
            base.replace(mad, &format!("{mad}\tmov.u32 %r3, 0;\n")),
        ),
        (
            "a guarded definition",
            base.replace(mad, "\t@%p2 mad.lo.s32 %r10, %r20, 4, %r3;\n"),
        ),
        (
            "a second entry",
            base.replace(
                "\tmov.u32 %r20, 0;\n",
                "\tmov.u32 %r20, 0;\n\t@%p2 bra $L__BB0_1;\n",
            ),
        ),
        (
            "no count",
            base.replace(
                "\tmov.u32 %r21, 8;\n",
                "\tld.param.u32 %r21, [k_param_0];\n",
            ),
        ),
    ];
    for (what, ptx) in cases {
        let out = widen_sums_in_counted_loops(&ptx, |_, _| true).unwrap();
        assert_eq!(out, ptx, "{what}");
    }
}
