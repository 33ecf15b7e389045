//! The type of a specialization constant, laid out as CUDA C++ lays it out.
//!
//! A [`SpecType`] is a tree: scalars at the leaves; structs, arrays and vectors
//! above them, nested to any depth. Sizes and alignments follow the CUDA C++
//! ABI on NVPTX (the same as x86-64 for these types): a struct's members are at
//! offsets rounded up to their alignment, its alignment is the largest member
//! alignment and its size is rounded up to that alignment.

use super::LayoutError;

/// A scalar leaf type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ScalarKind {
    /// C++ `bool`: one byte, 0 or 1.
    Bool,
    /// `char`, `signed char`.
    I8,
    /// `unsigned char`, `bool` (one byte).
    U8,
    /// `short`.
    I16,
    /// `unsigned short`.
    U16,
    /// `int`.
    I32,
    /// `unsigned int`.
    U32,
    /// `long long`.
    I64,
    /// `unsigned long long`.
    U64,
    /// IEEE half precision, stored as its 16 bits (`__half`).
    F16,
    /// `float`.
    F32,
    /// `double`.
    F64,
    /// An integer of this many bytes whose signedness the image does not
    /// record: a member of a C++ struct, which PTX reads as untyped bits
    /// (`ld.param.b32`). Values of either signedness fit. Never a Rust
    /// type's leaf.
    Bits8,
    /// A 2-byte integer of unrecorded signedness.
    Bits16,
    /// A 4-byte integer of unrecorded signedness.
    Bits32,
    /// An 8-byte integer of unrecorded signedness.
    Bits64,
    /// `__nv_bfloat16`: `float`'s exponent with 7 mantissa bits.
    BF16,
}

impl ScalarKind {
    /// Size in bytes, which is also the alignment.
    pub const fn size(self) -> u32 {
        match self {
            ScalarKind::Bool | ScalarKind::I8 | ScalarKind::U8 | ScalarKind::Bits8 => 1,
            ScalarKind::I16
            | ScalarKind::U16
            | ScalarKind::F16
            | ScalarKind::BF16
            | ScalarKind::Bits16 => 2,
            ScalarKind::I32 | ScalarKind::U32 | ScalarKind::F32 | ScalarKind::Bits32 => 4,
            ScalarKind::I64 | ScalarKind::U64 | ScalarKind::F64 | ScalarKind::Bits64 => 8,
        }
    }

    /// Every kind, in the order of their numbers in property files.
    pub const ALL: [ScalarKind; 17] = [
        ScalarKind::Bool,
        ScalarKind::I8,
        ScalarKind::U8,
        ScalarKind::I16,
        ScalarKind::U16,
        ScalarKind::I32,
        ScalarKind::U32,
        ScalarKind::I64,
        ScalarKind::U64,
        ScalarKind::F16,
        ScalarKind::F32,
        ScalarKind::F64,
        ScalarKind::Bits8,
        ScalarKind::Bits16,
        ScalarKind::Bits32,
        ScalarKind::Bits64,
        ScalarKind::BF16,
    ];

    /// The kind's number in property files (its index in `Self::ALL`).
    pub fn code(self) -> u32 {
        Self::ALL.iter().position(|&k| k == self).unwrap_or(0) as u32
    }

    pub(crate) fn from_code(code: u32) -> Option<ScalarKind> {
        Self::ALL.get(code as usize).copied()
    }

