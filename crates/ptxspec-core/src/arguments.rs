//! Kernel arguments as constants: some of a kernel's by-value parameters
//! fixed to values, so that the compiler sees literals where the code reads
//! them — as specialization constants do, for code that passes its sizes and
//! modes as ordinary arguments. The kernel keeps its parameter list (a
//! launch passes the same arguments; the fixed ones are not read).
//!
//! Two ways, as for specialization constants:
//! - **PTX** ([`FixedArguments::in_ptx`]): each load of a fixed parameter
//!   in the kernel's body becomes a move of an immediate; ptxas then folds
//!   what it can.
//! - **LTO** (`FixedArguments::wrapper_ir`): a small generated NVVM IR
//!   kernel calls the kernel with the literals; nvJitLink links it with the
//!   image's LTO-IR keeping only that wrapper, so NVVM inlines the kernel
//!   into it and optimizes with the values known (loops bounded by an
//!   argument unroll as for a literal). The wrapper's PTX is then renamed to
//!   the kernel's name and parameters (`FixedArguments::renamed`) and
//!   compiled: the cubin holds the kernel under its own name.
//!
//! What a parameter holds is read from the kernel's PTX declaration; a
//! 64-bit parameter that the kernel turns into a global address (`cvta`) or
//! dereferences is a pointer, which cannot be fixed (its value is an
//! address of one process).

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::digest::KeyEncoder;
use crate::ptx::{self, Edits, ItemKind, Module, StmtKind, TokenKind};

/// What a kernel parameter holds, from its PTX declaration (and, for
/// 64-bit ones, its use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParamKind {
    /// An integer (or a value PTX declares as bits) of `bits` bits.
    Int {
        /// Its width.
        bits: u32,
        /// Declared `.s*`.
        signed: bool,
    },
    /// `.f32` or `.f64`.
    Float {
        /// Its width.
        bits: u32,
    },
    /// A 64-bit value the kernel uses as an address.
    Pointer,
    /// A byte array (a struct passed by value).
    Aggregate {
        /// Its size in bytes.
        size: u32,
        /// Its alignment.
        align: u32,
    },
}

impl ParamKind {
    /// Its size in bytes.
    pub fn size(&self) -> u32 {
        match *self {
            ParamKind::Int { bits, .. } | ParamKind::Float { bits } => bits / 8,
            ParamKind::Pointer => 8,
            ParamKind::Aggregate { size, .. } => size,
        }
    }

    /// How it is named in messages.
    fn describe(&self) -> String {
        match *self {
            ParamKind::Int { bits, signed } => {
                format!(
                    "a {bits}-bit {}integer",
                    if signed { "signed " } else { "" }
                )
            }
            ParamKind::Float { bits } => format!("a {bits}-bit float"),
            ParamKind::Pointer => "a pointer".into(),
            ParamKind::Aggregate { size, .. } => format!("an aggregate of {size} bytes"),
        }
    }

    /// Its type in NVVM IR (the wrapper's parameter, and its call's
    /// argument).
    fn nvvm_type(&self) -> String {
        match *self {
            ParamKind::Int { bits, .. } => format!("i{bits}"),
            ParamKind::Float { bits: 32 } => "float".into(),
            ParamKind::Float { .. } => "double".into(),
            // A pointer as a pointer: a kernel's pointer parameters get
            // the global address space in the wrapper as in the kernel.
            ParamKind::Pointer => "i8*".into(),
            ParamKind::Aggregate { size, align } => format!("[{size} x i8]* byval align {align}"),
        }
    }
}

/// A kernel's parameters and performance directives, from its PTX.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelParams {
    kernel: String,
    params: Vec<ParamKind>,
    /// `.maxntid`, `.reqntid`, `.minnctapersm`, `.maxnreg` with numbers.
    perf: Vec<(String, Vec<u64>)>,
}

