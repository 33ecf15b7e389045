//! The SYCL property sets of a device image: specialization constants,
//! their default values and device requirements.

use super::{PropertySets, PropertyValue};
use crate::layout::{Descriptor, Layout};

/// The property set of the constants' descriptors (`<ID, offset, size>` per symbolic ID).
pub const SPEC_CONSTANTS_SET: &str = "SYCL/specialization constants";
/// The property set of the default values (one property, `all`: the blob).
pub const DEFAULT_VALUES_SET: &str = "SYCL/specialization constants default values";
/// The property set of an image's device requirements.
pub const DEVICE_REQUIREMENTS_SET: &str = "SYCL/device requirements";

/// Descriptors as a byte array of little-endian `u32` triples.
pub(crate) fn encode_descriptors(descriptors: &[Descriptor]) -> Vec<u8> {
    descriptors
        .iter()
        .flat_map(|d| [d.id, d.offset, d.size])
        .flat_map(u32::to_le_bytes)
        .collect()
}

/// Little-endian `u32`s of a byte array; `None` when its length is not a
/// multiple of 4.
pub fn decode_u32s(bytes: &[u8]) -> Option<Vec<u32>> {
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

pub(crate) fn encode_u32s(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Descriptors of a byte array; `None` when it is not whole triples.
pub(crate) fn decode_descriptors(bytes: &[u8]) -> Option<Vec<Descriptor>> {
    let words = decode_u32s(bytes)?;
    if words.len() % 3 != 0 {
        return None;
    }
    Some(
        words
            .chunks_exact(3)
            .map(|t| Descriptor::new(t[0], t[1], t[2]))
            .collect(),
    )
}

/// What the two specialization-constant sets say, read back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecConstProps {
    /// Symbolic ID → descriptors, in file order.
    pub constants: Vec<(String, Vec<Descriptor>)>,
    /// The `all` property of the default-values set, when present.
    pub default_values: Option<Vec<u8>>,
}

impl SpecConstProps {
    /// Offsets in the buffer of an emulated layout (each constant one
    /// descriptor at offset 0, perhaps followed by padding), by the
    /// runtime's rule: sizes, padding included, summed in ascending ID
    /// order. `None` for per-leaf (native) descriptors.
    /// (`None` also where the sizes add up past 4 GiB.)
    pub fn buffer_offsets(&self) -> Option<Vec<u32>> {
        let constants = &self.constants;
        let emulated = constants.iter().all(|(_, d)| {
            d.first().is_some_and(|f| !f.is_padding() && f.offset == 0)
                && d[1..].iter().all(Descriptor::is_padding)
        });
        if !emulated {
            return None;
        }
        let mut order: Vec<usize> = (0..constants.len()).collect();
        order.sort_by_key(|&i| constants[i].1[0].id);
        let mut offsets = vec![0; constants.len()];
        let mut at = 0u32;
        for i in order {
            offsets[i] = at;
            // Sizes from a file: a sum past 4 GiB is no layout (None).
            for d in &constants[i].1 {
                at = at.checked_add(d.size)?;
            }
        }
        Some(offsets)
    }

    /// Adds both sets for `layout` (nothing when it has no constants, as
    /// sycl-post-link writes none then).
    pub fn write(layout: &Layout, sets: &mut PropertySets) {
        if layout.is_empty() {
            return;
        }
        let set = sets.set_mut(SPEC_CONSTANTS_SET);
        for p in layout.constants() {
            set.insert(
                p.constant.symbolic_id(),
                PropertyValue::bytes(encode_descriptors(&p.descriptors)),
            );
        }
        sets.set_mut(DEFAULT_VALUES_SET)
            .insert("all", PropertyValue::bytes(layout.default_blob().to_vec()));
    }

    /// Reads both sets; a property of the wrong type or shape is an error
    /// naming it.
    pub fn read(sets: &PropertySets) -> Result<Self, super::SchemaError> {
        let mut out = SpecConstProps::default();
        if let Some(set) = sets.get(SPEC_CONSTANTS_SET) {
            for (name, value) in set.iter() {
                let descs = value
                    .as_bytes()
                    .and_then(decode_descriptors)
                    .ok_or_else(|| {
                        super::SchemaError::property(
                            SPEC_CONSTANTS_SET,
                            name,
                            "not a byte array of <u32 ID, offset, size> triples",
                        )
                    })?;
                out.constants.push((name.to_string(), descs));
            }
        }
        if let Some(set) = sets.get(DEFAULT_VALUES_SET) {
            let all = set.get("all").ok_or_else(|| {
                super::SchemaError::set(DEFAULT_VALUES_SET, "has no property 'all'")
            })?;
            let bytes = all.as_bytes().ok_or_else(|| {
                super::SchemaError::property(DEFAULT_VALUES_SET, "all", "not a byte array")
            })?;
            out.default_values = Some(bytes.to_vec());
        }
        Ok(out)
    }
}
