//! Loops whose trip count a specialization made known: the unrolling half
//! of the PTX optimizer.
//!
//! NVVM unrolls a loop whose trip count it does not know by a few
//! iterations and marks what is left `.pragma "nounroll"` (so does a
//! source's `#pragma unroll 1`); ptxas keeps such a loop rolled. Once a
//! specialization makes the count known — a block size that became an
//! immediate — the literal's build would have unrolled the loop completely,
//! and ptxas would too were it not for the pragma. This pass drops the
//! pragma of a loop whose trip count is known in the specialized code and
//! was not in the generic code (a loop counted by the source's own
//! literals keeps its pragma: NVVM saw that count and was told not to
//! unroll). Dropping a pragma changes no result — ptxas then unrolls as it
//! sees fit — so the analysis errs only towards keeping it.
//!
//! A trip count is known for a loop of one block: the label the pragma
//! follows, straight-line code with no other branch, label or exit, and a
//! branch back to the label guarded by a predicate that a `setp` in the
//! block sets from an induction register and a known bound. The induction
//! register is written twice in the function: once before the loop, to a
//! value known there, and once in the block, by adding a known step to
//! itself. A value is known at a place where it is an immediate, a
//! register written once in the function from known values
//! ([`known_values`]), or a register whose last write before that place,
//! in the straight-line code that leads to it (back to the nearest label,
//! where paths merge), folds from values known at its own place — NVVM's
//! remaining count `bs & 3` is written again by the remainder loop after
//! it.
//! The count is what running the block's comparison and step at their
//! types' widths gives ([`super::known::Fold`]), up to [`MAX_TRIPS`].

use std::collections::{HashMap, HashSet};

use super::instr::{Operand, Type, TypeKind, extend, integer_immediate};
use super::known::{Fold, known_values};
use super::{Body, Edits, Module, Span, StmtKind};

/// The most iterations a loop may run for its pragma to be dropped: beyond
/// it a full unroll is not what NVVM would have done with the count, and
/// the counting stops there.
pub const MAX_TRIPS: u64 = 256;

/// A loop marked `.pragma "nounroll"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NounrollLoop {
    /// The label that heads it.
    pub header: String,
    /// The pragma's statement.
    pub pragma: Span,
    /// How many times its block runs, where known (at most [`MAX_TRIPS`]).
    pub trips: Option<u64>,
}

/// The loops of `body` marked `.pragma "nounroll"`, each with its trip
/// count where the module docs' model knows it.
pub fn nounroll_loops(m: &Module, body: &Body) -> Vec<NounrollLoop> {
    let stmts = &body.stmts;
    let headers = nounroll_headers(m, stmts);
    if headers.is_empty() {
        return Vec::new();
    }
    let known = known_values(m, body);
    let writers = writers(m, body);
    let values = Values::new(m, body, &known, &writers);
    headers
        .into_iter()
        .map(|at| {
            let header = label_name(m, &stmts[at]);
            NounrollLoop {
                trips: trip_count(&values, at, header),
                header: header.to_string(),
                pragma: stmts[at + 1].span,
            }
        })
        .collect()
}

/// Every register's writers in `body`: the statement's index and whether
/// a guard makes the write conditional.
pub(super) fn writers<'m>(m: &'m Module, body: &Body) -> HashMap<&'m str, Vec<(usize, bool)>> {
    let mut out: HashMap<&str, Vec<(usize, bool)>> = HashMap::new();
    for (j, s) in body.stmts.iter().enumerate() {
        if s.kind != StmtKind::Instr {
            continue;
        }
        let Ok(Some(i)) = m.instr(s) else { continue };
        for r in i.written_registers() {
            out.entry(r).or_default().push((j, i.guard.is_some()));
        }
    }
    out
}

/// The trip count of the loop headed by the label at `at` (see the module
/// docs), where known.
fn trip_count(values: &Values<'_, '_>, at: usize, header: &str) -> Option<u64> {
    counted(values, at, header).map(|(trips, _)| trips)
}

