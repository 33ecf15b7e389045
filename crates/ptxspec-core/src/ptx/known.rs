//! What a function's registers are known to hold: the folding half of the
//! PTX optimizer. A value becomes known through an immediate (a
//! specialization constant made one, an argument fixed through PTX, a
//! literal of the source) and stays known through what NVVM would have
//! folded — moves, integer conversions, and integer arithmetic on known
//! values (sums, products, wide products, multiply-adds, shifts, bitwise
//! operations, negations, quotients, remainders, minima and maxima). The
//! division rewrite reads the result, so that `i / (HS * seq)` with both
//! known divides by multiplying.
//!
//! Every operation is evaluated exactly as PTX defines it (the ISA's
//! integer arithmetic instructions): operands read at the instruction's
//! width, results wrapped to it (a wide product to twice it) and held
//! extended by the type's signedness; shift amounts above the width clamped
//! to it. A register written more than once, by a guarded instruction, or by
//! anything this model does not fold, is not known.

use std::collections::HashMap;

use super::instr::{IntConversion, Operand, Type, TypeKind, extend, integer_immediate};
use super::{Body, Module, StmtKind};

/// The registers of `body` whose value is known (see the module docs),
/// each as 64 bits: the written width's bits, extended by the writing
/// type's signedness. A reader at a narrower width takes the low bits.
pub fn known_values(m: &Module, body: &Body) -> HashMap<String, u64> {
    let mut writes: HashMap<&str, usize> = HashMap::new();
    let mut defs: Vec<(&str, Fold, Vec<&str>)> = Vec::new();
    for s in body.stmts.iter().filter(|s| s.kind == StmtKind::Instr) {
        let Ok(Some(i)) = m.instr(s) else { continue };
        let predicated = i.guard.is_some();
        // Every register written, by any instruction.
        for r in i.written_registers() {
            *writes.entry(r).or_default() += if predicated { 2 } else { 1 };
        }
        if predicated {
            continue;
        }
        let Some(fold) = Fold::of(&i) else { continue };
        let Some(Operand::Reg(dst)) = i.operands.first() else {
            continue;
        };
        let sources: Option<Vec<&str>> = i.operands[1..]
            .iter()
            .map(|o| match o {
                Operand::Reg(r) => Some(*r),
                Operand::Imm(text) => Some(*text),
                _ => None,
            })
            .collect();
        match sources {
            Some(sources) if sources.len() == fold.arity() => defs.push((*dst, fold, sources)),
            _ => continue,
        }
    }
    // Each definition is tried once, then again when a source of it becomes
    // known: linear in the code, however its registers chain (a pass over
    // every definition until none became known was quadratic on a chain
    // written backwards).
    let mut users: HashMap<&str, Vec<usize>> = HashMap::new();
    for (at, (_, _, sources)) in defs.iter().enumerate() {
        for src in sources.iter().filter(|s| s.starts_with('%')) {
            users.entry(src).or_default().push(at);
        }
    }
    let mut known: HashMap<String, u64> = HashMap::new();
    let mut work: Vec<usize> = (0..defs.len()).rev().collect();
    while let Some(at) = work.pop() {
        let (dst, fold, sources) = &defs[at];
        if writes.get(dst) != Some(&1) || known.contains_key(*dst) {
            continue;
        }
        let values: Option<Vec<u64>> = sources
            .iter()
            .map(|src| match src.strip_prefix('%') {
                Some(_) => known.get(*src).copied(),
                None => integer_immediate(src),
            })
            .collect();
        let Some(values) = values else { continue };
        if let Some(v) = fold.apply(&values) {
            known.insert(dst.to_string(), v);
            work.extend(users.get(dst).map(Vec::as_slice).unwrap_or_default());
        }
    }
    known
}

/// How an instruction's result follows from its sources' values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fold {
    /// `mov.<type>`: the source's low bits.
    Mov(Type),
    /// An integer `cvt`.
    Cvt(IntConversion),
    /// Integer arithmetic of one type.
    Arith(Arith, Type),
}

