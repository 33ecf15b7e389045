//! Which of a kernel's parameters may hold an address: a data-flow
//! analysis of its PTX body that fails closed.
//!
//! The trust model (the guide's page): device memory is data. A safe launch
//! never hands a kernel an address made from a number, so a parameter that
//! the kernel may use as an address takes device memory only. A parameter
//! is a *number* only where every use of every value derived from it is
//! proven a number's; anything the analysis does not understand makes it an
//! address.
//!
//! Every value loaded from the parameter — any width, any offset, scalar or
//! vector, integer or float: a pointer cut into halves or read byte by byte
//! is still one — is followed through every instruction that reads it
//! (`ptx::instr`): arithmetic, logic, shifts, conversions of any kind (a
//! value multiplied by one, shifted by zero, or cut in two and put back
//! together is the same value). Each register holds a set of *classes*:
//!
//! - `P`: derived from the parameter alone (and numbers);
//! - `PA`: derived from the parameter and an address together other than
//!   as an address plus an offset (`p − base`, an indexed address aligned):
//!   such a value can give the number back, so it is never an address, nor
//!   added to one;
//! - `B`: an address the kernel was given (made by `cvta`, a variable's
//!   symbol) plus offsets not derived from the parameter;
//! - `BP`: such an address plus an offset derived from the parameter alone —
//!   the kernel indexing memory it was given, which is its own contract;
//! - `T`: derived from addresses other than by adding an offset (a
//!   difference of two, an aligned one), the parameter not involved;
//! - `C`: a plain value (an immediate, a special register, a load's value);
//! - `Q`: another parameter's 64-bit value as loaded — perhaps an address
//!   not yet made one by `cvta` (`end − begin` before `begin` is): the
//!   parameter added to it or subtracted from it is `PA`.
//!
//! A register written in several places holds the union of their classes
//! (the analysis does not follow control flow), and each combination of one
//! class of each operand is taken.
//!
//! The parameter *may hold an address* where a `P` or `PA` value is the
//! base of an address (`[...]`) or made one (`cvta`); where the parameter's
//! value, or an address indexed by it, goes where the analysis cannot follow
//! (a call's argument, local or parameter memory, an opcode it does not
//! know); or where the parameter's name is used other than by a load (its
//! address taken). A value stops being followed where it becomes no
//! address: a comparison's predicate, or a value written into device memory
//! — data there, as an atomic's operand is, so that a kernel filling a
//! buffer of 64-bit numbers takes numbers. Where the kernel has no body to
//! read, every parameter may hold an address.
//!
//! Two users rely on the answer: a launch refuses a plain value for such a
//! parameter, and a fixed argument (`--arg`, adaptive arguments) is refused
//! for one (an address of one process baked into code).

use std::collections::HashMap;

use crate::ptx::instr::{Instr, Operand, Writes};
use crate::ptx::{self, Module, StmtKind};

/// A register's classes (see the module docs), as bits.
type Classes = u8;
const P: Classes = 1;
const PA: Classes = 2;
const BP: Classes = 4;
const B: Classes = 8;
const T: Classes = 16;
/// A plain value: neither derived from the parameter nor from an address
/// (an immediate, a special register, what a load returns).
const C: Classes = 32;
/// Another parameter's 64-bit value, as loaded: perhaps an address (its
/// own analysis decides), not yet made one by `cvta`.
const Q: Classes = 64;
/// Another parameter's 64-bit value, as loaded, where that parameter is
/// taken to be an address (see [`may_hold_address`]): an offset added to
/// it indexes memory the kernel was given (`BP`).
const QA: Classes = 128;
/// The classes of a value that may give the parameter's number back.
const NUMBER: Classes = P | PA;
/// The classes of a value that is, or was made from, an address.
const ADDRESS: Classes = BP | B | T;

