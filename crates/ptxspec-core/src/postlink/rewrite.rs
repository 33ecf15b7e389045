//! Rewriting getters, and specializing rewritten PTX.
//!
//! Emulated form: every piece the caller reads from a getter's return value
//! becomes a load from the buffer, in a scope of its own, through the
//! register `%ptxspec_buf`. With the buffer in global memory:
//!
//! ```text
//! { .reg .b64 %ptxspec_buf; cvta.to.global.u64 %ptxspec_buf, %rd1;
//!   ld.global.nc.f32 %f1, [%ptxspec_buf+20]; }
//! ```
//!
//! With the buffer in the kernel's parameter space, a getter in the kernel
//! reads the parameter (`mov.u64 %ptxspec_buf, k_param_4; ld.param.f32 …`),
//! and one in a device function reads through the generic address the
//! kernel passes down (`mov.b64 %ptxspec_buf, %rd1; ld.f32 …`), the kernel
//! taking it with `cvta.param` (PTX ISA 7.7, sm_70).
//!
//! [`specialize`] turns exactly these loads into `mov`s of immediates taken
//! from a blob; AOT mode is emulated output specialized with the defaults,
//! and the runtime's native mode is the same call with the user's values.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::PostLinkError;
use super::analyze::{Piece, Site};
use crate::ptx::instr::{Operand, TypeKind};
use crate::ptx::{self, Edits, ItemKind, Module, Span, StmtKind, TokenKind};

/// Why a rewrite cannot be applied: two edits of one statement.
pub(super) const OVERLAPPING_REWRITES: &str = "two rewrites of one statement: getter calls that share \
     the statements passing their arguments (each call needs its own st.param stores, as \
     ptxspec.cuh's getters make)";

/// The register that marks emulated loads.
pub(crate) const BUFFER_REG: &str = "%ptxspec_buf";

/// How a getter's loads reach the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LoadForm<'a> {
    /// Read-only global loads through the pointer the getter received.
    Global,
    /// Parameter-space loads of the named kernel parameter.
    Param(&'a str),
    /// Generic loads through the address the getter received (the
    /// parameter space's, passed down by the kernel).
    Generic,
}

/// Adds the edits that turn `site` into loads from the buffer, the
/// constant's value being at `base` in it.
pub(crate) fn emulate_site(site: &Site, base: u32, form: LoadForm<'_>, edits: &mut Edits) {
    // The removed statements come before the loads of the result, which
    // follow the call (`Edits` sorts them otherwise).
    for &span in &site.removed {
        edits.replace(span, String::new());
    }
    for piece in &site.pieces {
        let mut text = String::with_capacity(128);
        piece_loads(site, piece, base, form, &mut text);
        edits.replace(piece.stmt, text);
    }
}