/// A loop of one block whose trip count is known: its header's and its
/// branch back's statements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CountedBlock {
    pub(super) header_at: usize,
    pub(super) back_at: usize,
    pub(super) trips: u64,
    /// Whether no branch but its own branch back goes to its header: every
    /// entry falls into it from the code above.
    pub(super) sole_entry: bool,
}

/// The blocks of `values`' body marked nounroll whose trip count is known.
pub(super) fn counted_blocks(values: &Values<'_, '_>) -> Vec<CountedBlock> {
    let (m, stmts) = (values.m, &values.body.stmts);
    let headers = nounroll_headers(m, stmts);
    if headers.is_empty() {
        return Vec::new();
    }
    // How many branches go to each label, counted once for every block.
    let mut branches_to: HashMap<&str, usize> = HashMap::new();
    for s in stmts.iter().filter(|s| s.kind == StmtKind::Instr) {
        if let Ok(Some(i)) = m.instr(s)
            && i.opcode == "bra"
            && let Some(target) = i.operands.first()
        {
            for label in target.names() {
                *branches_to.entry(label).or_default() += 1;
            }
        }
    }
    headers
        .into_iter()
        .filter_map(|at| {
            let header = label_name(m, &stmts[at]);
            let (trips, back_at) = counted(values, at, header)?;
            Some(CountedBlock {
                header_at: at,
                back_at,
                trips,
                // Its own branch back is the one.
                sole_entry: branches_to.get(header) == Some(&1),
            })
        })
        .collect()
}

/// The statements of `stmts` that are labels followed by `.pragma
/// "nounroll"`: the loops NVVM marked.
fn nounroll_headers(m: &Module, stmts: &[super::Stmt]) -> Vec<usize> {
    (0..stmts.len().saturating_sub(1))
        .filter(|&j| stmts[j].kind == StmtKind::Label && is_nounroll(m, &stmts[j + 1]))
        .collect()
}

/// A label statement's name (`$L__BB0_5` of `$L__BB0_5:`).
pub(super) fn label_name<'m>(m: &'m Module, label: &super::Stmt) -> &'m str {
    m.text(label.span).trim_end_matches(':').trim()
}

/// Whether `s` is a `.pragma "nounroll"`.
fn is_nounroll(m: &Module, s: &super::Stmt) -> bool {
    let text = m.text(s.span);
    s.kind == StmtKind::Directive && text.starts_with(".pragma") && text.contains("\"nounroll\"")
}

