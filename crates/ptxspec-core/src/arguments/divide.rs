//! Integer division by a value the code now knows, made a multiplication:
//! ptxas keeps `div.s32 %r2, %r1, 768` a division (a long sequence), where
//! NVVM, seeing a literal, emits a multiply-high and shifts. After the PTX
//! way has made fixed parameters' loads moves of their values, each
//! `div`/`rem` (`.s32`, `.u32`, `.s64`, `.u64`) whose divisor is such a
//! value — an immediate, or a register written once, by a move of an
//! immediate, or by moves and conversions from one — is rewritten into the
//! sequence of Granlund and Montgomery ("Division by invariant integers
//! using multiplication", 1994): a shift for a power of two, the identity
//! for 1, a negation for −1, and otherwise a multiply-high by a magic
//! number and shifts. The sequence is written here once as a small program
//! ([`Seq`]) that is both printed as PTX and evaluated on the CPU, so the
//! tests compare it with the division it replaces on sampled operands.

use std::fmt::Write as _;

use crate::ptx::instr::{Operand, TypeKind};
use crate::ptx::known::known_values;
use crate::ptx::{self, Edits, Module, StmtKind};

/// An operand of a sequence's instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Src {
    /// The dividend.
    N,
    /// Temporary `i`.
    T(usize),
    /// An immediate (bits of the operation's width).
    Imm(u64),
}

/// One instruction of a sequence: its destination is a new temporary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    MulHi(Src, Src),
    MulLo(Src, Src),
    Add(Src, Src),
    Sub(Src, Src),
    /// Logical shift right.
    Shr(Src, u32),
    /// Arithmetic shift right.
    Sar(Src, u32),
    Neg(Src),
}

/// A sequence computing a quotient (or remainder) of the dividend `N` by a
/// known divisor, for one width and signedness; its result is the last
/// instruction's temporary (or `N` itself where it has none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seq {
    pub(crate) bits: u32,
    pub(crate) signed: bool,
    pub(crate) ops: Vec<Op>,
}

impl Seq {
    fn push(&mut self, op: Op) -> Src {
        self.ops.push(op);
        Src::T(self.ops.len() - 1)
    }

    fn result(&self) -> Src {
        match self.ops.len() {
            0 => Src::N,
            n => Src::T(n - 1),
        }
    }

    /// The sequence's result for dividend `n` (its low `bits` bits), as
    /// the GPU computes it: what the tests compare with the division.
    #[cfg(test)]
    pub(crate) fn eval(&self, n: u64) -> u64 {
        let mask = mask(self.bits);
        let mut t: Vec<u64> = Vec::with_capacity(self.ops.len());
        let v = |s: Src, t: &[u64]| match s {
            Src::N => n & mask,
            Src::T(i) => t[i],
            Src::Imm(x) => x & mask,
        };
        let signed = |x: u64| -> i128 {
            let shift = 128 - self.bits;
            ((x as i128) << shift) >> shift
        };
        for op in &self.ops {
            let r = match *op {
                Op::MulHi(a, b) => {
                    let (a, b) = (v(a, &t), v(b, &t));
                    let p = match self.signed {
                        true => (signed(a) * signed(b)) >> self.bits,
                        false => ((a as u128 * b as u128) >> self.bits) as i128,
                    };
                    p as u64
                }
                Op::MulLo(a, b) => v(a, &t).wrapping_mul(v(b, &t)),
                Op::Add(a, b) => v(a, &t).wrapping_add(v(b, &t)),
                Op::Sub(a, b) => v(a, &t).wrapping_sub(v(b, &t)),
                Op::Shr(a, s) => v(a, &t) >> s,
                Op::Sar(a, s) => (signed(v(a, &t)) >> s) as u64,
                Op::Neg(a) => v(a, &t).wrapping_neg(),
            };
            t.push(r & mask);
        }
        v(self.result(), &t)
    }
}

fn mask(bits: u32) -> u64 {
    match bits {
        64 => u64::MAX,
        b => (1u64 << b) - 1,
    }
}

