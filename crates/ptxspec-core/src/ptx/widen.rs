//! Sign extensions of sums that cannot overflow, distributed: the address
//! half of the PTX optimizer.
//!
//! NVVM compiles `a[k * bs + t]` for an unknown `bs` as a 32-bit sum
//! sign-extended to 64 bits, once per access. Where `bs` is a literal it
//! knows the sum cannot overflow (C's signed overflow is undefined) and
//! extends each term instead, so that the constant parts become immediate
//! offsets of one base address. PTX carries no such fact: ptxas keeps the
//! 32-bit sum and its extension in every copy of an unrolled loop (the
//! native matmul's shared loads: three integer instructions each). This
//! pass proves the fact from value ranges and writes the extension of the
//! sum as the sum of the extensions, `sext(a + b) = sext(a) + sext(b)`
//! (and `sext(a · b) = a ·wide b`), in the blocks of loops whose trip count
//! is known ([`super::loops`]): where ptxas will unroll, and where the
//! loop's induction registers have known ranges.
//!
//! A 32-bit value's range is known for an immediate, a register the
//! function knows ([`super::known`]), a special register of bounded value
//! (`%tid`, `%ntid`, `%laneid`: the ISA's limits), a register written once
//! by `mov`, `add`, `sub`, `mul.lo`, `mad.lo` or `shl` of values of known
//! range whose exact result fits 32 signed bits, and an induction register
//! of a counted loop, inside its block (its start plus its step times the
//! trips so far). A sum is distributed only where every term's exact value
//! fits: the 32-bit operation then computes the exact integer, which is what
//! the 64-bit terms add up to.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use super::instr::{Operand, TypeKind, extend, integer_immediate};
use super::known::Fold;
use super::known::known_values;
use super::loops::{CountedBlock, Induction, Values, counted_blocks, writers};
use super::{Body, BodyRewrite, Module, StmtKind, temporary};

/// How many statements back a sign extension is looked for to reuse.
const REUSE_WINDOW: usize = 64;

/// How deep a sum is distributed, and a range followed back.
const DEPTH: u32 = 8;

/// An exact integer range, both ends included.
type Range = (i128, i128);

/// The 32-bit signed values.
const S32: Range = (i32::MIN as i128, i32::MAX as i128);

fn fits((lo, hi): Range) -> Option<Range> {
    (lo >= S32.0 && hi <= S32.1).then_some((lo, hi))
}

fn add(a: Range, b: Range) -> Option<Range> {
    fits((a.0 + b.0, a.1 + b.1))
}

fn mul(a: Range, b: Range) -> Option<Range> {
    let p = [a.0 * b.0, a.0 * b.1, a.1 * b.0, a.1 * b.1];
    fits((*p.iter().min()?, *p.iter().max()?))
}

/// The range of a special register, where the ISA bounds it.
fn special(name: &str) -> Option<Range> {
    Some(match name {
        "%tid.x" | "%tid.y" => (0, 1023),
        "%tid.z" => (0, 63),
        "%ntid.x" | "%ntid.y" => (1, 1024),
        "%ntid.z" => (1, 64),
        "%laneid" => (0, 31),
        _ => return None,
    })
}

/// What a body's 32-bit values range over, and how their sums extend.
struct Ranges<'v, 'a, 'm> {
    values: &'v Values<'a, 'm>,
    blocks: &'v [CountedBlock],
    /// [`written`](Self::written)'s answers by statement and depth: each
    /// worked out once, however the body's values chain.
    memo: std::cell::RefCell<HashMap<(usize, u32), Option<Range>>>,
}

impl<'m> Ranges<'_, '_, 'm> {
    /// The range of the 32-bit value `operand` holds at statement `at`
    /// (read as signed), where known.
    fn of(&self, operand: &Operand<'_>, at: usize, depth: u32) -> Option<Range> {
        let r = match operand {
            Operand::Imm(text) => {
                let v = i128::from(extend(integer_immediate(text)?, 32, true) as i64);
                return Some((v, v));
            }
            Operand::Reg(r) => *r,
            _ => return None,
        };
        if let Some(range) = special(r) {
            return Some(range);
        }
        if let Some(&v) = self.values.known.get(r) {
            let v = i128::from(extend(v, 32, true) as i64);
            return Some((v, v));
        }
        match self.values.writers.get(r)?.as_slice() {
            [(w, false)] if depth > 0 => self.written(*w, depth - 1),
            _ => self.induction(r, at),
        }
    }

    /// The range of what statement `at` writes: a 32-bit `mov`, `add`,
    /// `sub`, `mul.lo`, `mad.lo` or `shl` whose exact result fits.
    fn written(&self, at: usize, depth: u32) -> Option<Range> {
        if let Some(r) = self.memo.borrow().get(&(at, depth)) {
            return *r;
        }
        let r = self.worked_out(at, depth);
        self.memo.borrow_mut().insert((at, depth), r);
        r
    }