/// Why arguments cannot be fixed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgumentError {
    /// The PTX does not parse.
    #[error(transparent)]
    Ptx(#[from] ptx::ParseError),
    /// The PTX defines no kernel of that name.
    #[error("no kernel {kernel} is defined in the PTX (it defines {defined})")]
    NoKernel {
        /// The kernel asked for.
        kernel: String,
        /// The kernels it defines.
        defined: String,
    },
    /// A parameter index past the last.
    #[error(
        "kernel {kernel} has {count} parameter(s), numbered from 0: there is no parameter {index}"
    )]
    NoParameter {
        /// The kernel.
        kernel: String,
        /// Its parameter count.
        count: usize,
        /// The index given.
        index: usize,
    },
    /// A parameter that cannot be fixed.
    #[error("parameter {index} of kernel {kernel} cannot be fixed: {why}")]
    NotFixable {
        /// The kernel.
        kernel: String,
        /// The parameter.
        index: usize,
        /// Why not.
        why: String,
    },
    /// A value that is not one for the parameter.
    #[error("parameter {index} of kernel {kernel} is {kind}: {value:?} {why}")]
    BadValue {
        /// The kernel.
        kernel: String,
        /// The parameter.
        index: usize,
        /// What the parameter holds.
        kind: String,
        /// The value given.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// The same parameter given twice.
    #[error("parameter {index} of kernel {kernel} is given twice")]
    Twice {
        /// The kernel.
        kernel: String,
        /// The parameter.
        index: usize,
    },
    /// The linked PTX is not what the wrapper should have made.
    #[error("the LTO link of kernel {kernel} with fixed arguments: {why}")]
    Link {
        /// The kernel.
        kernel: String,
        /// What went wrong.
        why: String,
    },
}

/// The kernel named `kernel` in `m`, defined with a body.
fn find_kernel<'m>(m: &'m Module, kernel: &str) -> Result<&'m ptx::Function, ArgumentError> {
    let kernels = || {
        m.items.iter().filter_map(|i| match &i.kind {
            ItemKind::Function(f) if f.is_kernel && f.body.is_some() => Some(f),
            _ => None,
        })
    };
    kernels()
        .find(|f| m.text(f.name) == kernel)
        .ok_or_else(|| ArgumentError::NoKernel {
            kernel: kernel.into(),
            defined: kernels()
                .map(|f| m.text(f.name))
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The PTX name of parameter `index` of `f` in `m`.
fn param_name<'m>(m: &'m Module, f: &ptx::Function, index: usize) -> &'m str {
    m.text(f.params[index].name)
}

/// The registers that loads of parameter `name` write, whole.
fn loaded_registers<'m>(m: &'m Module, body: &ptx::Body, name: &str) -> Vec<&'m str> {
    let mut regs = Vec::new();
    for s in body.stmts.iter().filter(|s| s.kind == StmtKind::Instr) {
        if !m.text(s.op).starts_with("ld.param") {
            continue;
        }
        let Ok(ops) = m.operands(s) else { continue };
        let reads_param = ops
            .get(1)
            .is_some_and(|t| t.iter().any(|t| t.text(&m.src) == name));
        if let (true, Some([dst])) = (reads_param, ops.first()) {
            regs.push(dst.text(&m.src));
        }
    }
    regs
}

/// Whether a register is used as an address in `body`: converted by
/// `cvta`, or inside brackets.
fn used_as_address(m: &Module, body: &ptx::Body, reg: &str) -> bool {
    body.stmts
        .iter()
        .filter(|s| s.kind == StmtKind::Instr)
        .any(|s| {
            let Ok(ops) = m.operands(s) else {
                return false;
            };
            let op = m.text(s.op);
            ops.iter().enumerate().any(|(i, toks)| {
                let names_reg = toks.iter().any(|t| t.text(&m.src) == reg);
                names_reg
                    && ((op.starts_with("cvta") && i == 1)
                        || toks.first().is_some_and(|t| t.is(b'[')))
            })
        })
}

