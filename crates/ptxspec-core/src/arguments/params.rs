//! A kernel's parameters, read from its PTX: what each holds (a pointer is
//! told from an integer by its use), its performance directives, and values
//! parsed for its parameters.

use super::{ArgumentError, ParamKind};
use crate::ptx::{self, ItemKind, Module};

/// A kernel's parameters and performance directives, from its PTX.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelParams {
    pub(super) kernel: String,
    pub(super) params: Vec<ParamKind>,
    /// `.maxntid`, `.reqntid`, `.minnctapersm`, `.maxnreg` with numbers.
    pub(super) perf: Vec<(String, Vec<u64>)>,
    /// Per parameter: whether it may hold an address (`image::addresses`).
    pub(super) holds_address: Vec<bool>,
    /// Per parameter: whether the kernel reads the memory it points to
    /// only through the non-coherent cache (`image::read_only`): the
    /// no-alias, read-only facts the LTO way's wrapper must carry.
    pub(super) read_only: Vec<bool>,
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

    /// The parameters of kernel `f` of `m`. A 64-bit integer parameter
    /// that may hold an address (`image::addresses`: used as one, or gone where
    /// the analysis cannot follow it — a call, a store, a kernel without a
    /// body) is a pointer.
    fn of_function(m: &Module, f: &ptx::Function) -> KernelParams {
        let holds_address = crate::image::addresses::may_hold_address(m, f);
        let params = f
            .params
            .iter()
            .zip(&holds_address)
            .map(|(p, &address)| {
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
                    _ if bits == 64 && address => ParamKind::Pointer,
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
            holds_address,
            read_only: crate::image::read_only::read_only_through_nc(m, f),
        }
    }

    /// Whether parameter `index` may hold an address: a pointer, or an
    /// aggregate (a struct passed by value) with a pointer in it, as far as
    /// the kernel's code shows — where it cannot tell, yes. A launch passes
    /// such a parameter device memory, never a number a program made up.
    pub fn may_hold_address(&self, index: usize) -> bool {
        self.holds_address.get(index).copied().unwrap_or(true)
    }

    /// Why parameter `index`, which may hold an address, is never fixed:
    /// the words a refusal says (the same question a safe launch asks).
    pub(super) fn address_reason(&self, index: usize) -> &'static str {
        match self.params.get(index) {
            Some(ParamKind::Pointer) => {
                "it holds a pointer (the kernel uses it as an address), an address of one process"
            }
            _ => {
                "the kernel may use its value as an address (the analysis a safe launch asks: \
                 image::addresses), and an address of one process must not be baked into code"
            }
        }
    }

    /// Whether the kernel reads what pointer parameter `index` points to
    /// only through the non-coherent cache — a `const T *__restrict__`
    /// parameter, or one read by `__ldg` — as far as its code shows (where
    /// it cannot tell, no).
    pub fn read_only(&self, index: usize) -> bool {
        matches!(self.params.get(index), Some(ParamKind::Pointer))
            && self.read_only.get(index).copied().unwrap_or(false)
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
        if self.may_hold_address(index) {
            return Err(self.not_fixable(index, self.address_reason(index)));
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
            ParamKind::Float { bits } => float_bytes(text, bits).map_err(bad),
            ParamKind::Aggregate { .. } => Err(bad(format!(
                "is not its bytes: write bytes: and its {size} bytes in memory order"
            ))),
            ParamKind::Pointer => Err(bad("holds a pointer".into())),
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

/// The bytes of `text` as a float of `bits` bits, refused where the number
/// written does not survive: beyond the type's range (it would be an
/// infinity) or so small that it becomes zero. Infinities and NaN are taken
/// only where written as such (`inf`, `-infinity`, `nan`).
fn float_bytes(text: &str, bits: u32) -> Result<Vec<u8>, String> {
    let t = text.trim();
    let body = t.trim_start_matches(['+', '-']).to_ascii_lowercase();
    let named = matches!(body.as_str(), "inf" | "infinity" | "nan");
    let wide: f64 = t.parse().map_err(|_| "is not a number".to_string())?;
    let nonzero_digits = body
        .split(['e', 'E'])
        .next()
        .is_some_and(|m| m.chars().any(|c| ('1'..='9').contains(&c)));
    let (value_is_finite, value_is_zero, bytes) = match bits {
        32 => {
            let v: f32 = t.parse().map_err(|_| "is not a number".to_string())?;
            (v.is_finite(), v == 0.0, v.to_le_bytes().to_vec())
        }
        _ => (wide.is_finite(), wide == 0.0, wide.to_le_bytes().to_vec()),
    };
    let max = if bits == 32 {
        "3.4028235e38"
    } else {
        "1.7976931348623157e308"
    };
    if !named && !value_is_finite {
        return Err(format!(
            "is beyond the range of a {bits}-bit float (±{max}): it would be an infinity \
             (write inf or -inf for one)"
        ));
    }
    if !named && value_is_zero && nonzero_digits {
        return Err(format!(
            "is too small for a {bits}-bit float: it would be 0 (write 0 for zero)"
        ));
    }
    Ok(bytes)
}