/// [`trip_count`], with the statement of the branch back.
fn counted(values: &Values<'_, '_>, at: usize, header: &str) -> Option<(u64, usize)> {
    let (m, stmts) = (values.m, &values.body.stmts);
    // The block: from the header to the first branch, label or exit; that
    // branch must be the one back to the header, guarded.
    let mut back = None;
    for (j, s) in stmts.iter().enumerate().skip(at + 2) {
        match s.kind {
            StmtKind::Label | StmtKind::Open | StmtKind::Close => return None,
            StmtKind::Instr => {
                let i = m.instr(s).ok()??;
                match i.opcode {
                    "bra" => {
                        let target = i.operands.first().and_then(|o| match o {
                            Operand::Symbol(t) | Operand::Reg(t) => Some(*t),
                            _ => None,
                        });
                        if target != Some(header) {
                            return None;
                        }
                        let (predicate, negated) = i.guard?;
                        back = Some((j, predicate, negated));
                        break;
                    }
                    "brx" | "ret" | "exit" | "trap" | "call" => return None,
                    _ => {}
                }
            }
            StmtKind::Decl | StmtKind::Directive => {}
        }
    }
    let (end, predicate, negated) = back?;
    let in_block = |j: usize| j > at && j < end;
    // The predicate: set once, in the block, by a plain comparison.
    let [(set_at, false)] = values.writers.get(predicate)?.as_slice() else {
        return None;
    };
    if !in_block(*set_at) {
        return None;
    }
    let setp = m.instr(&stmts[*set_at]).ok()??;
    let (Some(Operand::Reg(_)), [cmp], [ty], 3) = (
        setp.operands.first(),
        setp.modifiers.as_slice(),
        setp.types.as_slice(),
        setp.operands.len(),
    ) else {
        return None;
    };
    if setp.opcode != "setp" || !ty.is_integer() && ty.kind != TypeKind::Bits {
        return None;
    }
    // One side the induction register, the other a bound known for the
    // whole function (read on every trip).
    let value = |o: &Operand<'_>| values.at(o, *set_at, 0);
    let (a, b) = (&setp.operands[1], &setp.operands[2]);
    let (counter, bound, counter_first) = match (a, value(a), value(b)) {
        (Operand::Reg(r), None, Some(bound)) => (*r, bound, true),
        (_, Some(bound), None) => match b {
            Operand::Reg(r) => (*r, bound, false),
            _ => return None,
        },
        _ => return None,
    };
    // The counter written only there, before the header and in the block.
    if values.writers.get(counter)?.len() != 2 {
        return None;
    }
    let induction = Induction::of(values, counter, at, end)?;
    let stepped_first = induction.step_at < *set_at;
    let mut v = induction.start;
    for trips in 1..=MAX_TRIPS {
        let after = induction.step.apply(&[v, induction.by])?;
        let compared = if stepped_first { after } else { v };
        let (x, y) = match counter_first {
            true => (compared, bound),
            false => (bound, compared),
        };
        if compare(cmp, *ty, x, y)? == negated {
            return Some((trips, end));
        }
        v = after;
    }
    None
}

/// How many writes back [`Values::at`] follows a value.
pub(super) const VALUE_DEPTH: u32 = 8;

/// What a function's registers hold at a place (see the module docs).
/// Each statement's value is worked out once per depth (`written`), so a
/// body's loops cost time linear in its statements however their values
/// chain.
pub(super) struct Values<'a, 'm> {
    pub(super) m: &'m Module,
    pub(super) body: &'a Body,
    pub(super) known: &'a HashMap<String, u64>,
    /// Every register's writers, ascending: the statement and whether a
    /// guard makes the write conditional.
    pub(super) writers: &'a HashMap<&'m str, Vec<(usize, bool)>>,
    /// How many labels come before each statement (and one past the last).
    labels_before: Vec<u32>,
    written: std::cell::RefCell<HashMap<(usize, u32), Option<u64>>>,
}

impl<'a, 'm> Values<'a, 'm> {
    pub(super) fn new(
        m: &'m Module,
        body: &'a Body,
        known: &'a HashMap<String, u64>,
        writers: &'a HashMap<&'m str, Vec<(usize, bool)>>,
    ) -> Self {
        let mut labels_before = Vec::with_capacity(body.stmts.len() + 1);
        let mut labels = 0;
        labels_before.push(0);
        for s in &body.stmts {
            labels += u32::from(s.kind == StmtKind::Label);
            labels_before.push(labels);
        }
        Values {
            m,
            body,
            known,
            writers,
            labels_before,
            written: Default::default(),
        }
    }

    /// The value `operand` holds when statement `at` runs, where known,
    /// following at most `depth` writes back.
    pub(super) fn at(&self, operand: &Operand<'_>, at: usize, depth: u32) -> Option<u64> {
        let r = match operand {
            Operand::Imm(text) => return integer_immediate(text),
            Operand::Reg(r) => *r,
            _ => return None,
        };
        if let Some(v) = self.known.get(r) {
            return Some(*v);
        }
        // The last write before `at` (the writers ascend).
        let writes = self.writers.get(r)?;
        let &(last, guarded) =
            writes.get(writes.partition_point(|(w, _)| *w < at).checked_sub(1)?)?;
        let merges = self.label_between(last, at);
        if guarded || merges || depth == 0 {
            return None;
        }
        self.written_at(last, depth - 1)
    }

