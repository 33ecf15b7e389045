//! The device-image contract, re-exported from `ptxspec-core` on purpose.
//!
//! What an image is — its kernels' signatures, where its values are placed
//! and how a build's code takes them, its LTO-IR, and the cubins linked from
//! it — is one contract that the post-link writes and every reader shares.
//! These types are part of `ptxspec`'s API (its semver covers them); the
//! rest of `ptxspec-core` is not.

pub use ptxspec_core::image::{
    Delivery, HandlerParam, Image, ImageError, KernelParam, KernelSignature, LtoImage, Slot,
};
pub use ptxspec_core::lto::{Cubin, Source as CubinSource};

// The contract's functions the bundle and runtime call (not re-exported).
pub(crate) use ptxspec_core::image::{CodeForm, KernelArg, LaunchLayout, delivery, launch_layout};