/// `x + y`, for single classes.
fn add(x: Classes, y: Classes) -> Classes {
    let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
    match (lo, hi) {
        (c, C) | (C, c) => c,
        (P, QA) => BP,
        (P, Q) | (PA, _) => PA,
        (B, Q) | (B, QA) => B,
        (T, Q) | (T, QA) => T,
        (Q, Q) | (Q, QA) | (QA, QA) => C,
        (P, P) => P,
        (P, BP) | (P, B) => BP,
        (B, B) | (T, T) => T,
        (B, T) => B,
        // The parameter with an address other than as its offset (or an
        // already mixed value): an address plus an address-derived value,
        // two indexed addresses.
        _ => PA,
    }
}

/// `x − y`, for single classes.
fn sub(x: Classes, y: Classes) -> Classes {
    match (x, y) {
        (c, C) => c,
        (PA, _) | (_, PA) | (P, Q) | (Q, P) | (P, QA) | (QA, P) => PA,
        (C, Q) | (Q, Q) | (C, QA) | (QA, QA) | (Q, QA) | (QA, Q) => C,
        (B, Q) | (B, QA) => B,
        (Q, B) | (Q, T) | (T, Q) | (QA, B) | (QA, T) | (T, QA) => T,
        (C, P) | (P, P) => P,
        (C, B) | (C, T) | (B, B) | (T, T) | (T, B) => T,
        (B, P) | (BP, P) => BP,
        (B, T) => B,
        // The parameter's value and an address meet: a difference that
        // may give the number back.
        _ => PA,
    }
}

/// Any other operation (a product, a shift, a conversion, a logical
/// operation …) of values with the classes `union` together.
fn other(union: Classes) -> Classes {
    if union & (PA | BP) != 0 || (union & P != 0 && union & ADDRESS != 0) {
        PA
    } else if union & ADDRESS != 0 {
        T
    } else if union & P != 0 {
        P
    } else {
        C
    }
}

/// The classes each pair of classes of `a` and `b` combine to by `f`.
fn pairwise(a: Classes, b: Classes, f: fn(Classes, Classes) -> Classes) -> Classes {
    let atoms = |c: Classes| (0..8).map(|i| 1 << i).filter(move |bit| c & bit != 0);
    let mut out = 0;
    for x in atoms(a) {
        for y in atoms(b) {
            out |= f(x, y);
        }
    }
    out
}

/// What an unknown callee may return in 64 bits: anything but the
/// parameter's value (it was given none), an address included. A narrower
/// result holds no address: a plain value.
const UNKNOWN_RESULT: Classes = B | T | Q | C;

/// How deep calls are followed; deeper, a call is one the analysis does
/// not follow.
const MAX_CALL_DEPTH: usize = 16;

/// A function's instructions, typed once, with which instructions name
/// each register or variable and which touch local memory: where a class
/// that grew is followed to (here, and by `read_only`'s analysis).
pub(super) struct Code<'m> {
    pub(super) instrs: Vec<Instr<'m>>,
    pub(super) readers: HashMap<&'m str, Vec<usize>>,
    local: Vec<usize>,
}

impl<'m> Code<'m> {
    pub(super) fn new(instrs: Vec<Instr<'m>>) -> Self {
        let mut readers: HashMap<&'m str, Vec<usize>> = HashMap::new();
        let mut local = Vec::new();
        for (at, i) in instrs.iter().enumerate() {
            for name in i.operands.iter().flat_map(Operand::names) {
                let list = readers.entry(name).or_default();
                if list.last() != Some(&at) {
                    list.push(at);
                }
            }
            if i.has("local") {
                local.push(at);
            }
        }
        Code {
            instrs,
            readers,
            local,
        }
    }
}

/// The module's functions, each with its instructions typed once.
struct Program<'m> {
    m: &'m Module,
    functions: HashMap<&'m str, (&'m ptx::Function, Option<Code<'m>>)>,
}

