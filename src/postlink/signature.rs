//! Kernel signatures: each kernel's parameters with the one that carries the
//! specialization-constant buffer marked, as DPC++'s integration header marks
//! `kind_specialization_constants_buffer`. Written into the `.prop` file as
//! the set [`KERNEL_SIGNATURES_SET`]: per kernel a byte array of
//! `<u32 size, u32 alignment, u32 kind>` triples, kind 1 for the buffer.

use crate::props::{PropertySets, PropertyValue, decode_u32s, encode_u32s};
use crate::ptx::{ItemKind, Module};

pub const KERNEL_SIGNATURES_SET: &str = "ptxspec/kernel signatures";

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
    /// This parameter is the specialization-constant buffer, which the
    /// runtime fills in itself.
    pub is_spec_const_buffer: bool,
}

/// A kernel's name and parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSignature {
    pub name: String,
    pub params: Vec<KernelParam>,
}

impl KernelSignature {
    pub(crate) fn of(m: &Module, item: usize, buffer: Option<usize>) -> Self {
        let (name, params) = match &m.items[item].kind {
            ItemKind::Function(f) => (m.text(f.name).to_string(), f.params.as_slice()),
            _ => (String::new(), &[][..]),
        };
        KernelSignature {
            name,
            params: params
                .iter()
                .enumerate()
                .map(|(i, p)| KernelParam {
                    size: p.size(),
                    align: p.alignment(),
                    ptx_type: p.ty.clone(),
                    is_spec_const_buffer: buffer == Some(i),
                })
                .collect(),
        }
    }

    /// Index of the buffer parameter, if the kernel reads any constant.
    pub fn buffer_param(&self) -> Option<usize> {
        self.params.iter().position(|p| p.is_spec_const_buffer)
    }

    /// Reads the signatures of a property file.
    pub fn read_all(sets: &PropertySets) -> Result<Vec<KernelSignature>, String> {
        let Some(set) = sets.get(KERNEL_SIGNATURES_SET) else {
            return Ok(Vec::new());
        };
        set.iter()
            .map(|(name, v)| {
                let words = v
                    .as_bytes()
                    .and_then(decode_u32s)
                    .filter(|w| w.len() % 3 == 0)
                    .ok_or_else(|| {
                        format!("[{KERNEL_SIGNATURES_SET}] {name}: not <size, align, kind> triples")
                    })?;
                Ok(KernelSignature {
                    name: name.to_string(),
                    params: words
                        .chunks_exact(3)
                        .map(|t| KernelParam {
                            size: t[0],
                            align: t[1],
                            ptx_type: String::new(),
                            is_spec_const_buffer: t[2] == 1,
                        })
                        .collect(),
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
            .flat_map(|p| [p.size, p.align, p.is_spec_const_buffer as u32])
            .collect();
        set.insert(s.name.clone(), PropertyValue::bytes(encode_u32s(&words)));
    }
}
