//! Constant parts of 64-bit addresses moved outward: the offset half of
//! the PTX optimizer.
//!
//! After [`super::widen`], an address in a counted loop's block reads
//! `base + ((sext(t) + C) << 2)`: ptxas adds the constant before the shift
//! in every copy of the unrolled loop (an add and a shift-add a load) where
//! the literal's code, `(base + (sext(t) << 2)) + 4C`, has one address and
//! an immediate offset per load. 64-bit integer arithmetic is modular, so
//! additions, subtractions, shifts left and products by constants
//! distribute without any range: this pass writes each address a load or
//! store of the block reads as its terms (in one order, so that copies
//! share them) plus one constant.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::instr::{Operand, TypeKind, integer_immediate};
use super::known::known_values;
use super::loops::{Values, counted_blocks, writers};
use super::{Body, BodyRewrite, Module, StmtKind, temporary};

/// How many definitions back an address is followed.
const DEPTH: u32 = 8;

/// A 64-bit value as a sum of registers times coefficients plus a
/// constant, modulo 2^64.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Linear<'m> {
    terms: BTreeMap<&'m str, u64>,
    constant: u64,
    /// How many definitions it was read through.
    through: u32,
}

impl<'m> Linear<'m> {
    fn leaf(r: &'m str) -> Self {
        Linear {
            terms: BTreeMap::from([(r, 1)]),
            ..Linear::default()
        }
    }

    fn constant(c: u64) -> Self {
        Linear {
            constant: c,
            ..Linear::default()
        }
    }

    fn plus(mut self, other: Linear<'m>, sign: u64) -> Self {
        for (r, c) in other.terms {
            let e = self.terms.entry(r).or_default();
            *e = e.wrapping_add(c.wrapping_mul(sign));
        }
        self.terms.retain(|_, c| *c != 0);
        self.constant = self
            .constant
            .wrapping_add(other.constant.wrapping_mul(sign));
        self.through += other.through;
        self
    }

    fn times(mut self, k: u64) -> Self {
        for c in self.terms.values_mut() {
            *c = c.wrapping_mul(k);
        }
        self.terms.retain(|_, c| *c != 0);
        self.constant = self.constant.wrapping_mul(k);
        self
    }
}

/// What a body's 64-bit registers are, as linear forms.
struct Forms<'v, 'a, 'm> {
    values: &'v Values<'a, 'm>,
}

