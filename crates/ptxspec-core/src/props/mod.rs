//! Property sets and the text `.prop` format of DPC++'s sycl-post-link.
//!
//! A file is a sequence of named sets (`[Category]`), each a sequence of
//! named properties `name=TYPE|VALUE`: type 1 is a decimal `u32`, type 2 a byte
//! array, written as an 8-byte little-endian size *in bits* followed by the
//! bytes, the whole coded with `base64`. Order is kept as read, so what is
//! read is written back byte for byte.

pub(crate) mod base64;
mod image_facts;
mod sycl;
mod table;

pub use image_facts::LtoSymbol;
pub use image_facts::{FILES_SET, ImageFile, ImageProps, LTO_SYMBOLS_SET, record_file_hash};
pub(crate) use image_facts::{recorded_file_hash, sha256};

pub use sycl::DEVICE_REQUIREMENTS_SET;
pub use sycl::decode_u32s;
#[cfg(any(feature = "spirv", test))]
pub(crate) use sycl::encode_descriptors;
pub(crate) use sycl::encode_u32s;
pub use sycl::{DEFAULT_VALUES_SET, SPEC_CONSTANTS_SET, SpecConstProps};
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

/// Entries with unique names, in the order they came. Found by comparing
/// names while there are few: a hash map's code and its random keys cost a
/// new process's first image read more than comparing a handful of short
/// names. Beyond that, through a hash index, so that a file of many names
/// is not read in quadratic time.
#[derive(Clone, Debug)]
struct Named<T> {
    entries: Vec<(String, T)>,
    /// Name → position in `entries`, kept once there are more than
    /// [`Named::COMPARED`] entries.
    index: Option<std::collections::HashMap<String, usize>>,
}

impl<T> Default for Named<T> {
    fn default() -> Self {
        Named {
            entries: Vec::new(),
            index: None,
        }
    }
}

// The index is derived from the entries.
impl<T: PartialEq> PartialEq for Named<T> {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}
impl<T: Eq> Eq for Named<T> {}

impl<T> Named<T> {
    /// Up to this many entries, a lookup compares names.
    const COMPARED: usize = 16;

    fn position(&self, name: &str) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(name).copied(),
            None => self.entries.iter().position(|(n, _)| n == name),
        }
    }

    /// Adds an entry whose name is not there yet; its position.
    fn push_new(&mut self, name: String, value: T) -> usize {
        let at = self.entries.len();
        match &mut self.index {
            Some(index) => {
                index.insert(name.clone(), at);
            }
            None if at >= Self::COMPARED => {
                let mut index: std::collections::HashMap<String, usize> = self
                    .entries
                    .iter()
                    .enumerate()
                    .map(|(i, (n, _))| (n.clone(), i))
                    .collect();
                index.insert(name.clone(), at);
                self.index = Some(index);
            }
            None => {}
        }
        self.entries.push((name, value));
        at
    }

    fn remove(&mut self, name: &str) -> Option<T> {
        let at = self.position(name)?;
        let (_, value) = self.entries.remove(at);
        if let Some(index) = &mut self.index {
            index.remove(name);
            for later in index.values_mut().filter(|i| **i > at) {
                *later -= 1;
            }
        }
        Some(value)
    }
}

/// A named set of named properties, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PropertySet {
    props: Named<PropertyValue>,
}

impl PropertySet {
    /// Sets `name`, replacing an earlier value in its place.
    pub fn insert(&mut self, name: impl Into<String>, value: PropertyValue) {
        let name = name.into();
        match self.props.position(&name) {
            Some(i) => self.props.entries[i].1 = value,
            None => {
                self.props.push_new(name, value);
            }
        }
    }
    /// The value of property `name`.
    pub fn get(&self, name: &str) -> Option<&PropertyValue> {
        self.props.position(name).map(|i| &self.props.entries[i].1)
    }
    /// The properties, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &PropertyValue)> {
        self.props.entries.iter().map(|(n, v)| (n.as_str(), v))
    }
    /// How many properties it holds.
    pub fn len(&self) -> usize {
        self.props.entries.len()
    }
    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.props.entries.is_empty()
    }
}

/// All property sets of one device image, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PropertySets {
    sets: Named<PropertySet>,
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
        self.sets.remove(name)
    }

    /// The position of set `name`, created empty at the end when missing.
    fn position_or_insert(&mut self, name: &str) -> usize {
        match self.sets.position(name) {
            Some(i) => i,
            None => self.sets.push_new(name.to_string(), PropertySet::default()),
        }
    }

    /// The set `name`, created empty at the end when missing.
    pub fn set_mut(&mut self, name: &str) -> &mut PropertySet {
        let i = self.position_or_insert(name);
        &mut self.sets.entries[i].1
    }
    /// The set named `name`.
    pub fn get(&self, name: &str) -> Option<&PropertySet> {
        self.sets.position(name).map(|i| &self.sets.entries[i].1)
    }
    /// The sets, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &PropertySet)> {
        self.sets.entries.iter().map(|(n, s)| (n.as_str(), s))
    }
    /// Whether it holds no set.
    pub fn is_empty(&self) -> bool {
        self.sets.entries.is_empty()
    }

    /// The `.prop` text.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (name, set) in &self.sets.entries {
            let _ = writeln!(out, "[{name}]");
            for (pname, value) in &set.props.entries {
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
            sets.sets.entries[set].1.insert(name, value);
        }
        if sets.sets.entries.is_empty() {
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
