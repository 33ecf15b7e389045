//! Specialization-constant layout: numeric IDs, descriptors, the buffer and
//! its default-values blob, as DPC++'s SpecConstants pass computes them.
//!
//! Constants are added in first-encounter order; each symbolic ID is numbered
//! once. Two numberings exist, as in DPC++:
//!
//! * **emulated** (the PTX buffer): one numeric ID per constant and one
//!   descriptor `<ID, 0, size>`. Each constant sits in the buffer at an offset
//!   rounded up to its alignment; the gap is described by a padding descriptor
//!   `<0xFFFFFFFF, size of the previous constant, gap>` appended to the
//!   previous constant's list, and is zero in the blob (intel/llvm#6093).
//! * **native** (SPIR-V): one numeric ID per scalar leaf, numbered by a
//!   depth-first walk, and a descriptor `<ID, offset in the value, size>` per
//!   leaf, plus `<0xFFFFFFFF, end of last member, padding>` for every struct
//!   with trailing padding. Defaults are concatenated without alignment.

mod float16;
pub mod text;

/// The largest specialization constant ptxspec takes, in bytes: the size
/// of CUDA's constant bank, far above what a kernel's parameter space
/// (4 KiB) or a real constant needs. A larger one in PTX or SPIR-V is an
/// error before anything of its size is allocated.
pub(crate) const MAX_CONSTANT_BYTES: u64 = 64 << 10;
mod types;

pub use types::{Member, ScalarKind, SpecType, StructType, round_up};

use std::collections::HashMap;

/// Numeric ID of a descriptor that describes padding, not a value.
pub(crate) const PADDING_ID: u32 = u32::MAX;

/// `<numeric ID, offset, size>` as in the `SYCL/specialization constants` set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Descriptor {
    /// The numeric ID (`PADDING_ID` for padding).
    pub id: u32,
    /// The offset of the bytes it describes: in the value (native) or in the buffer (emulated padding).
    pub offset: u32,
    /// How many bytes it describes.
    pub size: u32,
}

impl Descriptor {
    /// A descriptor of `size` bytes at `offset` for numeric ID `id`.
    pub const fn new(id: u32, offset: u32, size: u32) -> Self {
        Descriptor { id, offset, size }
    }
    /// Whether it describes padding rather than a value.
    pub const fn is_padding(&self) -> bool {
        self.id == PADDING_ID
    }
}

/// Errors of the layout layer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    #[error("inconsistent struct layout: {0}")]
    /// A Rust struct's layout that does not add up (members overlap or run past its size).
    BadStructLayout(String),
    #[error(
        "specialization constant '{symbolic_id}': default value has {got} bytes but its type has {expected}"
    )]
    /// A default value of another size than the constant's type.
    DefaultSizeMismatch {
        /// The constant.
        symbolic_id: String,
        /// Its type's size in bytes.
        expected: u32,
        /// The default's size in bytes.
        got: usize,
    },
    #[error(
        "specialization constant '{symbolic_id}' is used with {got} bytes here but with {expected} bytes before"
    )]
    /// One constant read with two sizes.
    InconsistentSize {
        /// The constant.
        symbolic_id: String,
        /// The size seen first.
        expected: u32,
        /// The other size.
        got: u32,
    },
    #[error("specialization constant '{symbolic_id}': alignment {align} is not a power of two")]
    /// An alignment that is not a power of two.
    BadAlignment {
        /// The constant.
        symbolic_id: String,
        /// The alignment given.
        align: u32,
    },
    /// Two constants of one symbolic ID (an explicit ID given twice, or one
    /// equal to another constant's name) that differ in type or default.
    #[error(
        "specialization constant '{symbolic_id}' is declared twice, {what}: one ID names one constant \
         (give one of them another ID)"
    )]
    Conflicting {
        /// The ID.
        symbolic_id: String,
        /// How the two differ.
        what: String,
    },
    /// A constant without a type in a layout that numbers leaves (native).
    #[error(
        "specialization constant '{0}' has no type description, which native (per-leaf) numbering needs"
    )]
    NativeNeedsType(String),
    #[error("unknown specialization constant '{0}'")]
    /// A symbolic ID the layout does not have.
    UnknownSymbolicId(String),
    #[error(
        "value for specialization constant '{symbolic_id}' has {got} bytes, but the constant has {expected}"
    )]
    /// A value of another size than its constant.
    ValueSizeMismatch {
        /// The constant.
        symbolic_id: String,
        /// The constant's size in bytes.
        expected: u32,
        /// The value's size in bytes.
        got: usize,
    },
    #[error("blob has {got} bytes, but the layout needs {expected}")]
    /// A blob of another size than the layout's.
    BlobSizeMismatch {
        /// The layout's size in bytes.
        expected: usize,
        /// The blob's size in bytes.
        got: usize,
    },
}

