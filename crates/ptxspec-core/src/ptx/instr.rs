//! The one typed view of a PTX instruction that analyses and rewrites read:
//! its guard, its opcode, its type suffixes and its other modifiers
//! (`.sat`, `.rn`, `.hi`, `.wide`, `.param`, `.v2` …), and its operands
//! with what each one is (a register, an immediate, a symbol, an address in
//! brackets, a vector in braces). Each modifier's meaning is defined here
//! once — which operands an opcode writes, what an integer conversion does
//! to a value — so that no pass splits an opcode string again and reads a
//! `.sat` as nothing (a miscompile that happened).

use super::{Module, ParseError, Stmt, StmtKind, Token, TokenKind};

/// The kind of a PTX fundamental type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TypeKind {
    /// `.s8` … `.s64`.
    Signed,
    /// `.u8` … `.u64`.
    Unsigned,
    /// `.b8` … `.b128`: bits, no arithmetic meaning.
    Bits,
    /// `.f16` … `.f64`.
    Float,
    /// `.bf16`.
    BFloat,
    /// `.pred`.
    Pred,
    /// Two halves in 32 bits (`.f16x2`).
    HalfPair,
    /// Two bfloat16s in 32 bits (`.bf16x2`).
    BFloatPair,
    /// The other packed and narrow float forms (`.e4m3x2`, `.tf32` …).
    Packed,
}

/// A type suffix of an opcode (`.u32` of `add.u32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Type {
    /// What kind of value.
    pub kind: TypeKind,
    /// Its width in bits.
    pub bits: u32,
}

impl Type {
    /// The type a suffix names (`u32`, `bf16`, `pred`), or `None` where the
    /// suffix is a modifier (`sat`, `param`, `v2`).
    pub fn parse(suffix: &str) -> Option<Type> {
        let packed = |bits| {
            Some(Type {
                kind: TypeKind::Packed,
                bits,
            })
        };
        match suffix {
            "pred" => {
                return Some(Type {
                    kind: TypeKind::Pred,
                    bits: 1,
                });
            }
            "f16x2" => {
                return Some(Type {
                    kind: TypeKind::HalfPair,
                    bits: 32,
                });
            }
            "bf16x2" => {
                return Some(Type {
                    kind: TypeKind::BFloatPair,
                    bits: 32,
                });
            }
            "e4m3x2" | "e5m2x2" | "e2m3x2" | "e3m2x2" | "e2m1x2" | "ue8m0x2" => {
                return packed(if suffix.starts_with('e') { 16 } else { 32 });
            }
            "tf32" => return packed(32),
            "e4m3" | "e5m2" => return packed(8),
            _ => {}
        }
        let (kind, digits) = if let Some(d) = suffix.strip_prefix("bf") {
            (TypeKind::BFloat, d)
        } else {
            let mut chars = suffix.chars();
            let kind = match chars.next()? {
                's' => TypeKind::Signed,
                'u' => TypeKind::Unsigned,
                'b' => TypeKind::Bits,
                'f' => TypeKind::Float,
                _ => return None,
            };
            (kind, chars.as_str())
        };
        let bits: u32 = match digits {
            "8" => 8,
            "16" => 16,
            "32" => 32,
            "64" => 64,
            "128" => 128,
            _ => return None,
        };
        Some(Type { kind, bits })
    }

    /// An integer type (signed, unsigned or bits).
    pub fn is_integer(&self) -> bool {
        matches!(
            self.kind,
            TypeKind::Signed | TypeKind::Unsigned | TypeKind::Bits
        )
    }

    /// A floating-point type of any width or packing.
    pub fn is_float(&self) -> bool {
        matches!(
            self.kind,
            TypeKind::Float
                | TypeKind::BFloat
                | TypeKind::HalfPair
                | TypeKind::BFloatPair
                | TypeKind::Packed
        )
    }
}

