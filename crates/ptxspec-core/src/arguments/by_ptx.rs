//! The PTX way: each load of a fixed parameter in the kernel's body becomes
//! a move of its value into the same registers; ptxas then folds what it
//! can, and integer divisions by the values are made multiplications here
//! (`divide`), which ptxas does not do.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::params::{find_kernel, param_name};
use super::{ArgumentError, FixedArguments};
use crate::ptx::instr::{Instr, Operand, TypeKind};
use crate::ptx::{self, Edits, Module, StmtKind};

impl FixedArguments {
    /// `ptx` with the kernel's loads of each fixed parameter replaced by
    /// moves of its value. A fixed parameter the kernel uses other than by
    /// loading it (its address taken) is an error.
    pub fn in_ptx(&self, ptx: &str) -> Result<String, ArgumentError> {
        let m = ptx::parse("kernel.ptx", ptx.to_string())?;
        let f = find_kernel(&m, self.kernel())?;
        let Some(body) = &f.body else {
            unreachable!("find_kernel returns definitions")
        };
        if f.params.len() != self.params.params.len() {
            return Err(self.params.not_fixable(
                f.params.len(),
                "the PTX's kernel has another parameter list than the one the arguments were fixed for",
            ));
        }
        let widths = register_widths(&m, body);
        let mut edits = Edits::new();
        for (index, bytes) in &self.fixed {
            let name = param_name(&m, f, *index);
            for s in body.stmts.iter().filter(|s| s.kind == StmtKind::Instr) {
                let Some(i) = m.instr(s)? else { continue };
                if !i.operands.iter().any(|o| o.names().contains(&name)) {
                    continue;
                }
                match self.load_as_moves(&i, name, bytes, &widths) {
                    Some(text) => edits.replace(s.span, text),
                    None => {
                        return Err(self.params.not_fixable(
                            *index,
                            &format!(
                                "the kernel uses it other than by loading it ({})",
                                m.text(s.span).trim()
                            ),
                        ));
                    }
                }
            }
        }
        let moved = edits.apply(&m.src).map_err(|span| ArgumentError::Link {
            kernel: self.kernel().into(),
            why: format!("two rewrites of one statement at byte {}", span.start),
        })?;
        // Divisions by the values now known become multiplications (ptxas
        // keeps a division by an immediate a division), then the loop
        // passes both routes run (`ptx::loop_passes`).
        let divided = super::divide::divisions_by_constants(&moved, self.kernel())?;
        let this_kernel =
            |m: &ptx::Module, f: &ptx::Function| f.is_kernel && m.text(f.name) == self.kernel();
        Ok(crate::ptx::loop_passes(&m, &divided, this_kernel)?)
    }

    /// The moves that replace `i`, a load of parameter `name` (whose
    /// value is `bytes`): `None` where `i` is not a plain, unguarded load
    /// of it (any spelling of the parameter space, any way of writing its
    /// offset) into registers the moves can write — 64 bits at most each.
    fn load_as_moves(
        &self,
        i: &Instr<'_>,
        name: &str,
        bytes: &[u8],
        widths: &HashMap<String, u32>,
    ) -> Option<String> {
        if i.opcode != "ld" || !i.has("param") || i.guard.is_some() || i.operands.len() != 2 {
            return None;
        }
        // `[name]` or `[name+OFFSET]`.
        let offset = match &i.operands[1] {
            Operand::Address {
                base: Some(base),
                offset,
            } if *base == name => usize::try_from(*offset).ok()?,
            _ => return None,
        };
        // One element type; `.v2`/`.v4` lanes of it.
        let [ty] = i.types.as_slice() else {
            return None;
        };
        // Any value type of a register's width or less (integers, floats,
        // bf16, packed halves); not a predicate, nothing wider than 64 bits.
        if ty.kind == TypeKind::Pred || ty.bits > 64 || ty.bits < 8 {
            return None;
        }
        let lanes = i
            .modifiers
            .iter()
            .find_map(|m| m.strip_prefix('v')?.parse::<usize>().ok())
            .unwrap_or(1);
        let elem = (ty.bits / 8) as usize;
        let signed = ty.kind == TypeKind::Signed;
        // The destination registers: one, or `{a, b}` (`_`: a lane
        // dropped).
        let regs: Vec<Option<&str>> = match &i.operands[0] {
            Operand::Reg(r) => vec![Some(*r)],
            Operand::Vector(v) => v
                .iter()
                .map(|o| match o {
                    Operand::Reg(r) => Some(Some(*r)),
                    Operand::Sink => Some(None),
                    _ => None,
                })
                .collect::<Option<_>>()?,
            _ => return None,
        };
        if regs.len() != lanes {
            return None;
        }
        let mut out = String::new();
        for (lane, reg) in regs.iter().enumerate() {
            let Some(reg) = reg else { continue };
            let at = offset.checked_add(lane * elem)?;
            let value = bytes.get(at..at.checked_add(elem)?)?;
            let mut wide = [0u8; 8];
            wide[..elem].copy_from_slice(value);
            let negative = signed && value[elem - 1] & 0x80 != 0;
            if negative {
                wide[elem..].fill(0xff);
            }
            let bits = *widths.get(register_prefix(reg))?;
            let v = u64::from_le_bytes(wide);
            let v = if bits < 64 {
                v & ((1u64 << bits) - 1)
            } else {
                v
            };
            if !out.is_empty() {
                out.push(' ');
            }
            let _ = write!(out, "mov.b{bits} {reg}, {v:#x};");
        }
        Some(out)
    }
}

/// A register's name without its number: the name a `.reg` declaration of
/// `%r<10>` gives (`%r12` → `%r`).
fn register_prefix(reg: &str) -> &str {
    reg.trim_end_matches(|c: char| c.is_ascii_digit())
}

/// Each declared register (or register family) of `body` and its width in
/// bits.
fn register_widths(m: &Module, body: &ptx::Body) -> HashMap<String, u32> {
    let mut widths = HashMap::new();
    for s in body.stmts.iter().filter(|s| s.kind == StmtKind::Decl) {
        let text = m.text(s.span);
        let mut words = text
            .split(|c: char| c.is_whitespace() || c == ',' || c == ';')
            .filter(|w| !w.is_empty());
        if words.next() != Some(".reg") {
            continue;
        }
        let Some(bits) = words
            .next()
            .and_then(|t| t.strip_prefix('.'))
            .and_then(ptx::scalar_type_size)
            .map(|b| b * 8)
        else {
            continue;
        };
        for w in words {
            let name = w.split('<').next().unwrap_or(w);
            widths.insert(register_prefix(name).to_string(), bits);
            widths.insert(name.to_string(), bits);
        }
    }
    widths
}
