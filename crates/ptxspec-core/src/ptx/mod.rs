//! PTX front end: lexer, parser, module model and printer. No semantics of
//! specialization constants live here.
//!
//! The model keeps byte ranges into the source rather than copies: a module
//! is its source text plus a list of [`Item`]s (module-scope directives,
//! variables, functions), each function body a flat list of [`Stmt`]s.
//! Instructions are decoded on demand: [`Module::instr`] gives the typed
//! view ([`instr`]) every analysis reads.
//! Printing is copying the source with `Edits` applied, so untouched input
//! comes back byte for byte.

pub mod instr;
#[cfg(test)]
pub(crate) mod interpret;
pub mod known;
pub(crate) mod lex;
pub mod loops;
pub mod offsets;
mod operands;
mod parse;
pub mod pointers;
mod print;
pub(crate) mod rewrite;
pub mod widen;

pub(crate) use lex::line_col;
pub use lex::{Token, TokenKind};
pub use operands::Operands;
pub use parse::parse;
pub(crate) use print::{Edits, joins, push_apart};
#[cfg(test)]
pub(crate) use rewrite::first_body;
pub(crate) use rewrite::{BodyRewrite, fresh_prefix, loop_passes, rewrite_bodies, temporary};

use std::fmt;
use std::ops::Range;

/// A byte range of the module's source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Span {
    /// The first byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

impl Span {
    /// The bytes `start..end`.
    pub fn new(start: u32, end: u32) -> Self {
        Span { start, end }
    }
    /// The same bytes as a range, for slicing the source.
    pub fn range(&self) -> Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// A parse error with its position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{col}: {what}")]
#[non_exhaustive]
pub struct ParseError {
    /// The input's name.
    pub file: String,
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1.
    pub col: usize,
    /// What the parser expected or found.
    pub what: String,
}

/// Linkage of a module-scope symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Linkage {
    /// No linkage directive: local to the translation unit.
    Internal,
    /// `.visible`: defined here, seen by other modules.
    Visible,
    /// `.extern`: declared here, defined elsewhere.
    Extern,
    /// `.weak`: defined here, replaced by a `.visible` definition elsewhere.
    Weak,
    /// `.common`: the largest of several declarations wins.
    Common,
}

/// A module-scope variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variable {
    /// Its name.
    pub name: Span,
    /// Its linkage.
    pub linkage: Linkage,
    /// `.global`, `.const`, `.shared`, …, without the dot.
    pub space: String,
    /// `.align N`, when given.
    pub align: Option<u32>,
    /// Element type: `.b8`, `.u32`, `.f32`, …, without the dot.
    pub elem_type: String,
    /// `.v2`/`.v4` element vector width, 1 otherwise.
    pub vector: u32,
    /// Array dimensions; `None` for `[]`.
    pub dims: Vec<Option<u64>>,
    /// The initializer after `=`, up to the `;`.
    pub init: Option<Span>,
}

impl Variable {
    /// Size in bytes of one element (vector included), if the type is known.
    pub(crate) fn elem_size(&self) -> Option<u32> {
        scalar_type_size(&self.elem_type).map(|s| s * self.vector)
    }
    /// Total size in bytes, if every dimension is known.
    pub fn size(&self) -> Option<u64> {
        let mut n = self.elem_size()? as u64;
        for d in &self.dims {
            n = n.checked_mul((*d)?)?;
        }
        Some(n)
    }
}

/// Byte size of a PTX fundamental type name (no dot): `b8` → 1, `f64` → 8.
pub(crate) fn scalar_type_size(ty: &str) -> Option<u32> {
    match ty.as_bytes() {
        [b'b' | b'u' | b's' | b'f', bits @ ..] => match bits {
            b"8" => Some(1),
            b"16" => Some(2),
            b"32" => Some(4),
            b"64" => Some(8),
            b"128" => Some(16),
            b"16x2" if ty.starts_with('f') => Some(4),
            b"f16" if ty.starts_with('b') => Some(2),
            b"f16x2" if ty.starts_with('b') => Some(4),
            _ => None,
        },
        b"pred" => Some(1),
        _ => None,
    }
}