/// The quotient of an unsigned `bits`-bit dividend by `d` (≥ 1).
pub(crate) fn unsigned_quotient(bits: u32, d: u64) -> Seq {
    let mut s = Seq {
        bits,
        signed: false,
        ops: Vec::new(),
    };
    if d == 1 {
        return s;
    }
    if d.is_power_of_two() {
        s.push(Op::Shr(Src::N, d.trailing_zeros()));
        return s;
    }
    // l = ceil(log2 d); m' = floor(2^N (2^l − d) / d) + 1 (fits N bits).
    let l = 64 - (d - 1).leading_zeros();
    let m = (((1u128 << bits) * ((1u128 << l) - d as u128)) / d as u128 + 1) as u64;
    let t1 = s.push(Op::MulHi(Src::N, Src::Imm(m)));
    let diff = s.push(Op::Sub(Src::N, t1));
    let half = s.push(Op::Shr(diff, 1));
    let sum = s.push(Op::Add(t1, half));
    s.push(Op::Shr(sum, l - 1));
    s
}

/// The quotient, truncated toward zero, of a signed `bits`-bit dividend by
/// `d` (≠ 0).
pub(crate) fn signed_quotient(bits: u32, d: i64) -> Seq {
    let mut s = Seq {
        bits,
        signed: true,
        ops: Vec::new(),
    };
    let a = d.unsigned_abs();
    let q = if a == 1 {
        Src::N
    } else if a.is_power_of_two() {
        let k = a.trailing_zeros();
        // n + (2^k − 1 where n < 0), then shifted: rounds toward zero.
        let sign = s.push(Op::Sar(Src::N, k - 1));
        let bias = s.push(Op::Shr(sign, bits - k));
        let sum = s.push(Op::Add(Src::N, bias));
        s.push(Op::Sar(sum, k))
    } else {
        // l = max(ceil(log2 |d|), 1); m = 1 + floor(2^(N+l−1) / |d|),
        // used as the N-bit signed m − 2^N.
        let l = (64 - (a - 1).leading_zeros()).max(1);
        let m = 1 + (1u128 << (bits + l - 1)) / a as u128;
        let m_signed =
            (m as u64).wrapping_sub(if bits == 64 { 0 } else { 1u64 << bits }) & mask(bits);
        let hi = s.push(Op::MulHi(Src::N, Src::Imm(m_signed)));
        let sum = s.push(Op::Add(Src::N, hi));
        let shifted = s.push(Op::Sar(sum, l - 1));
        let sign = s.push(Op::Sar(Src::N, bits - 1));
        s.push(Op::Sub(shifted, sign))
    };
    if d < 0 {
        s.push(Op::Neg(q));
    }
    s
}

/// The remainder: `n − q·d` after the quotient's sequence.
pub(crate) fn remainder(mut q: Seq, d: u64) -> Seq {
    let quotient = q.result();
    let product = q.push(Op::MulLo(quotient, Src::Imm(d)));
    q.push(Op::Sub(Src::N, product));
    q
}

/// The temporaries' register names: `<prefix><bits>_<n>` (declared by the
/// rewrite at the body's start).
fn temp(prefix: &str, bits: u32, i: usize) -> String {
    format!("{prefix}{bits}_{i}")
}

impl Seq {
    /// The sequence as PTX: each line guarded by `guard` (a predicate of
    /// the division it replaces, or nothing), its result moved into `dst`.
    fn to_ptx(&self, guard: &str, dst: &str, dividend: &str, prefix: &str, base: usize) -> String {
        let ty = format!("{}{}", if self.signed { "s" } else { "u" }, self.bits);
        let b = self.bits;
        let name = |s: Src| match s {
            Src::N => dividend.to_string(),
            Src::T(i) => temp(prefix, b, base + i),
            Src::Imm(x) => format!("{x:#x}"),
        };
        let mut out = String::new();
        for (i, op) in self.ops.iter().enumerate() {
            let d = temp(prefix, b, base + i);
            let line = match *op {
                Op::MulHi(x, y) => format!("mul.hi.{ty} {d}, {}, {};", name(x), name(y)),
                Op::MulLo(x, y) => format!("mul.lo.{ty} {d}, {}, {};", name(x), name(y)),
                Op::Add(x, y) => format!("add.{ty} {d}, {}, {};", name(x), name(y)),
                Op::Sub(x, y) => format!("sub.{ty} {d}, {}, {};", name(x), name(y)),
                Op::Shr(x, s) => format!("shr.u{b} {d}, {}, {s};", name(x)),
                Op::Sar(x, s) => format!("shr.s{b} {d}, {}, {s};", name(x)),
                Op::Neg(x) => format!("neg.s{b} {d}, {};", name(x)),
            };
            let _ = write!(out, "{guard}{line} ");
        }
        let _ = write!(out, "{guard}mov.b{b} {dst}, {};", name(self.result()));
        out
    }
}