/// One operand of an instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operand<'m> {
    /// A register (`%r1`), or a special register (`%tid.x`). A negated
    /// predicate (`!%p1`) is its register.
    Reg(&'m str),
    /// An integer or float immediate, as written (`768`, `-3`, `0x300U`,
    /// `0f3F800000`).
    Imm(&'m str),
    /// A symbol: a variable, a function, a parameter, a label.
    Symbol(&'m str),
    /// `[base]`, `[base+offset]`: an address. `base` is a register or a
    /// symbol (or `None` for `[0x10]`).
    Address {
        /// What the address is made from.
        base: Option<&'m str>,
        /// The constant added to it.
        offset: i64,
    },
    /// `name+N`, `name-N` outside brackets: a symbol's address (or a
    /// register's value) plus a constant (`mov.u64 %rd1, table+8`).
    Sum {
        /// The symbol or register.
        base: &'m str,
        /// The constant added to it.
        offset: i64,
    },
    /// `{a, b, …}`: a vector of registers (or `_`).
    Vector(Vec<Operand<'m>>),
    /// `%p|%q`: the two predicates `setp` may write.
    Pair(&'m str, &'m str),
    /// `_`: a sink (the value is dropped).
    Sink,
    /// Anything else (a call's parenthesised lists, a label list): its
    /// words, which a fail-closed reader treats as uses.
    Other(Vec<&'m str>),
}

impl<'m> Operand<'m> {
    /// The registers and symbols the operand names, brackets and braces
    /// included.
    pub fn names(&self) -> Vec<&'m str> {
        match self {
            Operand::Reg(r) | Operand::Symbol(r) | Operand::Sum { base: r, .. } => vec![r],
            Operand::Address { base, .. } => base.iter().copied().collect(),
            Operand::Vector(v) => v.iter().flat_map(Operand::names).collect(),
            Operand::Pair(a, b) => vec![a, b],
            Operand::Other(words) => words.clone(),
            Operand::Imm(_) | Operand::Sink => Vec::new(),
        }
    }

    /// The integer this immediate means (`768`, `-3`, `0x300U`, `017`), as
    /// 64 bits; `None` for other operands and float immediates.
    pub fn integer(&self) -> Option<u64> {
        match self {
            Operand::Imm(text) => integer_immediate(text),
            _ => None,
        }
    }
}

/// An integer immediate of PTX (`768`, `-3`, `0x300`, `0x300U`, `017`) as 64
/// bits; `None` for a float immediate or something else.
pub fn integer_immediate(text: &str) -> Option<u64> {
    let t = text.trim_end_matches(['U', 'u']);
    let (negative, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok()?,
        None if t.starts_with('0') && t.len() > 1 => u64::from_str_radix(&t[1..], 8).ok()?,
        None => t.parse().ok()?,
    };
    Some(if negative { v.wrapping_neg() } else { v })
}

/// An instruction, read once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instr<'m> {
    /// `@%p` / `@!%p`: the predicate register and whether it is negated.
    pub guard: Option<(&'m str, bool)>,
    /// The opcode's first part (`cvt` of `cvt.sat.u8.u32`).
    pub opcode: &'m str,
    /// The whole opcode as written (`cvt.sat.u8.u32`).
    pub full: &'m str,
    /// Its suffixes that are not types, in order (`sat`).
    pub modifiers: Vec<&'m str>,
    /// Its type suffixes, in order (`u8`, `u32`).
    pub types: Vec<Type>,
    /// Its operands, in order.
    pub operands: Vec<Operand<'m>>,
}

/// What an opcode does with its first operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writes {
    /// It writes operand 0 and reads the others (`add`, `ld`, `atom`).
    First,
    /// It writes no operand: each one is read (`st`, `red`, `bra`,
    /// `bar`, `ret`).
    Nothing,
    /// A call: `call (ret), f, (args)` writes its return list.
    Call,
    /// An opcode this model does not know: a reader must treat every
    /// operand as read (and may not assume what is written).
    Unknown,
}

impl<'m> Instr<'m> {
    /// Whether the opcode carries modifier `m` (`sat`, `rn`, `hi`, `wide`,
    /// `param`, `v2`). A sub-qualifier narrows its modifier and keeps it:
    /// `.param::entry` and `.param::func` are `param` (a kernel's and a
    /// function's parameter space), `.shared::cta` is `shared` — what newer
    /// compilers write where older ones wrote the bare space. Asked with
    /// its sub-qualifier (`param::func`), only that spelling answers.
    pub fn has(&self, modifier: &str) -> bool {
        self.modifiers.iter().any(|m| {
            *m == modifier
                || m.strip_prefix(modifier)
                    .is_some_and(|rest| rest.starts_with("::"))
        })
    }

    /// The vector width its access names (`.v2`, `.v4`, `.v8`); 1 for a
    /// scalar one.
    pub fn vector(&self) -> u32 {
        self.modifiers
            .iter()
            .find_map(|m| m.strip_prefix('v')?.parse().ok())
            .unwrap_or(1)
    }

    /// The text of its last type suffix (`b32` of `ld.param.v2.b32`), for
    /// a rewrite that writes the type again.
    pub fn type_text(&self) -> Option<&'m str> {
        self.full
            .split('.')
            .skip(1)
            .filter(|p| Type::parse(p).is_some())
            .last()
    }

    /// What the opcode does with its operands (see [`Writes`]).
    pub fn writes(&self) -> Writes {
        match self.opcode {
            // mbarrier's arrive and try_wait write a state or a predicate;
            // init, inval and the expect forms write nothing.
            "mbarrier" if self.has("init") || self.has("inval") => Writes::Nothing,
            "st" | "red" | "prefetch" | "prefetchu" | "bar" | "barrier" | "membar" | "fence"
            | "bra" | "brx" | "ret" | "exit" | "trap" | "brkpt" | "pmevent" | "nanosleep"
            | "cp" | "griddepcontrol" | "discard" | "applypriority" | "stmatrix" => Writes::Nothing,
            "call" => Writes::Call,
            "mov"
            | "add"
            | "sub"
            | "mul"
            | "mad"
            | "mul24"
            | "mad24"
            | "sad"
            | "div"
            | "rem"
            | "abs"
            | "neg"
            | "min"
            | "max"
            | "popc"
            | "clz"
            | "bfind"
            | "fns"
            | "brev"
            | "bfe"
            | "bfi"
            | "szext"
            | "bmsk"
            | "dp4a"
            | "dp2a"
            | "and"
            | "or"
            | "xor"
            | "not"
            | "cnot"
            | "lop3"
            | "shf"
            | "shl"
            | "shr"
            | "prmt"
            | "cvt"
            | "cvta"
            | "setp"
            | "set"
            | "selp"
            | "slct"
            | "testp"
            | "copysign"
            | "fma"
            | "rcp"
            | "sqrt"
            | "rsqrt"
            | "sin"
            | "cos"
            | "lg2"
            | "ex2"
            | "tanh"
            | "ld"
            | "ldu"
            | "atom"
            | "isspacep"
            | "vote"
            | "shfl"
            | "match"
            | "activemask"
            | "redux"
            | "addc"
            | "subc"
            | "madc"
            | "mbarrier"
            | "elect"
            | "tex"
            | "tld4"
            | "suld"
            | "txq"
            | "suq"
            | "ldmatrix"
            | "mapa"
            | "getctarank"
            | "istypep"
            | "clusterlaunchcontrol" => Writes::First,
            _ => Writes::Unknown,
        }
    }

    /// The operands the instruction reads: all but the written one (see
    /// [`writes`](Self::writes)); for a call, its callee and arguments.
    pub fn sources(&self) -> &[Operand<'m>] {
        match self.writes() {
            Writes::First | Writes::Call if !self.operands.is_empty() => {
                // A call without a return list names its callee first.
                if self.opcode == "call" && !matches!(self.operands[0], Operand::Other(_)) {
                    return &self.operands;
                }
                &self.operands[1..]
            }
            _ => &self.operands,
        }
    }

    /// The registers the instruction writes: operand 0's for opcodes that
    /// write it (each of a vector's, both of a pair), a call's return list.
    /// Empty for opcodes this model does not know.
    pub fn destinations(&self) -> Vec<&'m str> {
        match (self.writes(), self.operands.first()) {
            (Writes::First, Some(op)) => match op {
                Operand::Reg(r) => vec![r],
                Operand::Vector(v) => v.iter().flat_map(Operand::names).collect(),
                Operand::Pair(a, b) => vec![a, b],
                _ => Vec::new(),
            },
            (Writes::Call, Some(Operand::Other(words))) => words.clone(),
            _ => Vec::new(),
        }
    }

    /// Every register the instruction may write, for a reader that must
    /// not miss one: its [`destinations`](Self::destinations), and for an
    /// opcode this model does not know, whatever its first operand names.
    pub fn written_registers(&self) -> Vec<&'m str> {
        match self.writes() {
            Writes::Unknown => self.operands.first().map(|o| o.names()).unwrap_or_default(),
            _ => self.destinations(),
        }
    }

    /// For an integer `cvt` (no rounding, no float on either side): the
    /// conversion it makes. `None` for other instructions and conversions
    /// this model does not define, which a folding pass must not fold.
    pub fn integer_conversion(&self) -> Option<IntConversion> {
        if self.opcode != "cvt" {
            return None;
        }
        let [to, from] = self.types.as_slice() else {
            return None;
        };
        if !to.is_integer() || !from.is_integer() {
            return None;
        }
        let mut saturate = false;
        for m in &self.modifiers {
            match *m {
                "sat" => saturate = true,
                // `.ftz` and rounding modes have no meaning between
                // integers; anything else is not modelled.
                _ => return None,
            }
        }
        Some(IntConversion {
            to: *to,
            from: *from,
            saturate,
        })
    }
}

