//! Which of a kernel's parameters may hold an address: a data-flow
//! analysis of its PTX body, conservative by construction.
//!
//! A 64-bit value loaded from a parameter is followed through the
//! registers it reaches. The parameter *may hold an address* where such a
//! value reaches a place where the analysis cannot rule that out: an
//! address operand (`[...]`), a `cvta`, a store's value (memory the kernel
//! or another reads later), a call's argument (a function the analysis does
//! not see), or an instruction it does not know. A value stops being
//! followed only where it becomes something no address is made of: a
//! comparison's predicate, a product, a quotient or a shift (an index
//! scaled into an offset), a truncation to 32 bits or fewer, a
//! conversion to floating point — or where it is added to an address
//! already derived from a `cvta` (it is then that address's offset, not a
//! base).
//!
//! Where the parameter's name is used other than by `ld.param`
//! (its address taken), or the kernel has no body to read, every parameter
//! of 8 bytes or more may hold an address. Two users rely on the answer: a
//! launch refuses a plain value for such a parameter (a safe call cannot
//! make a kernel write an address it was given as a number), and a fixed
//! argument is refused for one (an address of one process baked into code).

use std::collections::HashSet;

use crate::ptx::{self, Module, StmtKind};

/// One instruction as the analysis reads it.
struct Instr<'m> {
    /// The opcode with its suffixes (`add.s64`).
    op: &'m str,
    /// Its operands, each as its word tokens with whether they are inside
    /// brackets (an address).
    operands: Vec<Vec<(&'m str, bool)>>,
}

impl<'m> Instr<'m> {
    /// The opcode's first part (`add` of `add.s64`).
    fn base(&self) -> &str {
        self.op.split('.').next().unwrap_or(self.op)
    }

    fn words(&self, i: usize) -> impl Iterator<Item = &(&'m str, bool)> {
        self.operands.get(i).into_iter().flatten()
    }

    fn mentions(&self, name: &str) -> bool {
        self.operands.iter().flatten().any(|(w, _)| *w == name)
    }
}

/// What an instruction does with a followed value among its sources.
enum Flow {
    /// Its result holds the value (or part of it): follow the result.
    Carries,
    /// Its result is no address: stop.
    Ends,
    /// The value may be used as an address, or go where the analysis
    /// cannot follow it.
    Escapes,
}

/// How `instr` treats followed values read at source operand `at`.
fn flow(instr: &Instr<'_>, at: usize) -> Flow {
    let op = instr.op;
    let suffixes = || op.split('.').skip(1);
    match instr.base() {
        "mov" | "add" | "sub" | "and" | "or" | "xor" | "not" | "neg" | "min" | "max" | "abs"
        | "selp" | "slct" | "bfe" | "bfi" | "prmt" | "shf" | "cnot" | "addc" | "subc" => {
            Flow::Carries
        }
        "setp" | "set" | "mul" | "mul24" | "div" | "rem" | "shl" | "shr" | "popc" | "clz"
        | "bfind" | "brev" | "testp" | "bra" | "sad" => Flow::Ends,
        // a * b + c: the product ends; c is carried.
        "mad" | "mad24" => match at {
            3 => Flow::Carries,
            _ => Flow::Ends,
        },
        // cvt.<to>.<from>: to 32 bits or fewer, or to floating point, the
        // address is gone.
        "cvt" => {
            let to = suffixes().find(|s| type_bits(s).is_some());
            match to {
                Some(t) if t.starts_with('f') || t.starts_with("bf") => Flow::Ends,
                Some(t) if type_bits(t).is_some_and(|b| b <= 32) => Flow::Ends,
                _ => Flow::Carries,
            }
        }
        // A load's value operand is its destination; a followed value
        // among its sources is in its address (brackets, handled before).
        "ld" | "ldu" => Flow::Ends,
        _ => Flow::Escapes,
    }
}

/// The bits of a PTX type suffix (`u64` → 64), `None` for other suffixes.
fn type_bits(s: &str) -> Option<u32> {
    let digits = s.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    let kind = &s[..s.len() - digits.len()];
    if !matches!(kind, "u" | "s" | "b" | "f" | "bf") {
        return None;
    }
    digits.parse().ok()
}