impl<'m> Program<'m> {
    fn new(m: &'m Module) -> Self {
        let functions = m
            .items
            .iter()
            .filter_map(|item| match &item.kind {
                ptx::ItemKind::Function(f) => {
                    let code = f
                        .body
                        .as_ref()
                        .and_then(|b| instructions(m, b))
                        .map(Code::new);
                    Some((m.text(f.name), (f, code)))
                }
                _ => None,
            })
            .collect();
        Program { m, functions }
    }
}

/// One parameter's analysis: which calls were followed with which classes
/// of their arguments, and what they return.
struct Analysis<'p, 'm> {
    program: &'p Program<'m>,
    memo: HashMap<(&'m str, Vec<Classes>), Result<Classes, ()>>,
    /// The functions being analysed, innermost last (recursion).
    stack: Vec<&'m str>,
}

impl<'m> Analysis<'_, 'm> {
    /// Function `name` with its parameters holding `seeds`: `Err(())` where
    /// the parameter's value may become an address in it, else the classes
    /// of what it returns.
    fn function(&mut self, name: &'m str, seeds: Vec<Classes>) -> Result<Classes, ()> {
        let Some((f, instrs)) = self.program.functions.get(name) else {
            return self.unknown_callee(&seeds);
        };
        let Some(code) = instrs else {
            return self.unknown_callee(&seeds);
        };
        if self.stack.len() >= MAX_CALL_DEPTH || self.stack.contains(&name) {
            return self.unknown_callee(&seeds);
        }
        let key = (name, seeds.clone());
        if let Some(known) = self.memo.get(&key) {
            return *known;
        }
        self.stack.push(name);
        let m = self.program.m;
        let mut flow = Flow {
            params: f
                .params
                .iter()
                .map(|p| m.text(p.name))
                .zip(seeds.iter().copied().chain(std::iter::repeat(C)))
                .collect(),
            returns: f.returns.iter().map(|p| m.text(p.name)).collect(),
            regs: HashMap::new(),
            returned: 0,
            local: 0,
        };
        let result = self.body(&mut flow, code);
        self.stack.pop();
        self.memo.insert(key, result);
        result
    }

    /// A callee the analysis does not read (declared only, through a
    /// register, too deep, recursive): the parameter's value, or an address
    /// indexed by it, is lost there.
    fn unknown_callee(&self, seeds: &[Classes]) -> Result<Classes, ()> {
        match seeds.iter().any(|&c| c & (NUMBER | BP) != 0) {
            true => Err(()),
            false => Ok(UNKNOWN_RESULT),
        }
    }

    /// What a callee the analysis does not read returns into `rets`, by
    /// their declared widths in `flow`'s function: an address fits 64 bits
    /// only.
    fn unknown_result(&self, name: Option<&str>) -> Classes {
        let wide = name
            .and_then(|n| self.program.functions.get(n))
            .map(|(f, _)| f.returns.iter().any(|r| r.size() >= 8))
            .unwrap_or(true);
        if wide { UNKNOWN_RESULT } else { C }
    }