/// The integer operations folded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    /// `add`
    Add,
    /// `sub`
    Sub,
    /// `mul.lo`
    MulLo,
    /// `mul.hi`
    MulHi,
    /// `mul.wide`: the whole product, twice the width.
    MulWide,
    /// `mad.lo`
    MadLo,
    /// `mad.wide`: the whole product plus a value of twice the width.
    MadWide,
    /// `shl`: amounts of the width or more give 0.
    Shl,
    /// `shr`: logical for `.u` and `.b`, arithmetic for `.s`.
    Shr,
    /// `and`
    And,
    /// `or`
    Or,
    /// `xor`
    Xor,
    /// `not`
    Not,
    /// `neg`
    Neg,
    /// `div`: truncated toward zero.
    Div,
    /// `rem`: the sign of the dividend.
    Rem,
    /// `min`
    Min,
    /// `max`
    Max,
}

impl Fold {
    /// What `i` folds to, where it is an operation this model folds: no
    /// saturation, carry, rounding or other modifier that changes the
    /// result, and integer types of 16, 32 or 64 bits.
    pub fn of(i: &super::instr::Instr<'_>) -> Option<Fold> {
        let [ty] = i.types.as_slice() else {
            return match i.opcode {
                "cvt" => i.integer_conversion().map(Fold::Cvt),
                _ => None,
            };
        };
        let ty = *ty;
        if !matches!(ty.bits, 16 | 32 | 64) {
            return None;
        }
        let integer = matches!(ty.kind, TypeKind::Signed | TypeKind::Unsigned);
        let bits = ty.kind == TypeKind::Bits;
        let arith = |a: Arith| Some(Fold::Arith(a, ty));
        match (i.opcode, i.modifiers.as_slice()) {
            ("mov", []) if integer || bits => Some(Fold::Mov(ty)),
            ("add", []) if integer => arith(Arith::Add),
            ("sub", []) if integer => arith(Arith::Sub),
            ("mul", ["lo"]) if integer => arith(Arith::MulLo),
            ("mul", ["hi"]) if integer => arith(Arith::MulHi),
            ("mul", ["wide"]) if integer && ty.bits < 64 => arith(Arith::MulWide),
            ("mad", ["lo"]) if integer => arith(Arith::MadLo),
            ("mad", ["wide"]) if integer && ty.bits < 64 => arith(Arith::MadWide),
            ("shl", []) if bits => arith(Arith::Shl),
            ("shr", []) if integer || bits => arith(Arith::Shr),
            ("and", []) if bits => arith(Arith::And),
            ("or", []) if bits => arith(Arith::Or),
            ("xor", []) if bits => arith(Arith::Xor),
            ("not", []) if bits => arith(Arith::Not),
            ("neg", []) if ty.kind == TypeKind::Signed => arith(Arith::Neg),
            ("div", []) if integer => arith(Arith::Div),
            ("rem", []) if integer => arith(Arith::Rem),
            ("min", []) if integer => arith(Arith::Min),
            ("max", []) if integer => arith(Arith::Max),
            _ => None,
        }
    }

    /// How many sources it reads.
    pub fn arity(&self) -> usize {
        match self {
            Fold::Mov(_) | Fold::Cvt(_) => 1,
            Fold::Arith(Arith::Not | Arith::Neg, _) => 1,
            Fold::Arith(Arith::MadLo | Arith::MadWide, _) => 3,
            Fold::Arith(..) => 2,
        }
    }

