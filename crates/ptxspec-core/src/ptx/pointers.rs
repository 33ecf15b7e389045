//! Addresses stepped as pointers in loops, guarded: the last pass of the
//! PTX optimizer.
//!
//! A loop over tiles reads `base + sext(inv + i) * C` on every trip — `i`
//! the loop's counter, `inv` and `base` the same on every trip — as NVVM
//! writes a C++ `A[row * n + t]` whose index is a signed `int`. The
//! literal's build steps a 64-bit pointer by `C * step` instead: NVVM knew
//! from C++ that the `int` sum does not overflow (signed overflow is
//! undefined there), a fact PTX does not carry — the specialized code then
//! keeps the 32-bit sum and its widening on every trip, and ptxas schedules
//! the loop otherwise (the native matmul's last gap to the literal).
//!
//! This pass proves the fact at run time instead, once per entry into the
//! loop, and versions the loop on it. Before the loop it computes, in 64
//! bits, the largest value the counter takes inside the loop — the start,
//! or the bound less one, whichever is larger, for a loop that steps a
//! 32-bit counter up by a positive constant and continues while it is less
//! than a bound (`setp.lt.s32`) that no trip changes — and checks that no
//! sum `inv + i` nor the counter's step can leave the 32-bit range on any
//! trip. Where that holds, the loop as it was, its addresses read from
//! pointers stepped with the counter; where not, a copy of the original
//! loop, placed after the function's last statement, which branches back
//! to the loop's exit. Both compute the same values: with no overflow,
//! `sext(inv + i) * C = (sext(inv) + sext(i)) * C`, and each trip adds
//! `C * step` to `i`'s part.
//!
//! Only outermost loops qualify (a guard per entry of an inner loop costs
//! more than it saves), entered by falling into their header alone, with no
//! branch from outside into them and no declaration or scope inside, whose
//! counter's step and comparison sit in the block that branches back. The
//! guard differs between threads (their sums do), and threads in different
//! copies must not be made to meet at one instruction: a loop that waits at
//! the block's barrier 0 reduces its guard over the block first
//! (`bar.red.and.pred`: every thread of the block runs such a loop, or it
//! would not meet its barriers), so that all take one copy; a loop with any
//! other instruction that ties threads together (a warp's `shfl.sync`, a
//! named or counted barrier) is left as it was.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use super::instr::{Instr, Operand, TypeKind, integer_immediate};
use super::loops::{Values, label_name, writers};
use super::{Body, BodyRewrite, Module, StmtKind, temporary};

/// The largest scale an address's index may have (`C`), and the largest
/// step a counter may take: their product stays far from 64-bit overflow.
const MAX_FACTOR: u64 = 1 << 16;

/// The most loops of one function the pass looks at.
const MAX_LOOPS: usize = 64;

/// Steps the addresses of loops of `ptx`'s functions that `wanted` names as
/// pointers, each loop guarded and versioned (see the module docs). Text
/// with no such loop comes back as it was.
pub fn step_addresses_as_pointers(
    ptx: &str,
    wanted: impl Fn(&Module, &super::Function) -> bool,
) -> Result<String, super::ParseError> {
    if !ptx.contains("mul.wide.s32") {
        return Ok(ptx.to_string());
    }
    super::rewrite_bodies(ptx, "%pxpt", wanted, step_body)
}

/// One address to step: the statement of its `add.s64`, the register it
/// writes, its base, the invariant part of its index and its scale.
struct Stepped<'m> {
    at: usize,
    address: &'m str,
    base: &'m str,
    invariant: Operand<'m>,
    scale: u64,
}

/// A loop that qualifies (see the module docs).
struct SteppedLoop<'m> {
    header: usize,
    back: usize,
    /// The counter's step statement.
    step_at: usize,
    counter: &'m str,
    step: u64,
    bound: Operand<'m>,
    addresses: Vec<Stepped<'m>>,
    /// Whether the loop waits at the block's barrier 0: its guard is then
    /// made the same for every thread of the block (see [`ThreadTies`]).
    block_barrier: bool,
}