    /// The body's instructions to a fixed point (the classes only grow):
    /// each instruction once, then again each time a register, variable or
    /// the local memory it reads grew — linear in the code however its
    /// registers chain (a pass over the body until nothing grows was
    /// quadratic on a chain written backwards: 8 000 moves took 15 s).
    fn body(&mut self, flow: &mut Flow<'m>, code: &Code<'m>) -> Result<Classes, ()> {
        let instrs = &code.instrs;
        // A parameter's name anywhere but as the base of a parameter load:
        // its address taken, or used in a way not followed.
        for i in instrs {
            let loads = i.opcode == "ld" && i.has("param");
            for (at, op) in i.operands.iter().enumerate() {
                for (name, seed) in &flow.params {
                    let base_of_load = loads
                        && at > 0
                        && matches!(op, Operand::Address { base: Some(b), .. } if b == name);
                    if !base_of_load && seed & (NUMBER | BP) != 0 && op.names().contains(name) {
                        return Err(());
                    }
                }
            }
        }
        let mut queued = vec![true; instrs.len()];
        let mut work: std::collections::VecDeque<usize> = (0..instrs.len()).collect();
        while let Some(at) = work.pop_front() {
            queued[at] = false;
            let i = &instrs[at];
            let names: Vec<&'m str> = i.operands.iter().flat_map(Operand::names).collect();
            let before: Vec<Classes> = names.iter().map(|n| flow.classes_of(n)).collect();
            let local = flow.local;
            let grew = match i.opcode {
                "call" => self.call(flow, i)?,
                _ => flow.step(i)?,
            };
            if !grew {
                continue;
            }
            let mut again = |readers: &[usize]| {
                for &r in readers {
                    if !queued[r] {
                        queued[r] = true;
                        work.push_back(r);
                    }
                }
            };
            for (n, was) in names.iter().zip(before) {
                if flow.classes_of(n) != was {
                    again(code.readers.get(n).map(Vec::as_slice).unwrap_or_default());
                }
            }
            if flow.local != local {
                again(&code.local);
            }
        }
        Ok(flow.returned)
    }

    /// `call (ret), f, (args)`: the callee followed with its arguments'
    /// classes (the parameter-space variables the caller stored them in),
    /// its result written into the return variables.
    fn call(&mut self, flow: &mut Flow<'m>, i: &Instr<'m>) -> Result<bool, ()> {
        let mut rets: &[&str] = &[];
        let mut callee: Option<&Operand<'m>> = None;
        let mut args: &[&str] = &[];
        for op in &i.operands {
            match (op, callee) {
                (Operand::Other(words), None) => rets = words,
                (Operand::Symbol(_) | Operand::Reg(_), None) => callee = Some(op),
                (Operand::Other(words), Some(_)) if args.is_empty() => args = words,
                _ => {}
            }
        }
        let seeds: Vec<Classes> = args
            .iter()
            .map(|a| flow.regs.get(a).copied().unwrap_or(C))
            .collect();
        let result = match callee {
            Some(Operand::Symbol(name)) => match self.program.functions.get(name) {
                // Declared only: its result by its declared width.
                Some((_, None)) => {
                    self.unknown_callee(&seeds)?;
                    self.unknown_result(Some(name))
                }
                _ => self.function(name, seeds)?,
            },
            Some(target @ Operand::Reg(_)) => {
                if flow.of(target) & NUMBER != 0 {
                    return Err(());
                }
                self.unknown_callee(&seeds)?
            }
            _ => self.unknown_callee(&seeds)?,
        };
        Ok(flow.write(rets, result))
    }
}

/// The classes of one function's registers (and of the parameter-space
/// variables its calls pass through), for one kernel parameter.
struct Flow<'m> {
    /// The function's parameters and the classes each holds.
    params: Vec<(&'m str, Classes)>,
    /// Its return parameters.
    returns: Vec<&'m str>,
    regs: HashMap<&'m str, Classes>,
    /// What it returns.
    returned: Classes,
    /// What its local memory holds (one cell for all of it: a value spilled
    /// there and read back is followed).
    local: Classes,
}

impl<'m> Flow<'m> {
    /// What register or variable `name` holds now (0: nothing yet).
    fn classes_of(&self, name: &str) -> Classes {
        self.regs.get(name).copied().unwrap_or(0)
    }

    /// The classes of a source operand.
    fn of(&self, op: &Operand<'m>) -> Classes {
        match op {
            Operand::Reg(r) => self.regs.get(r).copied().unwrap_or(C),
            // A variable's (or function's) address, plus a constant or not.
            Operand::Symbol(_) => B,
            Operand::Sum { base, .. } if !base.starts_with('%') => B,
            Operand::Sum { base, .. } => self.of(&Operand::Reg(base)),
            Operand::Vector(v) => v.iter().fold(0, |c, o| c | self.of(o)),
            Operand::Pair(a, b) => self.of(&Operand::Reg(a)) | self.of(&Operand::Reg(b)),
            Operand::Other(words) => words
                .iter()
                .fold(C, |c, w| c | self.regs.get(w).copied().unwrap_or(C)),
            Operand::Imm(_) | Operand::Sink | Operand::Address { .. } => C,
        }
    }