    /// The C++ spelling, for messages and `inspect`.
    pub const fn cpp_name(self) -> &'static str {
        match self {
            ScalarKind::Bool => "bool",
            ScalarKind::I8 => "int8_t",
            ScalarKind::U8 => "uint8_t",
            ScalarKind::I16 => "int16_t",
            ScalarKind::U16 => "uint16_t",
            ScalarKind::I32 => "int32_t",
            ScalarKind::U32 => "uint32_t",
            ScalarKind::I64 => "int64_t",
            ScalarKind::U64 => "uint64_t",
            ScalarKind::F16 => "__half",
            ScalarKind::BF16 => "__nv_bfloat16",
            ScalarKind::F32 => "float",
            ScalarKind::F64 => "double",
            ScalarKind::Bits8 => "int8_t or uint8_t",
            ScalarKind::Bits16 => "int16_t or uint16_t",
            ScalarKind::Bits32 => "int32_t or uint32_t",
            ScalarKind::Bits64 => "int64_t or uint64_t",
        }
    }

    /// Whether a leaf the image records as `self` takes a value of type
    /// `value` (a Rust type's leaf): the same kind, or an integer (or a
    /// `bool` for one byte) of its size where the image does not record
    /// signedness.
    pub fn takes(self, value: ScalarKind) -> bool {
        use ScalarKind::*;
        self == value
            || matches!(
                (self, value),
                (Bits8, I8 | U8 | Bool)
                    | (Bits16, I16 | U16)
                    | (Bits32, I32 | U32)
                    | (Bits64, I64 | U64)
            )
    }
}

/// One member of a [`StructType`]: its byte offset in the struct and its type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Member {
    /// Its byte offset in the struct.
    pub offset: u32,
    /// Its type.
    pub ty: SpecType,
}

/// A struct with explicit member offsets, size and alignment.
///
/// Built either with C layout rules ([`SpecType::c_struct`]) or from a layout
/// that is already known, such as Rust's `offset_of!` of a `#[repr(C)]` struct
/// ([`SpecType::struct_with_layout`], which checks it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StructType {
    members: Vec<Member>,
    size: u32,
    align: u32,
}

impl StructType {
    /// Its members, by ascending offset.
    pub fn members(&self) -> &[Member] {
        &self.members
    }
    /// Its size in bytes, trailing padding included.
    pub fn size(&self) -> u32 {
        self.size
    }
    /// Its alignment in bytes.
    pub fn align(&self) -> u32 {
        self.align
    }
}

/// The type of a specialization constant.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SpecType {
    /// One scalar.
    Scalar(ScalarKind),
    /// A struct: its members at their offsets, its size and alignment.
    Struct(StructType),
    /// `T[len]`: elements at multiples of the element size.
    Array {
        /// The element type.
        elem: Box<SpecType>,
        /// How many elements.
        len: u32,
    },
    /// A CUDA vector type (`int2`, `float4`, …): `len` scalars, aligned to
    /// the whole size when `len` is 1, 2 or 4 (capped at 16 bytes, as CUDA's
    /// `double4`), to the element otherwise (`float3`).
    Vector {
        /// The element type.
        elem: ScalarKind,
        /// How many elements.
        len: u32,
    },
    /// SYCL 2020's `vec<T, len>` (and OpenCL's vectors in SPIR-V): `len`
    /// of 1, 2, 3, 4, 8 or 16 scalars; a 3-element vector is laid out as 4
    /// (the fourth holds no value), and the alignment is the whole size.
    SyclVec {
        /// The element type.
        elem: ScalarKind,
        /// How many elements (1, 2, 3, 4, 8 or 16).
        len: u32,
    },
    /// Bytes that hold no value: explicit padding members of Rust structs
    /// (see `ptxspec::Pad`). They get no numeric ID and are zero in blobs.
    Padding(u32),
}

impl SpecType {
    /// The type of one scalar.
    pub const fn scalar(kind: ScalarKind) -> SpecType {
        SpecType::Scalar(kind)
    }

    /// The type `elem[len]`.
    pub fn array(elem: SpecType, len: u32) -> SpecType {
        SpecType::Array {
            elem: Box::new(elem),
            len,
        }
    }

    /// CUDA's vector type of `len` `elem`s (`float4`: `vector(F32, 4)`).
    pub fn vector(elem: ScalarKind, len: u32) -> SpecType {
        SpecType::Vector { elem, len }
    }

    /// SYCL's `vec<elem, len>`.
    pub fn sycl_vec(elem: ScalarKind, len: u32) -> SpecType {
        SpecType::SyclVec { elem, len }
    }

