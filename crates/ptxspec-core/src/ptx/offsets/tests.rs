use std::collections::HashMap;

use super::*;
use crate::ptx::interpret::run;
use crate::test_util::Rng;

/// A kernel whose counted loop computes an address the way NVVM's code for
/// an unknown block does after the widening: `%rd5 = base + ((t + C1) op
/// K) + C2`, `t` the extended thread index plus the induction register
/// times 32, and loads from it — the watched registers `%rd5` and `%rd6`
/// (a second address from the first).
fn kernel(c1: i64, op: &str, k: i64, c2: i64, trips: i32) -> String {
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n\
         .visible .entry k(.param .u64 k_param_0)\n{{\n\
         \t.reg .pred %p<3>;\n\t.reg .b32 %r<30>;\n\t.reg .b64 %rd<20>;\n\t.reg .f32 %f<4>;\n\
         \tld.param.u64 %rd1, [k_param_0];\n\tmov.u32 %r3, %tid.x;\n\tcvt.s64.s32 %rd2, %r3;\n\
         \tmov.u32 %r21, {trips};\n\tmov.u32 %r20, 0;\n\tmov.u32 %r22, 0;\n\
         $L__BB0_1:\n\t.pragma \"nounroll\";\n\
         \tmul.wide.s32 %rd9, %r20, 32;\n\tadd.s64 %rd10, %rd9, %rd2;\n\
         \tadd.s64 %rd3, %rd10, {c1};\n\t{op} %rd4, %rd3, {k};\n\tadd.s64 %rd11, %rd1, %rd4;\n\
         \tadd.s64 %rd5, %rd11, {c2};\n\tld.shared.f32 %f1, [%rd5];\n\
         \tsub.s64 %rd6, %rd5, {c1};\n\tld.shared.f32 %f2, [%rd6+8];\n\
         \tadd.s32 %r20, %r20, 4;\n\tadd.s32 %r22, %r22, 1;\n\
         \tsetp.lt.s32 %p1, %r22, %r21;\n\t@%p1 bra $L__BB0_1;\n\tret;\n}}\n"
    )
}

/// A generated family of address chains — additions, subtractions,
/// shifts and products by constants, constants small, negative and near
/// 2^63 — run before and after the pass, for the thread index and the
/// base at their extremes and at random: every address it rewrites holds
/// the same 64-bit value on every trip, and the rewritten ones end in one
/// constant.
#[test]
fn moved_constants_give_the_same_addresses() {
    let mut rng = Rng(0x0ff5_e7a1_1ce5);
    let mut rewritten = 0;
    for round in 0..300 {
        let pick = |rng: &mut Rng, xs: &[i64]| xs[rng.below(xs.len() as u64) as usize];
        let c1 = pick(&mut rng, &[0, 32, -64, 1 << 40, i64::MAX, 1024]);
        let c2 = pick(&mut rng, &[0, 4096, -8, i64::MIN]);
        let (op, k) = match rng.below(3) {
            0 => ("shl.b64", pick(&mut rng, &[0, 2, 3, 63])),
            1 => ("mul.lo.s64", pick(&mut rng, &[4, -3, 12, 0])),
            _ => ("add.s64", pick(&mut rng, &[7, -7])),
        };
        let trips = [1, 4, 8][rng.below(3) as usize];
        let ptx = kernel(c1, op, k, c2, trips);
        let out = fold_offsets_in_counted_loops(&ptx, |_, _| true).unwrap();
        if out != ptx {
            rewritten += 1;
        }
        for sample in 0..8 {
            let tid = match sample {
                0 => 0,
                1 => 1023,
                _ => rng.below(1024),
            };
            let base = match sample {
                0 => 0,
                1 => u64::MAX,
                _ => rng.next(),
            };
            let inputs = HashMap::from([("%tid.x", tid), ("k_param_0", base)]);
            let watch = ["%rd5", "%rd6"];
            let before = run(&ptx, &inputs, &watch, 10_000);
            assert_eq!(before.len(), 2 * trips as usize, "round {round}");
            assert_eq!(
                run(&out, &inputs, &watch, 10_000),
                before,
                "round {round}:\n{out}"
            );
        }
    }
    assert!(rewritten > 150, "rewritten {rewritten}");
}

/// The matmul's shared address after the widening: the constant of the
/// sum leaves the shift, and the address ends in `+ 4 (C + 1024)`.
#[test]
fn the_matmul_address_ends_in_its_offset() {
    let ptx = kernel(1024, "shl.b64", 2, 0, 8);
    let out = fold_offsets_in_counted_loops(&ptx, |_, _| true).unwrap();
    assert!(out.contains("add.s64 %rd5, "), "{out}");
    assert!(out.contains(", 4096;"), "{out}");
}

/// Addresses defined before the loop, or whose definition a label, a
/// guard or a later write of an operand separates from the load, stay.
#[test]
fn addresses_the_block_does_not_define_stay() {
    let base = kernel(1024, "shl.b64", 2, 0, 8);
    let cases = [
        (
            "a guard",
            base.replace(
                "\tadd.s64 %rd5, %rd11, 0;",
                "\t@%p2 add.s64 %rd5, %rd11, 0;",
            ),
        ),
        (
            "no count",
            base.replace("\tmov.u32 %r21, 8;", "\tld.param.u32 %r21, [k_param_0];"),
        ),
    ];
    for (what, ptx) in cases {
        assert_ne!(ptx, base, "{what}");
        let out = fold_offsets_in_counted_loops(&ptx, |_, _| true).unwrap();
        assert!(!out.contains("add.s64 %rd5, %pxof"), "{what}:\n{out}");
    }
}

/// The matmul's A-row address, `tiles + (4k + 4·ty·bs)` (no constant): its
/// terms are put in order, what keeps its value over the trips first and
/// the induction register's term last, so that every unrolled copy reads
/// one base plus its own offset.
#[test]
fn varying_terms_come_last() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\
        .visible .entry k(.param .u64 k_param_0)\n{\n\
        \t.reg .pred %p<3>;\n\t.reg .b32 %r<30>;\n\t.reg .b64 %rd<20>;\n\t.reg .f32 %f<4>;\n\
        \tld.param.u64 %rd1, [k_param_0];\n\tmov.u32 %r7, %tid.y;\n\
        \tmov.u32 %r21, 8;\n\tmov.u32 %r20, 0;\n\tmov.u32 %r22, 0;\n\
        $L__BB0_1:\n\t.pragma \"nounroll\";\n\
        \tmul.wide.s32 %rd9, %r20, 4;\n\tmul.wide.s32 %rd10, %r7, 128;\n\
        \tadd.s64 %rd3, %rd9, %rd10;\n\tadd.s64 %rd5, %rd1, %rd3;\n\
        \tld.shared.f32 %f1, [%rd5+4];\n\
        \tadd.s32 %r20, %r20, 4;\n\tadd.s32 %r22, %r22, 1;\n\
        \tsetp.lt.s32 %p1, %r22, %r21;\n\t@%p1 bra $L__BB0_1;\n\tret;\n}\n";
    let out = fold_offsets_in_counted_loops(ptx, |_, _| true).unwrap();
    let at = out.find("%pxof").expect("rewritten");
    let t = &out[at..=at + out[at..].find('_').expect("the prefix's end")];
    for line in [
        format!("add.s64 {t}0, %rd1, %rd10;"),
        format!("add.s64 {t}1, {t}0, %rd9;"),
        format!("mov.b64 %rd5, {t}1;"),
    ] {
        assert!(out.contains(&line), "{line} missing:\n{out}");
    }
    for (y, base) in [(0, 0), (1023, u64::MAX), (7, 1 << 40)] {
        let inputs = HashMap::from([("%tid.y", y), ("k_param_0", base)]);
        assert_eq!(
            run(&out, &inputs, &["%rd5"], 1000),
            run(ptx, &inputs, &["%rd5"], 1000)
        );
    }
}
