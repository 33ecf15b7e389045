//! Writing a layout's constants as a SPIR-V module (DPC++'s SYCL 2020 spec-constant design's translator
//! form): `OpSpecConstant*` with `SpecId` per leaf, `OpSpecConstantComposite`
//! per composite level, `OpName` with the symbolic ID.

use std::collections::HashMap;

use rspirv::binary::Assemble;
use rspirv::dr::{Builder, Operand};
use rspirv::spirv::{
    AddressingModel, Capability, Decoration, ExecutionMode, ExecutionModel, FunctionControl,
    MemoryModel, Word,
};

use super::SpirvError;
use crate::layout::{Layout, ScalarKind, SpecType};

struct Writer {
    b: Builder,
    types: HashMap<SpecType, Word>,
    u32_type: Option<Word>,
}

impl Writer {
    fn scalar_type(&mut self, k: ScalarKind) -> Word {
        let b = &mut self.b;
        match k {
            ScalarKind::Bool => b.type_bool(),
            ScalarKind::I8 => b.type_int(8, 1),
            // SPIR-V ints have a signedness; storage of unknown signedness
            // is written unsigned (only images read from PTX have such).
            ScalarKind::U8 | ScalarKind::Bits8 => b.type_int(8, 0),
            ScalarKind::I16 => b.type_int(16, 1),
            ScalarKind::U16 | ScalarKind::Bits16 => b.type_int(16, 0),
            ScalarKind::I32 => b.type_int(32, 1),
            ScalarKind::U32 | ScalarKind::Bits32 => b.type_int(32, 0),
            ScalarKind::I64 => b.type_int(64, 1),
            ScalarKind::U64 | ScalarKind::Bits64 => b.type_int(64, 0),
            ScalarKind::F16 => b.type_float(16, None),
            // Refused by `write` before any type is made (SPIR-V 1.0 has no
            // bfloat16); its storage, should one ever get here.
            ScalarKind::BF16 => b.type_int(16, 0),
            ScalarKind::F32 => b.type_float(32, None),
            ScalarKind::F64 => b.type_float(64, None),
        }
    }

    /// The SPIR-V type of `ty`, made once per distinct type (so that a
    /// struct's member offsets are decorated once).
    fn ty(&mut self, ty: &SpecType) -> Word {
        if let Some(&t) = self.types.get(ty) {
            return t;
        }
        let t = match ty {
            SpecType::Scalar(k) => self.scalar_type(*k),
            // SPIR-V vectors have 2 or more components: a 1-element vec is
            // its scalar. A shader module (what this writes) has none longer
            // than 4 (8 and 16 need the Kernel capability): SYCL's vec<T, 8>
            // and vec<T, 16> are written as arrays of their scalars — the
            // same SpecIds, descriptors and values.
            SpecType::SyclVec { elem, len: 1 } => self.scalar_type(*elem),
            SpecType::SyclVec { elem, len } if *len > 4 => {
                self.ty(&SpecType::array(SpecType::Scalar(*elem), *len))
            }
            SpecType::Vector { elem, len } | SpecType::SyclVec { elem, len } => {
                let e = self.scalar_type(*elem);
                self.b.type_vector(e, *len)
            }
            SpecType::Array { elem, len } => {
                let e = self.ty(elem);
                let u32_type = *self.u32_type.get_or_insert_with(|| self.b.type_int(32, 0));
                let n = self.b.constant_bit32(u32_type, *len);
                self.b.type_array(e, n)
            }
            SpecType::Struct(s) => {
                let members: Vec<_> = s
                    .members()
                    .iter()
                    .filter(|m| !matches!(m.ty, SpecType::Padding(_)))
                    .collect();
                let ids: Vec<Word> = members.iter().map(|m| self.ty(&m.ty)).collect();
                let t = self.b.type_struct(ids);
                for (i, m) in members.iter().enumerate() {
                    self.b.member_decorate(
                        t,
                        i as u32,
                        Decoration::Offset,
                        [Operand::LiteralBit32(m.offset)],
                    );
                }
                t
            }
            SpecType::Padding(_) => self.b.type_int(8, 0),
        };
        self.types.insert(ty.clone(), t);
        t
    }

