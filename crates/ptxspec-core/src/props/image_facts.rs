//! Image-level facts beyond the specialization constants: DPC++'s
//! `SYCL/misc properties` (`specConstsReplacedWithDefault`), and ptxspec's
//! own sets — the external symbols of the header's LTO flavour, and what the
//! driver must link in (CUDA's device runtime).

use super::{PropertySets, PropertyValue, decode_u32s, encode_u32s};
use crate::layout::ScalarKind;

/// DPC++'s set of miscellaneous image properties.
pub(crate) const MISC_SET: &str = "SYCL/misc properties";
/// DPC++'s mark of an image whose constants were replaced by their defaults.
pub(crate) const SPEC_CONSTS_REPLACED: &str = "specConstsReplacedWithDefault";
/// Per symbolic ID: `<u32 alignment> <u32 symbol length> <symbol>`, then,
/// for a constant of the image's translation units that is not in its
/// layout, its default value.
pub const LTO_SYMBOLS_SET: &str = "ptxspec/lto symbols";
/// Per symbolic ID: `<u32 offset, u32 kind>` of each scalar in the value
/// (kinds numbered as [`ScalarKind::ALL`]).
pub(crate) const VALUE_TYPES_SET: &str = "ptxspec/value types";
/// SHA-256 of the files written beside the `.prop`: `ptx` and `ltoir`.
pub const FILES_SET: &str = "ptxspec/image files";
/// ptxspec's image flags.
pub(crate) const IMAGE_SET: &str = "ptxspec/image";
const DEVICE_RUNTIME: &str = "device_runtime";

/// The external device constant that the header's LTO flavour declares for
/// one specialization constant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LtoSymbol {
    /// The constant's symbolic ID.
    pub symbolic_id: String,
    /// `ptxspec::detail::lto_slot<KEY, SIZE, ALIGN>`, mangled.
    pub symbol: String,
    /// The declaration's alignment, which the definition must honour.
    pub align: u32,
    /// For a constant outside the image's layout (used by a kernel of
    /// another image of the same translation unit, which an LTO link of
    /// the unit still needs defined): its default value. `None` for the
    /// image's own constants, whose values are in the buffer.
    pub default: Option<Vec<u8>>,
}

/// What an image says of itself besides its constants and kernels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageProps {
    /// The constants were replaced by their defaults (AOT): values cannot
    /// be set.
    pub spec_consts_replaced_with_default: bool,
    /// The image calls CUDA's device runtime (`libcudadevrt.a`).
    pub needs_device_runtime: bool,
    /// The LTO symbols of its constants, in layout order.
    pub lto_symbols: Vec<LtoSymbol>,
    /// Per constant, the scalars in its value by offset (to read values
    /// written as text).
    pub value_types: Vec<(String, Vec<(u32, ScalarKind)>)>,
}

impl ImageProps {
    /// Adds the sets that say something (none for a plain image).
    pub fn write(&self, sets: &mut PropertySets) {
        if self.spec_consts_replaced_with_default {
            sets.set_mut(MISC_SET)
                .insert(SPEC_CONSTS_REPLACED, PropertyValue::U32(1));
        }
        if self.needs_device_runtime {
            sets.set_mut(IMAGE_SET)
                .insert(DEVICE_RUNTIME, PropertyValue::U32(1));
        }
        if !self.value_types.is_empty() {
            let set = sets.set_mut(VALUE_TYPES_SET);
            for (id, leaves) in &self.value_types {
                let words: Vec<u32> = leaves.iter().flat_map(|&(o, k)| [o, k.code()]).collect();
                set.insert(id.clone(), PropertyValue::bytes(encode_u32s(&words)));
            }
        }
        if !self.lto_symbols.is_empty() {
            let set = sets.set_mut(LTO_SYMBOLS_SET);
            for s in &self.lto_symbols {
                let mut bytes = s.align.to_le_bytes().to_vec();
                bytes.extend_from_slice(&(s.symbol.len() as u32).to_le_bytes());
                bytes.extend_from_slice(s.symbol.as_bytes());
                bytes.extend_from_slice(s.default.as_deref().unwrap_or_default());
                set.insert(s.symbolic_id.clone(), PropertyValue::bytes(bytes));
            }
        }
    }

