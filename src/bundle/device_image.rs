//! Device images of a bundle (SYCL's `device_image`).

use std::marker::PhantomData;
use std::sync::Arc;

use super::{BuiltImage, Device, KernelId, SpecMode};
use crate::image::ImageData;
use ptxspec_core::features::Requirements;

/// A device image of a bundle, in the bundle's state (SYCL's
/// `device_image`). In an executable bundle it is one built image: the
/// same image built natively and emulated is two device images.
pub struct DeviceImage<S> {
    pub(super) image: Arc<ImageData>,
    pub(super) built: Option<Arc<BuiltImage>>,
    pub(super) mode: SpecMode,
    pub(super) _state: PhantomData<fn() -> S>,
}

impl<S> Clone for DeviceImage<S> {
    fn clone(&self) -> Self {
        DeviceImage {
            image: Arc::clone(&self.image),
            built: self.built.clone(),
            mode: self.mode,
            _state: PhantomData,
        }
    }
}

impl<S> std::fmt::Debug for DeviceImage<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceImage")
            .field("id", &self.image.id())
            .field("mode", &self.mode)
            .finish()
    }
}

impl<S> DeviceImage<S> {
    /// The post-link's name of the image (its file stem).
    pub fn id(&self) -> &str {
        self.image.id()
    }

    /// Whether the image holds kernel `id`.
    pub fn has_kernel(&self, id: &KernelId) -> bool {
        self.image.kernel(&id.0).is_some()
    }

    /// Whether the image holds kernel `id` and `device` can run it (SYCL
    /// 2020's `device_image::has_kernel(kernel_id, device)`; SYCL-CTS
    /// `device_image_api.cpp`).
    pub fn has_kernel_on(&self, id: &KernelId, device: &Device) -> bool {
        self.has_kernel(id) && device.check(self.image.requirements()).is_ok()
    }

    /// The IDs of the image's kernels.
    pub fn kernel_ids(&self) -> Vec<KernelId> {
        self.image
            .kernels()
            .iter()
            .map(|k| KernelId(k.name.clone()))
            .collect()
    }

    /// How this image delivers values: the mode it was built in (for an
    /// input bundle, the mode it will be built in).
    pub fn mode(&self) -> SpecMode {
        self.mode
    }

    /// Whether values reach its kernels natively (in the code: specialized
    /// PTX or an LTO cubin) rather than being read at run time.
    pub fn native_specialization_constant(&self) -> bool {
        !matches!(self.mode, SpecMode::Emulated | SpecMode::Tiered)
    }

    /// What the image needs of a device.
    pub fn requirements(&self) -> &Requirements {
        self.image.requirements()
    }

    /// The image itself.
    pub fn image(&self) -> crate::image::Image {
        crate::image::Image::from_data(Arc::clone(&self.image))
    }

    /// The built image (executable bundles only).
    pub fn built(&self) -> Option<&Arc<BuiltImage>> {
        self.built.as_ref()
    }
}