/// One specialization constant as the layout sees it: its symbolic ID, size,
/// alignment, default bytes and, where known, its full type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecConstant {
    symbolic_id: String,
    size: u32,
    align: u32,
    ty: Option<SpecType>,
    default: Vec<u8>,
}

impl SpecConstant {
    /// A constant whose type is known (needed for native numbering).
    pub fn typed(
        symbolic_id: impl Into<String>,
        ty: SpecType,
        default: Vec<u8>,
    ) -> Result<Self, LayoutError> {
        let (size, align) = (ty.size(), ty.align());
        Self::new(symbolic_id.into(), size, align, Some(ty), default)
    }

    /// A constant known only by size and alignment, as the PTX side sees it.
    pub(crate) fn opaque(
        symbolic_id: impl Into<String>,
        size: u32,
        align: u32,
        default: Vec<u8>,
    ) -> Result<Self, LayoutError> {
        Self::new(symbolic_id.into(), size, align, None, default)
    }

    fn new(
        symbolic_id: String,
        size: u32,
        align: u32,
        ty: Option<SpecType>,
        default: Vec<u8>,
    ) -> Result<Self, LayoutError> {
        if !align.is_power_of_two() {
            return Err(LayoutError::BadAlignment { symbolic_id, align });
        }
        if default.len() != size as usize {
            return Err(LayoutError::DefaultSizeMismatch {
                symbolic_id,
                expected: size,
                got: default.len(),
            });
        }
        Ok(SpecConstant {
            symbolic_id,
            size,
            align,
            ty,
            default,
        })
    }

    /// Its symbolic ID.
    pub fn symbolic_id(&self) -> &str {
        &self.symbolic_id
    }
    /// Its size in bytes.
    pub fn size(&self) -> u32 {
        self.size
    }
    /// Its alignment in bytes.
    pub fn align(&self) -> u32 {
        self.align
    }
    /// Its type, when known (the post-link knows it from the getter's markup).
    pub fn ty(&self) -> Option<&SpecType> {
        self.ty.as_ref()
    }
    /// Its default value's bytes.
    pub fn default_value(&self) -> &[u8] {
        &self.default
    }
}

/// Which numbering a [`Layout`] uses (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Numbering {
    /// One numeric ID and one descriptor per constant (emulated buffers).
    Emulated,
    /// One numeric ID and one descriptor per scalar leaf (SPIR-V's `SpecId`s).
    Native,
}

/// A constant placed in a layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    /// The constant.
    pub constant: SpecConstant,
    /// Byte offset of the value in the blob (and, emulated, in the buffer).
    pub offset: u32,
    /// Its descriptors, padding descriptors included.
    pub descriptors: Vec<Descriptor>,
}

impl Placed {
    /// Numeric IDs of the value (padding descriptors left out).
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.descriptors
            .iter()
            .filter(|d| !d.is_padding())
            .map(|d| d.id)
    }
}

