use std::collections::HashMap;

use super::*;
use crate::ptx::interpret::run;
use crate::test_util::Rng;

const I32_MAX: i64 = i32::MAX as i64;
const I32_MIN: i64 = i32::MIN as i64;

/// A kernel whose loop reads `base + sext(inv + i) * scale` (`%rd3`, the
/// watched register) while `i` steps from `start` by `step` (a register of
/// known value, as a specialization leaves a block size) and stays below
/// `n`: base, inv, n and start are parameters. `before` and `inside` are
/// statements put before the loop's header and at the start of its body.
fn kernel(step: i64, scale: i64, before: &str, inside: &str) -> String {
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n\
         .visible .entry k(.param .u64 k_param_0, .param .u32 k_param_1, .param .u32 k_param_2, \
         .param .u32 k_param_3)\n{{\n\
         \t.reg .pred %p<3>;\n\t.reg .b32 %r<30>;\n\t.reg .b64 %rd<20>;\n\t.reg .f32 %f<4>;\n\
         \tld.param.u64 %rd1, [k_param_0];\n\tld.param.u32 %r1, [k_param_1];\n\
         \tld.param.u32 %r2, [k_param_2];\n\tld.param.u32 %r3, [k_param_3];\n\
         \tmov.u32 %r4, {step};\n\tmov.u32 %r10, %r3;\n{before}\
         $L__BB0_1:\n{inside}\
         \tadd.s32 %r11, %r1, %r10;\n\tmul.wide.s32 %rd2, %r11, {scale};\n\
         \tadd.s64 %rd3, %rd1, %rd2;\n\tld.global.f32 %f1, [%rd3];\n\
         \tadd.s32 %r10, %r10, %r4;\n\tsetp.lt.s32 %p1, %r10, %r2;\n\t@%p1 bra $L__BB0_1;\n\
         $L__BB0_2:\n\tret;\n}}\n"
    )
}

fn step(ptx: &str) -> String {
    step_addresses_as_pointers(ptx, |_, _| true).unwrap()
}

/// The addresses the loop computes, for these parameters.
fn addresses(ptx: &str, base: u64, inv: i64, n: i64, start: i64) -> Vec<(String, u64)> {
    let inputs = HashMap::from([
        ("k_param_0", base),
        ("k_param_1", inv as u64),
        ("k_param_2", n as u64),
        ("k_param_3", start as u64),
    ]);
    run(ptx, &inputs, &["%rd3"], 4000)
}

/// A generated family — steps and scales, starts, bounds and invariant
/// parts at and around the 32-bit limits, where the sum or the counter
/// overflows and where it does not, and at random — run before and after
/// the pass: every trip reads the same 64-bit address (the guard sends
/// the overflowing ones to the loop as it was), and the pass rewrote the
/// loop.
#[test]
fn stepped_addresses_equal_the_widened_sums() {
    let mut rng = Rng(0x9017_7e45_a11c);
    let mut compared = 0;
    for round in 0..120 {
        let pick = |rng: &mut Rng, xs: &[i64]| xs[rng.below(xs.len() as u64) as usize];
        let step_by = pick(&mut rng, &[1, 4, 16, 32, 1000]);
        let scale = pick(&mut rng, &[1, 4, 8, 12]);
        let ptx = kernel(step_by, scale, "", "");
        let out = step(&ptx);
        assert!(
            out.contains("bra $pxpt"),
            "round {round}: not versioned\n{out}"
        );
        for sample in 0..12 {
            let start = match sample {
                0 => 0,
                1 => I32_MAX - 3 * step_by + 1,
                2 => I32_MIN,
                3 => -7,
                _ => pick(&mut rng, &[0, 5, I32_MAX - 40, I32_MIN + 2, 100_000]),
            };
            let trips = 1 + rng.below(6) as i64;
            let n = match sample % 3 {
                _ if sample == 1 => I32_MAX,
                0 => (start + trips * step_by).clamp(I32_MIN, I32_MAX),
                1 => pick(&mut rng, &[I32_MAX, I32_MAX - 1, start, start - 1]),
                _ => start.saturating_add(rng.below(5 * step_by as u64) as i64),
            };
            let inv = match (sample, rng.below(4)) {
                // The counter steps past the largest 32-bit value and wraps
                // (a bound at it, a start off the step's grid): the sum's
                // own wrap then no longer follows the pointer's.
                (1, _) => 0,
                (_, 0) => I32_MAX - rng.below(64) as i64,
                (_, 1) => I32_MIN + rng.below(64) as i64,
                (_, 2) => -start,
                _ => rng.below(1 << 20) as i64,
            };
            let base = [0, u64::MAX - 5, rng.next()][sample % 3];
            let n = n.clamp(I32_MIN, I32_MAX);
            let want = addresses(&ptx, base, inv, n, start);
            let got = addresses(&out, base, inv, n, start);
            // A loop whose counter wraps runs past the interpreter's
            // bound (its copy runs more statements a trip): compare what
            // both ran; where the loop ended well within it, all of it.
            let k = want.len().min(got.len());
            assert_eq!(
                want[..k],
                got[..k],
                "round {round}, start {start}, n {n}, inv {inv}, step {step_by}, scale {scale}\n{out}"
            );
            if want.len() < 300 {
                assert_eq!(want, got, "round {round}: trip counts differ");
            }
            compared += 1;
        }
    }
    assert_eq!(compared, 1440);
}

