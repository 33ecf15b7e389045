//! Which of a kernel's pointer parameters it only reads, and only through
//! the non-coherent cache (`ld.global.nc`): facts its PTX shows and its
//! LTO-IR keeps only where the kernel is compiled whole.
//!
//! A compiler loads through the non-coherent (read-only) cache only where
//! the memory is read-only while the kernel runs: a `const T *__restrict__`
//! parameter (the compiler's own proof: no-alias and read-only) or an
//! explicit `__ldg` (the programmer's word, the same promise). The LTO way
//! of fixing arguments inlines the kernel into a wrapper whose parameters
//! are new and carry no such attribute — and the code generator picks the
//! non-coherent loads by the kernel's own parameters, so the fixed
//! kernel lost them (every `LDG.E.CONSTANT` of a layer norm a plain load).
//! Where this analysis says a parameter is read only through such loads,
//! the wrapper declares it `noalias readonly`: LLVM's `noalias` promises
//! nothing about memory no one modifies while the function runs, and this
//! memory is such, by the promise the loads already stand on.
//!
//! Fails closed: every value derived from the parameter is followed through
//! every instruction that reads it (the instruction model, `ptx::instr`),
//! without control flow (a register written in several places holds what
//! each wrote); the parameter is read-only only where each memory access
//! based on such a value is an `ld.global.nc`, no such value is stored,
//! passed to a call or read by an opcode the model does not know, the
//! parameter's name is used only by its own loads, and at least one such
//! load exists. A comparison's predicate is no pointer and is not followed.

use std::collections::HashSet;

use super::addresses::{Code, instructions};
use crate::ptx::instr::{Instr, Operand, Writes};
use crate::ptx::{self, Module};

/// For each parameter of kernel `f` of `m`: whether the kernel reads the
/// memory it points to only through the non-coherent cache (see the module
/// docs). A kernel without a body to read has none.
pub(crate) fn read_only_through_nc(m: &Module, f: &ptx::Function) -> Vec<bool> {
    let Some(code) = f
        .body
        .as_ref()
        .and_then(|b| instructions(m, b))
        .map(Code::new)
    else {
        return vec![false; f.params.len()];
    };
    f.params
        .iter()
        .map(|p| only_nc_loads(&code, m.text(p.name)))
        .collect()
}

/// Whether every access based on parameter `param` is an `ld.global.nc`,
/// and there is one. A newly derived register is followed only to the
/// instructions that name it (`Code::readers`): linear in the code, however
/// its registers chain.
fn only_nc_loads(code: &Code<'_>, param: &str) -> bool {
    let (instrs, readers) = (&code.instrs, &code.readers);
    let mut derived: HashSet<&str> = HashSet::new();
    let mut work: Vec<&str> = Vec::new();
    for &at in readers.get(param).map(Vec::as_slice).unwrap_or_default() {
        let i = &instrs[at];
        for (n, op) in i.operands.iter().enumerate() {
            let own_load = i.opcode == "ld"
                && i.has("param")
                && n > 0
                && matches!(op, Operand::Address { base: Some(b), .. } if *b == param);
            if own_load {
                work.extend(i.destinations().into_iter().filter(|d| derived.insert(d)));
            } else if op.names().contains(&param) {
                // Its address taken, or its name used another way.
                return false;
            }
        }
    }
    // Each instruction that reads a newly derived register is looked at
    // again: what it does only grows as more of its operands are derived.
    let mut loads = false;
    while let Some(reg) = work.pop() {
        for &at in readers.get(reg).map(Vec::as_slice).unwrap_or_default() {
            let i = &instrs[at];
            match step(i, &derived) {
                Step::Unrelated => {}
                Step::NcLoad => loads = true,
                Step::Derives => {
                    work.extend(i.destinations().into_iter().filter(|d| derived.insert(d)));
                }
                Step::Escapes => return false,
            }
        }
    }
    loads
}

/// What an instruction does with the values derived from the parameter.
enum Step {
    /// It reads none.
    Unrelated,
    /// A non-coherent global load whose address is based on one (what it
    /// loads is data, not followed).
    NcLoad,
    /// Its results are derived from one (arithmetic, a move, a conversion).
    Derives,
    /// One reaches memory other than by a non-coherent load, is stored,
    /// passed on or read where the model cannot follow.
    Escapes,
}

fn step(i: &Instr<'_>, derived: &HashSet<&str>) -> Step {
    let reads = |op: &Operand<'_>| op.names().iter().any(|n| derived.contains(n));
    let sources = match i.writes() {
        Writes::First => i.sources(),
        _ => &i.operands[..],
    };
    if !sources.iter().any(reads) {
        return Step::Unrelated;
    }
    let as_address = sources
        .iter()
        .any(|op| matches!(op, Operand::Address { .. }) && reads(op));
    let as_value = sources
        .iter()
        .any(|op| !matches!(op, Operand::Address { .. }) && reads(op));
    match (i.writes(), i.opcode) {
        (Writes::First, "ld") if as_address && !as_value && i.has("global") && i.has("nc") => {
            Step::NcLoad
        }
        // A comparison's result is a predicate (or a number), no pointer.
        (Writes::First, "setp" | "set") if !as_address => Step::Unrelated,
        (Writes::First, op) if !as_address && !NOT_FOLLOWED.contains(&op) => Step::Derives,
        _ => Step::Escapes,
    }
}

/// Opcodes that write their first operand and touch memory (a texture, a
/// surface, another block's shared memory) or hand a value to other
/// threads: a derived value read by one, other than as an `ld.global.nc`'s
/// address, is not followed there.
const NOT_FOLLOWED: &[&str] = &[
    "ld", "ldu", "atom", "tex", "tld4", "suld", "txq", "suq", "ldmatrix", "mbarrier", "mapa",
    "shfl", "vote", "match", "redux",
];