    /// Writes `classes` into each of `dsts`; whether anything grew.
    fn write(&mut self, dsts: &[&'m str], classes: Classes) -> bool {
        let classes = if classes == 0 { C } else { classes };
        let mut grew = false;
        for d in dsts {
            let c = self.regs.entry(d).or_insert(0);
            if *c | classes != *c {
                *c |= classes;
                grew = true;
            }
        }
        grew
    }

    /// What a parameter-space load at `base` reads: one of the function's
    /// parameters, or a variable a call's arguments or results pass
    /// through.
    fn param_load(&self, base: &str, wide: bool) -> Classes {
        // Through a register (`mov %rd, p; ld.param [%rd]`): a parameter's
        // address taken, which the name's use itself answers for; what is
        // read is a value.
        if base.starts_with('%') {
            return C;
        }
        match self.params.iter().find(|(n, _)| *n == base) {
            // Another kernel parameter's value: perhaps an address.
            Some((_, seed)) if *seed == C && wide => Q,
            Some((_, seed)) if *seed == QA => match wide {
                true => QA,
                false => C,
            },
            Some((_, seed)) => *seed,
            None => self.regs.get(base).copied().unwrap_or(C),
        }
    }

    /// A store's step: data in device memory, except in the parameter space
    /// (a call's argument or the function's result: followed) and local
    /// memory (one cell, followed).
    fn store(&mut self, i: &Instr<'m>) -> Result<bool, ()> {
        let values = i
            .operands
            .iter()
            .filter(|o| !matches!(o, Operand::Address { .. }))
            .fold(0, |c, o| c | self.of(o));
        let target = i.operands.first().and_then(|o| match o {
            Operand::Address { base, .. } => *base,
            _ => None,
        });
        if i.has("local") {
            let grew = self.local | values != self.local;
            self.local |= values;
            return Ok(grew);
        }
        if !i.has("param") {
            return Ok(false);
        }
        match target {
            Some(t) if self.returns.contains(&t) => {
                let grew = self.returned | values != self.returned;
                self.returned |= values;
                Ok(grew)
            }
            Some(t) if !self.params.iter().any(|(n, _)| *n == t) => Ok(self.write(&[t], values)),
            _ => match values & (NUMBER | BP) {
                0 => Ok(false),
                _ => Err(()),
            },
        }
    }

    /// One instruction's step (calls aside): `Err(())` where the parameter
    /// may hold an address, else whether any classes grew.
    fn step(&mut self, i: &Instr<'m>) -> Result<bool, ()> {
        // Addresses first: a followed value as a base is an address, in
        // whatever instruction the brackets are; an address the model does
        // not read (`Other`) counts each of its words as one. A parameter-
        // space variable named in brackets (`[param0]`) is no register.
        let param_space = i.has("param");
        for op in &i.operands {
            let base = match op {
                Operand::Address { base: Some(b), .. } if param_space && !b.starts_with('%') => C,
                Operand::Address { base: Some(b), .. } => self.of(&Operand::Reg(b)),
                Operand::Other(_) => self.of(op),
                _ => C,
            };
            if base & NUMBER != 0 {
                return Err(());
            }
        }
        let dsts = i.destinations();
        let sources = i.sources();
        let union = sources.iter().fold(0, |c, o| c | self.of(o));
        let classes = match i.writes() {
            // Where the analysis cannot follow: the number, or an address
            // indexed by it, escapes.
            Writes::Unknown | Writes::Call => {
                let all = i.operands.iter().fold(0, |c, o| c | self.of(o));
                return if all & (NUMBER | BP) != 0 {
                    Err(())
                } else {
                    Ok(false)
                };
            }
            Writes::Nothing if i.opcode == "st" => return self.store(i),
            // A reduction's value is data; branches, barriers and fences
            // carry none.
            Writes::Nothing => return Ok(false),
            Writes::First => match i.opcode {
                "ld" | "ldu" => {
                    let base = sources.iter().find_map(|o| match o {
                        Operand::Address { base, .. } => *base,
                        _ => None,
                    });
                    let wide = !i.types.is_empty() && i.types.iter().all(|t| t.bits == 64);
                    match (i.has("param"), i.has("local"), base) {
                        (true, _, Some(b)) => self.param_load(b, wide),
                        (_, true, _) => self.local,
                        _ => C,
                    }
                }
                // What an atomic writes is data; what it returns, a load's.
                "atom" => C,
                "setp" | "set" | "testp" | "isspacep" | "vote" | "activemask" | "match"
                | "istypep" => C,
                "cvta" => {
                    if union & NUMBER != 0 {
                        return Err(());
                    }
                    B | (union & BP)
                }
                // selp's last operand chooses (a predicate): not a value.
                "selp" => sources[..sources.len().saturating_sub(1)]
                    .iter()
                    .fold(0, |c, o| c | self.of(o)),
                "mov" => union,
                "add" | "sub" if sources.len() == 2 => {
                    let (x, y) = (self.of(&sources[0]), self.of(&sources[1]));
                    pairwise(x, y, if i.opcode == "add" { add } else { sub })
                }
                "mad" | "mad24" if sources.len() == 3 => {
                    let product = other(self.of(&sources[0]) | self.of(&sources[1]));
                    pairwise(product, self.of(&sources[2]), add)
                }
                _ => other(union),
            },
        };
        Ok(self.write(&dsts, classes))
    }
}

/// The instructions of `body`, typed once; `None` where one does not read.
pub(super) fn instructions<'m>(m: &'m Module, body: &ptx::Body) -> Option<Vec<Instr<'m>>> {
    body.stmts
        .iter()
        .filter(|s| s.kind == StmtKind::Instr)
        .map(|s| m.instr(s).ok().flatten())
        .collect()
}