/// What a loop does that ties threads together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ThreadTies {
    /// Nothing: each thread may take either copy.
    None,
    /// `bar.sync 0` (or `barrier.sync 0`) of the whole block, and nothing
    /// else: every thread of the block runs the loop (or the kernel would
    /// not meet its barriers), so a guard reduced over the block
    /// (`bar.red.and.pred` before the loop) sends all of them into one
    /// copy, whose barriers they then meet together.
    BlockBarrier,
    /// Anything else that needs threads at the same instruction (a warp's
    /// `shfl.sync`, `vote.sync`, a named or counted barrier, …): not
    /// versioned.
    Other,
}

/// What the statements of `stmts` do that ties threads together.
fn ties_of(m: &Module, stmts: &[super::Stmt]) -> ThreadTies {
    let mut ties = ThreadTies::None;
    for s in stmts.iter().filter(|s| s.kind == StmtKind::Instr) {
        let Ok(Some(i)) = m.instr(s) else {
            return ThreadTies::Other;
        };
        let barrier = matches!(i.opcode, "bar" | "barrier");
        // A warp's collective operations, the old spellings without `.sync`
        // among them, and whatever says `.sync` or `.aligned`.
        let collective = matches!(
            i.opcode,
            "shfl"
                | "vote"
                | "match"
                | "redux"
                | "activemask"
                | "elect"
                | "wmma"
                | "mma"
                | "wgmma"
                | "ldmatrix"
                | "stmatrix"
                | "movmatrix"
                | "setmaxnreg"
        );
        let synchronizing =
            barrier || collective || i.modifiers.iter().any(|x| *x == "sync" || *x == "aligned");
        if !synchronizing {
            continue;
        }
        let whole_block = barrier
            && matches!(i.modifiers.as_slice(), ["sync"] | ["sync", "aligned"])
            && i.guard.is_none()
            && matches!(i.operands.as_slice(), [Operand::Imm(id)] if integer_immediate(id) == Some(0));
        if !whole_block {
            return ThreadTies::Other;
        }
        ties = ThreadTies::BlockBarrier;
    }
    ties
}

fn step_body(m: &Module, body: &Body, prefix: &str) -> BodyRewrite {
    let writers = writers(m, body);
    let known = super::known::known_values(m, body);
    let values = Values::new(m, body, &known, &writers);
    let stmts = &body.stmts;
    let labels: HashMap<&str, usize> = stmts
        .iter()
        .enumerate()
        .filter(|(_, s)| s.kind == StmtKind::Label)
        .map(|(j, s)| (label_name(m, s), j))
        .collect();
    // Every branch: its statement, its target's statement, whether guarded.
    let branches: Vec<(usize, usize, bool)> = stmts
        .iter()
        .enumerate()
        .filter_map(|(j, s)| {
            let i = m.instr(s).ok()??;
            if i.opcode != "bra" {
                return None;
            }
            let Some(Operand::Symbol(t) | Operand::Reg(t)) = i.operands.first() else {
                return None;
            };
            Some((j, *labels.get(t)?, i.guard.is_some()))
        })
        .collect();
    // The slow copies go after the last statement, which nothing may fall
    // past: an unguarded return, exit or branch.
    let ends = stmts
        .iter()
        .rev()
        .find(|s| s.kind != StmtKind::Directive)
        .and_then(|s| m.instr(s).ok().flatten())
        .is_some_and(|i| i.guard.is_none() && matches!(i.opcode, "ret" | "exit" | "bra"));
    if !ends {
        return BodyRewrite::default();
    }
    let mut loops = Vec::new();
    // Each candidate looks at every branch: a bounded number of them keeps
    // hostile PTX's work linear in its length.
    for &(back, header, _) in branches
        .iter()
        .filter(|(back, header, guarded)| *guarded && header < back)
        .take(MAX_LOOPS)
    {
        if let Some(l) = qualifying_loop(&values, &branches, header, back) {
            loops.push(l);
        }
    }
    let mut out = Rewriter {
        m,
        body,
        prefix,
        next: 0,
        predicates: 0,
        statements: BTreeMap::new(),
        tail: String::new(),
    };
    for (n, l) in loops.iter().enumerate() {
        out.version(l, n);
    }
    if out.statements.is_empty() {
        return BodyRewrite::default();
    }
    // The slow copies after the function's last statement.
    if let Some(last) = stmts.len().checked_sub(1) {
        let tail = std::mem::take(&mut out.tail);
        out.append(last, &tail);
    }
    BodyRewrite {
        statements: out.statements,
        temporaries: out.next,
        predicates: out.predicates,
    }
}