impl KernelParams {
    /// The parameters of `kernel` as its definition in `ptx` declares
    /// them.
    pub fn from_ptx(ptx: &str, kernel: &str) -> Result<KernelParams, ArgumentError> {
        let m = ptx::parse("kernel.ptx", ptx.to_string())?;
        let f = find_kernel(&m, kernel)?;
        let Some(body) = &f.body else {
            unreachable!("find_kernel returns definitions")
        };
        let params = f
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let ty = p.ty.as_str();
                let bits = p.size() * 8;
                if p.array.is_some() {
                    return ParamKind::Aggregate {
                        size: p.size(),
                        align: p.alignment(),
                    };
                }
                match ty.as_bytes().first() {
                    Some(b'f') => ParamKind::Float { bits },
                    _ if bits == 64
                        && loaded_registers(&m, body, param_name(&m, f, i))
                            .iter()
                            .any(|r| used_as_address(&m, body, r)) =>
                    {
                        ParamKind::Pointer
                    }
                    first => ParamKind::Int {
                        bits,
                        signed: first == Some(&b's'),
                    },
                }
            })
            .collect();
        Ok(KernelParams {
            kernel: kernel.into(),
            params,
            perf: f.perf.clone(),
        })
    }

    /// The kernel's name.
    pub fn kernel(&self) -> &str {
        &self.kernel
    }

    /// What each parameter holds, in order.
    pub fn params(&self) -> &[ParamKind] {
        &self.params
    }

    /// What parameter `index` holds.
    fn param(&self, index: usize) -> Result<ParamKind, ArgumentError> {
        self.params
            .get(index)
            .copied()
            .ok_or_else(|| ArgumentError::NoParameter {
                kernel: self.kernel.clone(),
                count: self.params.len(),
                index,
            })
    }

    /// The bytes of `text` as a value of parameter `index`: an integer
    /// (decimal, or hexadecimal after `0x`; negative where signed values
    /// fit), a float, or `bytes:` and the value's bytes in memory order (an
    /// aggregate's only form).
    pub fn value(&self, index: usize, text: &str) -> Result<Vec<u8>, ArgumentError> {
        let kind = self.param(index)?;
        let bad = |why: String| ArgumentError::BadValue {
            kernel: self.kernel.clone(),
            index,
            kind: kind.describe(),
            value: text.into(),
            why,
        };
        if kind == ParamKind::Pointer {
            return Err(self.not_fixable(
                index,
                "it holds a pointer (the kernel uses it as an address), an address of one process",
            ));
        }
        let size = kind.size() as usize;
        if let Some(hex) = text.strip_prefix("bytes:") {
            if hex.len() != size * 2 {
                return Err(bad(format!(
                    "is not {size} bytes ({} hexadecimal digits)",
                    size * 2
                )));
            }
            return (0..size)
                .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("?"), 16).ok())
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(|| bad("holds a character that is not a hexadecimal digit".into()));
        }
        match kind {
            ParamKind::Int { bits, .. } => {
                let t = text.trim();
                let (negative, digits) = match t.strip_prefix('-') {
                    Some(d) => (true, d),
                    None => (false, t),
                };
                let magnitude = match digits.strip_prefix("0x").or(digits.strip_prefix("0X")) {
                    Some(h) => u128::from_str_radix(h, 16),
                    None => digits.parse::<u128>(),
                }
                .map_err(|_| bad("is not an integer".into()))?;
                let (low, high) = (1u128 << (bits - 1), (1u128 << bits) - 1);
                let value: u128 = match negative {
                    false if magnitude <= high => magnitude,
                    true if magnitude <= low => magnitude.wrapping_neg(),
                    _ => {
                        return Err(bad(format!("does not fit {bits} bits (-{low} to {high})")));
                    }
                };
                Ok(value.to_le_bytes()[..size].to_vec())
            }
            ParamKind::Float { bits: 32 } => text
                .trim()
                .parse::<f32>()
                .map(|v| v.to_le_bytes().to_vec())
                .map_err(|_| bad("is not a number".into())),
            ParamKind::Float { .. } => text
                .trim()
                .parse::<f64>()
                .map(|v| v.to_le_bytes().to_vec())
                .map_err(|_| bad("is not a number".into())),
            ParamKind::Aggregate { .. } => Err(bad(format!(
                "is not its bytes: write bytes: and its {size} bytes in memory order"
            ))),
            ParamKind::Pointer => unreachable!("refused above"),
        }
    }

    fn not_fixable(&self, index: usize, why: &str) -> ArgumentError {
        ArgumentError::NotFixable {
            kernel: self.kernel.clone(),
            index,
            why: why.into(),
        }
    }
}