/// `ptx` with every integer `div` and `rem` of kernel `kernel` whose
/// divisor is known (see the module docs) made a multiplication; the rest
/// as it was.
pub(crate) fn divisions_by_constants(ptx: &str, kernel: &str) -> Result<String, ptx::ParseError> {
    divisions_in(ptx, |m, f| f.is_kernel && m.text(f.name) == kernel)
}

/// [`divisions_by_constants`] in every function of `ptx` with a body: what
/// the native route runs after its specialization constants became
/// immediates, so that a divisor read from a constant (or computed from
/// constants) divides by multiplying as a fixed argument's does.
pub(crate) fn divisions_in_every_function(ptx: &str) -> Result<String, ptx::ParseError> {
    divisions_in(ptx, |_, _| true)
}

fn divisions_in(
    ptx: &str,
    wanted: impl Fn(&Module, &ptx::Function) -> bool,
) -> Result<String, ptx::ParseError> {
    // Both callers parsed this text a moment before (it is their own
    // edit of a parsed module); most specializations divide by nothing,
    // and a new value set's native build should not parse it again then.
    if !ptx.contains("div.") && !ptx.contains("rem.") {
        return Ok(ptx.to_string());
    }
    let m = ptx::parse("kernel.ptx", ptx.to_string())?;
    let prefix = ptx::fresh_prefix(&m.src, "%pxdv");
    let mut edits = Edits::new();
    let mut any = false;
    for item in &m.items {
        let ptx::ItemKind::Function(f) = &item.kind else {
            continue;
        };
        if let (Some(body), true) = (&f.body, wanted(&m, f)) {
            any |= rewrite_body(&m, body, &prefix, &mut edits);
        }
    }
    if !any {
        return Ok(ptx.to_string());
    }
    Ok(edits.apply(&m.src).unwrap_or_else(|_| ptx.to_string()))
}

