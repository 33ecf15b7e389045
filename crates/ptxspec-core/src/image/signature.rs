//! Kernel signatures: each kernel's parameters with the one that carries the
//! specialization-constant buffer marked, as DPC++'s integration header marks
//! `kind_specialization_constants_buffer`. Written into the `.prop` file as
//! the set [`KERNEL_SIGNATURES_SET`]: per kernel a byte array of
//! `<u32 size, u32 alignment, u32 kind>` triples, kind 1 for a pointer to
//! the buffer in global memory, kind 2 for the buffer's contents passed in
//! the parameter space (see [`ParamKind`]).

use crate::props::{PropertySets, PropertyValue, SchemaError, decode_u32s, encode_u32s};
use crate::ptx::{ItemKind, Module};

/// Where an image's kernels find the specialization-constant buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// In global memory: the `kernel_handler` parameter holds its address.
    Global,
    /// In the parameter space: the `kernel_handler` parameter becomes the
    /// buffer itself, `size` bytes aligned to `align`.
    Param { size: u32, align: u32 },
}

pub(crate) const KERNEL_SIGNATURES_SET: &str = "ptxspec/kernel signatures";

/// What a kernel parameter carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// One of the caller's arguments.
    User = 0,
    /// The address of the specialization-constant buffer in global memory
    /// (the `kernel_handler`), which the runtime passes itself.
    BufferPointer = 1,
    /// The buffer's contents themselves, in the parameter space: the
    /// runtime passes the values with the launch.
    BufferContents = 2,
    /// A `kernel_handler` through which the kernel reads no constant: the
    /// runtime passes a null pointer, and no values.
    UnusedHandler = 3,
}

impl ParamKind {
    pub(crate) fn from_u32(k: u32) -> Option<ParamKind> {
        match k {
            0 => Some(ParamKind::User),
            1 => Some(ParamKind::BufferPointer),
            2 => Some(ParamKind::BufferContents),
            3 => Some(ParamKind::UnusedHandler),
            _ => None,
        }
    }
}

/// One kernel parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelParam {
    /// Size in bytes.
    pub size: u32,
    /// Alignment in bytes.
    pub align: u32,
    /// The PTX type (`u64`, `b8` for byte arrays); empty when read back
    /// from a property file.
    pub ptx_type: String,
    pub kind: ParamKind,
}

impl KernelParam {
    /// This parameter carries the specialization constants (a pointer or
    /// the contents), which the runtime fills in itself.
    pub(crate) fn is_spec_const_buffer(&self) -> bool {
        self.kind != ParamKind::User
    }
}

/// A kernel's name and parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSignature {
    pub name: String,
    pub params: Vec<KernelParam>,
}

impl KernelSignature {
    /// The signature of kernel `item`; `buffer` marks the parameter that
    /// carries the constants, and how (with the contents' size and
    /// alignment when they are passed in the parameter space).
    pub(crate) fn of(m: &Module, item: usize, buffer: Option<(usize, Placement)>) -> Self {
        let (name, params) = match &m.items[item].kind {
            ItemKind::Function(f) => (m.text(f.name).to_string(), f.params.as_slice()),
            _ => (String::new(), &[][..]),
        };
        KernelSignature {
            name,
            params: params
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let declared = |kind| KernelParam {
                        size: p.size(),
                        align: p.alignment(),
                        ptx_type: p.ty.clone(),
                        kind,
                    };
                    match buffer {
                        Some((b, Placement::Param { size, align })) if b == i => KernelParam {
                            size,
                            align,
                            ptx_type: "b8".into(),
                            kind: ParamKind::BufferContents,
                        },
                        Some((b, Placement::Global)) if b == i => {
                            declared(ParamKind::BufferPointer)
                        }
                        _ => declared(ParamKind::User),
                    }
                })
                .collect(),
        }
    }

    /// Marks parameter `p` as a kernel_handler the kernel does not read.
    pub(crate) fn with_unused_handler(mut self, p: usize) -> Self {
        if let Some(param) = self.params.get_mut(p) {
            param.kind = ParamKind::UnusedHandler;
        }
        self
    }

    /// Whether the kernel reads constants through its buffer parameter
    /// (not a kernel_handler it takes and does not read).
    pub fn reads_constants(&self) -> bool {
        self.params
            .iter()
            .any(|p| matches!(p.kind, ParamKind::BufferPointer | ParamKind::BufferContents))
    }

    /// Index of the buffer parameter (the kernel_handler), if it has one.
    pub fn buffer_param(&self) -> Option<usize> {
        self.params
            .iter()
            .position(KernelParam::is_spec_const_buffer)
    }

    /// Reads the signatures of a property file.
    pub fn read_all(sets: &PropertySets) -> Result<Vec<KernelSignature>, SchemaError> {
        let Some(set) = sets.get(KERNEL_SIGNATURES_SET) else {
            return Ok(Vec::new());
        };
        set.iter()
            .map(|(name, v)| {
                let bad = |what: &str| {
                    SchemaError::property(
                        KERNEL_SIGNATURES_SET,
                        name,
                        format!("not <size, align, kind> triples{what}"),
                    )
                };
                let words = v
                    .as_bytes()
                    .and_then(decode_u32s)
                    .filter(|w| w.len() % 3 == 0)
                    .ok_or_else(|| bad(""))?;
                let params = words
                    .chunks_exact(3)
                    .map(|t| {
                        Some(KernelParam {
                            size: t[0],
                            align: t[1],
                            ptx_type: String::new(),
                            kind: ParamKind::from_u32(t[2])?,
                        })
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| bad(": unknown parameter kind"))?;
                if params.iter().filter(|p| p.is_spec_const_buffer()).count() > 1 {
                    return Err(bad(": two specialization-constant parameters"));
                }
                Ok(KernelSignature {
                    name: name.to_string(),
                    params,
                })
            })
            .collect()
    }
}

pub(crate) fn write(signatures: &[KernelSignature], sets: &mut PropertySets) {
    if signatures.is_empty() {
        return;
    }
    let set = sets.set_mut(KERNEL_SIGNATURES_SET);
    for s in signatures {
        let words: Vec<u32> = s
            .params
            .iter()
            .flat_map(|p| [p.size, p.align, p.kind as u32])
            .collect();
        set.insert(s.name.clone(), PropertyValue::bytes(encode_u32s(&words)));
    }
}