/// A kernel with some by-value parameters fixed to values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedArguments {
    params: KernelParams,
    /// (index, the value's bytes), by ascending index.
    fixed: Vec<(usize, Vec<u8>)>,
}

impl FixedArguments {
    /// `fixed` (parameter index, value bytes) of the kernel `params`
    /// describes: each index a parameter that is not a pointer, given once,
    /// with a value of its size.
    pub fn new(
        params: &KernelParams,
        mut fixed: Vec<(usize, Vec<u8>)>,
    ) -> Result<FixedArguments, ArgumentError> {
        fixed.sort_by_key(|(i, _)| *i);
        for (n, (index, bytes)) in fixed.iter().enumerate() {
            let kind = params.param(*index)?;
            if n > 0 && fixed[n - 1].0 == *index {
                return Err(ArgumentError::Twice {
                    kernel: params.kernel.clone(),
                    index: *index,
                });
            }
            if kind == ParamKind::Pointer {
                return Err(params.not_fixable(
                    *index,
                    "it holds a pointer (the kernel uses it as an address), an address of one process",
                ));
            }
            if bytes.len() != kind.size() as usize {
                return Err(ArgumentError::BadValue {
                    kernel: params.kernel.clone(),
                    index: *index,
                    kind: kind.describe(),
                    value: format!("{} bytes", bytes.len()),
                    why: format!("are not its {} bytes", kind.size()),
                });
            }
        }
        Ok(FixedArguments {
            params: params.clone(),
            fixed,
        })
    }

    /// The kernel's name.
    pub fn kernel(&self) -> &str {
        &self.params.kernel
    }

    /// The fixed parameters: (index, value bytes), by ascending index.
    pub fn fixed(&self) -> &[(usize, Vec<u8>)] {
        &self.fixed
    }

    /// Adds what makes a cubin of these arguments to a cache key.
    pub(crate) fn key(&self, key: &mut KeyEncoder) {
        key.str("fixed arguments").str(&self.params.kernel);
        key.u64(self.params.params.len() as u64);
        for p in &self.params.params {
            key.str(&p.nvvm_type());
        }
        key.u64(self.fixed.len() as u64);
        for (i, bytes) in &self.fixed {
            key.u64(*i as u64).bytes(bytes);
        }
    }

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
                let ops = m.operands(s)?;
                let names_param = ops
                    .iter()
                    .any(|toks| toks.iter().any(|t| t.text(&m.src) == name));
                if !names_param {
                    continue;
                }
                let moves = self.load_as_moves(&m, s, &ops, name, bytes, &widths);
                match moves {
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
        edits.apply(&m.src).map_err(|span| ArgumentError::Link {
            kernel: self.kernel().into(),
            why: format!("two rewrites of one statement at byte {}", span.start),
        })
    }