/// An integer-to-integer `cvt`: `cvt[.sat].<to>.<from>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntConversion {
    /// The destination type.
    pub to: Type,
    /// The source type.
    pub from: Type,
    /// `.sat`: clamp to the destination's range instead of truncating.
    pub saturate: bool,
}

impl IntConversion {
    /// The register value the conversion writes for a source register
    /// holding `v`, as PTX defines it: the source read as `from` (its low
    /// bits, extended by its signedness); with `.sat`, clamped to `to`'s
    /// range, else truncated to `to`'s width; then extended to 64 bits by
    /// `to`'s signedness — a destination register wider than the type
    /// holds the value sign- or zero-extended (`cvt.s8.s32` of 384 writes
    /// −128). A reader of a narrower register takes the low bits.
    pub fn apply(&self, v: u64) -> u64 {
        let source = extend(v, self.from.bits, self.from.kind == TypeKind::Signed);
        let to_bits = self.to.bits.min(64);
        let to_signed = self.to.kind == TypeKind::Signed;
        let value = if self.saturate {
            // The source as a mathematical integer, clamped.
            let wide: i128 = match self.from.kind == TypeKind::Signed {
                true => source as i64 as i128,
                false => source as i128,
            };
            let (lo, hi): (i128, i128) = match to_signed {
                true => (-(1i128 << (to_bits - 1)), (1i128 << (to_bits - 1)) - 1),
                false => (0, (1i128 << to_bits) - 1),
            };
            wide.clamp(lo, hi) as u64
        } else {
            source
        };
        extend(value, to_bits, to_signed)
    }
}

