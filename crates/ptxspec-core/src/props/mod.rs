//! Property sets and the text `.prop` format of DPC++'s sycl-post-link.
//!
//! A file is a sequence of named sets (`[Category]`), each a sequence of
//! named properties `name=TYPE|VALUE`: type 1 is a decimal `u32`, type 2 a byte
//! array, written as an 8-byte little-endian size *in bits* followed by the
//! bytes, the whole coded with `base64`. Order is kept as read, so what is
//! read is written back byte for byte.

pub(crate) mod base64;
mod image;
mod sycl;
mod table;

pub use image::LtoSymbol;
pub use image::{FILES_SET, ImageFile, ImageProps, LTO_SYMBOLS_SET, record_file_hash};
pub(crate) use image::{recorded_file_hash, sha256};

pub use sycl::DEVICE_REQUIREMENTS_SET;
pub use sycl::decode_u32s;
pub use sycl::{DEFAULT_VALUES_SET, SPEC_CONSTANTS_SET, SpecConstProps};
pub(crate) use sycl::{encode_descriptors, encode_u32s};
pub use table::FileTable;

/// A property set that breaks its schema: the set, the property (where one
/// is at fault) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("[{set}] {}{what}", property.as_ref().map(|p| format!("{p}: ")).unwrap_or_default())]
pub struct SchemaError {
    /// The property set.
    pub set: String,
    /// The property, when one is at fault.
    pub property: Option<String>,
    /// What is wrong.
    pub what: String,
}

impl SchemaError {
    /// Property `property` of `set` is wrong: `what`.
    pub fn property(set: &str, property: &str, what: impl Into<String>) -> Self {
        SchemaError {
            set: set.to_string(),
            property: Some(property.to_string()),
            what: what.into(),
        }
    }

    /// `set` as a whole is wrong: `what`.
    pub fn set(set: &str, what: impl Into<String>) -> Self {
        SchemaError {
            set: set.to_string(),
            property: None,
            what: what.into(),
        }
    }
}

use std::fmt::Write as _;

/// A property's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PropertyValue {
    /// Type 1.
    U32(u32),
    /// Type 2: `bits` significant bits in `data` (`data.len() == ceil(bits/8)`).
    Bytes {
        /// The size in bits, as written.
        bits: u64,
        /// The bytes.
        data: Vec<u8>,
    },
}

impl PropertyValue {
    /// A byte array of whole bytes.
    pub fn bytes(data: Vec<u8>) -> Self {
        PropertyValue::Bytes {
            bits: data.len() as u64 * 8,
            data,
        }
    }
    /// The bytes of a byte-array value.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            PropertyValue::Bytes { data, .. } => Some(data),
            PropertyValue::U32(_) => None,
        }
    }
    pub(crate) fn type_tag(&self) -> u32 {
        match self {
            PropertyValue::U32(_) => 1,
            PropertyValue::Bytes { .. } => 2,
        }
    }
}

/// A named set of named properties, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PropertySet {
    props: Vec<(String, PropertyValue)>,
    /// Name → position in `props`.
    index: std::collections::HashMap<String, usize>,
}

impl PropertySet {
    /// Sets `name`, replacing an earlier value in its place.
    pub fn insert(&mut self, name: impl Into<String>, value: PropertyValue) {
        let name = name.into();
        match self.index.get(&name) {
            Some(&i) => self.props[i].1 = value,
            None => {
                self.index.insert(name.clone(), self.props.len());
                self.props.push((name, value));
            }
        }
    }
    /// The value of property `name`.
    pub fn get(&self, name: &str) -> Option<&PropertyValue> {
        self.index.get(name).map(|&i| &self.props[i].1)
    }
    /// The properties, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &PropertyValue)> {
        self.props.iter().map(|(n, v)| (n.as_str(), v))
    }
    /// How many properties it holds.
    pub fn len(&self) -> usize {
        self.props.len()
    }
    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.props.is_empty()
    }
}

/// All property sets of one device image, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PropertySets {
    sets: Vec<(String, PropertySet)>,
    /// Name → position in `sets` (a file may hold many sets: lookups must
    /// not be linear).
    index: std::collections::HashMap<String, usize>,
}

/// A `.prop` file that cannot be read; `line` counts from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct PropParseError {
    /// The line, from 1.
    pub line: usize,
    /// What is wrong.
    pub what: String,
}

impl PropertySets {
    /// Takes the set `name` out, if there is one.
    pub fn remove(&mut self, name: &str) -> Option<PropertySet> {
        let i = self.index.remove(name)?;
        let (_, set) = self.sets.remove(i);
        for later in self.index.values_mut().filter(|j| **j > i) {
            *later -= 1;
        }
        Some(set)
    }

