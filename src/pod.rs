//! The one place where ptxspec asserts bytemuck's `Pod` for types of its
//! own: each impl states why every bit pattern is a valid value and there
//! is no padding, which the types around it make true. The rest of the
//! crate has no unsafe code but the driver layer (`runtime/cuda.rs`).
#![allow(unsafe_code)]

use crate::spec_id::Pad;
use crate::sycl_types::{Len, Marray, SyclVec, VecLayout};

// SAFETY: a transparent wrapper of a byte array: any bit pattern is valid,
// zero is valid, and there is no padding.
unsafe impl<const N: usize> bytemuck::Zeroable for Pad<N> {}
// SAFETY: as for `Zeroable`: every bit pattern of the bytes is a valid `Pad`.
unsafe impl<const N: usize> bytemuck::Pod for Pad<N> {}

// SAFETY: repr(C) of `[T; N]` (Pod), the padding elements (Pod, zero where
// made by `new`) and a zero-size alignment marker; `VecLayout`'s contract
// makes the size exactly the alignment's multiple, so there are no padding
// bytes. Zero is a valid value of every field.
unsafe impl<T: bytemuck::Zeroable, const N: usize> bytemuck::Zeroable for SyclVec<T, N> where
    Len<N>: VecLayout<T>
{
}
// SAFETY: as above; `T` and `Pad` are Pod, the marker is a zero-size array.
unsafe impl<T: bytemuck::Pod, const N: usize> bytemuck::Pod for SyclVec<T, N> where
    Len<N>: VecLayout<T>
{
}

// SAFETY: a transparent wrapper of `[T; N]`.
unsafe impl<T: bytemuck::Zeroable, const N: usize> bytemuck::Zeroable for Marray<T, N> {}
// SAFETY: a transparent wrapper of `[T; N]`, which is Pod when `T` is.
unsafe impl<T: bytemuck::Pod, const N: usize> bytemuck::Pod for Marray<T, N> {}

/// `unsafe impl`s of `Pod` and `Zeroable` for a struct `spec_struct!`
/// declared: `repr(C)`, every field `Pod`, and its size the sum of its
/// fields' (the macro checks both at compile time), so it has no padding
/// and every bit pattern of its fields is a valid value.
#[doc(hidden)]
#[macro_export]
macro_rules! __spec_struct_pod {
    ($name:ident) => {
        // SAFETY: repr(C), every field is Pod and the size is the sum of the
        // field sizes (both checked by spec_struct!), so there is no padding.
        #[allow(unsafe_code)]
        unsafe impl $crate::spec_id::__private::bytemuck::Zeroable for $name {}
        // SAFETY: as for `Zeroable`, and every bit pattern of a Pod field is
        // valid.
        #[allow(unsafe_code)]
        unsafe impl $crate::spec_id::__private::bytemuck::Pod for $name {}
    };
}