/// The instructions of `body`, read once.
fn instructions<'m>(m: &'m Module, body: &ptx::Body) -> Option<Vec<Instr<'m>>> {
    let mut out = Vec::new();
    for s in body.stmts.iter().filter(|s| s.kind == StmtKind::Instr) {
        let ops = m.operands(s).ok()?;
        let mut operands = Vec::with_capacity(ops.len());
        for i in 0..ops.len() {
            let mut depth = 0i32;
            let mut words = Vec::new();
            for t in ops.get(i).unwrap_or(&[]) {
                if t.is(b'[') {
                    depth += 1;
                } else if t.is(b']') {
                    depth -= 1;
                } else if t.kind == ptx::TokenKind::Word {
                    words.push((t.text(&m.src), depth > 0));
                }
            }
            operands.push(words);
        }
        out.push(Instr {
            op: m.text(s.op),
            operands,
        });
    }
    Some(out)
}

/// Whether `op` (an `ld.param…`) loads a 64-bit integer or bits.
fn loads_64_bit_integer(op: &str) -> bool {
    op.split('.').any(|s| matches!(s, "u64" | "s64" | "b64"))
}

/// The registers derived from a `cvta` (an address made global, shared,
/// …), through moves and additions: bases, to which an added value is an
/// offset.
fn address_bases<'m>(instrs: &[Instr<'m>]) -> HashSet<&'m str> {
    let mut bases: HashSet<&'m str> = HashSet::new();
    loop {
        let before = bases.len();
        for i in instrs {
            let from_base = match i.base() {
                "cvta" => true,
                "mov" | "add" | "sub" => {
                    (1..i.operands.len()).any(|at| i.words(at).any(|(w, _)| bases.contains(w)))
                }
                _ => false,
            };
            if from_base {
                bases.extend(i.words(0).map(|(w, _)| *w));
            }
        }
        if bases.len() == before {
            return bases;
        }
    }
}

/// Whether a 64-bit value loaded from parameter `name` may be used as an
/// address (see the module docs).
fn follows_to_address<'m>(instrs: &[Instr<'m>], bases: &HashSet<&'m str>, name: &str) -> bool {
    let mut followed: HashSet<&'m str> = HashSet::new();
    for i in instrs {
        let is_param_load = i.op.starts_with("ld.param");
        if !i.mentions(name) {
            continue;
        }
        let reads_it = is_param_load && i.words(1).any(|(w, inside)| *w == name && *inside);
        if !reads_it {
            // The parameter's address taken, or its name used otherwise.
            return true;
        }
        if loads_64_bit_integer(i.op) {
            followed.extend(i.words(0).map(|(w, _)| *w));
        }
    }
    loop {
        let before = followed.len();
        for i in instrs {
            // A store's or a reduction's first operand is its address, not
            // a destination: every operand is a source.
            let sources_from = match i.base() {
                "st" | "red" | "prefetch" | "prefetchu" | "call" | "ret" | "bra" => 0,
                _ => 1,
            };
            for at in sources_from..i.operands.len() {
                let mut hit = false;
                for (w, inside) in i.words(at) {
                    if followed.contains(w) {
                        if *inside {
                            return true;
                        }
                        hit = true;
                    }
                }
                if !hit {
                    continue;
                }
                match flow(i, at) {
                    Flow::Escapes => return true,
                    Flow::Ends => {}
                    Flow::Carries => {
                        // Added to an address made by cvta: an offset.
                        let onto_base = matches!(i.base(), "add" | "sub")
                            && (sources_from..i.operands.len())
                                .filter(|&o| o != at)
                                .any(|o| i.words(o).any(|(w, _)| bases.contains(w)));
                        if !onto_base {
                            followed.extend(i.words(0).map(|(w, _)| *w));
                        }
                    }
                }
            }
        }
        if followed.len() == before {
            return false;
        }
    }
}

/// For each parameter of kernel `f` of `m`: whether it may hold an address
/// (see the module docs). Parameters of fewer than 8 bytes never do.
pub(crate) fn may_hold_address(m: &Module, f: &ptx::Function) -> Vec<bool> {
    let wide = |p: &ptx::Param| p.size() >= 8;
    let Some(instrs) = f.body.as_ref().and_then(|b| instructions(m, b)) else {
        return f.params.iter().map(wide).collect();
    };
    let bases = address_bases(&instrs);
    f.params
        .iter()
        .map(|p| wide(p) && follows_to_address(&instrs, &bases, m.text(p.name)))
        .collect()
}