    /// A struct of these members in order, laid out with C rules.
    pub fn c_struct(members: impl IntoIterator<Item = SpecType>) -> SpecType {
        let mut offset = 0u32;
        let mut align = 1u32;
        let members = members
            .into_iter()
            .map(|ty| {
                let a = ty.align();
                offset = round_up(offset, a);
                let m = Member { offset, ty };
                offset += m.ty.size();
                align = align.max(a);
                m
            })
            .collect();
        SpecType::Struct(StructType {
            members,
            size: round_up(offset, align),
            align,
        })
    }

    /// A struct whose layout is given (member offsets, total size and
    /// alignment), checked for consistency: members in ascending order,
    /// aligned, not overlapping, inside the size; size a multiple of the
    /// alignment, which is a power of two no smaller than any member's.
    pub fn struct_with_layout(
        members: Vec<Member>,
        size: u32,
        align: u32,
    ) -> Result<SpecType, LayoutError> {
        let bad = |why: String| Err(LayoutError::BadStructLayout(why));
        if !align.is_power_of_two() {
            return bad(format!("alignment {align} is not a power of two"));
        }
        if !size.is_multiple_of(align) {
            return bad(format!(
                "size {size} is not a multiple of alignment {align}"
            ));
        }
        let mut end = 0u32;
        for (i, m) in members.iter().enumerate() {
            let (a, s) = (m.ty.align(), m.ty.size());
            if m.offset < end {
                return bad(format!(
                    "member {i} at offset {} overlaps the one before",
                    m.offset
                ));
            }
            if m.offset % a != 0 {
                return bad(format!(
                    "member {i} at offset {} is not aligned to {a}",
                    m.offset
                ));
            }
            if a > align {
                return bad(format!(
                    "member {i} needs alignment {a}, more than the struct's {align}"
                ));
            }
            end = m.offset + s;
            if end > size {
                return bad(format!(
                    "member {i} ends at {end}, past the struct's size {size}"
                ));
            }
        }
        Ok(SpecType::Struct(StructType {
            members,
            size,
            align,
        }))
    }

    /// Size in bytes (`sizeof`).
    pub fn size(&self) -> u32 {
        match self {
            SpecType::Scalar(k) => k.size(),
            SpecType::Struct(s) => s.size,
            SpecType::Array { elem, len } => elem.size() * len,
            SpecType::Vector { elem, len } => elem.size() * len,
            SpecType::SyclVec { elem, len } => elem.size() * if *len == 3 { 4 } else { *len },
            SpecType::Padding(n) => *n,
        }
    }

    /// Alignment in bytes (`alignof`).
    pub fn align(&self) -> u32 {
        match self {
            SpecType::Scalar(k) => k.size(),
            SpecType::Struct(s) => s.align,
            SpecType::Array { elem, .. } => elem.align(),
            SpecType::Vector { elem, len } => match len {
                1 | 2 | 4 => (elem.size() * len).min(16),
                _ => elem.size(),
            },
            SpecType::SyclVec { .. } => self.size(),
            SpecType::Padding(_) => 1,
        }
    }

    /// Calls `f(offset, kind)` for every scalar leaf in depth-first order,
    /// the order in which leaves get their numeric IDs.
    pub fn for_each_leaf(&self, base: u32, f: &mut impl FnMut(u32, ScalarKind)) {
        match self {
            SpecType::Scalar(k) => f(base, *k),
            SpecType::Struct(s) => {
                for m in &s.members {
                    m.ty.for_each_leaf(base + m.offset, f);
                }
            }
            SpecType::Array { elem, len } => {
                let step = elem.size();
                for i in 0..*len {
                    elem.for_each_leaf(base + i * step, f);
                }
            }
            SpecType::Vector { elem, len } | SpecType::SyclVec { elem, len } => {
                for i in 0..*len {
                    f(base + i * elem.size(), *elem);
                }
            }
            SpecType::Padding(_) => {}
        }
    }

    /// Number of scalar leaves (numeric IDs in native form).
    pub fn leaf_count(&self) -> u32 {
        let mut n = 0;
        self.for_each_leaf(0, &mut |_, _| n += 1);
        n
    }

