//! A kernel's parameters, read from its PTX: what each holds (a pointer is
//! told from an integer by its use), its performance directives, and values
//! parsed for its parameters.

use super::{ArgumentError, ParamKind};
use crate::ptx::{self, ItemKind, Module, StmtKind};

/// A kernel's parameters and performance directives, from its PTX.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelParams {
    pub(super) kernel: String,
    pub(super) params: Vec<ParamKind>,
    /// `.maxntid`, `.reqntid`, `.minnctapersm`, `.maxnreg` with numbers.
    pub(super) perf: Vec<(String, Vec<u64>)>,
}

/// The kernel named `kernel` in `m`, defined with a body.
pub(super) fn find_kernel<'m>(
    m: &'m Module,
    kernel: &str,
) -> Result<&'m ptx::Function, ArgumentError> {
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
pub(super) fn param_name<'m>(m: &'m Module, f: &ptx::Function, index: usize) -> &'m str {
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
        Ok(KernelParams::of_function(&m, f))
    }

    /// The parameters of every kernel `ptx` defines, its module parsed
    /// once (a runtime that watches several kernels of one image).
    pub fn all_from_ptx(ptx: &str) -> Result<Vec<KernelParams>, ArgumentError> {
        let m = ptx::parse("kernel.ptx", ptx.to_string())?;
        Ok(m.items
            .iter()
            .filter_map(|i| match &i.kind {
                ItemKind::Function(f) if f.is_kernel && f.body.is_some() => {
                    Some(KernelParams::of_function(&m, f))
                }
                _ => None,
            })
            .collect())
    }

    /// The parameters of kernel `f` of `m`, a definition.
    fn of_function(m: &Module, f: &ptx::Function) -> KernelParams {
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
                // Both callers pass definitions; were one without a body
                // passed, its 64-bit parameters would be taken for
                // pointers, which are never fixed.
                let is_address = |body: &ptx::Body| {
                    loaded_registers(m, body, param_name(m, f, i))
                        .iter()
                        .any(|r| used_as_address(m, body, r))
                };
                match ty.as_bytes().first() {
                    Some(b'f') => ParamKind::Float { bits },
                    _ if bits == 64 && f.body.as_ref().is_none_or(is_address) => ParamKind::Pointer,
                    first => ParamKind::Int {
                        bits,
                        signed: first == Some(&b's'),
                    },
                }
            })
            .collect();
        KernelParams {
            kernel: m.text(f.name).to_string(),
            params,
            perf: f.perf.clone(),
        }
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
    pub(super) fn param(&self, index: usize) -> Result<ParamKind, ArgumentError> {
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

    pub(super) fn not_fixable(&self, index: usize, why: &str) -> ArgumentError {
        ArgumentError::NotFixable {
            kernel: self.kernel.clone(),
            index,
            why: why.into(),
        }
    }
}
