//! Rust-side names of specialization constants: [`SpecId<T>`] and the
//! [`SpecConstType`] descriptions of value types.

use std::marker::PhantomData;

use ptxspec_core::layout::{Member, ScalarKind, SpecType};

/// A type that can be the value of a specialization constant: it knows its
/// CUDA C++ layout.
///
/// Implemented for the scalars, arrays of them, [`Bool`], [`F16`], [`BF16`], [`Pad`],
/// tuples (described as C structs of their members, for layout work; tuples
/// are not `Pod` and cannot carry values) and, through [`spec_struct!`](crate::spec_struct!), for
/// your own `#[repr(C)]` structs.
pub trait SpecConstType {
    /// The layout of the type, as the post-link and the device header see it.
    fn spec_type() -> SpecType;
}

macro_rules! scalar_types {
    ($($t:ty => $k:ident),* $(,)?) => {$(
        impl SpecConstType for $t {
            fn spec_type() -> SpecType { SpecType::Scalar(ScalarKind::$k) }
        }
    )*};
}
scalar_types!(i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32, u32 => U32,
              i64 => I64, u64 => U64, f32 => F32, f64 => F64, Bool => Bool, F16 => F16, BF16 => BF16);

impl<T: SpecConstType, const N: usize> SpecConstType for [T; N] {
    fn spec_type() -> SpecType {
        SpecType::array(T::spec_type(), N as u32)
    }
}

macro_rules! tuple_types {
    ($(($($t:ident),+)),* $(,)?) => {$(
        impl<$($t: SpecConstType),+> SpecConstType for ($($t,)+) {
            fn spec_type() -> SpecType { SpecType::c_struct([$($t::spec_type()),+]) }
        }
    )*};
}
tuple_types!(
    (A),
    (A, B),
    (A, B, C),
    (A, B, C, D),
    (A, B, C, D, E),
    (A, B, C, D, E, F)
);

/// C++ `bool` as a specialization-constant value: one byte, 0 or 1.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Bool(pub u8);

impl From<bool> for Bool {
    fn from(b: bool) -> Self {
        Bool(b as u8)
    }
}
impl From<Bool> for bool {
    fn from(b: Bool) -> Self {
        b.0 != 0
    }
}

/// A half-precision float (`__half`) as its 16 bits.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, bytemuck::Pod, bytemuck::Zeroable)]
pub struct F16(pub u16);

/// A bfloat16 (`__nv_bfloat16`) as its 16 bits: `f32`'s upper half.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BF16(pub u16);

/// `N` bytes of explicit padding in a [`spec_struct!`](crate::spec_struct!): `bytemuck::Pod` admits
/// no implicit padding, so write it out; it gets no numeric ID and is zero in
/// the default blob, exactly like a C++ struct's implicit padding.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pad<const N: usize>(pub [u8; N]);

impl<const N: usize> Default for Pad<N> {
    fn default() -> Self {
        Pad([0; N])
    }
}
impl<const N: usize> SpecConstType for Pad<N> {
    fn spec_type() -> SpecType {
        SpecType::Padding(N as u32)
    }
}

/// Names a specialization constant by its symbolic ID — the qualified name of
/// the device code's `specialization_id` (`"coeff_id"`, `"a::sc"`,
/// `"S::sc"`, `"same<float>"`), or the ID given to
/// `PTXSPEC_SPECIALIZATION_ID_NAMED` — and carries its value type —
/// and, like SYCL's `specialization_id`, may carry its default value, which
/// host code reads where no image of a bundle uses the constant.
pub struct SpecId<T> {
    symbolic_id: &'static str,
    default: Option<T>,
    _value: PhantomData<fn() -> T>,
}

impl<T> SpecId<T> {
    /// `symbolic_id` must be the string the device code uses.
    pub const fn new(symbolic_id: &'static str) -> Self {
        SpecId {
            symbolic_id,
            default: None,
            _value: PhantomData,
        }
    }

    /// The same, with the default value the device code declares: what
    /// `get_specialization_constant` returns for a constant that no image
    /// of the bundle uses and that was not set (images that use it carry
    /// their own default, which they keep).
    pub const fn with_default(symbolic_id: &'static str, default: T) -> Self {
        SpecId {
            symbolic_id,
            default: Some(default),
            _value: PhantomData,
        }
    }

    /// The symbolic ID this names.
    pub const fn symbolic_id(&self) -> &'static str {
        self.symbolic_id
    }

    /// The default this `SpecId` carries, if any.
    pub const fn default_value(&self) -> Option<&T> {
        self.default.as_ref()
    }
}

impl<T: bytemuck::Pod + SpecConstType> SpecId<T> {
    /// The value type's layout.
    pub fn spec_type(&self) -> SpecType {
        T::spec_type()
    }
}

impl<T: Copy> Clone for SpecId<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Copy> Copy for SpecId<T> {}
impl<T> std::fmt::Debug for SpecId<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SpecId<{}>({:?})",
            std::any::type_name::<T>(),
            self.symbolic_id
        )
    }
}