/// The numbered, laid-out specialization constants of one device image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    numbering: Numbering,
    constants: Vec<Placed>,
    index: HashMap<String, usize>,
    blob: Vec<u8>,
    next_id: u32,
}

impl Layout {
    /// An empty layout.
    pub fn new(numbering: Numbering) -> Self {
        Layout {
            numbering,
            constants: Vec::new(),
            index: HashMap::new(),
            blob: Vec::new(),
            next_id: 0,
        }
    }

    /// A layout of these constants, numbered in the order given; a repeated
    /// symbolic ID keeps its first placement (see [`Layout::add`]).
    pub fn build(
        numbering: Numbering,
        constants: impl IntoIterator<Item = SpecConstant>,
    ) -> Result<Self, LayoutError> {
        let mut layout = Layout::new(numbering);
        for c in constants {
            layout.add(c)?;
        }
        Ok(layout)
    }

    /// Adds a constant at first encounter and returns its index; a constant
    /// seen before returns the earlier index after checking its size.
    pub fn add(&mut self, c: SpecConstant) -> Result<usize, LayoutError> {
        if let Some(&i) = self.index.get(c.symbolic_id()) {
            // One ID is one constant: whatever names it must agree on it.
            let first = &self.constants[i].constant;
            if first.size != c.size {
                return Err(LayoutError::InconsistentSize {
                    symbolic_id: c.symbolic_id,
                    expected: first.size,
                    got: c.size,
                });
            }
            if let (Some(a), Some(b)) = (&first.ty, &c.ty)
                && a != b
            {
                return Err(LayoutError::Conflicting {
                    symbolic_id: c.symbolic_id,
                    what: format!("typed {} and {}", a.describe(), b.describe()),
                });
            }
            if first.default != c.default {
                return Err(LayoutError::Conflicting {
                    symbolic_id: c.symbolic_id,
                    what: format!(
                        "with the default values {} and {}",
                        hex(&first.default),
                        hex(&c.default)
                    ),
                });
            }
            return Ok(i);
        }
        let placed = match self.numbering {
            Numbering::Emulated => self.place_emulated(c),
            Numbering::Native => self.place_native(c)?,
        };
        let i = self.constants.len();
        self.index.insert(placed.constant.symbolic_id.clone(), i);
        self.constants.push(placed);
        Ok(i)
    }

    fn place_emulated(&mut self, c: SpecConstant) -> Placed {
        let end = self.blob.len() as u32;
        let offset = round_up(end, c.align);
        if offset > end {
            // The gap belongs to the previous constant's list, as DPC++ writes
            // it, so every constant's own descriptor keeps offset 0.
            if let Some(prev) = self.constants.last_mut() {
                let prev_size = prev.constant.size;
                prev.descriptors
                    .push(Descriptor::new(PADDING_ID, prev_size, offset - end));
            }
            self.blob.resize(offset as usize, 0);
        }
        self.blob.extend_from_slice(&c.default);
        let descriptors = vec![Descriptor::new(self.next_id, 0, c.size)];
        self.next_id += 1;
        Placed {
            constant: c,
            offset,
            descriptors,
        }
    }

    fn place_native(&mut self, c: SpecConstant) -> Result<Placed, LayoutError> {
        let Some(ty) = &c.ty else {
            return Err(LayoutError::NativeNeedsType(c.symbolic_id));
        };
        let next = &mut self.next_id;
        let descriptors = leaf_descriptors(ty, || {
            *next += 1;
            *next - 1
        });
        let at = self.blob.len() as u32;
        self.blob.extend_from_slice(&c.default);
        Ok(Placed {
            constant: c,
            offset: at,
            descriptors,
        })
    }

    /// Which numbering it uses.
    pub fn numbering(&self) -> Numbering {
        self.numbering
    }

    /// Placed constants in ascending numeric-ID order.
    pub fn constants(&self) -> &[Placed] {
        &self.constants
    }