/// A parameter of a function or kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// Its name.
    pub name: Span,
    /// The type (`u64`, `b8`, …, no dot).
    pub ty: String,
    /// `.align N`, when given.
    pub align: Option<u32>,
    /// `[N]` byte-array length.
    pub array: Option<u32>,
    /// The whole declaration.
    pub span: Span,
}

impl Param {
    /// Size in bytes.
    pub fn size(&self) -> u32 {
        scalar_type_size(&self.ty)
            .unwrap_or(0)
            .saturating_mul(self.array.unwrap_or(1))
    }
    /// Alignment in bytes: the declared one, else the element size.
    pub fn alignment(&self) -> u32 {
        self.align
            .unwrap_or_else(|| scalar_type_size(&self.ty).unwrap_or(1))
    }
}

/// What a statement in a function body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StmtKind {
    /// `{`: a nested scope opens.
    Open,
    /// `}`: it closes.
    Close,
    /// A state-space declaration: `.reg`, `.param`, `.local`, `.shared`, …
    Decl,
    /// `name:`.
    Label,
    /// An instruction, predicate included; `op` is the opcode's span.
    Instr,
    /// Other directives (`.pragma`, `.loc`, …).
    Directive,
}

/// One statement; `span` runs from its first token through its `;` (or the
/// brace, or the label's colon).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stmt {
    /// What it is.
    pub kind: StmtKind,
    /// Its text.
    pub span: Span,
    /// The opcode's span for instructions, the first token's otherwise.
    pub op: Span,
}

/// `.entry` or `.func`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// `.entry` (a kernel) rather than `.func`.
    pub is_kernel: bool,
    /// Its linkage.
    pub linkage: Linkage,
    /// Its name.
    pub name: Span,
    /// Its return parameters.
    pub returns: Vec<Param>,
    /// Its parameters.
    pub params: Vec<Param>,
    /// Performance directives between the parameters and the body
    /// (`.reqntid 64, 1, 1`), each as the directive's name (no dot) and its
    /// numbers.
    pub perf: Vec<(String, Vec<u64>)>,
    /// `None` for a declaration (prototype ending in `;`).
    pub body: Option<Body>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
/// A function's body: its statements.
pub struct Body {
    /// From `{` through `}`.
    pub span: Span,
    /// Its statements, in order.
    pub stmts: Vec<Stmt>,
}

impl Body {
    /// For ascending byte offsets, the index of the statement whose span
    /// holds each (`None` between statements: in white space or a
    /// comment), found in one forward walk over the statements.
    pub(crate) fn stmts_at<'s>(
        &'s self,
        offsets: impl Iterator<Item = u32> + 's,
    ) -> impl Iterator<Item = Option<usize>> + 's {
        let mut j = 0;
        offsets.map(move |at| {
            while j < self.stmts.len() && self.stmts[j].span.end <= at {
                j += 1;
            }
            self.stmts.get(j).filter(|s| s.span.start <= at).map(|_| j)
        })
    }

    /// Indices of the instructions whose first operand (what they write)
    /// is the word `reg`, ascending: a search of the body's text for the
    /// word, each hit checked in its statement.
    pub(crate) fn writers(&self, m: &Module, reg: &str) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::new();
        let hits = lex::word_positions(m.text(self.span), reg).map(|p| self.span.start + p as u32);
        for j in self.stmts_at(hits).flatten() {
            if out.last() != Some(&(j as u32)) && m.first_operand_is(&self.stmts[j], reg) {
                out.push(j as u32);
            }
        }
        out
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
/// What a module-scope item is.
pub enum ItemKind {
    /// `.version`.
    Version,
    /// `.target`.
    Target,
    /// `.address_size`.
    AddressSize,
    /// A variable.
    Variable(Variable),
    /// A function or kernel, declared or defined.
    Function(Function),
    /// `.file N "name"`: a source file that `.loc` lines refer to by number.
    File,
    /// `.section .debug_* { ... }`: debug information.
    Section,
    /// Anything else at module scope (`.pragma`, `.alias`, …).
    Other,
}