    /// The result for sources holding `v` (see [`known_values`] for how a
    /// value is held); `None` where PTX leaves it undefined (a division by
    /// zero).
    pub fn apply(&self, v: &[u64]) -> Option<u64> {
        let (op, ty) = match *self {
            Fold::Mov(ty) => {
                return Some(extend(v[0], ty.bits, ty.kind == TypeKind::Signed));
            }
            Fold::Cvt(c) => return Some(c.apply(v[0])),
            Fold::Arith(op, ty) => (op, ty),
        };
        let n = ty.bits;
        let signed = ty.kind == TypeKind::Signed;
        // An operand read at the instruction's width, as a number of it.
        let s = |x: u64| extend(x, n, true) as i64;
        let u = |x: u64| extend(x, n, false);
        let wrap = |x: u64| extend(x, n, signed);
        let (a, b) = (v[0], v.get(1).copied().unwrap_or(0));
        // The whole product, as 128 bits: exact for every width (a signed
        // 64-bit product fits i128, an unsigned one u128).
        let product = |a: u64, b: u64| -> u128 {
            match signed {
                true => (i128::from(s(a)) * i128::from(s(b))) as u128,
                false => u128::from(u(a)) * u128::from(u(b)),
            }
        };
        Some(match op {
            Arith::Add => wrap(a.wrapping_add(b)),
            Arith::Sub => wrap(a.wrapping_sub(b)),
            Arith::MulLo => wrap(a.wrapping_mul(b)),
            Arith::MulHi => match signed {
                true => wrap(((product(a, b) as i128) >> n) as u64),
                false => wrap((product(a, b) >> n) as u64),
            },
            Arith::MulWide => extend(product(a, b) as u64, 2 * n, signed),
            Arith::MadLo => wrap(a.wrapping_mul(b).wrapping_add(v[2])),
            Arith::MadWide => extend((product(a, b) as u64).wrapping_add(v[2]), 2 * n, signed),
            Arith::Shl => {
                let amount = b & 0xffff_ffff;
                match amount >= u64::from(n) {
                    true => 0,
                    false => wrap(a << amount),
                }
            }
            Arith::Shr => {
                let amount = (b & 0xffff_ffff).min(u64::from(n));
                match signed {
                    // An arithmetic shift by the width or more fills with
                    // the sign.
                    true => wrap((s(a) >> amount.min(u64::from(n) - 1)) as u64),
                    false if amount >= u64::from(n) => 0,
                    false => u(a) >> amount,
                }
            }
            Arith::And => u(a & b),
            Arith::Or => u(a | b),
            Arith::Xor => u(a ^ b),
            Arith::Not => u(!a),
            Arith::Neg => wrap(a.wrapping_neg()),
            Arith::Div | Arith::Rem => {
                if u(b) == 0 {
                    return None;
                }
                let quotient = op == Arith::Div;
                match signed {
                    // i64 holds every narrower quotient; MIN / -1 wraps at
                    // the width as the GPU's does.
                    true => wrap(match quotient {
                        true => s(a).wrapping_div(s(b)) as u64,
                        false => s(a).wrapping_rem(s(b)) as u64,
                    }),
                    false => match quotient {
                        true => u(a) / u(b),
                        false => u(a) % u(b),
                    },
                }
            }
            Arith::Min | Arith::Max => {
                let a_first = match signed {
                    true => s(a) <= s(b),
                    false => u(a) <= u(b),
                };
                let pick_a = a_first == (op == Arith::Min);
                wrap(if pick_a { a } else { b })
            }
        })
    }
}