    /// The placed constant `symbolic_id`.
    pub fn get(&self, symbolic_id: &str) -> Option<&Placed> {
        self.index.get(symbolic_id).map(|&i| &self.constants[i])
    }

    /// Whether it holds no constant.
    pub fn is_empty(&self) -> bool {
        self.constants.is_empty()
    }

    /// The default-values blob, laid out like the buffer.
    pub fn default_blob(&self) -> &[u8] {
        &self.blob
    }

    /// Writes `value` over the constant `symbolic_id` in `blob` (a buffer laid
    /// out like [`Layout::default_blob`]), checking the size.
    pub fn patch(
        &self,
        blob: &mut [u8],
        symbolic_id: &str,
        value: &[u8],
    ) -> Result<(), LayoutError> {
        let p = self
            .get(symbolic_id)
            .ok_or_else(|| LayoutError::UnknownSymbolicId(symbolic_id.to_string()))?;
        if value.len() != p.constant.size as usize {
            return Err(LayoutError::ValueSizeMismatch {
                symbolic_id: symbolic_id.to_string(),
                expected: p.constant.size,
                got: value.len(),
            });
        }
        if blob.len() != self.blob.len() {
            return Err(LayoutError::BlobSizeMismatch {
                expected: self.blob.len(),
                got: blob.len(),
            });
        }
        let at = p.offset as usize;
        blob[at..at + value.len()].copy_from_slice(value);
        Ok(())
    }
}

/// Native descriptors of one value, mirroring DPC++'s depth-first walk:
/// each scalar leaf gets the next ID from `next_id` and a descriptor at its
/// offset; a struct's trailing padding (explicit padding members included)
/// gets a padding descriptor. The SPIR-V side passes the module's SpecIds.
pub(crate) fn leaf_descriptors(ty: &SpecType, mut next_id: impl FnMut() -> u32) -> Vec<Descriptor> {
    let mut out = Vec::with_capacity(ty.leaf_count() as usize + 1);
    let mut offset = 0;
    walk(ty, &mut next_id, &mut offset, &mut out);
    out
}

fn walk(
    ty: &SpecType,
    next_id: &mut dyn FnMut() -> u32,
    offset: &mut u32,
    out: &mut Vec<Descriptor>,
) {
    match ty {
        SpecType::Scalar(k) => {
            out.push(Descriptor::new(next_id(), *offset, k.size()));
            *offset += k.size();
        }
        SpecType::Array { elem, len } => {
            for _ in 0..*len {
                walk(elem, next_id, offset, out);
            }
        }
        SpecType::Vector { elem, len } => {
            for _ in 0..*len {
                walk(&SpecType::Scalar(*elem), next_id, offset, out);
            }
        }
        SpecType::SyclVec { elem, len } => {
            let base = *offset;
            for _ in 0..*len {
                walk(&SpecType::Scalar(*elem), next_id, offset, out);
            }
            // A 3-element vec's fourth element: padding, as DPC++ describes
            // the tail of `vec<T, 3>`.
            let trailing = base + ty.size() - *offset;
            if trailing > 0 {
                out.push(Descriptor::new(PADDING_ID, *offset, trailing));
            }
            *offset = base + ty.size();
        }
        SpecType::Struct(s) => {
            let base = *offset;
            let mut local = base;
            for m in s.members() {
                local = base + m.offset;
                walk(&m.ty, next_id, &mut local, out);
            }
            let trailing = base + s.size() - local;
            if trailing > 0 {
                out.push(Descriptor::new(PADDING_ID, local, trailing));
            }
            *offset = base + s.size();
        }
        // Padding holds no value: like the implicit padding of a C++ struct it
        // is left to the enclosing struct's trailing-padding descriptor.
        SpecType::Padding(_) => {}
    }
}

#[cfg(test)]
mod tests;

/// Bytes as hex, for messages.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
