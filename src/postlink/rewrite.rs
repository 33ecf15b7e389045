//! Rewriting getters, and specializing rewritten PTX.
//!
//! Emulated form: every piece the caller reads from a getter's return value
//! becomes a read-only global load from the buffer, in a scope of its own:
//!
//! ```text
//! { .reg .b64 %ptxspec_buf; cvta.to.global.u64 %ptxspec_buf, %rd1;
//!   ld.global.nc.f32 %f1, [%ptxspec_buf+20]; }
//! ```
//!
//! [`specialize`] turns exactly these loads into `mov`s of immediates taken
//! from a blob; AOT mode is emulated output specialized with the defaults,
//! and the runtime's native mode is the same call with the user's values.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::PostLinkError;
use super::analyze::{Piece, Site};
use crate::ptx::{self, Edits, ItemKind, Module, Span, StmtKind, TokenKind};

/// The register that marks emulated loads.
pub const BUFFER_REG: &str = "%ptxspec_buf";

/// Adds the edits that turn `site` into loads from the buffer, the
/// constant's value being at `base` in it.
pub fn emulate_site(site: &Site, base: u32, edits: &mut Edits) {
    let mut out: Vec<(Span, String)> = site.removed.iter().map(|&s| (s, String::new())).collect();
    for piece in &site.pieces {
        let mut text = String::with_capacity(128);
        piece_loads(site, piece, base, &mut text);
        out.push((piece.stmt, text));
    }
    // In source order, so that the edits need no sorting.
    out.sort_by_key(|(s, _)| s.start);
    for (span, text) in out {
        edits.replace(span, text);
    }
}

/// How many bytes [`emulate_site`] adds to the text (negative: removes).
pub fn emulated_growth(site: &Site, base: u32, scratch: &mut String) -> isize {
    let removed: isize = site
        .removed
        .iter()
        .map(|s| (s.end - s.start) as isize)
        .sum();
    let mut added = 0isize;
    for piece in &site.pieces {
        scratch.clear();
        piece_loads(site, piece, base, scratch);
        added += scratch.len() as isize - (piece.stmt.end - piece.stmt.start) as isize;
    }
    added - removed
}

/// The replacement of one `ld.param` of a getter's result.
fn piece_loads(site: &Site, piece: &Piece, base: u32, text: &mut String) {
    let _ = write!(
        text,
        "{{ .reg .b64 {BUFFER_REG}; cvta.to.global.u64 {BUFFER_REG}, {};",
        site.buffer_reg
    );
    let addr = base + piece.offset;
    let elem = ptx::scalar_type_size(piece.ty).unwrap_or(1);
    let vec = piece.dests.len() as u32;
    if let Some(n) = site.narrowed {
        let sign = if n.signed { 's' } else { 'u' };
        let _ = write!(
            text,
            " ld.global.nc.{sign}{} {}, [{BUFFER_REG}+{addr}];",
            n.size * 8,
            piece.dests[0]
        );
    } else if vec == 1 {
        let _ = write!(
            text,
            " ld.global.nc.{} {}, [{BUFFER_REG}+{addr}];",
            piece.ty, piece.dests[0]
        );
    } else if addr.is_multiple_of(elem * vec) {
        let _ = write!(
            text,
            " ld.global.nc.v{vec}.{} {{{}}}, [{BUFFER_REG}+{addr}];",
            piece.ty,
            piece.dests.join(", ")
        );
    } else {
        // A vector load needs its whole size's alignment, which the
        // buffer offset may not give: load element by element.
        for (i, d) in piece.dests.iter().enumerate() {
            let _ = write!(
                text,
                " ld.global.nc.{} {d}, [{BUFFER_REG}+{}];",
                piece.ty,
                addr + i as u32 * elem
            );
        }
    }
    text.push_str(" }");
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
/// immediates that ptxas can fold. Text outside those loads is untouched.
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
            let op = m.text(st.op);
            if st.kind == StmtKind::Decl || op.starts_with("cvta") {
                edits.replace(st.span, "");
                continue;
            }
            if !op.starts_with("ld.global.nc") {
                return Err(m
                    .error_at(
                        st.span.start,
                        format!("unexpected use of {BUFFER_REG}: {text}"),
                    )
                    .into());
            }
            edits.replace(st.span, immediates(&m, st, op, &regs, blob)?);
        }
    }
    Ok(edits.apply(&m.src))
}

/// `mov`s for one emulated load.
fn immediates(
    m: &Module,
    st: &ptx::Stmt,
    op: &str,
    regs: &RegWidths,
    blob: &[u8],
) -> Result<String, PostLinkError> {
    let err = |what: String| PostLinkError::from(m.error_at(st.span.start, what));
    let ops = m.operands(st)?;
    let ty = op.rsplit('.').next().unwrap_or("");
    let elem = ptx::scalar_type_size(ty).ok_or_else(|| err(format!("unknown load type in {op}")))?
        as usize;
    let signed = ty.starts_with('s');
    let dests: Vec<&str> = ops
        .first()
        .map(|d| {
            d.iter()
                .filter(|t| t.kind == TokenKind::Word)
                .map(|t| t.text(&m.src))
                .collect()
        })
        .unwrap_or_default();
    let addr = ops
        .get(1)
        .and_then(|a| super::analyze::address(m, a))
        .filter(|&(reg, off)| reg == BUFFER_REG && off >= 0)
        .map(|(_, off)| off as usize)
        .ok_or_else(|| err(format!("cannot read the address of {}", m.text(st.span))))?;
    let mut out = String::new();
    for (i, d) in dests.iter().enumerate() {
        let at = addr + i * elem;
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
