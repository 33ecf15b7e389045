//! Kernel signatures: each kernel's parameters with its `kernel_handler`
//! marked, as DPC++'s integration header marks
//! `kind_specialization_constants_buffer`. Written into the `.prop` file as
//! the set [`KERNEL_SIGNATURES_SET`]: per kernel a byte array of
//! `<u32 size, u32 alignment, u32 marker>` triples. The marker says which
//! parameter is the handler and, for an image whose kernels read constants,
//! where the buffer is — 1 a pointer to global memory, 2 the contents in the
//! parameter space, 3 a handler the kernel does not read — so the image's
//! [`Delivery`] is recorded in every kernel that reads; a reader takes it
//! once, for the image, and refuses kernels that disagree.

use super::Delivery;
use crate::props::{PropertySets, PropertyValue, SchemaError, decode_u32s, encode_u32s};
use crate::ptx::{ItemKind, Module};

/// The property set of kernel signatures.
pub(crate) const KERNEL_SIGNATURES_SET: &str = "ptxspec/kernel signatures";

/// The markers of the file format (see the module's documentation).
const USER: u32 = 0;
const POINTER: u32 = 1;
const CONTENTS: u32 = 2;
const UNUSED_HANDLER: u32 = 3;

/// One kernel parameter as the launch passes it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelParam {
    /// Size in bytes.
    pub size: u32,
    /// Alignment in bytes.
    pub align: u32,
    /// The PTX type (`u64`, `b8` for byte arrays); empty when read back
    /// from a property file.
    pub ptx_type: String,
}

/// A kernel's `kernel_handler` parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandlerParam {
    /// Its index among the kernel's parameters.
    pub index: usize,
    /// Whether the kernel reads constants through it; one it does not read
    /// receives a null pointer (and no values).
    pub reads_constants: bool,
}

/// A kernel's name and parameters, with its `kernel_handler` marked.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelSignature {
    /// The kernel's (mangled) name.
    pub name: String,
    /// Every parameter, the handler included.
    pub params: Vec<KernelParam>,
    /// The parameter the runtime fills in itself, if the kernel takes a
    /// `kernel_handler`.
    pub handler: Option<HandlerParam>,
}

impl KernelSignature {
    /// The signature of kernel `item`: `handler` is the parameter that
    /// carries the constants, read or not; `contents` the size and
    /// alignment of the values where they travel in the parameter space
    /// (that parameter then is a byte array of that size).
    pub(crate) fn of(
        m: &Module,
        item: usize,
        handler: Option<HandlerParam>,
        contents: Option<(u32, u32)>,
    ) -> Self {
        let (name, params) = match &m.items[item].kind {
            ItemKind::Function(f) => (m.text(f.name).to_string(), f.params.as_slice()),
            _ => (String::new(), &[][..]),
        };
        let in_param_space = |i: usize| handler.is_some_and(|h| h.index == i && h.reads_constants);
        KernelSignature {
            name,
            params: params
                .iter()
                .enumerate()
                .map(|(i, p)| match contents {
                    Some((size, align)) if in_param_space(i) => KernelParam {
                        size,
                        align,
                        ptx_type: "b8".into(),
                    },
                    _ => KernelParam {
                        size: p.size(),
                        align: p.alignment(),
                        ptx_type: p.ty.clone(),
                    },
                })
                .collect(),
            handler,
        }
    }

    /// Whether the kernel reads constants through its handler.
    pub fn reads_constants(&self) -> bool {
        self.handler.is_some_and(|h| h.reads_constants)
    }

    /// Index of the handler parameter, if the kernel takes one.
    pub fn buffer_param(&self) -> Option<usize> {
        self.handler.map(|h| h.index)
    }

    /// The caller's parameters: every one but the handler.
    pub fn user_params(&self) -> impl Iterator<Item = (usize, &KernelParam)> + Clone {
        let handler = self.buffer_param();
        self.params
            .iter()
            .enumerate()
            .filter(move |&(i, _)| Some(i) != handler)
    }

    /// Reads the signatures of a property file, and where the buffer of the
    /// kernels that read constants is (`InCode` when none reads one).
    pub fn read_all(sets: &PropertySets) -> Result<(Vec<KernelSignature>, Delivery), SchemaError> {
        let Some(set) = sets.get(KERNEL_SIGNATURES_SET) else {
            return Ok((Vec::new(), Delivery::InCode));
        };
        let mut placement: Option<(Delivery, &str)> = None;
        let mut kernels = Vec::new();
        for (name, v) in set.iter() {
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
            let mut handler = None;
            let mut params = Vec::with_capacity(words.len() / 3);
            for (i, t) in words.chunks_exact(3).enumerate() {
                let reads = match t[2] {
                    USER => None,
                    POINTER => Some(Some(Delivery::GlobalBuffer)),
                    CONTENTS => Some(Some(Delivery::ParamSpace)),
                    UNUSED_HANDLER => Some(None),
                    _ => return Err(bad(": unknown parameter kind")),
                };
                if let Some(delivery) = reads {
                    if handler.is_some() {
                        return Err(bad(": two specialization-constant parameters"));
                    }
                    handler = Some(HandlerParam {
                        index: i,
                        reads_constants: delivery.is_some(),
                    });
                    if let Some(d) = delivery {
                        match placement {
                            Some((p, other)) if p != d => {
                                return Err(SchemaError::property(
                                    KERNEL_SIGNATURES_SET,
                                    name,
                                    format!(
                                        "its buffer is {} where kernel {other}'s is {}: an image has one placement",
                                        d.words(),
                                        p.words()
                                    ),
                                ));
                            }
                            Some(_) => {}
                            None => placement = Some((d, name)),
                        }
                    }
                }
                params.push(KernelParam {
                    size: t[0],
                    align: t[1],
                    ptx_type: String::new(),
                });
            }
            kernels.push(KernelSignature {
                name: name.to_string(),
                params,
                handler,
            });
        }
        Ok((kernels, placement.map_or(Delivery::InCode, |(d, _)| d)))
    }
}

/// Writes `signatures` into `sets`, each reading kernel's handler marked
/// with `placement`, the image's one placement of its buffer (a kernel that
/// reads constants from code with the values in it is marked as a pointer,
/// which the runtime passes null).
pub(crate) fn write(signatures: &[KernelSignature], placement: Delivery, sets: &mut PropertySets) {
    if signatures.is_empty() {
        return;
    }
    let read_marker = match placement {
        Delivery::ParamSpace => CONTENTS,
        Delivery::GlobalBuffer | Delivery::InCode => POINTER,
    };
    let set = sets.set_mut(KERNEL_SIGNATURES_SET);
    for s in signatures {
        let words: Vec<u32> = s
            .params
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                let marker = match s.handler {
                    Some(h) if h.index == i && h.reads_constants => read_marker,
                    Some(h) if h.index == i => UNUSED_HANDLER,
                    _ => USER,
                };
                [p.size, p.align, marker]
            })
            .collect();
        set.insert(s.name.clone(), PropertyValue::bytes(encode_u32s(&words)));
    }
}