    /// Emits the value of `ty` whose bytes start at `bytes[base..]`, its
    /// leaves numbered from `ids`.
    fn value(
        &mut self,
        ty: &SpecType,
        bytes: &[u8],
        base: u32,
        ids: &mut impl Iterator<Item = u32>,
    ) -> Result<Word, SpirvError> {
        let t = self.ty(ty);
        let children: Vec<Word> = match ty {
            SpecType::Scalar(k) => {
                let at = base as usize;
                let raw = bytes.get(at..at + k.size() as usize).unwrap_or(&[]);
                let mut word = [0u8; 8];
                word[..raw.len()].copy_from_slice(raw);
                let mut bits = u64::from_le_bytes(word);
                // Narrow signed integers are sign-extended into their word.
                if matches!(k, ScalarKind::I8 | ScalarKind::I16)
                    && raw.last().is_some_and(|b| b & 0x80 != 0)
                {
                    bits |= u64::MAX << (k.size() * 8);
                    bits &= u32::MAX as u64;
                }
                let id = match k {
                    ScalarKind::Bool if bits != 0 => self.b.spec_constant_true(t),
                    ScalarKind::Bool => self.b.spec_constant_false(t),
                    _ if k.size() == 8 => self.b.spec_constant_bit64(t, bits),
                    _ => self.b.spec_constant_bit32(t, bits as u32),
                };
                let spec_id = ids.next().ok_or_else(|| SpirvError::Module {
                    id,
                    what: "more leaves than numeric IDs".into(),
                })?;
                self.b
                    .decorate(id, Decoration::SpecId, [Operand::LiteralBit32(spec_id)]);
                return Ok(id);
            }
            SpecType::SyclVec { elem, len: 1 } => {
                return self.value(&SpecType::Scalar(*elem), bytes, base, ids);
            }
            SpecType::Vector { elem, len } | SpecType::SyclVec { elem, len } => (0..*len)
                .map(|i| self.value(&SpecType::Scalar(*elem), bytes, base + i * elem.size(), ids))
                .collect::<Result<_, _>>()?,
            SpecType::Array { elem, len } => (0..*len)
                .map(|i| self.value(elem, bytes, base + i * elem.size(), ids))
                .collect::<Result<_, _>>()?,
            SpecType::Struct(s) => s
                .members()
                .iter()
                .filter(|m| !matches!(m.ty, SpecType::Padding(_)))
                .map(|m| self.value(&m.ty, bytes, base + m.offset, ids))
                .collect::<Result<_, _>>()?,
            SpecType::Padding(_) => Vec::new(),
        };
        Ok(self.b.spec_constant_composite(t, children))
    }
}

/// A SPIR-V module (a compute shader `main` doing nothing) declaring the
/// constants of a native layout with their defaults and numeric IDs.
pub fn write(layout: &Layout) -> Result<Vec<u8>, SpirvError> {
    let mut w = Writer {
        b: Builder::new(),
        types: HashMap::new(),
        u32_type: None,
    };
    w.b.set_version(1, 0);
    let mut caps = vec![Capability::Shader];
    for p in layout.constants() {
        let ty = p.constant.ty().ok_or_else(|| {
            SpirvError::Unknown(format!(
                "{} (no type description)",
                p.constant.symbolic_id()
            ))
        })?;
        let mut bf16 = false;
        ty.for_each_leaf(0, &mut |_, k| {
            bf16 |= k == ScalarKind::BF16;
            let cap = match k {
                ScalarKind::I8 | ScalarKind::U8 | ScalarKind::Bits8 => Some(Capability::Int8),
                ScalarKind::I16 | ScalarKind::U16 | ScalarKind::Bits16 => Some(Capability::Int16),
                ScalarKind::I64 | ScalarKind::U64 | ScalarKind::Bits64 => Some(Capability::Int64),
                ScalarKind::F16 => Some(Capability::Float16),
                ScalarKind::F64 => Some(Capability::Float64),
                _ => None,
            };
            if let Some(c) = cap.filter(|c| !caps.contains(c)) {
                caps.push(c);
            }
        });
        if bf16 {
            return Err(SpirvError::Value {
                name: p.constant.symbolic_id().to_string(),
                what: "holds a bfloat16, which the SPIR-V modules ptxspec writes (version 1.0) cannot type"
                    .into(),
            });
        }
    }
    for c in caps {
        w.b.capability(c);
    }
    w.b.memory_model(AddressingModel::Logical, MemoryModel::GLSL450);
    for p in layout.constants() {
        let ty = p.constant.ty().cloned().unwrap_or(SpecType::Padding(0));
        let mut ids = p.ids();
        let id = w.value(&ty, p.constant.default_value(), 0, &mut ids)?;
        w.b.name(id, p.constant.symbolic_id());
    }
    let void = w.b.type_void();
    let fn_type = w.b.type_function(void, vec![]);
    let main =
        w.b.begin_function(void, None, FunctionControl::NONE, fn_type)
            .map_err(|e| SpirvError::Module {
                id: 0,
                what: e.to_string(),
            })?;
    w.b.begin_block(None).map_err(|e| SpirvError::Module {
        id: 0,
        what: e.to_string(),
    })?;
    w.b.ret().map_err(|e| SpirvError::Module {
        id: 0,
        what: e.to_string(),
    })?;
    w.b.end_function().map_err(|e| SpirvError::Module {
        id: 0,
        what: e.to_string(),
    })?;
    w.b.entry_point(ExecutionModel::GLCompute, main, "main", vec![]);
    w.b.execution_mode(main, ExecutionMode::LocalSize, vec![1, 1, 1]);
    Ok(words_to_bytes(&w.b.module().assemble()))
}

pub(crate) fn words_to_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}