    /// The value statement `at` writes, where it folds from values known
    /// at its place.
    pub(super) fn written_at(&self, at: usize, depth: u32) -> Option<u64> {
        if let Some(v) = self.written.borrow().get(&(at, depth)) {
            return *v;
        }
        let v = self.fold_at(at, depth);
        self.written.borrow_mut().insert((at, depth), v);
        v
    }

    /// The statement that last writes `r` before statement `at`, where it
    /// reaches `at` for sure: unguarded, in the straight-line code that
    /// leads to `at` (no label between).
    pub(super) fn reaching_write(&self, r: &str, at: usize) -> Option<usize> {
        let writes = self.writers.get(r)?;
        let &(last, guarded) =
            writes.get(writes.partition_point(|(w, _)| *w < at).checked_sub(1)?)?;
        (!guarded && !self.label_between(last, at)).then_some(last)
    }

    /// Whether the registers instruction `i` (at statement `d`) reads hold
    /// the same values at statement `at`: none written in between.
    pub(super) fn sources_unchanged(
        &self,
        i: &super::instr::Instr<'_>,
        d: usize,
        at: usize,
    ) -> bool {
        i.operands.iter().skip(1).all(|o| match o {
            Operand::Reg(x) => self
                .writers
                .get(x)
                .is_none_or(|ws| ws.iter().all(|(w, _)| *w <= d || *w >= at)),
            _ => true,
        })
    }

    /// Whether a label (a place where paths merge) lies strictly between
    /// statements `after` and `before`.
    pub(super) fn label_between(&self, after: usize, before: usize) -> bool {
        after < before && self.labels_before[before] > self.labels_before[after + 1]
    }

    /// [`written_at`](Self::written_at), worked out.
    fn fold_at(&self, at: usize, depth: u32) -> Option<u64> {
        let i = self.m.instr(&self.body.stmts[at]).ok()??;
        let fold = Fold::of(&i)?;
        let sources: Option<Vec<u64>> = i
            .operands
            .get(1..)?
            .iter()
            .map(|o| self.at(o, at, depth))
            .collect();
        let sources = sources?;
        (sources.len() == fold.arity()).then(|| fold.apply(&sources))?
    }
}

/// A loop's induction register: its value before the loop and its step.
pub(super) struct Induction {
    /// Its value when the loop is entered.
    pub(super) start: u64,
    /// The step's operation (`add` or `sub` of its type).
    pub(super) step: Fold,
    /// What the step adds or subtracts.
    pub(super) by: u64,
    /// The step's statement.
    pub(super) step_at: usize,
}

impl Induction {
    /// `r` as an induction register of the loop whose block runs from the
    /// header at statement `header_at` to its branch back at `back_at`:
    /// started by its last write before the header — in the straight-line
    /// code that falls into it (a loop entered again from elsewhere would
    /// continue the count) — to a value known there, and written once in
    /// the block, by `add`/`sub` of a step known for the whole function to
    /// itself; neither guarded.
    pub(super) fn of(
        values: &Values<'_, '_>,
        r: &str,
        header_at: usize,
        back_at: usize,
    ) -> Option<Induction> {
        let writes = values.writers.get(r)?;
        let inside = |w: usize| header_at < w && w < back_at;
        let mut in_block = writes.iter().filter(|(w, _)| inside(*w));
        let (Some(&(step_at, false)), None) = (in_block.next(), in_block.next()) else {
            return None;
        };
        let &(before, false) = writes.iter().rev().find(|(w, _)| *w < header_at)? else {
            return None;
        };
        if values.label_between(before, header_at) {
            return None;
        }
        let start = values.written_at(before, VALUE_DEPTH)?;
        let step = values.m.instr(&values.body.stmts[step_at]).ok()??;
        let value = |o: &Operand<'_>| values.at(o, step_at, 0);
        let fold @ Fold::Arith(super::known::Arith::Add | super::known::Arith::Sub, _) =
            Fold::of(&step)?
        else {
            return None;
        };
        let is_r = |o: &Operand<'_>| matches!(o, Operand::Reg(x) if *x == r);
        let by = match step.operands.as_slice() {
            [_, a, b] if is_r(a) => value(b)?,
            // `add c, STEP, c`; a subtraction's order matters.
            [_, a, b] if is_r(b) && step.opcode == "add" => value(a)?,
            _ => return None,
        };
        Some(Induction {
            start,
            step: fold,
            by,
            step_at,
        })
    }