    /// Reads the sets; absent sets are defaults. A property of the wrong
    /// type or shape is an error naming it.
    pub fn read(sets: &PropertySets) -> Result<ImageProps, super::SchemaError> {
        let flag = |set: &str, name: &str| -> Result<bool, super::SchemaError> {
            match sets.get(set).and_then(|s| s.get(name)) {
                None => Ok(false),
                Some(PropertyValue::U32(v)) => Ok(*v != 0),
                Some(_) => Err(super::SchemaError::property(
                    set,
                    name,
                    "expected a number (1|...)",
                )),
            }
        };
        let mut out = ImageProps {
            spec_consts_replaced_with_default: flag(MISC_SET, SPEC_CONSTS_REPLACED)?,
            needs_device_runtime: flag(IMAGE_SET, DEVICE_RUNTIME)?,
            lto_symbols: Vec::new(),
            value_types: Vec::new(),
        };
        if let Some(set) = sets.get(VALUE_TYPES_SET) {
            for (id, v) in set.iter() {
                let bad = || {
                    super::SchemaError::property(
                        VALUE_TYPES_SET,
                        id,
                        "not <u32 offset, u32 kind> pairs",
                    )
                };
                let words = v
                    .as_bytes()
                    .and_then(decode_u32s)
                    .filter(|w| w.len() % 2 == 0)
                    .ok_or_else(bad)?;
                let leaves = words
                    .chunks_exact(2)
                    .map(|p| ScalarKind::from_code(p[1]).map(|k| (p[0], k)))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(bad)?;
                out.value_types.push((id.to_string(), leaves));
            }
        }
        if let Some(set) = sets.get(LTO_SYMBOLS_SET) {
            for (id, v) in set.iter() {
                let bad = || {
                    super::SchemaError::property(
                        LTO_SYMBOLS_SET,
                        id,
                        "not <u32 alignment> <u32 length> <symbol> [default]",
                    )
                };
                let bytes = v.as_bytes().filter(|b| b.len() > 8).ok_or_else(bad)?;
                let word = |i: usize| {
                    u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]])
                };
                let (align, len) = (word(0), word(4) as usize);
                let symbol = bytes
                    .get(8..8 + len)
                    .and_then(|s| std::str::from_utf8(s).ok())
                    .filter(|s| {
                        !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    })
                    .ok_or_else(bad)?;
                let rest = &bytes[8 + len..];
                out.lto_symbols.push(LtoSymbol {
                    symbolic_id: id.to_string(),
                    symbol: symbol.to_string(),
                    align,
                    default: (!rest.is_empty()).then(|| rest.to_vec()),
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_dpcpp_spelling() {
        let p = ImageProps {
            spec_consts_replaced_with_default: true,
            needs_device_runtime: true,
            lto_symbols: vec![
                LtoSymbol {
                    symbolic_id: "my.scale".into(),
                    symbol: "ptxspec_lto_scale".into(),
                    align: 8,
                    default: None,
                },
                LtoSymbol {
                    symbolic_id: "other".into(),
                    symbol: "ptxspec_lto_other".into(),
                    align: 4,
                    default: Some(vec![1, 2, 3, 4]),
                },
            ],
            value_types: vec![("my.scale".into(), vec![(0, ScalarKind::F64)])],
        };
        let mut sets = PropertySets::default();
        p.write(&mut sets);
        let text = sets.to_text();
        assert!(
            text.starts_with("[SYCL/misc properties]\nspecConstsReplacedWithDefault=1|1\n"),
            "{text}"
        );
        assert_eq!(
            ImageProps::read(&PropertySets::parse(&text).unwrap()),
            Ok(p)
        );
        let mut empty = PropertySets::default();
        ImageProps::default().write(&mut empty);
        assert!(empty.is_empty());
    }

    #[test]
    fn malformed_symbols_are_errors() {
        let sets = PropertySets::parse("[ptxspec/lto symbols]\na=1|3\n").unwrap();
        assert!(
            ImageProps::read(&sets)
                .unwrap_err()
                .to_string()
                .contains("a: not")
        );
    }
}

/// One of the files of an image whose hash the `.prop` records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFile {
    /// The `.ptx` file.
    Ptx,
    /// The `.ltoir` file.
    LtoIr,
}

impl ImageFile {
    fn key(self) -> &'static str {
        match self {
            ImageFile::Ptx => "ptx",
            ImageFile::LtoIr => "ltoir",
        }
    }
}

/// The SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    crate::digest::Digest::of(bytes).0
}

/// Records the hash of an image file in its property sets.
pub fn record_file_hash(sets: &mut PropertySets, file: ImageFile, bytes: &[u8]) {
    sets.set_mut(FILES_SET)
        .insert(file.key(), PropertyValue::bytes(sha256(bytes).to_vec()));
}

/// The hash the property sets record for `file`, if any.
pub(crate) fn recorded_file_hash(
    sets: &PropertySets,
    file: ImageFile,
) -> Result<Option<[u8; 32]>, super::SchemaError> {
    match sets.get(FILES_SET).and_then(|s| s.get(file.key())) {
        None => Ok(None),
        Some(v) => v
            .as_bytes()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .map(Some)
            .ok_or_else(|| {
                super::SchemaError::property(FILES_SET, file.key(), "not a 32-byte SHA-256")
            }),
    }
}