    /// The position of set `name`, created empty at the end when missing.
    fn position_or_insert(&mut self, name: &str) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        self.sets.push((name.to_string(), PropertySet::default()));
        self.index.insert(name.to_string(), self.sets.len() - 1);
        self.sets.len() - 1
    }

    /// The set `name`, created empty at the end when missing.
    pub fn set_mut(&mut self, name: &str) -> &mut PropertySet {
        let i = self.position_or_insert(name);
        &mut self.sets[i].1
    }
    /// The set named `name`.
    pub fn get(&self, name: &str) -> Option<&PropertySet> {
        self.index.get(name).map(|&i| &self.sets[i].1)
    }
    /// The sets, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &PropertySet)> {
        self.sets.iter().map(|(n, s)| (n.as_str(), s))
    }
    /// Whether it holds no set.
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }

    /// The `.prop` text.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (name, set) in &self.sets {
            let _ = writeln!(out, "[{name}]");
            for (pname, value) in &set.props {
                let _ = write!(out, "{pname}={}|", value.type_tag());
                match value {
                    PropertyValue::U32(v) => {
                        let _ = write!(out, "{v}");
                    }
                    PropertyValue::Bytes { bits, data } => {
                        let mut raw = Vec::with_capacity(8 + data.len());
                        raw.extend_from_slice(&bits.to_le_bytes());
                        raw.extend_from_slice(data);
                        base64::encode_into(&raw, &mut out);
                    }
                }
                out.push('\n');
            }
        }
        out
    }

    /// Why `name` cannot be a property's name in the text form (the parser
    /// would read it back as something else): empty, holding `=` or a line
    /// break, or starting with `[`.
    pub fn unwritable_name(name: &str) -> Option<&'static str> {
        if name.is_empty() {
            Some("it is empty")
        } else if name.contains('=') {
            Some("it holds '=', which ends a property's name")
        } else if name.contains(['\n', '\r']) {
            Some("it holds a line break")
        } else if name.starts_with('[') {
            Some("it starts with '[', which starts a property set")
        } else {
            None
        }
    }

    /// Reads `.prop` text. Blank lines are skipped, as LLVM's reader does;
    /// anything else that is not a category or a property is an error.
    pub fn parse(text: &str) -> Result<Self, PropParseError> {
        let mut sets = PropertySets::default();
        let mut current: Option<usize> = None;
        for (i, raw) in text.lines().enumerate() {
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            let err = |what: String| PropParseError { line: i + 1, what };
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix('[') {
                let Some(end) = rest.rfind(']') else {
                    return Err(err(format!("category without ']': {line:?}")));
                };
                current = Some(sets.position_or_insert(&rest[..end]));
                continue;
            }
            let Some(set) = current else {
                return Err(err("property before any [category]".into()));
            };
            let Some((name, type_value)) = line.split_once('=') else {
                return Err(err(format!("expected name=TYPE|VALUE, found {line:?}")));
            };
            let Some((tag, value)) = type_value.split_once('|') else {
                return Err(err(format!(
                    "expected TYPE|VALUE after '=', found {type_value:?}"
                )));
            };
            if name.is_empty() || tag.is_empty() || value.is_empty() {
                return Err(err(format!("empty name, type or value in {line:?}")));
            }
            let value = match tag {
                "1" => PropertyValue::U32(
                    value
                        .parse()
                        .map_err(|_| err(format!("invalid u32 value {value:?}")))?,
                ),
                "2" => decode_byte_array(value).map_err(err)?,
                _ => {
                    return Err(err(format!(
                        "unknown property type {tag:?} (expected 1 or 2)"
                    )));
                }
            };
            sets.sets[set].1.insert(name, value);
        }
        if sets.sets.is_empty() {
            return Err(PropParseError {
                line: 0,
                what: "no property set in file".into(),
            });
        }
        Ok(sets)
    }
}

fn decode_byte_array(value: &str) -> Result<PropertyValue, String> {
    let raw = base64::decode(value).map_err(|e| format!("byte array: {e}"))?;
    if raw.len() < 8 {
        return Err(format!(
            "byte array of {} bytes has no 8-byte size prefix",
            raw.len()
        ));
    }
    let (size, data) = raw.split_at(8);
    let bits = u64::from_le_bytes(size.try_into().map_err(|_| "size prefix".to_string())?);
    if bits.div_ceil(8) != data.len() as u64 {
        return Err(format!(
            "byte array says {bits} bits but holds {} bytes",
            data.len()
        ));
    }
    Ok(PropertyValue::Bytes {
        bits,
        data: data.to_vec(),
    })
}

#[cfg(test)]
mod tests;