    /// [`written`](Self::written), worked out.
    fn worked_out(&self, at: usize, depth: u32) -> Option<Range> {
        let i = self.values.m.instr(&self.values.body.stmts[at]).ok()??;
        let [ty] = i.types.as_slice() else {
            return None;
        };
        if ty.bits != 32
            || !matches!(
                ty.kind,
                TypeKind::Signed | TypeKind::Unsigned | TypeKind::Bits
            )
        {
            return None;
        }
        let o = |n: usize| self.of(i.operands.get(n)?, at, depth);
        match (i.opcode, i.modifiers.as_slice(), i.operands.len()) {
            ("mov", [], 2) => o(1),
            ("add", [], 3) => add(o(1)?, o(2)?),
            ("sub", [], 3) => {
                let b = o(2)?;
                add(o(1)?, (-b.1, -b.0))
            }
            ("mul", ["lo"], 3) => mul(o(1)?, o(2)?),
            ("mad", ["lo"], 4) => add(mul(o(1)?, o(2)?)?, o(3)?),
            ("shl", [], 3) => {
                let (k, k2) = o(2)?;
                (k == k2 && (0..31).contains(&k)).then_some(())?;
                mul(o(1)?, (1 << k, 1 << k))
            }
            _ => None,
        }
    }

    /// The range of induction register `r` at statement `at` in the block
    /// of a counted loop ([`Induction`]) that no branch but its own enters.
    fn induction(&self, r: &str, at: usize) -> Option<Range> {
        let block = self
            .blocks
            .iter()
            .find(|b| b.header_at < at && at <= b.back_at)?;
        if !block.sole_entry {
            return None;
        }
        let iv = Induction::of(self.values, r, block.header_at, block.back_at)?;
        let Fold::Arith(_, ty) = iv.step else {
            return None;
        };
        if ty.bits != 32 {
            return None;
        }
        let by = i128::from(extend(iv.addend(), 32, true) as i64);
        let first = i128::from(extend(iv.start, 32, true) as i64);
        let trips = i128::from(block.trips);
        // Steps taken before `at` runs: none to trips - 1 before the
        // step's statement, one to trips after it.
        let (k0, k1) = match at <= iv.step_at {
            true => (0, trips - 1),
            false => (1, trips),
        };
        let (a, b) = (first + by * k0, first + by * k1);
        fits((a.min(b), a.max(b)))
    }

    /// `operand` at statement `at` as a sum of 64-bit terms (see [`Wide`]):
    /// a register written in the same block by a sum or product whose
    /// every term fits, and whose operands hold the same values at `at`,
    /// is distributed; anything else is one extended term.
    fn wide(&self, operand: &Operand<'m>, at: usize, depth: u32) -> Option<Wide<'m>> {
        let r = match operand {
            Operand::Imm(_) => {
                let (v, _) = self.of(operand, at, 0)?;
                return Some(Wide::Const(v as i64));
            }
            Operand::Reg(r) => *r,
            _ => return None,
        };
        if let Some(&v) = self.values.known.get(r) {
            return Some(Wide::Const(extend(v, 32, true) as i64));
        }
        if let Some(extended) = self.extended_before(r, at) {
            return Some(Wide::Extended(extended));
        }
        let leaf = Some(Wide::Leaf(r));
        let Some(d) = self.values.reaching_write(r, at) else {
            return leaf;
        };
        if depth == 0 || self.written(d, DEPTH).is_none() {
            return leaf;
        }
        let Ok(Some(i)) = self.values.m.instr(&self.values.body.stmts[d]) else {
            return leaf;
        };
        // The operands must still hold at `at` what they held at `d`.
        if !self.values.sources_unchanged(&i, d, at) {
            return leaf;
        }
        let term = |n: usize| self.wide(&i.operands[n], d, depth - 1);
        let product = |a: &Operand<'m>, b: &Operand<'m>| {
            Some(match (self.factor(a, d)?, self.factor(b, d)?) {
                (Wide::Const(x), Wide::Const(y)) => Wide::Const(x * y),
                (x, y) => Wide::Product(Box::new(x), Box::new(y)),
            })
        };
        Some(match (i.opcode, i.modifiers.as_slice()) {
            ("add", []) => Wide::sum(term(1)?, term(2)?),
            ("mul", ["lo"]) => product(&i.operands[1], &i.operands[2])?,
            ("mad", ["lo"]) => Wide::sum(product(&i.operands[1], &i.operands[2])?, term(3)?),
            _ => return leaf,
        })
    }

    /// A 64-bit register that holds the sign extension of `r` at statement
    /// `at`: written by `cvt.s64.s32` of `r` in the straight-line code just
    /// before (within [`REUSE_WINDOW`] statements), neither written since.
    /// Reusing it keeps a chain of sums a chain (`sext(x + 32)` from
    /// `sext(x)`), which ptxas folds into offsets.
    fn extended_before(&self, r: &str, at: usize) -> Option<&'m str> {
        let (m, stmts) = (self.values.m, &self.values.body.stmts);
        let unwritten = |reg: &str, from: usize| {
            self.values
                .writers
                .get(reg)
                .is_none_or(|ws| ws.iter().all(|(w, _)| *w <= from || *w >= at))
        };
        for j in (at.saturating_sub(REUSE_WINDOW)..at).rev() {
            if stmts[j].kind == StmtKind::Label {
                return None;
            }
            let Ok(Some(i)) = m.instr(&stmts[j]) else {
                continue;
            };
            let cvt = i.opcode == "cvt"
                && i.guard.is_none()
                && i.modifiers.is_empty()
                && matches!(i.types.as_slice(), [to, from] if to.bits == 64 && to.kind == TypeKind::Signed && from.bits == 32 && from.kind == TypeKind::Signed);
            if let (true, [Operand::Reg(wide), Operand::Reg(x)]) = (cvt, i.operands.as_slice())
                && *x == r
                && unwritten(r, j)
                && unwritten(wide, j)
            {
                return Some(wide);
            }
        }
        None
    }

