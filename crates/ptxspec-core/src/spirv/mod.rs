//! The native form of specialization constants: SPIR-V `OpSpecConstant*`
//! with `SpecId` decorations, one ID per scalar leaf (seeds 000 and 001),
//! read, written and specialized with `rspirv`. The layout model is shared
//! with the PTX side: types are [`SpecType`]s, descriptors come from
//! `leaf_descriptors`, property sets from [`SpecConstProps`](crate::props::SpecConstProps).

mod read;
mod specialize;
mod structure;
mod write;

pub use read::{SpirvConstant, read};
pub use specialize::{MapEntry, specialize, vulkan_map_entries};
pub use write::write;

use crate::layout::{Descriptor, SpecType};
use crate::props::{
    DEFAULT_VALUES_SET, PropertySets, PropertyValue, SPEC_CONSTANTS_SET, encode_descriptors,
};

/// Errors of the SPIR-V side.
#[derive(Debug, thiserror::Error)]
pub enum SpirvError {
    #[error("not a SPIR-V module: {0}")]
    /// Bytes that are not a SPIR-V module.
    Load(String),
    #[error("SPIR-V %{id}: {what}")]
    /// A module that breaks a rule ptxspec relies on.
    Module {
        /// The result ID at fault.
        id: u32,
        /// What is wrong.
        what: String,
    },
    #[error("specialization constant '{0}' is not in the module")]
    /// A constant name the module does not have.
    Unknown(String),
    #[error("specialization constant '{name}': {what}")]
    /// A value that does not fit its constant.
    Value {
        /// The constant.
        name: String,
        /// What is wrong.
        what: String,
    },
}

/// The SYCL property sets of these constants: native descriptors per leaf,
/// and the defaults concatenated in ascending order of first numeric ID.
pub fn property_sets(constants: &[SpirvConstant]) -> PropertySets {
    let mut sets = PropertySets::default();
    if constants.is_empty() {
        return sets;
    }
    let mut ordered: Vec<&SpirvConstant> = constants.iter().collect();
    ordered.sort_by_key(|c| c.first_id());
    let set = sets.set_mut(SPEC_CONSTANTS_SET);
    for c in &ordered {
        set.insert(
            c.name.clone(),
            PropertyValue::bytes(encode_descriptors(&c.descriptors)),
        );
    }
    let blob: Vec<u8> = ordered
        .iter()
        .flat_map(|c| c.default.iter().copied())
        .collect();
    sets.set_mut(DEFAULT_VALUES_SET)
        .insert("all", PropertyValue::bytes(blob));
    sets
}

impl SpirvConstant {
    /// The smallest numeric ID of the constant's leaves.
    pub(crate) fn first_id(&self) -> u32 {
        self.descriptors
            .iter()
            .filter(|d| !d.is_padding())
            .map(|d| d.id)
            .min()
            .unwrap_or(u32::MAX)
    }
}

/// Parses `NAME=VALUE` for the constant `NAME` of `constants` into its
/// bytes, as [`crate::layout::text`] spells values: one number per leaf,
/// comma-separated, depth-first, or `bytes:<hex>`.
pub fn parse_value(
    constants: &[SpirvConstant],
    arg: &str,
) -> Result<(String, Vec<u8>), SpirvError> {
    let (name, value) = arg.split_once('=').ok_or_else(|| SpirvError::Value {
        name: arg.to_string(),
        what: "expected NAME=VALUE".into(),
    })?;
    let c = constants
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| SpirvError::Unknown(name.to_string()))?;
    let mut leaves = Vec::new();
    c.ty.for_each_leaf(0, &mut |off, k| leaves.push((off, k)));
    let size = c.ty.size() as usize;
    let bytes =
        crate::layout::text::parse_value(value, size, &leaves, &vec![0; size]).map_err(|what| {
            SpirvError::Value {
                name: name.to_string(),
                what,
            }
        })?;
    Ok((name.to_string(), bytes))
}

/// Descriptors of a typed value whose leaves have these IDs in depth-first
/// order.
fn descriptors_with_ids(ty: &SpecType, ids: &[u32]) -> Vec<Descriptor> {
    let mut it = ids.iter().copied();
    crate::layout::leaf_descriptors(ty, || it.next().unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests;