    /// What one step adds, as a two's-complement word (a subtraction's
    /// amount negated).
    pub(super) fn addend(&self) -> u64 {
        match self.step {
            Fold::Arith(super::known::Arith::Sub, _) => self.by.wrapping_neg(),
            _ => self.by,
        }
    }
}

/// `setp.CMP.TYPE`'s comparison of `a` and `b`, read at the type's width;
/// `None` for a comparison this model does not read (floating point's).
pub(super) fn compare(cmp: &str, ty: Type, a: u64, b: u64) -> Option<bool> {
    let signed = ty.kind == TypeKind::Signed;
    let (s, u) = (
        |x: u64| extend(x, ty.bits, true) as i64,
        |x: u64| extend(x, ty.bits, false),
    );
    let ordered = |less: bool, equal: bool| match signed {
        true => (less && s(a) < s(b)) || (equal && s(a) == s(b)),
        false => (less && u(a) < u(b)) || (equal && u(a) == u(b)),
    };
    Some(match cmp {
        "eq" => u(a) == u(b),
        "ne" => u(a) != u(b),
        "lt" => ordered(true, false),
        "le" => ordered(true, true),
        "gt" => !ordered(true, true),
        "ge" => !ordered(true, false),
        // The unsigned spellings, whatever the type.
        "lo" => u(a) < u(b),
        "ls" => u(a) <= u(b),
        "hi" => u(a) > u(b),
        "hs" => u(a) >= u(b),
        _ => return None,
    })
}

/// Drops the `.pragma "nounroll"` of every loop of `specialized`'s
/// functions that `wanted` names whose trip count is known there (at most
/// [`MAX_TRIPS`]) and was not in the same function of `generic`, the code
/// it was specialized from (see the module docs). Text without such a
/// pragma comes back as it was, unparsed.
pub fn unroll_where_counts_became_known(
    generic: &Module,
    specialized: &str,
    wanted: impl Fn(&Module, &super::Function) -> bool,
) -> Result<String, super::ParseError> {
    if !specialized.contains("\"nounroll\"") {
        return Ok(specialized.to_string());
    }
    let m = super::parse("specialized.ptx", specialized.to_string())?;
    let generic_bodies: HashMap<&str, &Body> = generic
        .items
        .iter()
        .filter_map(|i| match &i.kind {
            super::ItemKind::Function(f) => Some((generic.text(f.name), f.body.as_ref()?)),
            _ => None,
        })
        .collect();
    let mut edits = Edits::new();
    let mut any = false;
    for item in &m.items {
        let super::ItemKind::Function(f) = &item.kind else {
            continue;
        };
        let Some(body) = &f.body else { continue };
        if !wanted(&m, f) || !m.text(body.span).contains("\"nounroll\"") {
            continue;
        }
        let counted_before: HashSet<String> = generic_bodies
            .get(m.text(f.name))
            .map(|b| nounroll_loops(generic, b))
            .unwrap_or_default()
            .into_iter()
            .filter(|l| l.trips.is_some())
            .map(|l| l.header)
            .collect();
        for l in nounroll_loops(&m, body) {
            if let (Some(trips), false) = (l.trips, counted_before.contains(&l.header)) {
                edits.replace(
                    l.pragma,
                    format!("// ptxspec: nounroll dropped, {trips} trips once specialized"),
                );
                any = true;
            }
        }
    }
    if !any {
        return Ok(specialized.to_string());
    }
    Ok(edits
        .apply(&m.src)
        .unwrap_or_else(|_| specialized.to_string()))
}

#[cfg(test)]
mod tests;