/// A loop that waits at the block's barrier 0 gets a guard reduced over the
/// block (`bar.red.and.pred`), so that all its threads take one copy and
/// meet its barriers together, and computes the same addresses; a loop
/// with a warp's shuffle or a named barrier is not versioned (threads that
/// must run one instruction together could take different copies).
#[test]
fn loops_with_barriers_take_one_copy_for_the_block() {
    let barrier = kernel(4, 4, "", "\tbar.sync 0;\n");
    let out = step(&barrier);
    let reduced = out
        .find("bar.red.and.pred")
        .expect("a guard reduced over the block");
    let branch = out.find("bra $pxpt").expect("versioned");
    assert!(
        reduced < branch,
        "the reduction comes before the branch\n{out}"
    );
    // The fast copy, the slow one (a sum past the 32-bit range), and a
    // counter that wraps (compared as far as both ran).
    for (inv, n, start) in [(5, 40, 0), (I32_MAX - 3, 40, 0), (0, I32_MAX, I32_MAX - 6)] {
        let (want, got) = (
            addresses(&barrier, 7, inv, n, start),
            addresses(&out, 7, inv, n, start),
        );
        let k = want.len().min(got.len());
        assert!(k > 2, "inv {inv}, n {n}, start {start}: ran nothing");
        assert_eq!(want[..k], got[..k], "inv {inv}, n {n}, start {start}");
    }
    // No barrier: no reduction (each thread its own copy).
    assert!(!step(&kernel(4, 4, "", "")).contains("bar.red"));
    for inside in [
        "\tshfl.sync.bfly.b32 %r12, %r1, 1, 31, -1;\n",
        "\tshfl.bfly.b32 %r12, %r1, 1, 31;\n",
        "\tvote.all.pred %p2, %p1;\n",
        "\tbar.sync 1, 64;\n",
        "\tbar.warp.sync -1;\n",
        "\t@%p2 bar.sync 0;\n",
    ] {
        let ptx = kernel(4, 4, "", inside);
        assert_eq!(step(&ptx), ptx, "{inside:?}: versioned");
    }
}