/// The loop from the label at `header` to the branch back at `back`, where
/// it qualifies, with the addresses it steps.
fn qualifying_loop<'m>(
    values: &Values<'_, 'm>,
    branches: &[(usize, usize, bool)],
    header: usize,
    back: usize,
) -> Option<SteppedLoop<'m>> {
    let (m, stmts, writers) = (values.m, &values.body.stmts, values.writers);
    // A value known for the whole function (not at one place).
    let value = |o: &Operand<'_>| match o {
        Operand::Imm(t) => integer_immediate(t),
        Operand::Reg(r) => values.known.get(*r).copied(),
        _ => None,
    };
    let inside = |j: usize| j > header && j <= back;
    // Entered by falling into the header alone; outermost; no branch from
    // outside into it.
    for &(from, to, _) in branches {
        if to == header && from != back
            || to > header && to <= back && !inside(from)
            || from > back && to < header
        {
            return None;
        }
    }
    let before = stmts[..header]
        .iter()
        .rev()
        .find(|s| matches!(s.kind, StmtKind::Instr | StmtKind::Label))?;
    if before.kind == StmtKind::Instr {
        let i = m.instr(before).ok()??;
        if i.guard.is_none() && matches!(i.opcode, "bra" | "ret" | "exit" | "brx") {
            return None;
        }
    }
    if stmts[header + 1..=back]
        .iter()
        .any(|s| matches!(s.kind, StmtKind::Decl | StmtKind::Open | StmtKind::Close))
    {
        return None;
    }
    let block_barrier = match ties_of(m, &stmts[header + 1..=back]) {
        ThreadTies::None => false,
        ThreadTies::BlockBarrier => true,
        ThreadTies::Other => return None,
    };
    let written_inside = |r: &str| {
        writers
            .get(r)
            .is_some_and(|ws| ws.iter().any(|(w, _)| inside(*w)))
    };
    let invariant = |o: &Operand<'_>| match o {
        Operand::Reg(r) => !written_inside(r),
        Operand::Imm(t) => integer_immediate(t).is_some(),
        _ => false,
    };
    // The branch back, guarded by a predicate that `setp.lt.s32 p, i, n`
    // (or `setp.gt.s32 p, n, i`) sets once in the loop, in the block that
    // branches back, after the counter's one step there.
    let back_instr = m.instr(&stmts[back]).ok()??;
    let (predicate, false) = back_instr.guard? else {
        return None;
    };
    let latch = stmts[..back]
        .iter()
        .rposition(|s| s.kind == StmtKind::Label)
        .filter(|&l| l >= header)?;
    let [(set_at, false)] = writers.get(predicate)?.as_slice() else {
        return None;
    };
    let set_at = *set_at;
    if set_at <= latch || set_at >= back {
        return None;
    }
    let setp = m.instr(&stmts[set_at]).ok()??;
    let ([cmp], [ty], 3) = (
        setp.modifiers.as_slice(),
        setp.types.as_slice(),
        setp.operands.len(),
    ) else {
        return None;
    };
    if setp.opcode != "setp" || ty.kind != TypeKind::Signed || ty.bits != 32 {
        return None;
    }
    let (counter, bound) = match (*cmp, &setp.operands[1], &setp.operands[2]) {
        ("lt", Operand::Reg(i), n) | ("gt", n, Operand::Reg(i)) => (*i, n.clone()),
        _ => return None,
    };
    if !invariant(&bound) {
        return None;
    }
    let [(step_at, false)] = writers
        .get(counter)?
        .iter()
        .filter(|(w, _)| inside(*w))
        .copied()
        .collect::<Vec<_>>()[..]
    else {
        return None;
    };
    if step_at <= latch || step_at >= set_at {
        return None;
    }
    let step = counter_step(&m.instr(&stmts[step_at]).ok()??, counter, &value)?;
    // No branch between the step and the branch back: every trip's reads
    // of the counter before the step see the trip's value.
    if branches.iter().any(|&(j, _, _)| j > step_at && j < back) {
        return None;
    }
    let scope = LoopScope {
        values,
        header,
        step_at,
    };
    let addresses = scope.stepped_addresses(counter, &invariant, &value);
    (!addresses.is_empty()).then_some(SteppedLoop {
        header,
        back,
        step_at,
        counter,
        step,
        bound,
        addresses,
        block_barrier,
    })
}