/// A module-scope item. `span` covers the item itself; `full` also covers the
/// comments and white space before it (back to the previous item's end), so
/// that items concatenated by `full` reproduce the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// What it is.
    pub kind: ItemKind,
    /// The item's own text.
    pub span: Span,
    /// Its text with the comments and white space before it.
    pub full: Span,
}

impl Item {
    /// The name of a variable or function.
    pub fn name(&self) -> Option<Span> {
        match &self.kind {
            ItemKind::Variable(v) => Some(v.name),
            ItemKind::Function(f) => Some(f.name),
            _ => None,
        }
    }
    /// Its linkage, for variables and functions.
    pub fn linkage(&self) -> Option<Linkage> {
        match &self.kind {
            ItemKind::Variable(v) => Some(v.linkage),
            ItemKind::Function(f) => Some(f.linkage),
            _ => None,
        }
    }
}

/// A parsed PTX module: its source and items.
#[derive(Clone, PartialEq, Eq)]
pub struct Module {
    /// The input's name.
    pub file: String,
    /// The source text.
    pub src: String,
    /// Its module-scope items, in order.
    pub items: Vec<Item>,
}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Module({:?}, {} items)", self.file, self.items.len())
    }
}

impl Module {
    /// The text of `span` in the source.
    pub fn text(&self, span: Span) -> &str {
        &self.src[span.range()]
    }

    /// The operands of an instruction, split at top-level commas, each as
    /// its tokens (predicate and opcode excluded).
    pub fn operands(&self, stmt: &Stmt) -> Result<Operands, ParseError> {
        let mut lx = lex::Lexer::range(&self.src, stmt.op.end, stmt.span.end);
        let mut ops = Operands::default();
        let mut depth = 0i32;
        let mut open = false;
        while let Some(t) = lx
            .next_token()
            .map_err(|e| self.error_at(e.offset, e.what))?
        {
            match t.kind {
                TokenKind::Punct(b'(' | b'[' | b'{') => depth += 1,
                TokenKind::Punct(b')' | b']' | b'}') => depth -= 1,
                TokenKind::Punct(b',') if depth == 0 => {
                    if !open {
                        ops.starts.push(ops.toks.len as u32);
                    }
                    open = false;
                    continue;
                }
                TokenKind::Punct(b';') if depth == 0 => break,
                _ => {}
            }
            if !open {
                ops.starts.push(ops.toks.len as u32);
                open = true;
            }
            ops.toks.push(t);
        }
        Ok(ops)
    }

    /// Whether an instruction's first operand (what it writes) is the word
    /// `word`: the same answer as the first token of [`Module::operands`],
    /// without lexing in the usual case where the operand follows the
    /// opcode after blanks.
    #[inline]
    pub(crate) fn first_operand_is(&self, stmt: &Stmt, word: &str) -> bool {
        if stmt.kind != StmtKind::Instr {
            return false;
        }
        let b = &self.src.as_bytes()[..stmt.span.end as usize];
        let rest = &b[lex::skip_space(b, stmt.op.end as usize)..];
        if !rest.starts_with(b"/") {
            if !rest.starts_with(word.as_bytes()) {
                return false;
            }
            match rest.get(word.len()) {
                // `.x`, `::x` or a comment may follow: the lexer decides.
                Some(b'.' | b':' | b'/') => {}
                Some(&c) => return !lex::is_ident_continue(c),
                None => return true,
            }
        }
        // A comment before the operand, or a word that may go on.
        lex::Lexer::range(&self.src, stmt.op.end, stmt.span.end)
            .next_token()
            .ok()
            .flatten()
            .is_some_and(|t| t.text(&self.src) == word)
    }