/// Adds to `edits` the rewrite of `body`'s divisions by known values and
/// its temporaries' declarations; whether there was any.
fn rewrite_body(m: &Module, body: &ptx::Body, prefix: &str, edits: &mut Edits) -> bool {
    let known = known_values(m, body);
    let mut used = [0usize; 2];
    for s in body.stmts.iter().filter(|s| s.kind == StmtKind::Instr) {
        let Ok(Some(i)) = m.instr(s) else { continue };
        let kind @ ("div" | "rem") = i.opcode else {
            continue;
        };
        let ([ty], true) = (i.types.as_slice(), i.modifiers.is_empty()) else {
            continue;
        };
        let signed = match ty.kind {
            TypeKind::Signed => true,
            TypeKind::Unsigned => false,
            _ => continue,
        };
        let bits = ty.bits;
        if bits != 32 && bits != 64 {
            continue;
        }
        let (Some(Operand::Reg(dst)), Some(Operand::Reg(n)), Some(divisor)) =
            (i.operands.first(), i.operands.get(1), i.operands.get(2))
        else {
            continue;
        };
        let (dst, n) = (*dst, *n);
        let d = match divisor {
            Operand::Reg(r) => match known.get(*r) {
                Some(&v) => v,
                None => continue,
            },
            other => match other.integer() {
                Some(v) => v,
                None => continue,
            },
        } & mask(bits);
        if d == 0 {
            continue;
        }
        let quotient = match signed {
            true => {
                let shift = 64 - bits;
                signed_quotient(bits, ((d << shift) as i64) >> shift)
            }
            false => unsigned_quotient(bits, d),
        };
        let seq = match kind {
            "rem" => remainder(quotient, d),
            _ => quotient,
        };
        let guard = match i.guard {
            Some((p, negated)) => format!("@{}{p} ", if negated { "!" } else { "" }),
            None => String::new(),
        };
        let slot = usize::from(bits == 64);
        edits.replace(s.span, seq.to_ptx(&guard, dst, n, prefix, used[slot]));
        used[slot] += seq.ops.len();
    }
    if used == [0, 0] {
        return false;
    }
    // The temporaries, declared in the body's own scope, right after its
    // opening brace: a body that opens with a nested `{ }` block would
    // otherwise declare them inside it, and uses after the block would not
    // see them.
    let open = ptx::Span::new(body.span.start, body.span.start + 1);
    let mut decls = String::new();
    for (slot, bits) in [(0, 32), (1, 64)] {
        if used[slot] > 0 {
            let _ = write!(decls, "\n.reg .b{bits} {prefix}{bits}_<{}>;", used[slot]);
        }
    }
    edits.replace(ptx::Span::new(open.end, open.end), decls);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::Rng;

    /// Divisors worth trying at `bits`: small ones, powers of two and their
    /// neighbours, the extremes, and random ones.
    fn divisors(bits: u32, rng: &mut Rng) -> Vec<u64> {
        let mut d: Vec<u64> = (1..=70).collect();
        d.extend([
            100,
            641,
            768,
            1000,
            3072,
            6700417,
            0x5555_5555,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_fffe,
            0xffff_ffff,
        ]);
        for k in 1..bits {
            d.extend([(1u64 << k) - 1, 1u64 << k, (1u64 << k) + 1]);
        }
        if bits == 64 {
            d.extend([
                u64::MAX,
                u64::MAX - 1,
                i64::MAX as u64,
                1u64 << 63,
                (1u64 << 63) + 1,
                0x5555_5555_5555_5555,
            ]);
        }
        for _ in 0..300 {
            let width = 1 + rng.below(u64::from(bits)) as u32;
            d.push(rng.next() & mask(width));
        }
        let m = mask(bits);
        let mut all: Vec<u64> = d.iter().map(|x| x & m).filter(|&x| x != 0).collect();
        // Negative divisors for signed division: the same magnitudes.
        all.extend(all.clone().iter().map(|x| x.wrapping_neg() & m));
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Dividends worth trying against divisor `d`: the extremes, the
    /// multiples of `d` near them and near zero (± 1), and random ones.
    fn dividends(bits: u32, d: u64, rng: &mut Rng) -> Vec<u64> {
        let m = mask(bits);
        let half = 1u64 << (bits - 1);
        let mut n = vec![0, 1, 2, m, m - 1, half, half - 1, half + 1];
        for base in [0, half, m] {
            let q = base / d.max(1);
            for k in [q.wrapping_sub(1), q, q.wrapping_add(1)] {
                let p = k.wrapping_mul(d);
                n.extend([p.wrapping_sub(1), p, p.wrapping_add(1)]);
            }
        }
        for _ in 0..64 {
            n.push(rng.next());
        }
        n.into_iter().map(|x| x & m).collect()
    }

    fn as_signed(bits: u32, x: u64) -> i64 {
        let shift = 64 - bits;
        ((x << shift) as i64) >> shift
    }

    /// Every sequence computes the division it replaces — quotient and
    /// remainder, signed and unsigned, 32 and 64 bits — for every divisor
    /// tried (1, −1, powers of two, the extremes, random ones) on dividends
    /// at the extremes, around the divisor's multiples and random, as the
    /// GPU's `div` and `rem` do (signed: truncated toward zero; MIN / −1
    /// wraps to MIN, MIN % −1 is 0).
    #[test]
    fn every_sequence_is_the_division_it_replaces() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut checked = 0u64;
        for bits in [32u32, 64] {
            let m = mask(bits);
            for d in divisors(bits, &mut rng) {
                let uq = unsigned_quotient(bits, d);
                let ur = remainder(unsigned_quotient(bits, d), d);
                let sd = as_signed(bits, d);
                let sq = signed_quotient(bits, sd);
                let sr = remainder(signed_quotient(bits, sd), d);
                for n in dividends(bits, d, &mut rng) {
                    assert_eq!(uq.eval(n), (n / d) & m, "u{bits} {n} / {d}");
                    assert_eq!(ur.eval(n), (n % d) & m, "u{bits} {n} % {d}");
                    let sn = as_signed(bits, n);
                    let (q, r) = match bits {
                        32 => (
                            (sn as i32).wrapping_div(sd as i32) as i64,
                            (sn as i32).wrapping_rem(sd as i32) as i64,
                        ),
                        _ => (sn.wrapping_div(sd), sn.wrapping_rem(sd)),
                    };
                    assert_eq!(sq.eval(n), q as u64 & m, "s{bits} {sn} / {sd}");
                    assert_eq!(sr.eval(n), r as u64 & m, "s{bits} {sn} % {sd}");
                    checked += 4;
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
    }

    /// The shapes: 1 is the dividend, a power of two one shift (signed: a
    /// bias and shifts), another divisor one multiply-high.
    #[test]
    fn powers_of_two_shift_and_others_multiply() {
        assert!(unsigned_quotient(32, 1).ops.is_empty());
        assert_eq!(unsigned_quotient(32, 64).ops, [Op::Shr(Src::N, 6)]);
        assert!(matches!(
            unsigned_quotient(32, 768).ops[0],
            Op::MulHi(Src::N, Src::Imm(_))
        ));
        assert_eq!(signed_quotient(64, -1).ops, [Op::Neg(Src::N)]);
        assert!(
            !signed_quotient(32, 12)
                .ops
                .iter()
                .any(|o| matches!(o, Op::MulLo(..)))
        );
    }

    /// A kernel's divisions by known values are rewritten — by an
    /// immediate, by a register moved from one, through a widening
    /// conversion, predicated — and no integer `div` or `rem` by them
    /// stays; one by an unknown register (written twice) stays.
    /// A divisor that reaches the division through an integer conversion
    /// is the value PTX gives it — for every conversion of a generated
    /// family (each signedness and width on both sides, with and without
    /// `.sat`), on values at the types' edges: the known value (the
    /// reference is Rust's casts and clamps, not the model) and the
    /// rewritten division's results on sampled dividends. The hostile
    /// round's two are among them: `cvt.sat.u8.u32` of 300 divides by 255,
    /// `cvt.s8.s32` of 384 by −128.
    #[test]
    fn divisors_through_conversions_are_the_gpus() {
        let widths = [8u32, 16, 32, 64];
        let as_int = |v: u64, bits: u32, signed: bool| -> i128 {
            let low = if bits == 64 { v } else { v & ((1 << bits) - 1) };
            match signed {
                true => ((low as i128) << (128 - bits)) >> (128 - bits),
                false => low as i128,
            }
        };
        let mut rng = Rng(7);
        let mut checked = 0;
        for (to_s, to_b) in widths.iter().flat_map(|&b| [(true, b), (false, b)]) {
            for (from_s, from_b) in widths.iter().flat_map(|&b| [(true, b), (false, b)]) {
                for sat in [false, true] {
                    for v in [300u64, 384, 1000, 0xffff_ff80, 0x1_0000_0007, 7, 255] {
                        let reg = |b: u32| if b == 64 { "%rd" } else { "%r" };
                        let ty = |s: bool, b: u32| format!("{}{b}", if s { "s" } else { "u" });
                        // Registers are at least 16 bits; 8-bit types live
                        // in 16- or 32-bit registers.
                        let (src, dst) = (format!("{}2", reg(from_b)), format!("{}3", reg(to_b)));
                        let op = format!(
                            "cvt{}.{}.{}",
                            if sat { ".sat" } else { "" },
                            ty(to_s, to_b),
                            ty(from_s, from_b)
                        );
                        // What the division reads: the destination register
                        // at the division's width (32 bits unless 64).
                        let div_bits = if to_b == 64 { 64 } else { 32 };
                        let x = as_int(v, from_b.max(if from_b == 64 { 64 } else { 32 }), false);
                        let x = as_int(x as u64, from_b, from_s);
                        let (lo, hi) = match to_s {
                            true => (-(1i128 << (to_b - 1)), (1i128 << (to_b - 1)) - 1),
                            false => (0, (1i128 << to_b) - 1),
                        };
                        let y = if sat { x.clamp(lo, hi) } else { x };
                        let in_register = as_int(y as u64, to_b, to_s) as u64 & mask(div_bits);
                        if in_register == 0 {
                            continue;
                        }
                        let mov_ty = if from_b == 64 { "u64" } else { "u32" };
                        let ptx = format!(
                            ".version 8.0\n.target sm_90\n.address_size 64\n\
                             .visible .entry k(.param .u64 a)\n{{\n.reg .b32 %r<8>;\n.reg .b64 %rd<8>;\n\
                             ld.param.u64 %rd1, [a];\ncvt.u32.u64 %r1, %rd1;\n\
                             mov.{mov_ty} {src}, {v};\n{op} {dst}, {src};\n\
                             div.u{div_bits} {}4, {}1, {dst};\nret;\n}}\n",
                            reg(div_bits),
                            reg(div_bits),
                        );
                        let known = crate::ptx::known::known_in(&ptx);
                        let got = known.get(dst.as_str()).copied().map(|k| k & mask(div_bits));
                        assert_eq!(got, Some(in_register), "{op} of {v:#x}");
                        // And the rewritten division divides by it.
                        let seq = unsigned_quotient(div_bits, in_register);
                        for n in dividends(div_bits, in_register, &mut rng) {
                            assert_eq!(seq.eval(n), (n & mask(div_bits)) / in_register, "{op} {v}");
                        }
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 400, "{checked}");
    }

    /// Divisors folded from known values — the attention permute's
    /// `i / (HS * T)`, `(i / HS) % T` and `i / (HS * T * NH)` with HS, T and
    /// NH known, in 32 and 64 bits, through products, wide products,
    /// shifts, sums and a quotient of constants — are rewritten; one with
    /// an unknown factor stays. Each rewritten sequence is checked against
    /// the division by the folded value on sampled dividends.
    #[test]
    fn divisors_folded_from_known_values_are_rewritten() {
        let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\
            .visible .entry k(.param .u32 a, .param .u32 b)\n{\n.reg .b32 %r<30>;\n.reg .b64 %rd<30>;\n\
            ld.param.u32 %r1, [a];\nld.param.u32 %r20, [b];\ncvt.s64.s32 %rd1, %r1;\n\
            mov.u32 %r2, 768;\nmov.u32 %r3, 12;\ndiv.s32 %r4, %r2, %r3;\n\
            mov.u32 %r5, 1024;\nmul.lo.s32 %r6, %r4, %r5;\nmul.wide.s32 %rd2, %r6, %r3;\n\
            div.s32 %r7, %r1, %r6;\ndiv.s32 %r8, %r1, %r4;\nrem.s32 %r9, %r8, %r5;\n\
            div.s64 %rd3, %rd1, %rd2;\ncvt.s64.s32 %rd4, %r6;\nrem.s64 %rd5, %rd1, %rd4;\n\
            shl.b32 %r10, %r5, 3;\nadd.s32 %r11, %r10, 5;\ndiv.u32 %r12, %r1, %r11;\n\
            mul.lo.s32 %r13, %r20, %r4;\ndiv.s32 %r14, %r1, %r13;\nret;\n}\n";
        let known = crate::ptx::known::known_in(ptx);
        let mut rng = Rng(3);
        for (reg, want, bits) in [
            ("%r4", 64u64, 32u32),
            ("%r6", 65_536, 32),
            ("%rd2", 786_432, 64),
            ("%r11", 8_197, 32),
        ] {
            assert_eq!(known.get(reg).map(|v| v & mask(bits)), Some(want), "{reg}");
            let seq = signed_quotient(bits, want as i64);
            for n in dividends(bits, want, &mut rng) {
                let sn = as_signed(bits, n);
                assert_eq!(
                    as_signed(bits, seq.eval(n)),
                    sn / want as i64,
                    "{reg}: {sn}"
                );
            }
        }
        assert!(
            !known.contains_key("%r13"),
            "a product with an unknown factor"
        );
        let out = divisions_by_constants(ptx, "k").unwrap();
        crate::ptx::parse("k.ptx", out.clone()).unwrap();
        let divisions: Vec<&str> = out
            .split(';')
            .map(|i| i.trim())
            .filter(|i| i.starts_with("div.") || i.starts_with("rem."))
            .collect();
        // Every division by a folded divisor is gone (the quotient of two
        // constants too: ptxas folds what is left); the unknown product's
        // stays.
        assert_eq!(divisions, ["div.s32 %r14, %r1, %r13"], "{out}");
    }

    /// The native route rewrites first, the PTX route of a fixed argument
    /// again on its output: the second rewrite's temporaries take names the
    /// first's do not hold (the same names, declared again with another
    /// count, made ptxas refuse the variant: "Unknown symbol '%pxdv32_10'").
    #[test]
    fn a_second_rewrite_takes_fresh_temporaries() {
        let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\
            .visible .entry k(.param .u32 a, .param .u32 b)\n{\n.reg .b32 %r<9>;\n\
            ld.param.u32 %r1, [a];\nld.param.u32 %r2, [b];\n\
            div.s32 %r3, %r1, 768;\nrem.u32 %r4, %r1, 12;\ndiv.s32 %r5, %r1, %r2;\nret;\n}\n";
        let first = divisions_in_every_function(ptx).unwrap();
        assert!(first.contains("div.s32 %r5, %r1, %r2"), "{first}");
        // What the PTX route does to the load of a fixed argument.
        let fixed = first.replace("ld.param.u32 %r2, [b];", "mov.b32 %r2, 1000;");
        let second = divisions_by_constants(&fixed, "k").unwrap();
        crate::ptx::parse("k.ptx", second.clone()).unwrap();
        assert!(
            !second.contains("div.") && !second.contains("rem."),
            "{second}"
        );
        let decls: Vec<&str> = second
            .lines()
            .filter(|l| l.trim_start().starts_with(".reg .b32 %pxdv"))
            .collect();
        assert_eq!(decls.len(), 2, "{second}");
        let names: Vec<&str> = decls
            .iter()
            .map(|d| {
                d.trim()
                    .trim_start_matches(".reg .b32 ")
                    .split('<')
                    .next()
                    .unwrap_or("")
            })
            .collect();
        assert_ne!(names[0], names[1], "{second}");
        // Each temporary used is below its own declaration's count.
        for d in &decls {
            let (name, count) = d
                .trim()
                .trim_start_matches(".reg .b32 ")
                .split_once('<')
                .unwrap();
            let count: usize = count.trim_end_matches(">;").parse().unwrap();
            for (at, _) in second.match_indices(name) {
                let digits: String = second[at + name.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                if let Ok(n) = digits.parse::<usize>() {
                    assert!(n < count, "{name}{n} beyond {count}: {second}");
                }
            }
        }
    }

    #[test]
    fn known_divisors_are_rewritten_in_the_kernel() {
        let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\
            .visible .entry k(.param .u32 a)\n{\n.reg .pred %p<2>;\n.reg .b32 %r<12>;\n.reg .b64 %rd<6>;\n\
            ld.param.u32 %r1, [a];\nmov.u32 %r2, 768;\nmov.u32 %r9, %r2;\ncvt.s64.s32 %rd1, %r2;\n\
            div.s32 %r3, %r1, %r9;\nrem.u32 %r4, %r1, 12;\ncvt.s64.s32 %rd2, %r1;\ndiv.s64 %rd3, %rd2, %rd1;\n\
            setp.eq.s32 %p1, %r1, 0;\n@%p1 rem.s32 %r5, %r1, %r2;\n\
            mov.u32 %r6, 5;\nmov.u32 %r6, 7;\ndiv.u32 %r7, %r1, %r6;\nret;\n}\n";
        let out = divisions_by_constants(ptx, "k").unwrap();
        crate::ptx::parse("k.ptx", out.clone()).unwrap();
        let divisions: Vec<&str> = out
            .split(';')
            .map(|i| i.trim())
            .filter(|i| {
                let op = i
                    .split_whitespace()
                    .find(|w| !w.starts_with('@'))
                    .unwrap_or("");
                op.starts_with("div.") || op.starts_with("rem.")
            })
            .collect();
        assert_eq!(divisions, ["div.u32 %r7, %r1, %r6"], "{out}");
        assert!(out.contains("@%p1 mul.hi.s32"), "{out}");
        assert!(out.contains(".reg .b64 %pxdv64_<"), "{out}");
    }
}
