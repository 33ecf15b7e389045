//! Device images: the post-linked PTX of a program's kernels with its
//! property sets, and optionally the LTO-IR of its translation units.
//!
//! [`Image`] is what a program holds of one: made from the files the
//! post-link wrote ([`Image::new`], [`Image::with_ltoir`]) or taken from a
//! bundle ([`KernelBundle::images`](crate::KernelBundle::images)), and
//! given to [`KernelBundle::from_images`](crate::KernelBundle::from_images).
//! It answers what a program asks of an image — its kernels and their
//! parameters, its constants and their defaults, what it needs of a
//! device — and nothing of how the runtime places values in it: that stays
//! inside ptxspec, free to change.
//!
//! The signature types ([`KernelSignature`], [`KernelParam`],
//! [`HandlerParam`]), [`Delivery`] and [`Cubin`] are plain data shared with
//! `ptxspec-core`, re-exported on purpose (this crate's semver covers them).

use std::sync::Arc;

use crate::error::Error;
use ptxspec_core::features::Requirements;

pub use ptxspec_core::image::{Delivery, HandlerParam, KernelParam, KernelSignature};
pub use ptxspec_core::lto::{Cubin, Source as CubinSource};

// The contract's types and functions the bundle and runtime use inside the
// crate (not re-exported).
pub(crate) use ptxspec_core::image::ImageData;
pub(crate) use ptxspec_core::image::{
    AddressParams, CodeForm, KernelArg, LaunchLayout, Slot, delivery, launch_layout,
};

/// One device image. Cloning it is cheap (the image is shared, never
/// copied).
#[derive(Clone)]
pub struct Image {
    data: Arc<ImageData>,
}

impl Image {
    /// An image from the post-link's PTX and `.prop` text, known by `id`
    /// (the post-link's file stem). Property sets that cannot be read, or
    /// that disagree with each other, are [`Error::BadImage`].
    pub fn new(id: impl Into<String>, ptx: impl Into<String>, props: &str) -> Result<Image, Error> {
        Ok(Image::from_data(Arc::new(ImageData::new(id, ptx, props)?)))
    }

    /// The image whose property file (`<stem>.prop`, as `ptxspec
    /// post-link` or `ptxspec compile` wrote it) is `prop`, with the
    /// `<stem>.ptx` beside it and its `<stem>.ltoir` where the property file
    /// records one, once no post-link writes into the folder. The property file records the others' SHA-256: a file
    /// whose hash differs (damaged, or another image's) is
    /// [`Error::BadImage`] naming it, before any of it is used; a file that
    /// cannot be read is [`Error::File`].
    pub fn read(prop: impl AsRef<std::path::Path>) -> Result<Image, Error> {
        use ptxspec_core::image::{LtoIrFile, WrittenImageError};
        match ptxspec_core::postlink::read_image(prop.as_ref(), LtoIrFile::IfPresent) {
            Ok(written) => Ok(Image::from_data(Arc::new(written.image))),
            Err(WrittenImageError::Io { path, source }) => Err(Error::File {
                what: format!("reading device image file {}", path.display()),
                source,
            }),
            Err(WrittenImageError::Bad { path, what }) => Err(Error::BadImage {
                image: path.display().to_string(),
                what,
            }),
        }
    }

    /// The same image with the LTO-IR of its translation units (the
    /// post-link's `.ltoir` file), which [`SpecMode::Lto`](crate::SpecMode::Lto)
    /// links with the values. A container that cannot be read is
    /// [`Error::BadImage`].
    pub fn with_ltoir(self, ltoir: &[u8]) -> Result<Image, Error> {
        let data = Arc::unwrap_or_clone(self.data);
        Ok(Image::from_data(Arc::new(data.with_ltoir(ltoir)?)))
    }

    /// The image's name (the post-link's file stem).
    pub fn id(&self) -> &str {
        self.data.id()
    }

    /// The post-link's PTX: the constants read from the buffer (emulated),
    /// or replaced by their defaults (an image compiled ahead of time).
    pub fn ptx(&self) -> &str {
        self.data.ptx()
    }

    /// Whether the image carries LTO-IR (an LTO build can link it).
    pub fn has_ltoir(&self) -> bool {
        self.data.ltoir().is_some()
    }

    /// Its kernels' signatures, in the order the image lists them.
    pub fn kernels(&self) -> &[KernelSignature] {
        self.data.kernels()
    }

    /// The signature of kernel `name`, if the image defines it.
    pub fn kernel(&self, name: &str) -> Option<&KernelSignature> {
        self.data.kernel(name)
    }

    /// The name of the kernel `name` means: `name` itself where the image
    /// defines it, else the one mangled kernel whose C++ function is `name`
    /// (`layernorm_forward_kernel3`, `ns::damp`, as launches resolve them).
    /// `None` where the image has no such kernel, or several (overloads).
    pub fn resolve_kernel(&self, name: &str) -> Option<&str> {
        crate::near::resolve_kernel(name, self.data.kernels().iter().map(|k| k.name.as_str()))
    }

    /// What the image needs of a device (its aspects, work-group sizes…).
    pub fn requirements(&self) -> &Requirements {
        self.data.requirements()
    }

    /// The symbolic IDs of its specialization constants (no order).
    pub fn specialization_constants(&self) -> impl Iterator<Item = &str> {
        self.data.symbolic_ids()
    }

    /// The buffer's initial contents: every constant's default at its
    /// offset, laid out by ascending numeric ID.
    pub fn default_values(&self) -> &[u8] {
        self.data.default_blob()
    }

    /// Whether the image was compiled ahead of time with its constants
    /// replaced by their defaults (`ptxspec compile --mode aot`): values
    /// set on it are refused.
    pub fn compiled_ahead_of_time(&self) -> bool {
        self.data.info().spec_consts_replaced_with_default
    }

    /// Whether the image calls CUDA's device runtime (dynamic parallelism):
    /// its code is linked with `libcudadevrt` when it loads.
    pub fn needs_device_runtime(&self) -> bool {
        self.data.info().needs_device_runtime
    }

    /// Where the image's own PTX finds the values: in its code, in global
    /// memory, or in the kernels' parameter space. A built image says how
    /// its code takes them ([`BuiltImage::delivery`](crate::bundle::BuiltImage::delivery)).
    pub fn placement(&self) -> Delivery {
        self.data.placement()
    }

    pub(crate) fn from_data(data: Arc<ImageData>) -> Image {
        Image { data }
    }

    pub(crate) fn into_data(self) -> Arc<ImageData> {
        self.data
    }
}

/// Two images are equal when they have the same ID, PTX, property sets and
/// LTO-IR (two crates may embed different images of one file stem).
impl PartialEq for Image {
    fn eq(&self, other: &Image) -> bool {
        Arc::ptr_eq(&self.data, &other.data) || self.data.same_as(&other.data)
    }
}

impl Eq for Image {}

/// The image's ID, kernels and constants, not its text.
impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("id", &self.id())
            .field(
                "kernels",
                &self.kernels().iter().map(|k| &k.name).collect::<Vec<_>>(),
            )
            .field(
                "specialization_constants",
                &self.specialization_constants().collect::<Vec<_>>(),
            )
            .field("has_ltoir", &self.has_ltoir())
            .finish()
    }
}
