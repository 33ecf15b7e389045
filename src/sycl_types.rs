//! SYCL 2020's `vec<T, N>` and `marray<T, N>` as specialization-constant
//! values, laid out as SYCL (and the device header's `ptxspec::vec`,
//! `ptxspec::marray`) lays them out.
//!
//! * [`SyclVec`]`<T, N>`: N of 1, 2, 3, 4, 8 or 16; a 3-element vector takes
//!   the room of 4 (the fourth is zero and holds no value), and the
//!   alignment is the whole size (`SyclVec<f64, 16>`: 128 bytes, aligned to 128).
//! * [`Marray`]`<T, N>`: N elements laid out as `[T; N]`.
//!
//! Rust cannot compute an alignment from a const parameter, so `SyclVec`'s comes
//! from [`VecLayout`], implemented for every element type and length SYCL
//! has; its size and alignment are checked against SYCL's rule in tests.

use crate::spec_id::{Bool, F16, SpecConstType};
use ptxspec_core::layout::{ScalarKind, SpecType};

/// A length of a SYCL `vec`.
pub struct Len<const N: usize>;

/// A type whose alignment is `N` bytes and size zero.
macro_rules! align_markers {
    ($($name:ident = $n:literal),*) => {$(
        #[doc(hidden)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[repr(align($n))]
        pub struct $name;
    )*};
}
align_markers!(
    A1 = 1,
    A2 = 2,
    A4 = 4,
    A8 = 8,
    A16 = 16,
    A32 = 32,
    A64 = 64,
    A128 = 128
);

/// The layout of `SyclVec<T, N>`: the element's kind, the padding after the N
/// elements (one element for N = 3) and a zero-size marker of the
/// alignment.
///
/// Sealed: implemented here alone, for the element types and lengths SYCL
/// has. `Pad` is `[T; 1]` for N = 3 and `[T; 0]` otherwise, and `Align` a
/// zero-size type aligned to `size_of::<T>() * (N == 3 ? 4 : N)`: then
/// `SyclVec<T, N>` has no padding bytes, which its `Pod` impl (`pod.rs`)
/// relies on — and which no other crate can break by implementing it.
pub trait VecLayout<T>: sealed::Sealed<T> {
    /// Bytes after the elements up to the vector's size (3-element vectors take 4 elements' room).
    type Pad: bytemuck::Pod;
    /// A zero-sized type with the vector's alignment.
    type Align: Copy + Default + 'static;
    /// The element's kind.
    const KIND: ScalarKind;
}

/// `VecLayout` is implemented in this module alone.
mod sealed {
    /// Not nameable outside the crate: no other crate can implement
    /// [`VecLayout`](super::VecLayout).
    pub trait Sealed<T> {}
}

macro_rules! vec_layouts {
    ($($t:ty => $kind:ident, [$a1:ident, $a2:ident, $a4:ident, $a8:ident, $a16:ident]);* $(;)?) => {$(
        // The padding and alignments SYCL's rule gives for this element
        // size (checked by the tests below).
        impl VecLayout<$t> for Len<1> { type Pad = [$t; 0]; type Align = $a1; const KIND: ScalarKind = ScalarKind::$kind; }
        impl VecLayout<$t> for Len<2> { type Pad = [$t; 0]; type Align = $a2; const KIND: ScalarKind = ScalarKind::$kind; }
        impl VecLayout<$t> for Len<3> { type Pad = [$t; 1]; type Align = $a4; const KIND: ScalarKind = ScalarKind::$kind; }
        impl VecLayout<$t> for Len<4> { type Pad = [$t; 0]; type Align = $a4; const KIND: ScalarKind = ScalarKind::$kind; }
        impl VecLayout<$t> for Len<8> { type Pad = [$t; 0]; type Align = $a8; const KIND: ScalarKind = ScalarKind::$kind; }
        impl VecLayout<$t> for Len<16> { type Pad = [$t; 0]; type Align = $a16; const KIND: ScalarKind = ScalarKind::$kind; }
        impl sealed::Sealed<$t> for Len<1> {}
        impl sealed::Sealed<$t> for Len<2> {}
        impl sealed::Sealed<$t> for Len<3> {}
        impl sealed::Sealed<$t> for Len<4> {}
        impl sealed::Sealed<$t> for Len<8> {}
        impl sealed::Sealed<$t> for Len<16> {}
    )*};
}
// Per element size s: alignments s, 2s, 4s (3 and 4 elements), 8s, 16s.
vec_layouts!(
    i8 => I8, [A1, A2, A4, A8, A16];
    u8 => U8, [A1, A2, A4, A8, A16];
    Bool => Bool, [A1, A2, A4, A8, A16];
    i16 => I16, [A2, A4, A8, A16, A32];
    u16 => U16, [A2, A4, A8, A16, A32];
    F16 => F16, [A2, A4, A8, A16, A32];
    i32 => I32, [A4, A8, A16, A32, A64];
    u32 => U32, [A4, A8, A16, A32, A64];
    f32 => F32, [A4, A8, A16, A32, A64];
    i64 => I64, [A8, A16, A32, A64, A128];
    u64 => U64, [A8, A16, A32, A64, A128];
    f64 => F64, [A8, A16, A32, A64, A128];
);

