//! The device-image contract: what the post-link writes and everything
//! else reads — the property sets of an image, its kernels' signatures, where
//! the values are placed, how they reach a kernel ([`Delivery`]), and
//! [`launch_params`], the one function that turns a signature, a delivery,
//! values and the caller's arguments into a kernel's launch parameters.
//!
//! The post-link writes images through the signatures and [`Placement`]; the
//! bundle, the runtime, `inspect`, the CLI and build scripts read them
//! through [`Image`]. Nothing above this module decides again how values
//! reach kernels.

mod device_image;
mod launch;
mod signature;

pub use device_image::{Image, LtoImage, Slot};
pub use launch::{Delivery, KernelArg, LaunchParams, launch_params};
pub(crate) use signature::write as write_signatures;
pub use signature::{KERNEL_SIGNATURES_SET, KernelParam, KernelSignature, ParamKind, Placement};

/// A device image that breaks the contract, or values and arguments that
/// do not fit it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// An image whose files cannot be read or disagree with each other.
    #[error("device image {image}: {what}")]
    BadImage { image: String, what: String },
    /// An image whose property sets break their schema.
    #[error("device image {image}: {source}")]
    Schema {
        image: String,
        #[source]
        source: crate::props::SchemaError,
    },
    /// An unknown specialization constant, a value of the wrong size, or a
    /// value for an image compiled with its defaults.
    #[error("spec_const_error: {0}")]
    SpecConst(String),
    /// Arguments that do not match the kernel's parameters.
    #[error("kernel arguments: {0}")]
    KernelArgument(String),
}