    /// A 32-bit operand of `mul.wide.s32` at statement `at`: a register,
    /// or the constant it or an immediate holds.
    fn factor(&self, o: &Operand<'m>, at: usize) -> Option<Wide<'m>> {
        match (o, self.of(o, at, 0)) {
            (_, Some((v, v2))) if v == v2 => Some(Wide::Const(v as i64)),
            (Operand::Reg(r), _) => Some(Wide::Leaf(r)),
            _ => None,
        }
    }
}

/// A 64-bit value as the sum of the sign extensions of 32-bit values.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Wide<'m> {
    Const(i64),
    /// A 32-bit register, sign-extended.
    Leaf(&'m str),
    /// A 64-bit register holding a sign extension already.
    Extended(&'m str),
    Add(Box<Wide<'m>>, Box<Wide<'m>>),
    /// `mul.wide.s32` of two factors (each a `Leaf` or a `Const`).
    Product(Box<Wide<'m>>, Box<Wide<'m>>),
}

impl Wide<'_> {
    /// `a + b`, constants gathered: two constants are one, and a constant
    /// joins the constant of a sum.
    fn sum<'m>(a: Wide<'m>, b: Wide<'m>) -> Wide<'m> {
        match (a, b) {
            (Wide::Const(x), Wide::Const(y)) => Wide::Const(x.wrapping_add(y)),
            (Wide::Add(p, q), Wide::Const(y)) | (Wide::Const(y), Wide::Add(p, q)) => match *q {
                Wide::Const(x) => Wide::sum(*p, Wide::Const(x.wrapping_add(y))),
                q => Wide::Add(
                    Box::new(Wide::Add(p, Box::new(q))),
                    Box::new(Wide::Const(y)),
                ),
            },
            (Wide::Const(y), b) => Wide::Add(Box::new(b), Box::new(Wide::Const(y))),
            (a, b) => Wide::Add(Box::new(a), Box::new(b)),
        }
    }

    /// It times `c`, each term scaled (`mul.wide.s32` by `c` for an
    /// extended register): ptxas folds scaled constants into offsets, not a
    /// product of a sum. `None` where a term cannot be (a factor past 32
    /// bits, a 64-bit register).
    fn scaled(self, c: i64) -> Option<Self> {
        let factor = |k: i64| i32::try_from(k).ok().map(|k| Wide::Const(i64::from(k)));
        Some(match self {
            Wide::Const(v) => Wide::Const(v.checked_mul(c)?),
            Wide::Leaf(r) => Wide::Product(Box::new(Wide::Leaf(r)), Box::new(factor(c)?)),
            Wide::Product(a, b) => match (*a, *b) {
                (x, Wide::Const(k)) | (Wide::Const(k), x) => {
                    Wide::Product(Box::new(x), Box::new(factor(k.checked_mul(c)?)?))
                }
                _ => return None,
            },
            Wide::Add(a, b) => Wide::sum(a.scaled(c)?, b.scaled(c)?),
            Wide::Extended(_) => return None,
        })
    }

    /// Whether it is more than one extended register.
    fn distributed(&self) -> bool {
        !matches!(self, Wide::Leaf(_))
    }

    /// Writes the PTX that computes it, each line a temporary named from
    /// `prefix` and `next`; returns the operand that holds it.
    fn emit(&self, prefix: &str, next: &mut usize, out: &mut String) -> String {
        match self {
            Wide::Const(v) => v.to_string(),
            Wide::Extended(r) => (*r).to_string(),
            Wide::Leaf(r) => {
                let t = temporary(prefix, next);
                let _ = write!(out, "\n\tcvt.s64.s32 {t}, {r};");
                t
            }
            Wide::Product(a, b) => {
                let word = |w: &Wide<'_>| match w {
                    Wide::Leaf(r) => (*r).to_string(),
                    Wide::Const(v) => (*v as i32).to_string(),
                    _ => String::new(),
                };
                let t = temporary(prefix, next);
                let _ = write!(out, "\n\tmul.wide.s32 {t}, {}, {};", word(a), word(b));
                t
            }
            Wide::Add(a, b) => match (a.as_ref(), b.as_ref()) {
                (Wide::Const(x), Wide::Const(y)) => x.wrapping_add(*y).to_string(),
                _ => {
                    let (x, y) = (a.emit(prefix, next, out), b.emit(prefix, next, out));
                    let t = temporary(prefix, next);
                    let _ = write!(out, "\n\tadd.s64 {t}, {x}, {y};");
                    t
                }
            },
        }
    }
}