/// The low `bits` of `v`, sign- or zero-extended to 64 bits.
pub fn extend(v: u64, bits: u32, signed: bool) -> u64 {
    if bits >= 64 {
        return v;
    }
    let low = v & ((1u64 << bits) - 1);
    if signed && low >> (bits - 1) & 1 == 1 {
        low | !((1u64 << bits) - 1)
    } else {
        low
    }
}

impl Module {
    /// The opcode's first part of instruction `stmt` ([`Instr::opcode`]:
    /// `call` of `call.uni`), without reading its operands; `None` for a
    /// statement that is not an instruction.
    pub fn opcode(&self, stmt: &Stmt) -> Option<&str> {
        (stmt.kind == StmtKind::Instr)
            .then(|| self.text(stmt.op))
            .and_then(|full| full.split('.').next())
    }

    /// The typed view of instruction `stmt` (see [`Instr`]); `None` for a
    /// statement that is not an instruction.
    pub fn instr(&self, stmt: &Stmt) -> Result<Option<Instr<'_>>, ParseError> {
        if stmt.kind != StmtKind::Instr {
            return Ok(None);
        }
        let full = self.text(stmt.op);
        let mut parts = full.split('.');
        let opcode = parts.next().unwrap_or(full);
        let (mut modifiers, mut types) = (Vec::new(), Vec::new());
        for p in parts {
            match Type::parse(p) {
                Some(t) => types.push(t),
                None => modifiers.push(p),
            }
        }
        let guard = self.guard(stmt);
        let ops = self.operands(stmt)?;
        let operands = ops.iter().map(|toks| self.operand(toks)).collect();
        Ok(Some(Instr {
            guard,
            opcode,
            full,
            modifiers,
            types,
            operands,
        }))
    }

    /// The `@%p` / `@!%p` before an instruction's opcode.
    fn guard(&self, stmt: &Stmt) -> Option<(&str, bool)> {
        let before = self
            .src
            .get(stmt.span.start as usize..stmt.op.start as usize)?;
        let rest = before.trim_start().strip_prefix('@')?;
        let (negated, rest) = match rest.trim_start().strip_prefix('!') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let name = rest.split_whitespace().next()?;
        Some((name, negated))
    }

    /// One operand's tokens, typed.
    fn operand<'m>(&'m self, toks: &[Token]) -> Operand<'m> {
        let text = |t: &Token| t.text(&self.src);
        match toks {
            [t] if t.kind == TokenKind::Word && text(t) == "_" => Operand::Sink,
            [t] if t.kind == TokenKind::Word && text(t).starts_with('%') => Operand::Reg(text(t)),
            [t] if t.kind == TokenKind::Word => Operand::Symbol(text(t)),
            [t] if t.kind == TokenKind::Number => Operand::Imm(text(t)),
            [neg, t] if neg.is(b'-') && t.kind == TokenKind::Number => {
                // The sign belongs to the immediate.
                let start = neg.start as usize;
                Operand::Imm(&self.src[start..t.end as usize])
            }
            [bang, t] if bang.is(b'!') && t.kind == TokenKind::Word => Operand::Reg(text(t)),
            [a, bar, b]
                if bar.is(b'|') && a.kind == TokenKind::Word && b.kind == TokenKind::Word =>
            {
                Operand::Pair(text(a), text(b))
            }
            [open, inner @ .., close] if open.is(b'[') && close.is(b']') => self.address(inner),
            [b, sign, n]
                if b.kind == TokenKind::Word
                    && (sign.is(b'+') || sign.is(b'-'))
                    && n.kind == TokenKind::Number =>
            {
                match integer_immediate(text(n)) {
                    Some(v) => Operand::Sum {
                        base: text(b),
                        offset: if sign.is(b'-') {
                            (v as i64).wrapping_neg()
                        } else {
                            v as i64
                        },
                    },
                    None => Operand::Other(vec![text(b)]),
                }
            }
            [open, inner @ .., close] if open.is(b'{') && close.is(b'}') => Operand::Vector(
                inner
                    .split(|t| t.is(b','))
                    .map(|part| self.operand(part))
                    .collect(),
            ),
            _ => Operand::Other(
                toks.iter()
                    .filter(|t| t.kind == TokenKind::Word)
                    .map(text)
                    .collect(),
            ),
        }
    }

    /// `[base]`, `[base+n]`, `[base+-n]`, `[n]`.
    fn address<'m>(&'m self, inner: &[Token]) -> Operand<'m> {
        let text = |t: &Token| t.text(&self.src);
        let number = |toks: &[Token]| -> Option<i64> {
            match toks {
                [n] if n.kind == TokenKind::Number => integer_immediate(text(n)).map(|v| v as i64),
                [m, n] if m.is(b'-') && n.kind == TokenKind::Number => {
                    integer_immediate(text(n)).map(|v| (v as i64).wrapping_neg())
                }
                _ => None,
            }
        };
        match inner {
            [b] if b.kind == TokenKind::Word => Operand::Address {
                base: Some(text(b)),
                offset: 0,
            },
            [b, plus, rest @ ..] if b.kind == TokenKind::Word && plus.is(b'+') => {
                match number(rest) {
                    Some(offset) => Operand::Address {
                        base: Some(text(b)),
                        offset,
                    },
                    None => self.other_address(inner),
                }
            }
            [b, minus, n] if b.kind == TokenKind::Word && minus.is(b'-') => {
                match number(std::slice::from_ref(n)) {
                    Some(offset) => Operand::Address {
                        base: Some(text(b)),
                        offset: offset.wrapping_neg(),
                    },
                    None => self.other_address(inner),
                }
            }
            _ => match number(inner) {
                Some(offset) => Operand::Address { base: None, offset },
                None => self.other_address(inner),
            },
        }
    }

    /// An address this model does not read: its words, as uses.
    fn other_address<'m>(&'m self, inner: &[Token]) -> Operand<'m> {
        Operand::Other(
            inner
                .iter()
                .filter(|t| t.kind == TokenKind::Word)
                .map(|t| t.text(&self.src))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_instr(body: &str) -> (Module, usize) {
        let src = format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{{\n{body}\n}}\n"
        );
        let m = crate::ptx::parse("t.ptx", src).unwrap();
        let idx = m
            .items
            .iter()
            .position(|i| matches!(i.kind, crate::ptx::ItemKind::Function(_)))
            .unwrap();
        (m, idx)
    }

    fn with_instr<R>(body: &str, f: impl FnOnce(&Instr) -> R) -> R {
        let (m, idx) = first_instr(body);
        let crate::ptx::ItemKind::Function(func) = &m.items[idx].kind else {
            unreachable!()
        };
        let stmt = func
            .body
            .as_ref()
            .unwrap()
            .stmts
            .iter()
            .find(|s| s.kind == StmtKind::Instr)
            .unwrap();
        let i = m.instr(stmt).unwrap().unwrap();
        f(&i)
    }

    #[test]
    fn opcodes_split_into_types_and_modifiers() {
        with_instr("cvt.sat.u8.u32 %r1, %r2;", |i| {
            assert_eq!(i.opcode, "cvt");
            assert_eq!(i.modifiers, ["sat"]);
            assert_eq!(
                i.types,
                [
                    Type {
                        kind: TypeKind::Unsigned,
                        bits: 8
                    },
                    Type {
                        kind: TypeKind::Unsigned,
                        bits: 32
                    }
                ]
            );
            assert_eq!(i.destinations(), ["%r1"]);
            assert_eq!(i.sources(), [Operand::Reg("%r2")]);
        });
        with_instr("@!%p1 ld.param.v2.u32 {%r1, %r2}, [p+8];", |i| {
            assert_eq!(i.guard, Some(("%p1", true)));
            assert!(i.has("param") && i.has("v2"));
            assert_eq!(i.destinations(), ["%r1", "%r2"]);
            assert_eq!(
                i.sources(),
                [Operand::Address {
                    base: Some("p"),
                    offset: 8
                }]
            );
        });
        // Sub-qualifiers keep their space: `param::entry` is `param`, and
        // no modifier is another's prefix without them.
        with_instr("ld.param::entry.u64 %rd1, [p];", |i| {
            assert!(i.has("param") && i.has("param::entry") && !i.has("param::func"));
            assert!(!i.has("para") && !i.has("entry"));
            assert_eq!(i.destinations(), ["%rd1"]);
        });
        with_instr("mov.u64 %rd1, table+010;", |i| {
            assert_eq!(
                i.sources(),
                [Operand::Sum {
                    base: "table",
                    offset: 8
                }]
            );
            assert_eq!(i.sources()[0].names(), ["table"]);
        });
        // A load's vector width and element type, as a rewrite writes them
        // again (one spelling or the other of the space).
        for (text, vector, ty) in [
            (
                "ld.param.v4.b8 {%rs1, %rs2, %rs3, %rs4}, [r];",
                4,
                Some("b8"),
            ),
            ("ld.param::func.f64 %fd1, [r];", 1, Some("f64")),
            ("ld.param.v2.u32 {%r1, %r2}, [r+8];", 2, Some("u32")),
        ] {
            with_instr(text, |i| {
                assert_eq!((i.vector(), i.type_text()), (vector, ty), "{text}");
                assert_eq!(i.opcode, "ld");
            });
        }
        with_instr("st.shared::cta.u32 [%r1], %r2;", |i| {
            assert!(i.has("shared") && !i.has("global"));
        });
        with_instr("st.global.u64 [%rd1+-16], %rd2;", |i| {
            assert_eq!(i.writes(), Writes::Nothing);
            assert!(i.destinations().is_empty());
            assert_eq!(
                i.operands[0],
                Operand::Address {
                    base: Some("%rd1"),
                    offset: -16
                }
            );
        });
        with_instr("setp.lt.s32 %p1|%p2, %r1, -3;", |i| {
            assert_eq!(i.destinations(), ["%p1", "%p2"]);
            assert_eq!(i.sources()[1].integer(), Some((-3i64) as u64));
        });
        with_instr("frobnicate.u32 %r1, %r2;", |i| {
            assert_eq!(i.writes(), Writes::Unknown);
            assert_eq!(i.sources().len(), 2);
        });
    }

    fn conversion(op: &str) -> IntConversion {
        with_instr(&format!("{op} %r1, %r2;"), |i| {
            i.integer_conversion().unwrap_or_else(|| panic!("{op}"))
        })
    }

    /// Every integer conversion, checked against Rust's own casts (which
    /// define truncation, extension and saturation the same way), on
    /// values at and around each type's edges.
    #[test]
    fn integer_conversions_are_exact() {
        let kinds = [("s", true), ("u", false)];
        let widths = [8u32, 16, 32, 64];
        let mut samples: Vec<u64> = vec![0, 1, 2, 44, 127, 128, 255, 256, 300, 384, 1000];
        for b in [8, 16, 32, 63] {
            for d in [-2i64, -1, 0, 1] {
                samples.push((1u64 << b).wrapping_add(d as u64));
                samples.push((1u64 << b).wrapping_add(d as u64).wrapping_neg());
            }
        }
        samples.push(u64::MAX);
        // The reference: the source value as a mathematical integer.
        let as_int = |v: u64, bits: u32, signed: bool| -> i128 {
            let low = if bits == 64 { v } else { v & ((1 << bits) - 1) };
            match signed {
                true => ((low as i128) << (128 - bits)) >> (128 - bits),
                false => low as i128,
            }
        };
        for (tk, ts) in kinds {
            for tb in widths {
                for (fk, fs) in kinds {
                    for fb in widths {
                        for sat in [false, true] {
                            let op =
                                format!("cvt{}.{tk}{tb}.{fk}{fb}", if sat { ".sat" } else { "" });
                            let c = conversion(&op);
                            for &v in &samples {
                                let x = as_int(v, fb, fs);
                                let (lo, hi) = match ts {
                                    true => (-(1i128 << (tb - 1)), (1i128 << (tb - 1)) - 1),
                                    false => (0, (1i128 << tb) - 1),
                                };
                                let y = if sat { x.clamp(lo, hi) } else { x };
                                let want = as_int(y as u64, tb, ts) as u64;
                                assert_eq!(c.apply(v), want, "{op} of {v:#x}");
                            }
                        }
                    }
                }
            }
        }
        // The hostile round's two: a saturating narrowing and a signed
        // narrowing into a wider register.
        assert_eq!(conversion("cvt.sat.u8.u32").apply(300), 255);
        assert_eq!(conversion("cvt.s8.s32").apply(384) as u32, (-128i32) as u32);
    }

    #[test]
    fn conversions_not_modelled_are_none() {
        for op in [
            "cvt.rn.f32.u32",
            "cvt.rzi.s32.f32",
            "cvt.f64.f32",
            "cvt.rni.u32.u32",
            "cvt.u32.bf16",
            "mov.u32",
        ] {
            assert_eq!(
                with_instr(&format!("{op} %r1, %r2;"), |i| i.integer_conversion()),
                None,
                "{op}"
            );
        }
    }
}