/// [`known_values`] of the first function of `ptx` with a body: what the
/// tests of the passes that read it take.
#[cfg(test)]
pub(crate) fn known_in(ptx: &str) -> HashMap<String, u64> {
    let (module, body) = super::first_body(ptx);
    known_values(&module, &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::Rng;

    /// A register of `bits` (16, 32 or 64) named `n`.
    fn reg(bits: u32, n: u32) -> String {
        match bits {
            16 => format!("%h{n}"),
            32 => format!("%r{n}"),
            _ => format!("%rd{n}"),
        }
    }

    /// What `op` (as the ISA spells it, without its type) leaves in its
    /// destination for sources `a`, `b`, `c` at `bits`, by Rust's own
    /// operations on the types of that width — not by the model — as the
    /// destination's low bits (twice `bits` for the wide forms).
    fn reference(op: &str, signed: bool, bits: u32, a: u64, b: u64, c: u64) -> Option<u64> {
        macro_rules! at {
            ($s:ty, $u:ty, $ws:ty, $wu:ty) => {{
                let (sa, sb, ua, ub) = (a as $s, b as $s, a as $u, b as $u);
                let amount = b as u32;
                Some(match (op, signed) {
                    ("add", _) => ua.wrapping_add(ub) as u64,
                    ("sub", _) => ua.wrapping_sub(ub) as u64,
                    ("mul.lo", _) => ua.wrapping_mul(ub) as u64,
                    ("mul.hi", true) => ((sa as $ws * sb as $ws) >> bits) as $u as u64,
                    ("mul.hi", false) => ((ua as $wu * ub as $wu) >> bits) as $u as u64,
                    ("mul.wide", true) => (sa as $ws * sb as $ws) as $wu as u64,
                    ("mul.wide", false) => (ua as $wu * ub as $wu) as u64,
                    ("mad.lo", _) => ua.wrapping_mul(ub).wrapping_add(c as $u) as u64,
                    ("mad.wide", true) => {
                        (sa as $ws * sb as $ws).wrapping_add(c as $ws) as $wu as u64
                    }
                    ("mad.wide", false) => (ua as $wu * ub as $wu).wrapping_add(c as $wu) as u64,
                    ("shl", _) => ua.checked_shl(amount).unwrap_or(0) as u64,
                    ("shr", true) => (sa >> amount.min(bits - 1)) as $u as u64,
                    ("shr", false) => ua.checked_shr(amount).unwrap_or(0) as u64,
                    ("and", _) => (ua & ub) as u64,
                    ("or", _) => (ua | ub) as u64,
                    ("xor", _) => (ua ^ ub) as u64,
                    ("not", _) => (!ua) as u64,
                    ("neg", _) => sa.wrapping_neg() as $u as u64,
                    ("div", true) => sa.checked_div(sb).or((sb == -1).then_some(sa))? as $u as u64,
                    ("div", false) => ua.checked_div(ub)? as u64,
                    ("rem", true) => sa.checked_rem(sb).or((sb == -1).then_some(0))? as $u as u64,
                    ("rem", false) => ua.checked_rem(ub)? as u64,
                    ("min", true) => sa.min(sb) as $u as u64,
                    ("min", false) => ua.min(ub) as u64,
                    ("max", true) => sa.max(sb) as $u as u64,
                    ("max", false) => ua.max(ub) as u64,
                    _ => unreachable!("{op}"),
                })
            }};
        }
        match bits {
            16 => at!(i16, u16, i32, u32),
            32 => at!(i32, u32, i64, u64),
            _ => at!(i64, u64, i128, u128),
        }
    }

    fn mask(bits: u32) -> u64 {
        if bits >= 64 {
            u64::MAX
        } else {
            (1 << bits) - 1
        }
    }

    /// Every folded operation, at every width and signedness it has, on
    /// operands at the types' edges (0, ±1, the extremes, shift amounts
    /// around the width) and random ones: the value the model knows is the
    /// value Rust's arithmetic of that type gives. Sources come through
    /// registers moved from immediates, so a chain is folded too.
    #[test]
    fn every_fold_is_the_isas_arithmetic() {
        // (op, the type kinds it takes: s/u or b, sources)
        let ops: [(&str, &str, usize); 20] = [
            ("add", "su", 2),
            ("sub", "su", 2),
            ("mul.lo", "su", 2),
            ("mul.hi", "su", 2),
            ("mul.wide", "su", 2),
            ("mad.lo", "su", 3),
            ("mad.wide", "su", 3),
            ("shl", "b", 2),
            ("shr", "sub", 2),
            ("and", "b", 2),
            ("or", "b", 2),
            ("xor", "b", 2),
            ("not", "b", 1),
            ("neg", "s", 1),
            ("div", "su", 2),
            ("rem", "su", 2),
            ("min", "su", 2),
            ("max", "su", 2),
            ("mul.lo", "su", 2),
            ("add", "su", 2),
        ];
        let mut rng = Rng(0x5eed);
        let mut checked = 0;
        for bits in [16u32, 32, 64] {
            let m = mask(bits);
            let edges = [
                0u64,
                1,
                2,
                3,
                m,
                m - 1,
                m >> 1,
                (m >> 1) + 1,
                u64::from(bits) - 1,
                u64::from(bits),
                u64::from(bits) + 1,
                768,
            ];
            let mut pairs: Vec<(u64, u64, u64)> = Vec::new();
            for &a in &edges {
                for &b in &edges {
                    pairs.push((
                        a,
                        b,
                        edges[(a.wrapping_add(b) % edges.len() as u64) as usize],
                    ));
                }
            }
            for _ in 0..40 {
                pairs.push((rng.next() & m, rng.next() & m, rng.next()));
            }
            for &(op, kinds, arity) in &ops {
                let wide = op.ends_with(".wide");
                if wide && bits == 64 {
                    continue;
                }
                for kind in kinds.chars() {
                    let signed = kind == 's';
                    let out_bits = if wide { 2 * bits } else { bits };
                    for &(a, b, c) in &pairs {
                        let c = c & mask(out_bits);
                        // A shift's amount is a .u32 operand: an immediate.
                        let shift = op == "shl" || op == "shr";
                        let mut body = format!(
                            "mov.b{bits} {}, {a:#x};\nmov.b{bits} {}, {b:#x};\nmov.b{out_bits} {}, {c:#x};\n",
                            reg(bits, 1),
                            reg(bits, 2),
                            reg(out_bits, 3)
                        );
                        let sources = match (arity, shift) {
                            (1, _) => reg(bits, 1),
                            (2, true) => format!("{}, {}", reg(bits, 1), b),
                            (2, false) => format!("{}, {}", reg(bits, 1), reg(bits, 2)),
                            _ => {
                                format!("{}, {}, {}", reg(bits, 1), reg(bits, 2), reg(out_bits, 3))
                            }
                        };
                        body += &format!("{op}.{kind}{bits} {}, {sources};\n", reg(out_bits, 4));
                        let ptx = format!(
                            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{{\n\
                             .reg .b16 %h<8>;\n.reg .b32 %r<8>;\n.reg .b64 %rd<8>;\n{body}ret;\n}}\n"
                        );
                        let known = known_in(&ptx);
                        let want = reference(op, signed, bits, a, b, c);
                        let got = known
                            .get(reg(out_bits, 4).as_str())
                            .map(|v| v & mask(out_bits));
                        assert_eq!(
                            got, want,
                            "{op}.{kind}{bits} of {a:#x}, {b:#x}, {c:#x}\n{ptx}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    /// What stays unknown: a register written twice, a guarded write, a
    /// saturating or carrying form, a float move, a special register — and
    /// what depends on one of those.
    #[test]
    fn what_the_model_cannot_know_stays_unknown() {
        let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\
            .reg .pred %p<2>;\n.reg .b32 %r<20>;\n.reg .f32 %f<2>;\n\
            mov.u32 %r1, 5;\nmov.u32 %r1, 6;\n\
            setp.eq.u32 %p1, %r1, 6;\n@%p1 mov.u32 %r2, 7;\n\
            mov.u32 %r3, 0x7fffffff;\nadd.sat.s32 %r4, %r3, %r3;\n\
            add.cc.u32 %r5, %r3, 1;\n\
            mov.f32 %f1, 0f3F800000;\n\
            mov.u32 %r6, %tid.x;\n\
            mul.lo.u32 %r7, %r6, 4;\n\
            mul.lo.u32 %r8, %r3, 2;\n\
            ret;\n}\n";
        let known = known_in(ptx);
        let mut names: Vec<&str> = known.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["%r3", "%r8"], "{known:?}");
        assert_eq!(known["%r8"] & 0xffff_ffff, 0xffff_fffe);
    }

    /// A value known through a chain of moves written backwards (each
    /// link read before its source is known) is known at its end — and each
    /// definition is tried again only when a source becomes known, so
    /// hostile code of such chains folds in linear time.
    #[test]
    fn a_chain_written_backwards_is_folded() {
        let n = 20_000;
        let mut body = String::new();
        for k in 1..=n {
            body.push_str(&format!("add.s32 %r{k}, %r{}, 1;\n", k + 1));
        }
        body.push_str(&format!("mov.u32 %r{}, 7;\n", n + 1));
        let ptx = format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{{\n.reg .b32 %r<{}>;\n{body}ret;\n}}\n",
            n + 2
        );
        let known = known_in(&ptx);
        assert_eq!(known.get("%r1"), Some(&(7 + n as u64)));
        assert_eq!(known.len(), n + 1);
    }
}