/// The step of `add.s32 i, i, S` (either order, `u32` too): `S`, a known
/// value from 1 to [`MAX_FACTOR`].
fn counter_step(
    i: &Instr<'_>,
    counter: &str,
    value: &dyn Fn(&Operand<'_>) -> Option<u64>,
) -> Option<u64> {
    let (d, s) = add_of(i, counter)?;
    // The step as the 32-bit add reads it.
    let step = u64::from(value(&s)? as u32);
    (d == counter && (1..=MAX_FACTOR).contains(&step)).then_some(step)
}

/// The register `i` writes and its other operand, where `i` is a plain
/// 32-bit integer `add` (`s32` or `u32`: the same bits) that reads `reg`.
fn add_of<'m>(i: &Instr<'m>, reg: &str) -> Option<(&'m str, Operand<'m>)> {
    let ([ty], 3) = (i.types.as_slice(), i.operands.len()) else {
        return None;
    };
    if i.opcode != "add" || !i.modifiers.is_empty() || ty.bits != 32 || !ty.is_integer() {
        return None;
    }
    let (Operand::Reg(d), a, b) = (&i.operands[0], &i.operands[1], &i.operands[2]) else {
        return None;
    };
    match (a, b) {
        (Operand::Reg(r), o) | (o, Operand::Reg(r)) if *r == reg => Some((*d, o.clone())),
        _ => None,
    }
}

/// A loop's statements up to its counter's step, as
/// [`LoopScope::stepped_addresses`] reads them.
struct LoopScope<'v, 'a, 'm> {
    values: &'v Values<'a, 'm>,
    header: usize,
    step_at: usize,
}