/// The replacement of one `ld.param` of a getter's result.
fn piece_loads(site: &Site, piece: &Piece, base: u32, form: LoadForm<'_>, text: &mut String) {
    // Plain pushes rather than `write!`: this runs for every getter of a
    // module, and formatting machinery dominated it.
    let open = |text: &mut String, setup: &str, from: &str| {
        text.push_str("{ .reg .b64 ");
        text.push_str(BUFFER_REG);
        text.push_str("; ");
        text.push_str(setup);
        text.push(' ');
        text.push_str(BUFFER_REG);
        text.push_str(", ");
        text.push_str(from);
        text.push(';');
    };
    let ld = match form {
        LoadForm::Global => {
            open(text, "cvta.to.global.u64", site.buffer_reg);
            "ld.global.nc"
        }
        LoadForm::Param(param) => {
            open(text, "mov.u64", param);
            "ld.param"
        }
        LoadForm::Generic => {
            open(text, "mov.b64", site.buffer_reg);
            "ld"
        }
    };
    let load = |text: &mut String, ty: &str, vec: Option<u32>, dests: &[&str], addr: u32| {
        text.push(' ');
        text.push_str(ld);
        if let Some(v) = vec {
            text.push_str(".v");
            push_u32(text, v);
        }
        text.push('.');
        text.push_str(ty);
        text.push(' ');
        if vec.is_some() {
            text.push('{');
        }
        for (i, d) in dests.iter().enumerate() {
            if i > 0 {
                text.push_str(", ");
            }
            text.push_str(d);
        }
        if vec.is_some() {
            text.push('}');
        }
        text.push_str(", [");
        text.push_str(BUFFER_REG);
        text.push('+');
        push_u32(text, addr);
        text.push_str("];");
    };
    let addr = base + piece.offset;
    let elem = ptx::scalar_type_size(piece.ty).unwrap_or(1);
    let vec = piece.dests.len() as u32;
    if let Some(n) = site.narrowed {
        let ty = match (n.signed, n.size) {
            (true, 1) => "s8",
            (false, 1) => "u8",
            (true, 2) => "s16",
            (false, 2) => "u16",
            (true, 4) => "s32",
            (false, 4) => "u32",
            (true, _) => "s64",
            (false, _) => "u64",
        };
        load(text, ty, None, &piece.dests[..1], addr);
    } else if vec == 1 {
        load(text, piece.ty, None, &piece.dests, addr);
    } else if addr.is_multiple_of(elem * vec) {
        load(text, piece.ty, Some(vec), &piece.dests, addr);
    } else {
        // A vector load needs its whole size's alignment, which the
        // buffer offset may not give: load element by element.
        for (i, d) in piece.dests.iter().enumerate() {
            load(
                text,
                piece.ty,
                None,
                std::slice::from_ref(d),
                addr + i as u32 * elem,
            );
        }
    }
    text.push_str(" }");
}

/// Appends `n` in decimal.
fn push_u32(text: &mut String, n: u32) {
    let mut buf = [0u8; 10];
    let mut i = buf.len();
    let mut v = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    text.push_str(std::str::from_utf8(&buf[i..]).unwrap_or("0"));
}