/// Two loops back to back, the first's exit the second's header: each is
/// versioned, the first's slow copy comes back to the second's guard (not
/// past it to the label it was written before), and both compute the
/// addresses they computed — the fast copies and the slow ones.
#[test]
fn back_to_back_loops_each_keep_their_guard() {
    let second = "\tmov.u32 %r20, %r3;\n         $L__BB0_3:\n\tadd.s32 %r21, %r1, %r20;\n\tmul.wide.s32 %rd12, %r21, 8;\n         \tadd.s64 %rd13, %rd1, %rd12;\n\tld.global.f32 %f2, [%rd13];\n         \tadd.s32 %r20, %r20, %r4;\n\tsetp.lt.s32 %p2, %r20, %r2;\n\t@%p2 bra $L__BB0_3;\n";
    let ptx =
        kernel(4, 4, "", "").replace("$L__BB0_2:\n\tret;", &format!("{second}$L__BB0_2:\n\tret;"));
    // The first loop's exit is the second's setup, then its header: make
    // the header follow the branch back directly.
    let ptx = ptx.replace(
        "\t@%p1 bra $L__BB0_1;\n\tmov.u32 %r20, %r3;\n",
        "\t@%p1 bra $L__BB0_1;\n",
    );
    let ptx = ptx.replace(
        "\tmov.u32 %r10, %r3;\n",
        "\tmov.u32 %r10, %r3;\n\tmov.u32 %r20, %r3;\n",
    );
    let out = step(&ptx);
    assert_eq!(
        out.matches("_q0 bra").count() + out.matches("_q1 bra").count(),
        2,
        "both versioned\n{out}"
    );
    for (inv, n, start) in [(5, 40, 0), (I32_MAX - 3, 40, 0), (I32_MAX - 30, 40, 0)] {
        let inputs = HashMap::from([
            ("k_param_0", 7u64),
            ("k_param_1", inv as u64),
            ("k_param_2", n as u64),
            ("k_param_3", start as u64),
        ]);
        let run_it = |p: &str| run(p, &inputs, &["%rd3", "%rd13"], 4000);
        assert_eq!(run_it(&ptx), run_it(&out), "inv {inv}\n{out}");
    }
}

/// Shapes the pass must leave alone, each a loop it would otherwise step:
/// an inner loop (a guard per entry), a branch from outside into the body,
/// a bound the body writes, a step whose value is unknown, an unsigned
/// widening, and a body with no return at its end.
#[test]
fn loops_it_cannot_prove_are_left_as_they_were() {
    let nested = kernel(4, 4, "$L__BB0_0:\n", "").replace(
        "$L__BB0_2:\n\tret;",
        "\tsetp.lt.s32 %p2, %r3, 9;\n\t@%p2 bra $L__BB0_0;\n$L__BB0_2:\n\tret;",
    );
    let entered_inside = kernel(4, 4, "", "$L__BB0_5:\n").replace(
        "\tmov.u32 %r10, %r3;\n",
        "\tmov.u32 %r10, %r3;\n\tsetp.eq.s32 %p2, %r3, 9;\n\t@%p2 bra $L__BB0_5;\n",
    );
    let bound_written = kernel(4, 4, "", "\tadd.s32 %r2, %r2, 1;\n");
    let unknown_step = kernel(4, 4, "", "").replace("mov.u32 %r4, 4;", "mov.u32 %r4, %r3;");
    let unsigned = kernel(4, 4, "", "").replace("mul.wide.s32", "mul.wide.u32");
    let no_return = kernel(4, 4, "", "").replace("\tret;\n", "");
    for (what, ptx) in [
        ("an inner loop", nested),
        ("a branch into the body", entered_inside),
        ("a bound the body writes", bound_written),
        ("an unknown step", unknown_step),
        ("an unsigned widening", unsigned),
        ("no return at the end", no_return),
    ] {
        assert_eq!(step(&ptx), ptx, "{what}: rewritten");
    }
    // The same loop, none of those: stepped.
    assert_ne!(step(&kernel(4, 4, "", "")), kernel(4, 4, "", ""));
}

/// The slow copy's labels are renamed as whole names: `$L__BB0_1` in the
/// copy, never the `$L__BB0_1` of `$L__BB0_10` nor a register.
#[test]
fn labels_are_renamed_as_whole_names() {
    let renamed = HashMap::from([("$L__BB0_1", "$x0".to_string())]);
    assert_eq!(
        rename_labels(
            "$L__BB0_1:\n\t@%p1 bra $L__BB0_10;\n\tbra $L__BB0_1;\n\tmov.u32 %L__BB0_1, 1;",
            &renamed
        ),
        "$x0:\n\t@%p1 bra $L__BB0_10;\n\tbra $x0;\n\tmov.u32 %L__BB0_1, 1;"
    );
}