    /// The moves that replace `s`, a load of parameter `name` (whose
    /// value is `bytes`): `None` where `s` is not a plain load of it.
    fn load_as_moves(
        &self,
        m: &Module,
        s: &ptx::Stmt,
        ops: &ptx::Operands,
        name: &str,
        bytes: &[u8],
        widths: &HashMap<String, u32>,
    ) -> Option<String> {
        let op = m.text(s.op);
        let rest = op.strip_prefix("ld.param")?;
        if ops.len() != 2 || m.text(s.span).trim_start().starts_with('@') {
            return None;
        }
        // `[name]` or `[name+OFFSET]`.
        let addr = ops.get(1)?;
        let texts: Vec<&str> = addr.iter().map(|t| t.text(&m.src)).collect();
        let offset: usize = match texts.as_slice() {
            ["[", n, "]"] if *n == name => 0,
            ["[", n, "+", off, "]"] if *n == name => off.parse().ok()?,
            _ => return None,
        };
        // `.v2`/`.v4` and the element type, the last suffix.
        let suffixes: Vec<&str> = rest.split('.').filter(|s| !s.is_empty()).collect();
        let ty = *suffixes.last()?;
        let lanes = match suffixes.iter().find(|s| s.starts_with('v')) {
            Some(v) => v[1..].parse::<usize>().ok()?,
            None => 1,
        };
        let elem = ptx::scalar_type_size(ty)? as usize;
        let signed = ty.starts_with('s');
        // The destination registers: one, or `{a, b}`.
        let dst = ops.first()?;
        let regs: Vec<&str> = dst
            .iter()
            .filter(|t| t.kind == TokenKind::Word)
            .map(|t| t.text(&m.src))
            .collect();
        if regs.len() != lanes {
            return None;
        }
        let mut out = String::new();
        for (lane, reg) in regs.iter().enumerate() {
            let at = offset + lane * elem;
            let value = bytes.get(at..at + elem)?;
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

    /// Whether the LTO way serves this kernel: NVVM does not inline a
    /// kernel that takes an aggregate by value into a wrapper (it calls
    /// it instead), whatever type the wrapper declares the aggregate with;
    /// such a kernel's arguments are fixed the PTX way.
    pub fn check_lto(&self) -> Result<(), ArgumentError> {
        match self
            .params
            .params
            .iter()
            .position(|p| matches!(p, ParamKind::Aggregate { .. }))
        {
            Some(index) => Err(ArgumentError::Link {
                kernel: self.kernel().into(),
                why: format!(
                    "parameter {index} is an aggregate passed by value, through which NVVM does not \
                     inline the kernel into the wrapper that fixes its arguments: fix them the PTX way \
                     (--via ptx)"
                ),
            }),
            None => Ok(()),
        }
    }

    /// The wrapper kernel's name: one no program has, tied to the kernel.
    pub(crate) fn wrapper_name(&self) -> String {
        format!("ptxspec_fixed_arguments__{}", self.kernel())
    }

    /// The wrapper as NVVM IR of version `ir_version`: a kernel with the
    /// same parameters that calls the kernel with the fixed values in
    /// place of its own, kept by `llvm.used` (nothing calls it) and given
    /// the kernel's performance directives.
    pub(crate) fn wrapper_ir(&self, ir_version: (i32, i32, i32, i32)) -> String {
        let params = &self.params.params;
        let kernel = self.kernel();
        let wrapper = self.wrapper_name();
        let types: Vec<String> = params.iter().map(ParamKind::nvvm_type).collect();
        let plain: Vec<String> = params
            .iter()
            .map(|p| match p {
                ParamKind::Aggregate { size, .. } => format!("[{size} x i8]*"),
                _ => p.nvvm_type(),
            })
            .collect();
        let mut ir = String::from(
            "target datalayout = \"e-i64:64-i128:128-v16:16-v32:32-n16:32:64\"\n\
             target triple = \"nvptx64-nvidia-cuda\"\n",
        );
        let _ = writeln!(ir, "declare void @\"{kernel}\"({})", types.join(", "));
        let formals: Vec<String> = types
            .iter()
            .enumerate()
            .map(|(i, t)| format!("{t} %a{i}"))
            .collect();
        let _ = writeln!(ir, "define void @\"{wrapper}\"({}) {{", formals.join(", "));
        let mut actuals = Vec::new();
        for (i, p) in params.iter().enumerate() {
            let fixed = self.fixed.iter().find(|(j, _)| *j == i).map(|(_, b)| b);
            let actual = match (p, fixed) {
                (_, None) => format!("%a{i}"),
                (ParamKind::Aggregate { size, align }, Some(bytes)) => {
                    let _ = writeln!(ir, "  %c{i} = alloca [{size} x i8], align {align}");
                    let _ = writeln!(
                        ir,
                        "  store [{size} x i8] c\"{}\", [{size} x i8]* %c{i}, align {align}",
                        bytes
                            .iter()
                            .map(|b| format!("\\{b:02X}"))
                            .collect::<String>()
                    );
                    format!("%c{i}")
                }
                (ParamKind::Int { .. }, Some(bytes)) => {
                    // The value sign-extended from its width: what LLVM
                    // reads for an integer of any width.
                    let mut wide = [0u8; 8];
                    wide[..bytes.len()].copy_from_slice(bytes);
                    if bytes.last().is_some_and(|b| b & 0x80 != 0) {
                        wide[bytes.len()..].fill(0xff);
                    }
                    format!("{}", i64::from_le_bytes(wide))
                }
                (ParamKind::Float { bits: 32 }, Some(bytes)) => {
                    // NVVM IR writes a float as the double of the same value.
                    let f = f32::from_le_bytes(bytes[..4].try_into().unwrap_or([0; 4]));
                    format!("0x{:016X}", (f as f64).to_bits())
                }
                (ParamKind::Float { .. }, Some(bytes)) => {
                    format!(
                        "0x{:016X}",
                        u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8]))
                    )
                }
                (ParamKind::Pointer, Some(_)) => format!("%a{i}"),
            };
            actuals.push(format!("{} {actual}", types[i]));
        }
        let _ = writeln!(ir, "  call void @\"{kernel}\"({})", actuals.join(", "));
        ir.push_str("  ret void\n}\n");
        let signature = format!("void ({})*", plain.join(", "));
        let _ = writeln!(
            ir,
            "@llvm.used = appending global [1 x i8*] [i8* bitcast ({signature} @\"{wrapper}\" to i8*)], section \"llvm.metadata\""
        );
        let mut annotations = vec![format!(
            "!{{{signature} @\"{wrapper}\", !\"kernel\", i32 1}}"
        )];
        for (directive, numbers) in &self.params.perf {
            let names: &[&str] = match directive.as_str() {
                "maxntid" => &["maxntidx", "maxntidy", "maxntidz"],
                "reqntid" => &["reqntidx", "reqntidy", "reqntidz"],
                "minnctapersm" => &["minctasm"],
                "maxnreg" => &["maxnreg"],
                _ => &[],
            };
            for (name, n) in names.iter().zip(numbers) {
                annotations.push(format!(
                    "!{{{signature} @\"{wrapper}\", !\"{name}\", i32 {n}}}"
                ));
            }
        }
        let refs: Vec<String> = (0..annotations.len())
            .map(|i| format!("!{}", i + 1))
            .collect();
        let _ = writeln!(ir, "!nvvm.annotations = !{{{}}}", refs.join(", "));
        for (i, a) in annotations.iter().enumerate() {
            let _ = writeln!(ir, "!{} = {a}", i + 1);
        }
        let (a, b, c, d) = ir_version;
        let _ = writeln!(
            ir,
            "!nvvmir.version = !{{!0}}\n!0 = !{{i32 {a}, i32 {b}, i32 {c}, i32 {d}}}"
        );
        ir
    }

    /// The PTX of the linked wrapper with the wrapper named as the kernel
    /// (its parameters `KERNEL_param_N`): checked to define the wrapper and
    /// not the kernel itself (which NVVM must have inlined into it).
    pub(crate) fn renamed(&self, ptx: &str) -> Result<String, ArgumentError> {
        let wrapper = self.wrapper_name();
        let kernel = self.kernel();
        let m = ptx::parse("linked.ptx", ptx.to_string())?;
        let defines = |name: &str| {
            m.items.iter().any(|i| {
                matches!(&i.kind, ItemKind::Function(f) if f.body.is_some() && m.text(f.name) == name)
            })
        };
        let link_error = |why: &str| ArgumentError::Link {
            kernel: kernel.into(),
            why: why.into(),
        };
        if !defines(&wrapper) {
            return Err(link_error("the linked PTX lacks the wrapper kernel"));
        }
        if defines(kernel) {
            return Err(link_error(
                "NVVM did not inline the kernel into its wrapper (is it recursive, or noinline?)",
            ));
        }
        // The wrapper's name stands alone or begins its parameters' names
        // (`WRAPPER_param_0`); it is no other name's part.
        let mut out = String::with_capacity(ptx.len());
        let mut rest = ptx;
        while let Some(at) = rest.find(&wrapper) {
            out.push_str(&rest[..at]);
            out.push_str(kernel);
            rest = &rest[at + wrapper.len()..];
        }
        out.push_str(rest);
        Ok(out)
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

#[cfg(test)]
#[path = "arguments_tests.rs"]
mod tests;
