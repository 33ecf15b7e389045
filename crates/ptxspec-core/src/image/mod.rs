//! The device-image contract: what the post-link writes and everything
//! else reads — the property sets of an image, its kernels' signatures, where
//! the values are placed, how they reach a kernel ([`Delivery`]), and
//! [`launch_layout`] and [`LaunchLayout::fill`], the one place that turns a signature, a delivery,
//! values and the caller's arguments into a kernel's launch parameters.
//!
//! The post-link writes images through the signatures and an image's one
//! placement (a [`Delivery`]); the bundle, the runtime, the CLI and build
//! scripts read them through [`ImageData`], and ask [`delivery()`] how a build's
//! code takes the values. Nothing above this module decides again how
//! values reach kernels. Which parameters take device memory rather than
//! a value is part of the contract too ([`ImageData::address_params`], read
//! from the kernels' code by `addresses`).

pub(crate) mod addresses;
mod delivery;
mod few_bytes;
mod launch;
mod ltoir;
mod post_linked;
pub(crate) mod read_only;
mod signature;
mod written;

pub use delivery::{CodeForm, Delivery, delivery};
pub use launch::{AddressParams, KernelArg, LaunchLayout, LaunchParams, launch_layout};
pub use ltoir::{ContainerError, LtoIr};
pub use post_linked::{ImageData, LtoImage, Slot};
pub(crate) use signature::KERNEL_SIGNATURES_SET;
pub(crate) use signature::write as write_signatures;
pub use signature::{HandlerParam, KernelParam, KernelSignature};
pub use written::{LtoIrFile, WrittenImage, WrittenImageError, read_written};

/// The property file of a device image written as `<stem>.ptx` beside
/// `<stem>.prop` (what `ptxspec post-link` and `ptxspec compile` write):
/// `Some` when `ptx`'s sibling `.prop` exists and reads as an image's
/// property sets. Such PTX is post-linked already: it is embedded or
/// loaded as it is, never post-linked again.
pub fn prop_beside(ptx: &std::path::Path) -> Option<std::path::PathBuf> {
    let prop = ptx.with_extension("prop");
    let meta = std::fs::metadata(&prop).ok()?;
    // A property file is small; anything else is not one (and is not read).
    if !meta.is_file() || meta.len() > 64 << 20 {
        return None;
    }
    let text = crate::files::read_input_text(&prop).ok()?;
    let sets = crate::props::PropertySets::parse(&text).ok()?;
    let is_image = [
        KERNEL_SIGNATURES_SET,
        crate::props::SPEC_CONSTANTS_SET,
        crate::props::DEVICE_REQUIREMENTS_SET,
    ]
    .iter()
    .any(|set| sets.get(set).is_some());
    is_image.then_some(prop)
}

/// A device image that breaks the contract, or values and arguments that
/// do not fit it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// An image whose files cannot be read or disagree with each other.
    #[error("device image {image}: {what}")]
    BadImage {
        /// The image's ID.
        image: String,
        /// What is wrong.
        what: String,
    },
    /// An image whose property sets break their schema.
    #[error("device image {image}: {source}")]
    Schema {
        /// The image's ID.
        image: String,
        #[source]
        /// The broken rule.
        source: crate::props::SchemaError,
    },
    /// An unknown specialization constant, a value of the wrong size, or a
    /// value for an image compiled with its defaults.
    #[error("spec_const_error: {what}")]
    SpecConst {
        /// The constant's symbolic ID.
        id: String,
        /// What is wrong.
        what: String,
    },
    /// Arguments that do not match the kernel's parameters.
    #[error("kernel arguments: {what}")]
    KernelArgument {
        /// The kernel.
        kernel: String,
        /// The argument (its index among the caller's), where one is wrong.
        argument: Option<usize>,
        /// What is wrong.
        what: String,
    },
}

/// One external device constant of an image's LTO-IR and the bytes that
/// define it (what an LTO link's definitions unit holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Definition<'a> {
    /// `ptxspec::detail::lto_slot<KEY, SIZE, ALIGN>`, mangled.
    pub symbol: &'a str,
    /// The alignment the declaration promises.
    pub align: u32,
    /// The value's bytes.
    pub bytes: &'a [u8],
}