/// The `(major, minor)` of a `.version` item.
fn version_of(m: &Module, item: &ptx::Item) -> Option<(u32, u32)> {
    let text = m.text(item.span);
    let v = text.split_whitespace().nth(1)?;
    let (a, b) = v.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Raises the `.version` item to at least `min`.
pub(crate) fn at_least_version(m: &Module, item: &ptx::Item, min: (u32, u32), edits: &mut Edits) {
    if version_of(m, item).is_some_and(|v| v < min) {
        edits.replace(item.span, format!(".version {}.{}", min.0, min.1));
    }
}

/// The lowest `sm_`/`compute_` number of the module's `.target`.
fn target_sm(m: &Module) -> Option<u32> {
    let item = m.items.iter().find(|i| i.kind == ItemKind::Target)?;
    m.text(item.span)
        .split([' ', ',', '\t'])
        .filter_map(|t| {
            let n = t
                .strip_prefix("sm_")
                .or_else(|| t.strip_prefix("compute_"))?;
            n.trim_end_matches(|c: char| c.is_ascii_alphabetic())
                .parse()
                .ok()
        })
        .min()
}

/// Where the buffer param of a kernel is read: the statements that mention
/// it, each an `ld.param` of the pointer (`[name]`, `[name+0]`), or `None`
/// when the kernel uses the parameter in another way (its address taken, a
/// partial or predicated read, a mention in a comment).
pub(crate) fn param_reads(m: &Module, kernel: usize, name: &str) -> Option<Vec<(Span, String)>> {
    let ItemKind::Function(f) = &m.items[kernel].kind else {
        return None;
    };
    let body = f.body.as_ref()?;
    let mut reads = Vec::new();
    let mut last = None;
    // Every mention, found by one search of the body, must be such a load
    // (and the only mention in its statement).
    let mentions = ptx::lex::word_positions(m.text(body.span), name);
    for i in body.stmts_at(mentions.map(|p| body.span.start + p as u32)) {
        let i = i?;
        let st = &body.stmts[i];
        if last.replace(i) == Some(i) {
            return None;
        }
        // An unguarded 64-bit load of the whole parameter into a register.
        let i = m.instr(st).ok()??;
        let pointer_load = matches!(i.types.as_slice(), [t] if t.is_integer() && t.bits == 64);
        if i.opcode != "ld" || !i.has("param") || i.guard.is_some() || !pointer_load {
            return None;
        }
        let (
            Some(Operand::Reg(dest)),
            Some(Operand::Address {
                base: Some(n),
                offset: 0,
            }),
            2,
        ) = (i.operands.first(), i.operands.get(1), i.operands.len())
        else {
            return None;
        };
        if *n != name {
            return None;
        }
        reads.push((st.span, dest.to_string()));
    }
    Some(reads)
}

/// Why the buffer of these kernels (item, buffer parameter) cannot be
/// `size` bytes in the parameter space, or, where it can, each kernel's
/// reads of the pointer (which [`param_buffer_kernel`] rewrites).
pub(crate) fn param_placement_possible(
    m: &Module,
    kernels: &[(usize, usize)],
    size: u32,
    align: u32,
) -> Result<Vec<Vec<(Span, String)>>, String> {
    match target_sm(m) {
        Some(sm) if sm >= 70 => {}
        Some(sm) => return Err(format!("the target is sm_{sm}; cvta.param needs sm_70")),
        None => return Err("the module names no sm_ target".into()),
    }
    let mut all = Vec::with_capacity(kernels.len());
    for &(k, p) in kernels {
        let ItemKind::Function(f) = &m.items[k].kind else {
            all.push(Vec::new());
            continue;
        };
        let mut total = 0u32;
        for (i, q) in f.params.iter().enumerate() {
            let (s, a) = if i == p {
                (size, align)
            } else {
                (q.size(), q.alignment().max(1))
            };
            total = total.next_multiple_of(a) + s;
        }
        let name = m.text(f.name);
        if total > super::PARAM_SPACE_BYTES {
            return Err(format!(
                "kernel {name} would take {total} bytes of parameters, more than {}",
                super::PARAM_SPACE_BYTES
            ));
        }
        let param = m.text(f.params[p].name);
        let reads = param_reads(m, k, param).ok_or_else(|| {
            format!("kernel {name} uses its kernel_handler parameter {param} other than by loading the pointer")
        })?;
        all.push(reads);
    }
    Ok(all)
}

/// The edits that make kernel `k`'s buffer parameter `name` hold the
/// buffer's contents (`size` bytes aligned to `align`) and its `reads` of
/// the pointer take the parameter's generic address instead.
pub(crate) fn param_buffer_kernel(
    m: &Module,
    k: usize,
    name: &str,
    (size, align): (u32, u32),
    reads: &[(Span, String)],
    edits: &mut Edits,
) {
    let ItemKind::Function(f) = &m.items[k].kind else {
        return;
    };
    let Some(p) = f.params.iter().find(|p| m.text(p.name) == name) else {
        return;
    };
    // Pushes rather than format!: this runs for every kernel of a module.
    let mut decl = String::with_capacity(32 + name.len());
    decl.push_str(".param .align ");
    push_u32(&mut decl, align);
    decl.push_str(" .b8 ");
    decl.push_str(name);
    decl.push('[');
    push_u32(&mut decl, size);
    decl.push(']');
    edits.replace(p.span, decl);
    for (span, dest) in reads {
        let mut text = String::with_capacity(40 + name.len() + 3 * dest.len());
        for part in [
            "mov.u64 ",
            dest,
            ", ",
            name,
            "; cvta.param.u64 ",
            dest,
            ", ",
            dest,
            ";",
        ] {
            text.push_str(part);
        }
        edits.replace(*span, text);
    }
}

/// Register widths in bits, from a function's `.reg` declarations.
#[derive(Default)]
struct RegWidths {
    /// `%r<5>`-style families by prefix.
    families: HashMap<String, u32>,
    names: HashMap<String, u32>,
}

impl RegWidths {
    fn add_decl(&mut self, m: &Module, span: Span) {
        let Ok(toks) = ptx::lex::tokens(&m.src, span.start, span.end) else {
            return;
        };
        let mut width = None;
        let mut i = 0;
        while i < toks.len() {
            let t = toks[i];
            let text = t.text(&m.src);
            match t.kind {
                TokenKind::Directive => {
                    if let Some(s) = ptx::scalar_type_size(&text[1..]) {
                        width = Some(if text == ".pred" { 1 } else { s * 8 });
                    }
                }
                TokenKind::Word => {
                    if let Some(w) = width {
                        if toks.get(i + 1).is_some_and(|n| n.is(b'<')) {
                            self.families.insert(text.to_string(), w);
                            i += 3;
                        } else {
                            self.names.insert(text.to_string(), w);
                        }
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }

    fn width(&self, reg: &str) -> Option<u32> {
        if let Some(&w) = self.names.get(reg) {
            return Some(w);
        }
        let prefix = reg.trim_end_matches(|c: char| c.is_ascii_digit());
        self.families.get(prefix).copied()
    }
}

/// Replaces every emulated load of `ptx` with `mov`s of the values at the
/// same offsets of `blob`: the specialization-constant values become
/// immediates that ptxas can fold; then each integer division or remainder
/// by a value now known (a constant, or what known values fold to) is made
/// a multiplication. Text outside those instructions is untouched.
pub fn specialize(file: &str, ptx: &str, blob: &[u8]) -> Result<String, PostLinkError> {
    let m = ptx::parse(file, ptx.to_string())?;
    let mut edits = Edits::new();
    for item in &m.items {
        let ItemKind::Function(f) = &item.kind else {
            continue;
        };
        let Some(body) = &f.body else { continue };
        if !m.text(body.span).contains(BUFFER_REG) {
            continue;
        }
        let mut regs = RegWidths::default();
        for st in &body.stmts {
            if st.kind == StmtKind::Decl && m.text(st.op) == ".reg" {
                regs.add_decl(&m, st.span);
            }
        }
        for st in &body.stmts {
            let text = m.text(st.span);
            if !text.contains(BUFFER_REG) {
                continue;
            }
            let opcode = m.instr(st)?.map(|i| i.opcode);
            if st.kind == StmtKind::Decl || matches!(opcode, Some("cvta" | "mov")) {
                edits.replace(st.span, "");
                continue;
            }
            if opcode != Some("ld") {
                return Err(m
                    .error_at(
                        st.span.start,
                        format!("unexpected use of {BUFFER_REG}: {text}"),
                    )
                    .into());
            }
            edits.replace(st.span, immediates(&m, st, &regs, blob)?);
        }
    }
    let specialized = edits
        .apply(&m.src)
        .map_err(|at| PostLinkError::from(m.error_at(at.start, OVERLAPPING_REWRITES)))?;
    // ptxas keeps a division by an immediate a division, a loop NVVM
    // marked nounroll rolled, and a sign extension of a sum whole: the
    // optimizer the PTX route of fixed arguments runs divides by the
    // constants (and what they fold to) by multiplying, extends the sums
    // in the loops they count term by term with the addresses' constants
    // moved outward, and lets those loops unroll, as NVVM does with a
    // literal; and it steps the loops' addresses as pointers where a guard
    // proves their sums cannot overflow, as NVVM knew from C++.
    let divided = crate::arguments::divide::divisions_in_every_function(&specialized)?;
    Ok(crate::ptx::loop_passes(&m, &divided, |_, _| true)?)
}

/// `mov`s for one emulated load: the values of `blob` at the load's
/// offsets into the registers it writes (`_`: a lane dropped), each value
/// as wide as its element type and written at its register's width.
fn immediates(
    m: &Module,
    st: &ptx::Stmt,
    regs: &RegWidths,
    blob: &[u8],
) -> Result<String, PostLinkError> {
    let err = |what: String| PostLinkError::from(m.error_at(st.span.start, what));
    let text = m.text(st.span);
    let i = m
        .instr(st)?
        .ok_or_else(|| err(format!("not an instruction: {text}")))?;
    // One element type of 1 to 8 bytes: a register's worth.
    let [ty] = i.types.as_slice() else {
        return Err(err(format!(
            "a load of {BUFFER_REG} without one element type: {text}"
        )));
    };
    if ty.bits < 8 || ty.bits > 64 {
        return Err(err(format!(
            "a load of {BUFFER_REG} of {}-bit elements, which no move of a register holds: {text}",
            ty.bits
        )));
    }
    let elem = (ty.bits / 8) as usize;
    let signed = ty.kind == TypeKind::Signed;
    let dests: Vec<Option<&str>> = match i.operands.first() {
        Some(Operand::Reg(r)) => vec![Some(*r)],
        Some(Operand::Vector(v)) => v
            .iter()
            .map(|o| match o {
                Operand::Reg(r) => Ok(Some(*r)),
                Operand::Sink => Ok(None),
                _ => Err(err(format!(
                    "a load of {BUFFER_REG} into something else than registers: {text}"
                ))),
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(err(format!(
                "a load of {BUFFER_REG} into something else than registers: {text}"
            )));
        }
    };
    let addr = match i.operands.get(1) {
        Some(Operand::Address {
            base: Some(base),
            offset,
        }) if *base == BUFFER_REG => usize::try_from(*offset).ok(),
        _ => None,
    }
    .ok_or_else(|| err(format!("cannot read the address of {text}")))?;
    let mut out = String::new();
    for (lane, d) in dests.iter().enumerate() {
        let Some(d) = d else { continue };
        let at = addr + lane * elem;
        let bytes = blob.get(at..at + elem).ok_or_else(|| {
            err(format!(
                "the load reads bytes {at}..{} but the values blob has {}",
                at + elem,
                blob.len()
            ))
        })?;
        let width = regs
            .width(d)
            .ok_or_else(|| err(format!("no .reg declaration gives the width of {d}")))?;
        let mut raw = [0u8; 8];
        raw[..elem].copy_from_slice(bytes);
        let mut v = u64::from_le_bytes(raw);
        if signed && elem < 8 && bytes[elem - 1] & 0x80 != 0 {
            v |= u64::MAX << (elem * 8);
        }
        if width < 64 {
            v &= (1u64 << width) - 1;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        let _ = write!(
            out,
            "mov.b{width} {d}, 0x{v:0w$X};",
            w = (width as usize).div_ceil(4)
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `param_reads` of a kernel whose body is `body`: the destination
    /// registers of the reads it accepts, or `None`.
    fn reads(body: &str) -> Option<Vec<String>> {
        let src = format!(
            ".version 8.8\n.target sm_90\n.address_size 64\n\
             .visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1)\n{{\n\
             .reg .pred %p<2>;\n.reg .b32 %r<3>;\n.reg .b64 %rd<4>;\n{body}\nret;\n}}\n"
        );
        let m = ptx::parse("k.ptx", src).expect("parse");
        param_reads(&m, 3, "k_param_1").map(|r| r.into_iter().map(|(_, d)| d).collect())
    }

    /// A post-linked image whose emulated loads are `loads` (each a load
    /// of `%ptxspec_buf` at some offset), as `specialize` reads one.
    fn image(loads: &str) -> String {
        format!(
            ".version 8.3\n.target sm_90\n.address_size 64\n\
             .visible .entry k(.param .u64 k_param_0)\n{{\n\
             .reg .b16 %rs<4>;\n.reg .b32 %r<4>;\n.reg .b64 %rd<4>;\n.reg .b128 %rq<2>;\n\
             {{ .reg .b64 %ptxspec_buf; mov.u64 %ptxspec_buf, k_param_0; {loads} }}\nret;\n}}\n"
        )
    }

    /// Each emulated load becomes moves of the blob's bytes at its offset,
    /// whatever its width, sign, lanes or the way its offset is written; a
    /// load the moves cannot write (`.b128`: wider than a register of
    /// theirs) is an error naming it — never a panic.
    #[test]
    fn emulated_loads_become_moves_of_the_blob() {
        let blob: Vec<u8> = (1..=32u8).collect();
        for (load, moves) in [
            (
                "ld.param.b32 %r1, [%ptxspec_buf+4];",
                "mov.b32 %r1, 0x08070605;",
            ),
            (
                "ld.param::entry.b32 %r1, [%ptxspec_buf+4];",
                "mov.b32 %r1, 0x08070605;",
            ),
            (
                "ld.global.u32 %r1, [%ptxspec_buf+0x4];",
                "mov.b32 %r1, 0x08070605;",
            ),
            (
                "ld.global.u32 %r1, [%ptxspec_buf+04];",
                "mov.b32 %r1, 0x08070605;",
            ),
            (
                "ld.global.s8 %rs1, [%ptxspec_buf+2];",
                "mov.b16 %rs1, 0x0003;",
            ),
            (
                "ld.global.s8 %rs1, [%ptxspec_buf+31];",
                "mov.b16 %rs1, 0x0020;",
            ),
            (
                "ld.global.v2.u32 {%r1, %r2}, [%ptxspec_buf+8];",
                "mov.b32 %r1, 0x0C0B0A09; mov.b32 %r2, 0x100F0E0D;",
            ),
            (
                "ld.global.v2.u32 {_, %r2}, [%ptxspec_buf+8];",
                "mov.b32 %r2, 0x100F0E0D;",
            ),
            (
                "ld.global.nc.u64 %rd1, [%ptxspec_buf+16];",
                "mov.b64 %rd1, 0x1817161514131211;",
            ),
        ] {
            let out =
                specialize("k.ptx", &image(load), &blob).unwrap_or_else(|e| panic!("{load}: {e}"));
            assert!(out.contains(moves), "{load}: {out}");
            assert!(!out.contains("%ptxspec_buf"), "{load}: {out}");
        }
        let wide = image("ld.global.b128 %rq1, [%ptxspec_buf];");
        let e = specialize("k.ptx", &wide, &blob).unwrap_err();
        assert!(e.to_string().contains("b128"), "{e}");
    }

    #[test]
    fn parameter_space_needs_every_mention_to_be_a_pointer_load() {
        let plain = "ld.param.u64 %rd1, [k_param_1];\nld.param.u64 %rd2, [k_param_0];";
        assert_eq!(reads(plain), Some(vec!["%rd1".to_string()]));
        assert_eq!(
            reads("ld.param.b64 %rd1, [k_param_1+0];\nld.param.u64 %rd2, [k_param_1];"),
            Some(vec!["%rd1".to_string(), "%rd2".to_string()])
        );
        assert_eq!(reads("mov.u64 %rd1, %rd2;"), Some(vec![]));
        assert_eq!(
            reads("ld.param::entry.u64 %rd1, [k_param_1];"),
            Some(vec!["%rd1".to_string()]),
            "a newer compiler's spelling"
        );
        // Another parameter whose name contains this one's.
        assert_eq!(reads("ld.param.u64 %rd1, [k_param_10_x];"), Some(vec![]));
        for other in [
            "mov.u64 %rd1, k_param_1;",                        // address taken
            "ld.param.u32 %r1, [k_param_1];",                  // partial read
            "ld.param.u64 %rd1, [k_param_1+8];",               // at an offset
            "ld.param.u64 %rd1, [k_param_1+010];",             // at an octal one
            "@%p1 ld.param.u64 %rd1, [k_param_1];",            // predicated
            "// k_param_1\nld.param.u64 %rd1, [k_param_1];",   // in a comment
            "ld.param.u64 %rd1, /* k_param_1 */ [k_param_1];", // twice in one
        ] {
            assert_eq!(reads(other), None, "{other}");
        }
    }
}