/// For each parameter of kernel `f` of `m`: whether it may hold an address
/// (see the module docs). Where the body does not read, every one may.
///
/// Which other parameters a parameter's offsets may be added to (a pointer
/// used without `cvta`, as debug builds and generic pointers are) is
/// decided soundly in two passes: first each parameter is analysed with
/// every other one taken for an address (the fewest it could be flagged
/// for: an offset added to another parameter then indexes memory); those
/// flagged even so are addresses whatever the others are — refused as
/// numbers. Then each parameter is analysed with only those taken for
/// addresses: every base a number is then added to is device memory a
/// launch was made to give.
pub(crate) fn may_hold_address(m: &Module, f: &ptx::Function) -> Vec<bool> {
    let program = Program::new(m);
    let name = m.text(f.name);
    if !matches!(program.functions.get(name), Some((_, Some(_)))) {
        return vec![true; f.params.len()];
    }
    let n = f.params.len();
    let flagged = |p: usize, anchors: &dyn Fn(usize) -> bool| {
        let seeds = (0..n)
            .map(|i| match (i == p, anchors(i)) {
                (true, _) => P,
                (false, true) => QA,
                (false, false) => C,
            })
            .collect();
        let mut analysis = Analysis {
            program: &program,
            memo: HashMap::new(),
            stack: Vec::new(),
        };
        analysis.function(name, seeds).is_err()
    };
    let surely: Vec<bool> = (0..n).map(|p| flagged(p, &|_| true)).collect();
    (0..n)
        .map(|p| surely[p] || flagged(p, &|i| surely[i]))
        .collect()
}
