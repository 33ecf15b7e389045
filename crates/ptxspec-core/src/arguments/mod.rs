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
//!   compiled: the cubin holds the kernel under its own name. The wrapper's
//!   pointers carry what the kernel's did where its PTX shows it (a pointer
//!   read only through the read-only cache is `noalias readonly`:
//!   `image::read_only`), or the inlined kernel would lose those loads.
//!
//! What a parameter holds is read from the kernel's PTX declaration; a
//! 64-bit parameter that may hold an address — used as one, or gone where
//! the analysis cannot follow it (`addresses`) — is a pointer, which cannot
//! be fixed (its value is an address of one process) and which a launch
//! passes device memory only.
//!
//! The modules (`image::addresses` follows parameters' values to where
//! they are used): `params` reads a kernel's parameters from its PTX and parses
//! values for them; `by_ptx` and `by_lto` are the two ways.

mod by_lto;
mod by_ptx;
pub(crate) mod divide;
mod params;

pub use params::KernelParams;

use crate::digest::KeyEncoder;
use crate::ptx;

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

    /// Whether the LTO way can pass it to the kernel it wraps so that NVVM
    /// inlines the kernel: every scalar and pointer, and of aggregates only
    /// an empty tag (one byte, aligned to one: `std::true_type`,
    /// `bool_constant<B>`, a struct of one `char`), whose NVVM IR type is
    /// `{ i8 }` whatever its name. NVVM IR takes any other aggregate by
    /// value as the kernel's own struct type, which PTX does not record
    /// (only its size and alignment): a wrapper that names another type
    /// calls the kernel through a cast, which NVVM does not inline.
    pub fn passes_through_lto(&self) -> bool {
        match *self {
            ParamKind::Aggregate { size, align } => size == 1 && align == 1,
            _ => true,
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
            // By value, as NVVM IR passes a kernel's aggregates (a tag is
            // the only one the wrapper can name: `passes_through_lto`).
            ParamKind::Aggregate { size: 1, align: 1 } => TAG.into(),
            ParamKind::Aggregate { size, .. } => format!("[{size} x i8]"),
        }
    }
}

/// The NVVM IR type the LTO way's wrapper gives an empty tag: isomorphic
/// to the kernel's own (`%struct.X = type { i8 }`), so that nvJitLink's
/// linker takes them for one type and the call is direct.
pub(crate) const TAG: &str = "%ptxspec.tag";
/// The NVVM IR type the LTO way's wrapper gives a `kernel_handler`:
/// isomorphic to ptxspec's own class (one `const void *` field; the LTO
/// flavour of the header reads no constant through it), so that the call
/// is direct.
pub(crate) const HANDLER: &str = "%ptxspec.handler";

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

/// A kernel with some by-value parameters fixed to values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedArguments {
    params: KernelParams,
    /// (index, the value's bytes), by ascending index.
    fixed: Vec<(usize, Vec<u8>)>,
    /// The kernel's `kernel_handler` parameter, where it takes one (the
    /// image's signature says which: PTX shows an aggregate only).
    handler: Option<usize>,
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
            if params.may_hold_address(*index) {
                return Err(params.not_fixable(*index, params.address_reason(*index)));
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
            handler: None,
        })
    }

    /// The same, the kernel's parameter `handler` (where it takes one)
    /// being its `kernel_handler`, as the image's signature says: through
    /// LTO it passes as ptxspec's own class (a pointer's one field), so
    /// that a kernel with specialization constants is fixed the LTO way too.
    /// The handler is never fixed (it is no launch argument).
    pub fn with_handler(mut self, handler: Option<usize>) -> Result<FixedArguments, ArgumentError> {
        if let Some(h) = handler
            && self.fixed.iter().any(|(i, _)| *i == h)
        {
            return Err(self.params.not_fixable(
                h,
                "it is the kernel's kernel_handler, which carries the specialization constants",
            ));
        }
        self.handler = handler;
        Ok(self)
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
        for i in 0..self.params.params.len() {
            key.str(&self.formal_type(i));
        }
        key.u64(self.fixed.len() as u64);
        for (i, bytes) in &self.fixed {
            key.u64(*i as u64).bytes(bytes);
        }
    }
}

#[cfg(test)]
mod tests;