impl<'m> Forms<'_, '_, 'm> {
    /// `operand` at statement `at` as a linear form: through the
    /// straight-line definitions before it (64-bit `add`, `sub`, `shl` and
    /// `mul.lo` by a constant, `mov`) whose operands still hold then what
    /// they held; a register otherwise.
    fn of(&self, operand: &Operand<'m>, at: usize, depth: u32) -> Option<Linear<'m>> {
        let r = match operand {
            Operand::Imm(text) => return integer_immediate(text).map(Linear::constant),
            Operand::Reg(r) => *r,
            _ => return None,
        };
        if let Some(&v) = self.values.known.get(r) {
            return Some(Linear::constant(v));
        }
        let leaf = Some(Linear::leaf(r));
        let Some(d) = self.values.reaching_write(r, at) else {
            return leaf;
        };
        if depth == 0 {
            return leaf;
        }
        let Ok(Some(i)) = self.values.m.instr(&self.values.body.stmts[d]) else {
            return leaf;
        };
        let ([ty], 64) = (i.types.as_slice(), i.types.first().map_or(0, |t| t.bits)) else {
            return leaf;
        };
        if !matches!(
            ty.kind,
            TypeKind::Signed | TypeKind::Unsigned | TypeKind::Bits
        ) {
            return leaf;
        }
        if !self.values.sources_unchanged(&i, d, at) {
            return leaf;
        }
        let o = |n: usize| self.of(i.operands.get(n)?, d, depth - 1);
        let k = |n: usize| match i.operands.get(n)? {
            Operand::Imm(t) => integer_immediate(t),
            Operand::Reg(x) => self.values.known.get(*x).copied(),
            _ => None,
        };
        let form = match (i.opcode, i.modifiers.as_slice(), i.operands.len()) {
            ("mov", [], 2) => o(1),
            ("add", [], 3) => Some(o(1)?.plus(o(2)?, 1)),
            ("sub", [], 3) => Some(o(1)?.plus(o(2)?, u64::MAX)),
            ("shl", [], 3) => match k(2)? {
                s if s < 64 => Some(o(1)?.times(1 << s)),
                _ => None,
            },
            ("mul", ["lo"], 3) => Some(o(1)?.times(k(2)?)),
            _ => None,
        };
        match form {
            Some(mut f) => {
                f.through += 1;
                Some(f)
            }
            None => leaf,
        }
    }
}

/// Moves the constants of the addresses that loads and stores read in
/// counted loops' blocks of `ptx`'s functions that `wanted` names outward
/// (see the module docs). Text with no counted loop comes back as it was.
pub fn fold_offsets_in_counted_loops(
    ptx: &str,
    wanted: impl Fn(&Module, &super::Function) -> bool,
) -> Result<String, super::ParseError> {
    if !ptx.contains("\"nounroll\"") {
        return Ok(ptx.to_string());
    }
    super::rewrite_bodies(ptx, "%pxof", wanted, fold_body)
}

/// The addresses of `body` written as terms plus a constant, their
/// temporaries named from `prefix`.
fn fold_body(m: &Module, body: &Body, prefix: &str) -> BodyRewrite {
    let known = known_values(m, body);
    let writers = writers(m, body);
    let values = Values::new(m, body, &known, &writers);
    let blocks = counted_blocks(&values);
    let forms = Forms { values: &values };
    let mut next = 0;
    let mut rewrites: BTreeMap<usize, String> = BTreeMap::new();
    for block in &blocks {
        for at in block.header_at + 1..block.back_at {
            let s = &body.stmts[at];
            if s.kind != StmtKind::Instr {
                continue;
            }
            let Ok(Some(i)) = m.instr(s) else { continue };
            if !matches!(i.opcode, "ld" | "st") {
                continue;
            }
            let Some(Operand::Address {
                base: Some(base), ..
            }) = i
                .operands
                .iter()
                .find(|o| matches!(o, Operand::Address { .. }))
            else {
                continue;
            };
            if !base.starts_with('%') {
                continue;
            }
            // The base's definition, rewritten once, at its own place.
            let Some(d) = values.reaching_write(base, at) else {
                continue;
            };
            if d <= block.header_at || rewrites.contains_key(&d) {
                continue;
            }
            let Some(form) = forms.of(&Operand::Reg(base), at, DEPTH) else {
                continue;
            };
            // Terms that keep their value over the loop's trips first, then
            // those that change (after unrolling, a constant each copy):
            // `invariant base + per-copy value + constant`, which ptxas
            // folds into one base and offsets.
            let (mut order, mut varying): (Vec<_>, Vec<_>) = form
                .terms
                .iter()
                .partition(|(r, _)| !changes_in(&values, r, d, block.header_at, DEPTH));
            let reordered = !order.is_empty() && !varying.is_empty();
            order.append(&mut varying);
            // Something to move: a constant read through more than the
            // last addition, or terms to put in that order.
            if form.terms.is_empty() || form.through < 2 || (form.constant == 0 && !reordered) {
                continue;
            }
            let mut text = String::new();
            let mut sum: Option<String> = None;
            for (r, c) in order {
                let term = match c {
                    1 => (*r).to_string(),
                    c if c.is_power_of_two() => {
                        let t = temporary(prefix, &mut next);
                        let _ = write!(text, "\n\tshl.b64 {t}, {r}, {};", c.trailing_zeros());
                        t
                    }
                    c => {
                        let t = temporary(prefix, &mut next);
                        let _ = write!(text, "\n\tmul.lo.s64 {t}, {r}, {};", *c as i64);
                        t
                    }
                };
                sum = Some(match sum {
                    None => term,
                    Some(s) => {
                        let t = temporary(prefix, &mut next);
                        let _ = write!(text, "\n\tadd.s64 {t}, {s}, {term};");
                        t
                    }
                });
            }
            let Some(sum) = sum else { continue };
            let _ = match form.constant {
                0 => write!(text, "\n\tmov.b64 {base}, {sum};"),
                c => write!(text, "\n\tadd.s64 {base}, {sum}, {};", c as i64),
            };
            rewrites.insert(d, text);
        }
    }
    BodyRewrite {
        statements: rewrites,
        temporaries: next,
        predicates: 0,
    }
}

/// Whether register `r`, read at statement `at` of a loop's block whose
/// header is statement `header`, may hold another value on another trip:
/// written in the block, from a register written there (its own step
/// included), within `depth` writes back.
fn changes_in(values: &Values<'_, '_>, r: &str, at: usize, header: usize, depth: u32) -> bool {
    let Some(writes) = values.writers.get(r) else {
        return false;
    };
    if !writes.iter().any(|(w, _)| *w > header) {
        return false;
    }
    let Some(d) = values.reaching_write(r, at) else {
        return true;
    };
    if d <= header {
        // Written again in the block after this read: a later trip reads that.
        return true;
    }
    let Ok(Some(i)) = values.m.instr(&values.body.stmts[d]) else {
        return true;
    };
    depth == 0
        || i.operands.iter().skip(1).any(|o| match o {
            Operand::Reg(x) => changes_in(values, x, d, header, depth - 1),
            Operand::Imm(_) => false,
            _ => true,
        })
}

#[cfg(test)]
mod tests;
