//! Applying values to a module — as new defaults (it stays specializable) or
//! frozen into plain constants — and Vulkan's specialization map.

use std::collections::HashMap;

use rspirv::binary::Assemble;
use rspirv::dr::{Instruction, Operand};
use rspirv::spirv::{Decoration, Op};

use super::read::{load, read_module};
use super::write::words_to_bytes;
use super::{SpirvConstant, SpirvError};
use crate::layout::ScalarKind;

/// Sets `values` (symbolic ID → bytes in memory layout) as the defaults of
/// their constants; with `freeze`, turns every specialization constant into
/// a plain constant and drops the `SpecId`s.
pub fn specialize(
    bytes: &[u8],
    values: &[(String, Vec<u8>)],
    freeze: bool,
) -> Result<Vec<u8>, SpirvError> {
    let mut module = load(bytes)?;
    let constants = read_module(&module, &HashMap::new())?;
    let updates = leaf_updates(&constants, values)?;
    for inst in &mut module.types_global_values {
        let Some(id) = inst.result_id else { continue };
        if let Some((k, b)) = updates.get(&id) {
            set_literal(inst, *k, b);
        }
        if freeze {
            freeze_constant(inst, id)?;
        }
    }
    if freeze {
        module.annotations.retain(|a| {
            !(a.class.opcode == Op::Decorate
                && matches!(
                    a.operands.get(1),
                    Some(Operand::Decoration(Decoration::SpecId))
                ))
        });
    }
    Ok(words_to_bytes(&module.assemble()))
}

/// The new literal of each leaf (a scalar specialization constant's result
/// id) that `values` set, with its kind. A value of the wrong size, an
/// unknown constant, or two constants sharing a leaf (one `SpecId`) with
/// different values for it are errors.
fn leaf_updates(
    constants: &[SpirvConstant],
    values: &[(String, Vec<u8>)],
) -> Result<HashMap<u32, (ScalarKind, Vec<u8>)>, SpirvError> {
    let mut updates: HashMap<u32, (ScalarKind, Vec<u8>)> = HashMap::new();
    // The constant whose value set each leaf.
    let mut set_by: HashMap<u32, &str> = HashMap::new();
    for (name, value) in values {
        let c = constants
            .iter()
            .find(|c| &c.name == name)
            .ok_or_else(|| SpirvError::Unknown(name.clone()))?;
        if value.len() != c.ty.size() as usize {
            return Err(SpirvError::Value {
                name: name.clone(),
                what: format!(
                    "{} bytes given, the type {} has {}",
                    value.len(),
                    c.ty.describe(),
                    c.ty.size()
                ),
            });
        }
        let mut leaves = c.leaves.iter();
        let mut clash = None;
        c.ty.for_each_leaf(0, &mut |off, k| {
            if let Some(&leaf) = leaves.next() {
                let b = value[off as usize..(off + k.size()) as usize].to_vec();
                // Composites may share a leaf (one SpecId): its values must
                // agree, or one would silently win.
                match (updates.get(&leaf), set_by.get(&leaf)) {
                    (Some((_, old)), Some(&other)) if *old != b && clash.is_none() => {
                        clash = Some((leaf, other));
                    }
                    _ => {
                        updates.insert(leaf, (k, b));
                        set_by.insert(leaf, name.as_str());
                    }
                }
            }
        });
        if let Some((leaf, other)) = clash {
            return Err(SpirvError::Value {
                name: name.clone(),
                what: format!(
                    "its scalar %{leaf} is also a scalar of '{other}', whose value gives it another: \
                     one SpecId takes one value"
                ),
            });
        }
    }
    Ok(updates)
}

/// Makes `b` (a `k` in memory layout) the literal of specialization
/// constant `inst`: `OpSpecConstantTrue`/`False` for a bool, else its
/// operand (narrow signed integers sign-extended to the word, as SPIR-V
/// writes them).
fn set_literal(inst: &mut Instruction, k: ScalarKind, b: &[u8]) {
    match k {
        ScalarKind::Bool => {
            let op = if b[0] != 0 {
                Op::SpecConstantTrue
            } else {
                Op::SpecConstantFalse
            };
            *inst = Instruction::new(op, inst.result_type, inst.result_id, Vec::new());
        }
        _ => {
            let mut word = [0u8; 8];
            word[..b.len()].copy_from_slice(b);
            let mut bits = u64::from_le_bytes(word);
            if matches!(k, ScalarKind::I8 | ScalarKind::I16)
                && b.last().is_some_and(|x| x & 0x80 != 0)
            {
                bits = (bits | (u64::MAX << (k.size() * 8))) & u32::MAX as u64;
            }
            inst.operands = vec![if k.size() == 8 {
                Operand::LiteralBit64(bits)
            } else {
                Operand::LiteralBit32(bits as u32)
            }];
        }
    }
}

/// Turns specialization constant `inst` (result `id`) into a plain one;
/// another instruction stays. An `OpSpecConstantOp` cannot be frozen here.
fn freeze_constant(inst: &mut Instruction, id: u32) -> Result<(), SpirvError> {
    let frozen = match inst.class.opcode {
        Op::SpecConstant => Op::Constant,
        Op::SpecConstantTrue => Op::ConstantTrue,
        Op::SpecConstantFalse => Op::ConstantFalse,
        Op::SpecConstantComposite => Op::ConstantComposite,
        Op::SpecConstantOp => {
            return Err(SpirvError::Module {
                id,
                what: "OpSpecConstantOp cannot be frozen: specialize it with a SPIR-V optimizer"
                    .into(),
            });
        }
        other => other,
    };
    if frozen != inst.class.opcode {
        *inst = Instruction::new(
            frozen,
            inst.result_type,
            inst.result_id,
            inst.operands.clone(),
        );
    }
    Ok(())
}

/// One `VkSpecializationMapEntry`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapEntry {
    /// The `SpecId`.
    pub constant_id: u32,
    /// Its value's offset in the data, in bytes.
    pub offset: u32,
    /// Its value's size in bytes.
    pub size: u32,
}

/// Vulkan's specialization map for these constants and the data it points
/// into: one entry per leaf, leaves packed in order; a `bool` leaf is a
/// 4-byte `VkBool32`, as Vulkan requires. Values are the constants'
/// defaults unless `values` (symbolic ID → bytes) gives others.
pub fn vulkan_map_entries(
    constants: &[SpirvConstant],
    values: &HashMap<String, Vec<u8>>,
) -> Result<(Vec<MapEntry>, Vec<u8>), SpirvError> {
    let mut entries = Vec::new();
    let mut data = Vec::new();
    for c in constants {
        let bytes = values.get(&c.name).unwrap_or(&c.default);
        if bytes.len() != c.ty.size() as usize {
            return Err(SpirvError::Value {
                name: c.name.clone(),
                what: format!("{} bytes given, the type has {}", bytes.len(), c.ty.size()),
            });
        }
        let mut ids = c
            .descriptors
            .iter()
            .filter(|d| !d.is_padding())
            .map(|d| d.id);
        c.ty.for_each_leaf(0, &mut |off, k| {
            let constant_id = ids.next().unwrap_or(u32::MAX);
            let leaf = &bytes[off as usize..(off + k.size()) as usize];
            let offset = data.len() as u32;
            let size = if k == ScalarKind::Bool {
                data.extend_from_slice(&u32::from(leaf[0] != 0).to_le_bytes());
                4
            } else {
                data.extend_from_slice(leaf);
                k.size()
            };
            entries.push(MapEntry {
                constant_id,
                offset,
                size,
            });
        });
    }
    Ok((entries, data))
}