    /// A C++-like spelling, for messages and `inspect`.
    pub fn describe(&self) -> String {
        match self {
            SpecType::Scalar(k) => k.cpp_name().to_string(),
            SpecType::Struct(s) => {
                let inner: Vec<String> = s
                    .members
                    .iter()
                    .map(|m| format!("{}@{}", m.ty.describe(), m.offset))
                    .collect();
                format!(
                    "struct {{{}}} (size {}, align {})",
                    inner.join(", "),
                    s.size,
                    s.align
                )
            }
            SpecType::Array { elem, len } => format!("{}[{len}]", elem.describe()),
            SpecType::Vector { elem, len } => format!("{}{len}", elem.cpp_name()),
            SpecType::SyclVec { elem, len } => format!("vec<{}, {len}>", elem.cpp_name()),
            SpecType::Padding(n) => format!("pad[{n}]"),
        }
    }
}

/// `value` rounded up to a multiple of `align` (a power of two, or 0/1 for none).
pub const fn round_up(value: u32, align: u32) -> u32 {
    if align <= 1 {
        value
    } else {
        value.div_ceil(align) * align
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ScalarKind::*;

    #[test]
    fn c_struct_pads_in_the_middle_and_at_the_end() {
        // struct { int; char; int; char; }: 0, 4, 8, 12; size 16, align 4.
        let t = SpecType::c_struct([I32, I8, I32, I8].map(SpecType::Scalar));
        let SpecType::Struct(s) = &t else {
            unreachable!()
        };
        let offsets: Vec<u32> = s.members().iter().map(|m| m.offset).collect();
        assert_eq!(offsets, [0, 4, 8, 12]);
        assert_eq!((t.size(), t.align()), (16, 4));
    }

    #[test]
    fn char_then_double_puts_the_double_on_8() {
        let t = SpecType::c_struct([SpecType::Scalar(I8), SpecType::Scalar(F64)]);
        let SpecType::Struct(s) = &t else {
            unreachable!()
        };
        assert_eq!(s.members()[1].offset, 8);
        assert_eq!((t.size(), t.align()), (16, 8));
    }

    #[test]
    fn arrays_vectors_and_nesting() {
        let a = SpecType::c_struct([SpecType::Scalar(I32), SpecType::Scalar(F32)]);
        let pod = SpecType::c_struct([SpecType::array(a, 2), SpecType::vector(I32, 2)]);
        assert_eq!((pod.size(), pod.align()), (24, 8));
        assert_eq!(pod.leaf_count(), 6);
        assert_eq!(SpecType::vector(F32, 3).align(), 4);
        assert_eq!(SpecType::vector(F32, 4).align(), 16);
        assert_eq!(SpecType::vector(F64, 4).align(), 16);
        let mut leaves = vec![];
        pod.for_each_leaf(0, &mut |o, k| leaves.push((o, k)));
        assert_eq!(
            leaves,
            [
                (0, I32),
                (4, F32),
                (8, I32),
                (12, F32),
                (16, I32),
                (20, I32)
            ]
        );
    }

    #[test]
    fn struct_with_layout_rejects_inconsistent_layouts() {
        let m = |offset, k| Member {
            offset,
            ty: SpecType::Scalar(k),
        };
        assert!(SpecType::struct_with_layout(vec![m(0, I32), m(4, I8)], 8, 4).is_ok());
        for (members, size, align) in [
            (vec![m(0, I32), m(2, I8)], 8, 4),  // overlap
            (vec![m(0, I8), m(2, I32)], 8, 4),  // misaligned
            (vec![m(0, I32), m(4, I32)], 6, 2), // member alignment above struct's
            (vec![m(0, I32), m(8, I32)], 8, 4), // past the end
            (vec![m(0, I32)], 6, 4),            // size not multiple of align
            (vec![m(0, I32)], 12, 3),           // align not power of two
        ] {
            assert!(
                SpecType::struct_with_layout(members.clone(), size, align).is_err(),
                "{members:?} {size} {align}"
            );
        }
    }
}