impl<'m> LoopScope<'_, '_, 'm> {
    /// The addresses `add.s64 z, base, y` of the loop (before the counter's
    /// step), `y` from `mul.wide.s32 y, x, C` and `x` from `add.s32 x, inv, i`
    /// in the same straight-line code, `base` and `inv` the same on every trip.
    fn stepped_addresses(
        &self,
        counter: &str,
        invariant: &dyn Fn(&Operand<'_>) -> bool,
        value: &dyn Fn(&Operand<'_>) -> Option<u64>,
    ) -> Vec<Stepped<'m>> {
        let Self {
            values,
            header,
            step_at,
        } = *self;
        let (m, stmts) = (values.m, &values.body.stmts);
        // The write of `r` that reaches `at` in the loop's straight-line
        // code (a loop with no scope inside: labels are its only merges).
        let last_write = |r: &str, at: usize| values.reaching_write(r, at).filter(|&w| w > header);
        let mut out = Vec::new();
        for at in header + 1..step_at {
            let Ok(Some(add)) = m.instr(&stmts[at]) else {
                continue;
            };
            let ([ty], 3, None) = (add.types.as_slice(), add.operands.len(), add.guard) else {
                continue;
            };
            if add.opcode != "add" || !add.modifiers.is_empty() || ty.bits != 64 {
                continue;
            }
            let Operand::Reg(address) = add.operands[0] else {
                continue;
            };
            // Either operand the product; the other the base.
            let found = [(1, 2), (2, 1)].into_iter().find_map(|(p, b)| {
                let (Operand::Reg(y), Operand::Reg(base)) = (&add.operands[p], &add.operands[b])
                else {
                    return None;
                };
                if !invariant(&Operand::Reg(base)) || *base == address {
                    return None;
                }
                let mul_at = last_write(y, at)?;
                let mul = m.instr(&stmts[mul_at]).ok()??;
                let scale = wide_scale(&mul, y, value)?;
                let Some(Operand::Reg(x)) = mul.operands[1..]
                    .iter()
                    .find(|o| matches!(o, Operand::Reg(_)) && value(o).is_none())
                else {
                    return None;
                };
                let sum_at = last_write(x, mul_at)?;
                let sum = m.instr(&stmts[sum_at]).ok()??;
                let inv = invariant_addend(&sum, x, counter, invariant)?;
                Some(Stepped {
                    at,
                    address,
                    base,
                    invariant: inv,
                    scale,
                })
            });
            out.extend(found);
        }
        out
    }
}

/// The scale of `mul.wide.s32 y, x, C` (either order; `C` a known value):
/// `C`, from 1 to [`MAX_FACTOR`].
fn wide_scale(i: &Instr<'_>, y: &str, value: &dyn Fn(&Operand<'_>) -> Option<u64>) -> Option<u64> {
    let ([ty], ["wide"], 3) = (i.types.as_slice(), i.modifiers.as_slice(), i.operands.len()) else {
        return None;
    };
    if i.opcode != "mul" || ty.kind != TypeKind::Signed || ty.bits != 32 {
        return None;
    }
    let (Operand::Reg(d), a, b) = (&i.operands[0], &i.operands[1], &i.operands[2]) else {
        return None;
    };
    // The index the register the other is not (a known register counts as
    // the scale).
    let scale = match (value(a), value(b)) {
        (None, Some(c)) | (Some(c), None) => c,
        _ => return None,
    };
    let scale = u64::from(scale as u32);
    (*d == y && (1..=MAX_FACTOR).contains(&scale)).then_some(scale)
}

/// The invariant addend of `add.s32 x, inv, i` (either order; `u32` too,
/// the same bits).
fn invariant_addend<'m>(
    i: &Instr<'m>,
    x: &str,
    counter: &str,
    invariant: &dyn Fn(&Operand<'_>) -> bool,
) -> Option<Operand<'m>> {
    let (d, other) = add_of(i, counter)?;
    let twice = matches!(other, Operand::Reg(r) if r == counter);
    (d == x && invariant(&other) && !twice).then_some(other)
}

/// The texts a body's loops are versioned with.
struct Rewriter<'b, 'm> {
    m: &'m Module,
    body: &'b Body,
    prefix: &'b str,
    next: usize,
    predicates: usize,
    statements: BTreeMap<usize, String>,
    /// The slow copies, for after the last statement.
    tail: String,
}

impl Rewriter<'_, '_> {
    /// Appends `text` after statement `at` (its text kept, or rewritten
    /// already).
    fn append(&mut self, at: usize, text: &str) {
        let original = self.m.text(self.body.stmts[at].span).to_string();
        self.statements.entry(at).or_insert(original).push_str(text);
    }

    /// Writes `text` before statement `at`.
    fn prepend(&mut self, at: usize, text: &str) {
        let original = self.m.text(self.body.stmts[at].span).to_string();
        let s = self.statements.entry(at).or_insert(original);
        s.insert_str(0, text);
    }

    fn temporary(&mut self) -> String {
        temporary(self.prefix, &mut self.next)
    }

    /// A 64-bit temporary holding `o` sign-extended from 32 bits.
    fn extended(&mut self, text: &mut String, o: &Operand<'_>) -> String {
        let t = self.temporary();
        match o {
            Operand::Reg(r) => {
                let _ = writeln!(text, "\tcvt.s64.s32 {t}, {r};");
            }
            Operand::Imm(i) => {
                let v = integer_immediate(i).unwrap_or(0) as u32 as i32;
                let _ = writeln!(text, "\tmov.b64 {t}, {v};");
            }
            _ => {}
        }
        t
    }

