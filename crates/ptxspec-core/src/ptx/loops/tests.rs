use super::*;
use crate::test_util::Rng;

/// One loop shape: a counter of `ty` from `start`, stepped by `step`
/// (before the comparison where `stepped_first`), compared `cmp` with the
/// bound (the counter first where `counter_first`), the branch back taken
/// where the comparison holds (fails, where `negated`).
#[derive(Clone, Copy, Debug)]
struct Shape {
    ty: &'static str,
    cmp: &'static str,
    start: i64,
    step: i64,
    bound: i64,
    stepped_first: bool,
    counter_first: bool,
    negated: bool,
}

impl Shape {
    fn wide(&self) -> bool {
        self.ty.ends_with("64")
    }

    /// The kernel: the bound read from parameter 1 (`generic`) or an
    /// immediate moved into the same register (specialized), as the two
    /// routes leave it.
    fn kernel(&self, specialized: bool) -> String {
        let (reg, param) = match self.wide() {
            true => ("%rd", "u64"),
            false => ("%r", "u32"),
        };
        let bound_def = match specialized {
            true => format!("mov.{} {reg}1, {};", self.ty, self.bound),
            false => format!("ld.param.{param} {reg}1, [k_param_1];"),
        };
        let step = format!(
            "add.{ty} {reg}2, {reg}2, {step};",
            ty = self.ty,
            step = self.step
        );
        let (a, b) = match self.counter_first {
            true => (format!("{reg}2"), format!("{reg}1")),
            false => (format!("{reg}1"), format!("{reg}2")),
        };
        let setp = format!("setp.{}.{} %p1, {a}, {b};", self.cmp, self.ty);
        let (first, second) = match self.stepped_first {
            true => (step.as_str(), setp.as_str()),
            false => (setp.as_str(), step.as_str()),
        };
        let guard = if self.negated { "@!%p1" } else { "@%p1" };
        format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n\n\
             .visible .entry k(.param .u64 k_param_0, .param .{param} k_param_1)\n{{\n\
             \t.reg .pred %p<3>;\n\t.reg .b32 %r<8>;\n\t.reg .b64 %rd<8>;\n\t.reg .f32 %f<4>;\n\n\
             \tld.param.u64 %rd5, [k_param_0];\n\t{bound_def}\n\
             \tmov.{ty} {reg}2, {start};\n\tmov.f32 %f1, 0f00000000;\n\
             $L__BB0_1:\n\t.pragma \"nounroll\";\n\tadd.f32 %f1, %f1, 0f3F800000;\n\
             \t{first}\n\t{second}\n\t{guard} bra $L__BB0_1;\n\
             \tst.global.f32 [%rd5], %f1;\n\tret;\n}}\n",
            ty = self.ty,
            start = self.start,
        )
    }

    /// How many times the block runs, by Rust's arithmetic on the type
    /// (not by the model); `None` beyond `MAX_TRIPS`.
    fn reference_trips(&self) -> Option<u64> {
        macro_rules! run {
            ($t:ty, $u:ty) => {{
                let (bound, step) = (self.bound as $t, self.step as $t);
                let mut v = self.start as $t;
                for trips in 1..=MAX_TRIPS {
                    let after = v.wrapping_add(step);
                    let c = if self.stepped_first { after } else { v };
                    let (x, y) = if self.counter_first {
                        (c, bound)
                    } else {
                        (bound, c)
                    };
                    let holds = match self.cmp {
                        "lt" => x < y,
                        "le" => x <= y,
                        "gt" => x > y,
                        "ge" => x >= y,
                        "eq" => x == y,
                        "ne" => x != y,
                        "lo" => (x as $u) < (y as $u),
                        "ls" => (x as $u) <= (y as $u),
                        "hi" => (x as $u) > (y as $u),
                        "hs" => (x as $u) >= (y as $u),
                        other => panic!("{other}"),
                    };
                    if holds == self.negated {
                        return Some(trips);
                    }
                    v = after;
                }
                None
            }};
        }
        match self.ty {
            "s32" => run!(i32, u32),
            "u32" => run!(u32, u32),
            "s64" => run!(i64, u64),
            _ => run!(u64, u64),
        }
    }
}

/// The one loop of `ptx`'s kernel.
fn the_loop(ptx: &str) -> NounrollLoop {
    let (m, body) = crate::ptx::first_body(ptx);
    let mut loops = nounroll_loops(&m, &body);
    assert_eq!(loops.len(), 1, "{ptx}");
    loops.remove(0)
}

/// What the pass leaves of `specialized`, specialized from `generic`.
fn unrolled(generic: &str, specialized: &str) -> String {
    let g = crate::ptx::parse("g.ptx", generic.to_string()).unwrap();
    unroll_where_counts_became_known(&g, specialized, |_, _| true).unwrap()
}

/// A generated family of counted loops — every type, comparison, order of
/// step and comparison, polarity, counts that end within the bound, past
/// it, and never (a step that jumps over an `ne` bound) — against Rust's
/// own arithmetic: the trip count is the reference's, the pragma dropped
/// exactly where the count is known and within the bound, and the generic
/// code (the bound a parameter) always keeps it.
#[test]
fn counted_loops_match_the_reference_and_only_known_counts_unroll() {
    let types = ["s32", "u32", "s64", "u64"];
    let cmps = ["lt", "le", "gt", "ge", "eq", "ne", "lo", "ls", "hi", "hs"];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut dropped = 0;
    let mut kept = 0;
    let pick = |rng: &mut Rng, xs: &[i64]| xs[rng.below(xs.len() as u64) as usize];
    for round in 0..3000 {
        let ty = types[round % types.len()];
        let cmp = cmps[(round / types.len()) % cmps.len()];
        let shape = Shape {
            ty,
            cmp,
            start: pick(&mut rng, &[0, 1, 16, 32, -1, 255, 1 << 31, -(1 << 31)]),
            step: pick(&mut rng, &[1, -1, 4, -4, 3, 2, 32, 0]),
            bound: pick(&mut rng, &[0, 16, 32, 64, 257, 1000, -8, 1 << 20]),
            stepped_first: rng.below(2) == 0,
            counter_first: rng.below(2) == 0,
            negated: rng.below(2) == 0,
        };
        let (generic, specialized) = (shape.kernel(false), shape.kernel(true));
        let want = shape.reference_trips();
        assert_eq!(the_loop(&specialized).trips, want, "{shape:?}");
        assert_eq!(the_loop(&generic).trips, None, "{shape:?}");
        let out = unrolled(&generic, &specialized);
        let still = out.contains(".pragma \"nounroll\"");
        assert_eq!(still, want.is_none(), "{shape:?}\n{out}");
        match want {
            Some(n) => {
                assert!(
                    out.contains(&format!("nounroll dropped, {n} trips")),
                    "{out}"
                );
                dropped += 1;
            }
            None => kept += 1,
        }
        // The generic code's own pass changes nothing.
        assert_eq!(unrolled(&generic, &generic), generic);
    }
    assert!(
        dropped > 300 && kept > 100,
        "dropped {dropped}, kept {kept}"
    );
}

/// A matmul block loop as NVVM writes it: rolled (`#pragma unroll 1`) and
/// unrolled by four with a remaining count, the block size an immediate.
#[test]
fn nvvm_loops_over_a_specialized_block_unroll() {
    let rolled = |bs: &str| {
        format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n\
             .visible .entry k(.param .u32 k_param_0)\n{{\n\
             \t.reg .pred %p<5>;\n\t.reg .b32 %r<30>;\n\t.reg .f32 %f<9>;\n\
             \t{bs}\n\tmov.u32 %r25, 0;\n\tmov.f32 %f1, 0f00000000;\n\
             $L__BB1_4:\n\t.pragma \"nounroll\";\n\tadd.f32 %f1, %f1, 0f3F800000;\n\
             \tadd.s32 %r25, %r25, 1;\n\tsetp.lt.s32 %p3, %r25, %r1;\n\t@%p3 bra $L__BB1_4;\n\
             \tret;\n}}\n"
        )
    };
    let by_four = |bs: &str| {
        format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n\
             .visible .entry k(.param .u32 k_param_0)\n{{\n\
             \t.reg .pred %p<5>;\n\t.reg .b32 %r<50>;\n\t.reg .f32 %f<9>;\n\
             \t{bs}\n\tand.b32 %r9, %r1, 3;\n\tsub.s32 %r10, %r1, %r9;\n\
             \tmov.u32 %r43, 0;\n\tmov.u32 %r42, %r10;\n\tmov.f32 %f1, 0f00000000;\n\
             $L__BB0_5:\n\t.pragma \"nounroll\";\n\tadd.f32 %f1, %f1, 0f3F800000;\n\
             \tadd.s32 %r43, %r43, 4;\n\tadd.s32 %r42, %r42, -4;\n\
             \tsetp.ne.s32 %p4, %r42, 0;\n\t@%p4 bra $L__BB0_5;\n\tret;\n}}\n"
        )
    };
    // NVVM's other shape: the remaining count's register is counted down
    // again by a remainder loop after the main one (written twice).
    let with_remainder = |bs: &str| {
        format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n\
             .visible .entry k(.param .u32 k_param_0)\n{{\n\
             \t.reg .pred %p<6>;\n\t.reg .b32 %r<50>;\n\t.reg .f32 %f<9>;\n\
             \t{bs}\n\tand.b32 %r26, %r1, 3;\n\tsetp.lt.u32 %p2, %r1, 4;\n\t@%p2 bra $L__BB0_4;\n\
             \tsub.s32 %r24, %r1, %r26;\n\tmov.f32 %f1, 0f00000000;\n\
             $L__BB0_3:\n\t.pragma \"nounroll\";\n\tadd.f32 %f1, %f1, 0f3F800000;\n\
             \tadd.s32 %r24, %r24, -4;\n\tsetp.ne.s32 %p3, %r24, 0;\n\t@%p3 bra $L__BB0_3;\n\
             $L__BB0_4:\n\tsetp.eq.s32 %p4, %r26, 0;\n\t@%p4 bra $L__BB0_7;\n\
             $L__BB0_6:\n\t.pragma \"nounroll\";\n\tadd.f32 %f1, %f1, 0f3F800000;\n\
             \tadd.s32 %r26, %r26, -1;\n\tsetp.ne.s32 %p5, %r26, 0;\n\t@%p5 bra $L__BB0_6;\n\
             $L__BB0_7:\n\tret;\n}}\n"
        )
    };
    let generic = "ld.param.u32 %r1, [k_param_0];";
    for bs in [8u64, 16, 32] {
        let native = format!("{{ mov.b32 %r1, {bs:#010x}; }}");
        let fixed = format!("mov.b32 %r1, {bs:#x};");
        for set in [&native, &fixed] {
            let (g, s) = (rolled(generic), rolled(set));
            assert_eq!(the_loop(&s).trips, Some(bs), "{s}");
            assert!(!unrolled(&g, &s).contains("\"nounroll\""));
            let (g, s) = (by_four(generic), by_four(set));
            assert_eq!(the_loop(&s).trips, Some(bs / 4), "{s}");
            assert!(!unrolled(&g, &s).contains("\"nounroll\""));
            // The main loop unrolls; the remainder (of a count of 0, never
            // entered) never ends by the model's count: it stays.
            let (g, s) = (with_remainder(generic), with_remainder(set));
            let out = unrolled(&g, &s);
            assert!(
                out.contains(&format!("nounroll dropped, {} trips", bs / 4)),
                "{out}"
            );
            assert_eq!(out.matches("\"nounroll\"").count(), 1, "{out}");
        }
    }
}

/// Loops whose count this model does not know, or that the source counted
/// itself, keep their pragma: a second label in the block, an exit from
/// it, a guarded step, a counter written a third time, a step that is not
/// the counter's own, a bound the generic code knew already (the source's
/// `#pragma unroll 1` over a literal count), a count past the bound.
#[test]
fn loops_the_model_cannot_count_keep_their_pragma() {
    let base = Shape {
        ty: "s32",
        cmp: "lt",
        start: 0,
        step: 1,
        bound: 16,
        stepped_first: true,
        counter_first: true,
        negated: false,
    };
    let specialized = base.kernel(true);
    let generic = base.kernel(false);
    assert_eq!(the_loop(&specialized).trips, Some(16));
    let step = "add.s32 %r2, %r2, 1;";
    let broken = [
        (
            "a second label",
            specialized.replace(step, &format!("{step}\n$L__inner:")),
        ),
        (
            "an exit",
            specialized.replace(step, &format!("{step}\n\t@%p2 bra $L__out;")),
        ),
        (
            "a guarded step",
            specialized.replace(step, "@%p2 add.s32 %r2, %r2, 1;"),
        ),
        (
            "a third write",
            specialized.replace(step, &format!("{step}\n\tadd.s32 %r2, %r2, 1;")),
        ),
        (
            "another's step",
            specialized.replace(step, "add.s32 %r2, %r3, 1;"),
        ),
        (
            "a call",
            specialized.replace(step, &format!("{step}\n\tcall f;")),
        ),
    ];
    for (what, ptx) in broken {
        assert_eq!(the_loop(&ptx).trips, None, "{what}:\n{ptx}");
        assert_eq!(unrolled(&generic, &ptx), ptx, "{what}");
    }
    // Counted in the generic code already: the source's own pragma.
    assert_eq!(unrolled(&specialized, &specialized), specialized);
    // Past the bound.
    let long = Shape {
        bound: MAX_TRIPS as i64 + 1,
        ..base
    };
    assert_eq!(the_loop(&long.kernel(true)).trips, None);
    let at_bound = Shape {
        bound: MAX_TRIPS as i64,
        ..base
    };
    assert_eq!(the_loop(&at_bound.kernel(true)).trips, Some(MAX_TRIPS));
}