    /// The last word of a statement: the name a declaration declares
    /// (`.param .align 8 .b8 param0[16];` → `param0`, `.reg .b32 %r<5>;` →
    /// `%r`). Read backwards from the `;` in the usual case; statements
    /// with comments, strings or dotted names are lexed.
    pub(crate) fn last_word(&self, stmt: &Stmt) -> Option<&str> {
        let text = self.text(stmt.span).as_bytes();
        if !text.iter().any(|&c| matches!(c, b'/' | b'"')) {
            let mut e = text.len();
            let trim = |e: &mut usize| {
                while *e > 0 && (text[*e - 1] == b';' || lex::is_space(text[*e - 1])) {
                    *e -= 1;
                }
            };
            trim(&mut e);
            // An array size or a register count after the name.
            for (open, close) in [(b'[', b']'), (b'<', b'>')] {
                if e > 0 && text[e - 1] == close {
                    e = text[..e].iter().rposition(|&c| c == open).unwrap_or(0);
                    trim(&mut e);
                }
            }
            let mut s = e;
            while s > 0 && lex::is_ident_continue(text[s - 1]) {
                s -= 1;
            }
            if s > 0 && text[s - 1] == b'%' {
                s -= 1;
            }
            let starts_word = s < e && !text[s].is_ascii_digit();
            if starts_word && s > 0 && (text[s - 1] == b',' || lex::is_space(text[s - 1])) {
                let at = stmt.span.start as usize;
                return Some(&self.src[at + s..at + e]);
            }
        }
        let mut lx = lex::Lexer::range(&self.src, stmt.span.start, stmt.span.end);
        let mut last = None;
        while let Ok(Some(t)) = lx.next_token() {
            if t.kind == TokenKind::Word {
                last = Some(t.text(&self.src));
            }
        }
        last
    }

    /// An error at a byte offset of this module.
    pub(crate) fn error_at(&self, offset: u32, what: impl Into<String>) -> ParseError {
        let (line, col) = line_col(&self.src, offset);
        ParseError {
            file: self.file.clone(),
            line,
            col,
            what: what.into(),
        }
    }

    /// Bytes of a variable's initializer laid out in memory, zero-filled to
    /// its size. `None` when it has no initializer or one that is not plain
    /// numbers (addresses of symbols, for instance).
    pub(crate) fn initializer_bytes(&self, var: &Variable) -> Option<Vec<u8>> {
        let init = var.init?;
        let size = var.size()? as usize;
        let elem = scalar_type_size(&var.elem_type)? as usize;
        let is_float = var.elem_type.starts_with('f');
        let mut out = Vec::with_capacity(size);
        let toks = lex::tokens(&self.src, init.start, init.end).ok()?;
        let mut negative = false;
        for t in toks {
            match t.kind {
                TokenKind::Punct(b'{' | b'}' | b',') => {}
                TokenKind::Punct(b'-') => negative = !negative,
                TokenKind::Number => {
                    let bits = parse_number(t.text(&self.src), elem, is_float, negative)?;
                    negative = false;
                    out.extend_from_slice(&bits.to_le_bytes()[..elem]);
                }
                _ => return None,
            }
        }
        if out.len() > size {
            return None;
        }
        out.resize(size, 0);
        Some(out)
    }
}

/// The bits of a PTX number literal stored in an element of `size` bytes.
fn parse_number(text: &str, size: usize, is_float: bool, negative: bool) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    let t = lower.trim_end_matches('u');
    if let Some(h) = t.strip_prefix("0f").or_else(|| t.strip_prefix("0d")) {
        let bits = u64::from_str_radix(h, 16).ok()?;
        return Some(if negative {
            bits ^ (1 << (size * 8 - 1))
        } else {
            bits
        });
    }
    let int = if let Some(h) = t.strip_prefix("0x") {
        u64::from_str_radix(h, 16).ok()
    } else if let Some(b) = t.strip_prefix("0b") {
        u64::from_str_radix(b, 2).ok()
    } else if t.len() > 1 && t.starts_with('0') && t.bytes().all(|b| b.is_ascii_digit()) {
        u64::from_str_radix(&t[1..], 8).ok()
    } else {
        t.parse::<u64>().ok()
    };
    match (int, is_float) {
        (Some(v), false) => Some(if negative { v.wrapping_neg() } else { v }),
        _ => {
            let v: f64 = t.parse().ok()?;
            let v = if negative { -v } else { v };
            Some(match (is_float, size) {
                (true, 4) => (v as f32).to_bits() as u64,
                (true, 8) => v.to_bits(),
                _ => return None,
            })
        }
    }
}

#[cfg(test)]
mod tests;