    /// Versions loop `l` (the `n`th of the body): the guard and the
    /// pointers before it, the pointers read and stepped in it, the slow
    /// copy in the tail.
    fn version(&mut self, l: &SteppedLoop<'_>, n: usize) {
        let (m, stmts) = (self.m, &self.body.stmts);
        let label_stem = format!("${}", self.prefix.trim_start_matches('%'));
        let slow_header = format!("{label_stem}slow{n}_");
        // The exit: a label of our own right after the branch back — not
        // the label that may follow it, which can head the next versioned
        // loop, whose guard is written before that label.
        let exit = format!("{label_stem}exit{n}");
        self.append(l.back, &format!("\n{exit}:"));
        let predicate = format!("{}q{}", self.prefix, self.predicates);
        self.predicates += 1;
        let mut guard = String::from(
            "// ptxspec: the loop below reads its addresses from pointers where this guard holds\n",
        );
        let start = self.extended(&mut guard, &Operand::Reg(l.counter));
        let bound = self.extended(&mut guard, &l.bound);
        let last = self.temporary();
        let top = self.temporary();
        let _ = write!(
            guard,
            "\tadd.s64 {last}, {bound}, -1;\n\tmax.s64 {last}, {last}, {start};\n\
             \tadd.s64 {top}, {last}, {};\n\tsetp.le.s64 {predicate}, {top}, 2147483647;\n",
            l.step
        );
        let mut pointers = Vec::new();
        for a in &l.addresses {
            let inv = self.extended(&mut guard, &a.invariant);
            let (high, low, pointer) = (self.temporary(), self.temporary(), self.temporary());
            let _ = write!(
                guard,
                "\tadd.s64 {high}, {inv}, {last};\n\
                 \tsetp.le.and.s64 {predicate}, {high}, 2147483647, {predicate};\n\
                 \tadd.s64 {low}, {inv}, {start};\n\
                 \tsetp.ge.and.s64 {predicate}, {low}, -2147483648, {predicate};\n\
                 \tmul.lo.s64 {low}, {low}, {};\n\tadd.s64 {pointer}, {}, {low};\n",
                a.scale, a.base
            );
            pointers.push(pointer);
        }
        if l.block_barrier {
            // One copy for the whole block: its barriers are met together.
            let _ = writeln!(guard, "\tbar.red.and.pred {predicate}, 0, {predicate};");
        }
        let _ = writeln!(guard, "\t@!{predicate} bra {slow_header}0;");
        self.prepend(l.header, &guard);
        for (a, pointer) in l.addresses.iter().zip(&pointers) {
            self.statements
                .insert(a.at, format!("mov.b64 {}, {pointer};", a.address));
        }
        let steps: String = l
            .addresses
            .iter()
            .zip(&pointers)
            .map(|(a, p)| format!("\n\tadd.s64 {p}, {p}, {};", a.scale * l.step))
            .collect();
        self.append(l.step_at, &steps);
        // The copy: the loop's statements as they were, its labels renamed.
        let renamed: HashMap<&str, String> = stmts[l.header..=l.back]
            .iter()
            .filter(|s| s.kind == StmtKind::Label)
            .enumerate()
            .map(|(k, s)| (label_name(m, s), format!("{slow_header}{k}")))
            .collect();
        let text = m.text(super::Span::new(
            stmts[l.header].span.start,
            stmts[l.back].span.end,
        ));
        let _ = write!(
            self.tail,
            "\n// ptxspec: the loop above as it was, where its addresses could overflow\n{}\n\tbra.uni {exit};",
            rename_labels(text, &renamed)
        );
    }
}

/// `text` with every label of `renamed` (a whole name) replaced.
fn rename_labels(text: &str, renamed: &HashMap<&str, String>) -> String {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| c == '$' || c.is_ascii_alphabetic()) {
        out.push_str(&rest[..start]);
        let word = &rest[start..];
        let end = word.find(|c: char| !is_name(c)).unwrap_or(word.len());
        let (name, after) = word.split_at(end);
        // A name that continues an identifier (`%r1`) is not a label.
        let continues = out.ends_with(|c: char| is_name(c) || c == '%' || c == '.');
        match renamed.get(name) {
            Some(new) if !continues => out.push_str(new),
            _ => out.push_str(name),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests;