/// Distributes, in the blocks of counted loops of `ptx`'s functions that
/// `wanted` names, each sign extension of a 32-bit sum whose terms cannot
/// overflow (see the module docs): `cvt.s64.s32 d, x` and `mul.wide.s32
/// d, x, C`. Text with no counted loop comes back as it was.
pub fn widen_sums_in_counted_loops(
    ptx: &str,
    wanted: impl Fn(&Module, &super::Function) -> bool,
) -> Result<String, super::ParseError> {
    if !ptx.contains("\"nounroll\"") {
        return Ok(ptx.to_string());
    }
    super::rewrite_bodies(ptx, "%pxwd", wanted, widen_body)
}

/// The distributed extensions of `body`, their temporaries named from
/// `prefix`.
fn widen_body(m: &Module, body: &Body, prefix: &str) -> BodyRewrite {
    let known = known_values(m, body);
    let writers = writers(m, body);
    let values = Values::new(m, body, &known, &writers);
    let blocks = counted_blocks(&values);
    if blocks.is_empty() {
        return BodyRewrite::default();
    }
    let ranges = Ranges {
        values: &values,
        blocks: &blocks,
        memo: Default::default(),
    };
    let mut next = 0;
    let mut rewrites: BTreeMap<usize, String> = BTreeMap::new();
    for block in &blocks {
        for at in block.header_at + 1..block.back_at {
            let s = &body.stmts[at];
            if s.kind != StmtKind::Instr {
                continue;
            }
            let Ok(Some(i)) = m.instr(s) else { continue };
            if i.guard.is_some() {
                continue;
            }
            let (Some(Operand::Reg(d)), Some(x)) = (i.operands.first(), i.operands.get(1)) else {
                continue;
            };
            let signed_32_to_64 = match i.types.as_slice() {
                [to, from] => to.bits == 64 && from.bits == 32 && from.kind == TypeKind::Signed,
                [t] => t.bits == 32 && t.kind == TypeKind::Signed,
                _ => false,
            };
            if !signed_32_to_64 {
                continue;
            }
            // `cvt.s64.s32 d, x`, or `mul.wide.s32 d, x, C` (C known).
            let scale = match (i.opcode, i.modifiers.as_slice(), i.operands.len()) {
                ("cvt", [], 2) => None,
                ("mul", ["wide"], 3) => match ranges.of(&i.operands[2], at, 0) {
                    Some((c, c2)) if c == c2 => Some(c as i64),
                    _ => continue,
                },
                _ => continue,
            };
            if ranges.of(x, at, DEPTH).is_none() {
                continue;
            }
            let Some(wide) = ranges.wide(x, at, DEPTH) else {
                continue;
            };
            if !wide.distributed() {
                continue;
            }
            let mut text = String::new();
            let (wide, scale) = match scale.map(|c| (wide.clone().scaled(c), c)) {
                None => (wide, None),
                Some((Some(scaled), _)) => (scaled, None),
                Some((None, c)) => (wide, Some(c)),
            };
            let sum = wide.emit(prefix, &mut next, &mut text);
            let _ = match scale {
                None => write!(text, "\n\tmov.b64 {d}, {sum};"),
                Some(c) => write!(text, "\n\tmul.lo.s64 {d}, {sum}, {c};"),
            };
            rewrites.insert(at, text);
        }
    }
    BodyRewrite {
        statements: rewrites,
        temporaries: next,
        predicates: 0,
    }
}

#[cfg(test)]
mod tests;