/// SYCL 2020's `vec<T, N>` (the device header's `ptxspec::vec<T, N>`).
#[repr(C)]
pub struct SyclVec<T, const N: usize>
where
    Len<N>: VecLayout<T>,
{
    /// The elements.
    pub elems: [T; N],
    pad: <Len<N> as VecLayout<T>>::Pad,
    align: [<Len<N> as VecLayout<T>>::Align; 0],
}

impl<T: bytemuck::Pod, const N: usize> SyclVec<T, N>
where
    Len<N>: VecLayout<T>,
{
    /// A vector of these elements (a 3-element vector's fourth is zero).
    pub fn new(elems: [T; N]) -> Self {
        SyclVec {
            elems,
            pad: bytemuck::Zeroable::zeroed(),
            align: [],
        }
    }
}

impl<T: Copy, const N: usize> Clone for SyclVec<T, N>
where
    Len<N>: VecLayout<T>,
{
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Copy, const N: usize> Copy for SyclVec<T, N> where Len<N>: VecLayout<T> {}

impl<T: PartialEq, const N: usize> PartialEq for SyclVec<T, N>
where
    Len<N>: VecLayout<T>,
{
    fn eq(&self, other: &Self) -> bool {
        self.elems == other.elems
    }
}

impl<T: std::fmt::Debug, const N: usize> std::fmt::Debug for SyclVec<T, N>
where
    Len<N>: VecLayout<T>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "vec{:?}", self.elems)
    }
}

impl<T, const N: usize> SpecConstType for SyclVec<T, N>
where
    Len<N>: VecLayout<T>,
{
    fn spec_type() -> SpecType {
        SpecType::sycl_vec(<Len<N> as VecLayout<T>>::KIND, N as u32)
    }
}

/// SYCL 2020's `marray<T, N>` (the device header's `ptxspec::marray<T, N>`):
/// laid out as `[T; N]`.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Marray<T, const N: usize>(pub [T; N]);

impl<T: SpecConstType, const N: usize> SpecConstType for Marray<T, N> {
    fn spec_type() -> SpecType {
        SpecType::array(T::spec_type(), N as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SYCL's rule: size = element size × (N == 3 ? 4 : N) = alignment.
    fn check<T, const N: usize>()
    where
        Len<N>: VecLayout<T>,
        T: bytemuck::Pod,
    {
        let stored = if N == 3 { 4 } else { N };
        let want = std::mem::size_of::<T>() * stored;
        assert_eq!(
            std::mem::size_of::<SyclVec<T, N>>(),
            want,
            "{}",
            std::any::type_name::<SyclVec<T, N>>()
        );
        assert_eq!(
            std::mem::align_of::<SyclVec<T, N>>(),
            want,
            "{}",
            std::any::type_name::<SyclVec<T, N>>()
        );
        let ty = <SyclVec<T, N> as SpecConstType>::spec_type();
        assert_eq!((ty.size() as usize, ty.align() as usize), (want, want));
        assert_eq!(ty.leaf_count() as usize, N);
    }

    macro_rules! all_lengths {
        ($($t:ty),*) => {$(
            check::<$t, 1>(); check::<$t, 2>(); check::<$t, 3>();
            check::<$t, 4>(); check::<$t, 8>(); check::<$t, 16>();
        )*};
    }

    #[test]
    fn every_vec_has_sycls_size_and_alignment() {
        all_lengths!(i8, u8, Bool, i16, u16, F16, i32, u32, f32, i64, u64, f64);
    }

    #[test]
    fn a_three_element_vec_is_four_with_a_zero_fourth() {
        let v = SyclVec::new([1.0f32, 2.0, 3.0]);
        let bytes = bytemuck::bytes_of(&v);
        assert_eq!(bytes.len(), 16);
        assert_eq!(&bytes[12..], &[0; 4]);
        assert_eq!(
            bytemuck::cast::<SyclVec<f32, 3>, [f32; 4]>(v),
            [1.0, 2.0, 3.0, 0.0]
        );
        let ty = <SyclVec<f32, 3> as SpecConstType>::spec_type();
        let mut leaves = Vec::new();
        ty.for_each_leaf(0, &mut |o, k| leaves.push((o, k)));
        assert_eq!(
            leaves,
            [
                (0, ScalarKind::F32),
                (4, ScalarKind::F32),
                (8, ScalarKind::F32)
            ]
        );
        let m = Marray([1.0f32, 2.0, 3.0]);
        assert_eq!(bytemuck::bytes_of(&m).len(), 12);
        assert_eq!(<Marray<f32, 3> as SpecConstType>::spec_type().align(), 4);
    }
}