#[doc(hidden)]
pub mod __private {
    pub use bytemuck;
    pub use core::mem::{align_of, offset_of, size_of};

    /// Fails to compile unless `T: Pod`.
    pub const fn assert_pod<T: bytemuck::Pod>() {}

    pub fn member(offset: usize, ty: super::SpecType) -> super::Member {
        super::Member {
            offset: offset as u32,
            ty,
        }
    }
}

/// Declares a `#[repr(C)]` struct usable as a specialization-constant value:
/// it derives `Clone, Copy, Debug, PartialEq`, implements `bytemuck::Pod` and
/// [`SpecConstType`] with member offsets taken from `core::mem::offset_of!`.
///
/// Checked at compile time: every field must be `Pod`, and the struct must
/// have no implicit padding (its size must equal the sum of its fields'):
/// write padding out with [`Pad<N>`](crate::Pad).
///
/// ```
/// ptxspec::spec_struct! {
///     /// DPC++'s SYCL 2020 spec-constant design's `Nested`.
///     pub struct Nested { pub a: f32, pub b: f32 }
/// }
/// ptxspec::spec_struct! {
///     pub struct WithPadding { pub x: i32, pub c: u8, pub _pad: ptxspec::Pad<3> }
/// }
/// use ptxspec::SpecConstType;
/// assert_eq!(Nested::spec_type().size(), 8);
/// assert_eq!(WithPadding::spec_type().leaf_count(), 2);
/// ```
#[macro_export]
macro_rules! spec_struct {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident { $($(#[$fattr:meta])* $fvis:vis $field:ident : $fty:ty),* $(,)? }
    ) => {
        $(#[$attr])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq)]
        $vis struct $name { $($(#[$fattr])* $fvis $field: $fty),* }

        const _: () = {
            use $crate::spec_id::__private as p;
            $(p::assert_pod::<$fty>();)*
            assert!(
                p::size_of::<$name>() == 0 $(+ p::size_of::<$fty>())*,
                concat!("spec_struct! ", stringify!($name),
                        " has implicit padding: add ptxspec::Pad<N> fields where the gaps are")
            );
        };
        // repr(C), every field Pod and no padding (checked above).
        $crate::__spec_struct_pod!($name);

        impl $crate::SpecConstType for $name {
            fn spec_type() -> $crate::layout::SpecType {
                use $crate::spec_id::__private as p;
                let members = vec![$(p::member(
                    p::offset_of!($name, $field),
                    <$fty as $crate::SpecConstType>::spec_type(),
                )),*];
                // offset_of! of a repr(C) struct is consistent by construction.
                $crate::layout::SpecType::struct_with_layout(
                    members,
                    p::size_of::<$name>() as u32,
                    p::align_of::<$name>() as u32,
                ).expect("repr(C) layout from offset_of! is consistent")
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptxspec_core::layout::{Layout, Numbering, SpecConstant};

    crate::spec_struct! {
        struct Nested { a: f32, b: f32 }
    }
    crate::spec_struct! {
        struct A { x: i32, n: Nested }
    }
    crate::spec_struct! {
        struct Padded { a: i32, b: u8, _p0: Pad<3>, c: i32, d: u8, _p1: Pad<3> }
    }

    #[test]
    fn derived_layouts_equal_c_layouts() {
        use ScalarKind::*;
        let c_nested = SpecType::c_struct([SpecType::Scalar(F32), SpecType::Scalar(F32)]);
        assert_eq!(Nested::spec_type(), c_nested);
        assert_eq!(
            A::spec_type(),
            SpecType::c_struct([SpecType::Scalar(I32), c_nested])
        );
        assert_eq!(<(i32, (f32, f32))>::spec_type(), A::spec_type());
        assert_eq!(<[[f32; 3]; 3]>::spec_type().size(), 36);
    }

    #[test]
    fn explicit_padding_numbers_like_implicit_padding() {
        let c = SpecType::c_struct(
            [
                ScalarKind::I32,
                ScalarKind::I8,
                ScalarKind::I32,
                ScalarKind::I8,
            ]
            .map(SpecType::Scalar),
        );
        let layout_of = |ty: SpecType| {
            Layout::build(
                Numbering::Native,
                [SpecConstant::typed("p", ty, vec![0; 16]).unwrap()],
            )
            .unwrap()
            .get("p")
            .unwrap()
            .descriptors
            .clone()
        };
        assert_eq!(layout_of(Padded::spec_type()), layout_of(c));
    }

    #[test]
    fn values_are_bytes() {
        let v = A {
            x: 1,
            n: Nested { a: 2.0, b: 3.0 },
        };
        let bytes = bytemuck::bytes_of(&v);
        assert_eq!(&bytes[0..4], &1i32.to_le_bytes());
        assert_eq!(&bytes[8..12], &3.0f32.to_le_bytes());
        let id: SpecId<A> = SpecId::new("id_A");
        assert_eq!(id.spec_type().size(), 12);
        assert_eq!(
            format!("{id:?}"),
            format!("SpecId<{}>(\"id_A\")", std::any::type_name::<A>())
        );
    }
}
