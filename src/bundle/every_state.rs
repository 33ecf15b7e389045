//! What a bundle of any state does: its kernels and images, its devices,
//! the values it holds and their defaults, as SYCL 2020's `kernel_bundle`
//! members available in every state.

use super::*;

impl<S> KernelBundle<S> {
    pub(super) fn wrap(inner: Inner) -> Self {
        KernelBundle {
            inner: Arc::new(inner),
            _state: PhantomData,
        }
    }

    /// The IDs of the bundle's kernels.
    pub fn kernel_ids(&self) -> &[KernelId] {
        &self.inner.kernels
    }

    /// Whether the bundle holds kernel `id` (by its image's name, or by
    /// the C++ name of the one mangled kernel that has it).
    pub fn has_kernel(&self, id: &KernelId) -> bool {
        self.find_kernel(&id.0).is_some()
    }

    /// Whether the bundle holds kernel `id` for `device`: the bundle is
    /// for that device (or any), and an image of it that defines the
    /// kernel can run there (SYCL 2020's `kernel_bundle::has_kernel(
    /// kernel_id, device)`; SYCL-CTS `kernel_bundle_api.cpp`).
    pub fn has_kernel_on(&self, id: &KernelId, device: &Device) -> bool {
        let Some(KernelId(name)) = self.find_kernel(&id.0) else {
            return false;
        };
        self.inner
            .devices
            .as_ref()
            .is_none_or(|d| d.contains(&device.ordinal))
            && registered::runs_somewhere(&self.inner.images, name, std::slice::from_ref(device))
    }

    /// The bundle's kernel that `name` names: itself, or the one mangled
    /// kernel whose C++ function is `name` ([`get_kernel_id`]).
    pub(crate) fn find_kernel(&self, name: &str) -> Option<&KernelId> {
        let found = crate::near::resolve_kernel(name, self.inner.kernels.iter().map(|k| k.name()))?;
        self.inner.kernels.iter().find(|k| k.0 == found)
    }

    /// The device images the bundle was made from.
    pub fn images(&self) -> Vec<crate::image::Image> {
        self.inner
            .images
            .iter()
            .map(|i| crate::image::Image::from_data(Arc::clone(i)))
            .collect()
    }

    /// The device images the bundle was made from, as the runtime reads
    /// them.
    pub(crate) fn image_data(&self) -> &[Arc<ImageData>] {
        &self.inner.images
    }

    /// The bundle's device images: one per image, or, in an executable
    /// bundle, one per built image.
    pub fn device_images(&self) -> Vec<DeviceImage<S>> {
        if self.inner.built.is_empty() {
            self.inner
                .images
                .iter()
                .map(|i| DeviceImage {
                    image: Arc::clone(i),
                    built: None,
                    mode: self.inner.mode,
                    _state: PhantomData,
                })
                .collect()
        } else {
            self.inner
                .built
                .iter()
                .map(|b| DeviceImage {
                    image: Arc::clone(b.image_data()),
                    built: Some(Arc::clone(b)),
                    mode: b.mode(),
                    _state: PhantomData,
                })
                .collect()
        }
    }

    /// Whether the bundle has no device images (SYCL 2020's `empty()`):
    /// what a selector that keeps nothing gives.
    pub fn is_empty(&self) -> bool {
        self.inner.images.is_empty()
    }

    /// The ordinals of the devices the bundle was built for, or `None`
    /// when it may run on any.
    pub fn devices(&self) -> Option<&[usize]> {
        self.inner.devices.as_deref()
    }

    /// Whether any image of the bundle has specialization constants.
    pub fn contains_specialization_constants(&self) -> bool {
        self.inner.images.iter().any(|i| i.has_constants())
    }

    /// Whether values reach kernels natively (in the code: specialized PTX
    /// or an LTO cubin) rather than being read at run time.
    ///
    /// As SYCL 2020's `kernel_bundle::native_specialization_constant`: true
    /// only when the bundle has device images and every one of them does
    /// (an executable bundle's built images each in the mode it was built
    /// in, so a join of native and emulated bundles is not native).
    pub fn native_specialization_constant(&self) -> bool {
        let images = self.device_images();
        !images.is_empty() && images.iter().all(|d| d.native_specialization_constant())
    }

    /// The mode the bundle builds (or was built) in.
    pub fn mode(&self) -> SpecMode {
        self.inner.mode
    }

    /// Whether any image of the bundle has the constant `id`.
    pub fn has_specialization_constant<T>(&self, id: &SpecId<T>) -> bool {
        self.slot(id.symbolic_id()).is_some()
    }

    pub(super) fn slot(&self, symbolic_id: &str) -> Option<(Slot, &Arc<ImageData>)> {
        self.inner
            .images
            .iter()
            .find_map(|i| i.slot(symbolic_id).map(|s| (s, i)))
    }

    /// The value set for `id`, or its default: the images' (where one uses
    /// it), else the one `id` carries ([`SpecId::with_default`]). As in SYCL
    /// 2020, a value set for a constant no image uses is kept and read back.
    /// A constant with neither, or a type that differs from the images', is
    /// `spec_const_error`.
    pub fn get_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &self,
        id: &SpecId<T>,
    ) -> Result<T, Error> {
        if self.slot(id.symbolic_id()).is_none() {
            return match (self.inner.values.get(id.symbolic_id()), id.default_value()) {
                (Some(v), _) if v.len() == std::mem::size_of::<T>() => {
                    Ok(bytemuck::pod_read_unaligned(v))
                }
                (None, Some(d)) => Ok(*d),
                _ => Err(Error::spec_const(
                    id.symbolic_id(),
                    format!(
                        "no image of this bundle has specialization constant '{}', no value was set for it \
                         and its SpecId carries no default (SpecId::with_default)",
                        id.symbolic_id()
                    ),
                )),
            };
        }
        let (slot, image) = self.checked_slot(id)?;
        let bytes = match self.inner.values.get(id.symbolic_id()) {
            Some(v) => v.as_slice(),
            None => &image.default_blob()[slot.offset as usize..(slot.offset + slot.size) as usize],
        };
        Ok(bytemuck::pod_read_unaligned(bytes))
    }

    pub(super) fn checked_slot<T: SpecConstType>(
        &self,
        id: &SpecId<T>,
    ) -> Result<(Slot, &Arc<ImageData>), Error> {
        let (slot, image) = self.slot(id.symbolic_id()).ok_or_else(|| {
            Error::spec_const(
                id.symbolic_id(),
                format!(
                    "no image of this bundle has specialization constant '{}'",
                    id.symbolic_id()
                ),
            )
        })?;
        let size = std::mem::size_of::<T>();
        if slot.size as usize != size {
            return Err(Error::spec_const(
                id.symbolic_id(),
                format!(
                    "specialization constant '{}' has {} bytes, but {} has {size}",
                    id.symbolic_id(),
                    slot.size,
                    std::any::type_name::<T>()
                ),
            ));
        }
        // Every image that has the constant, not only the first.
        for img in self
            .inner
            .images
            .iter()
            .filter(|i| i.slot(id.symbolic_id()).is_some())
        {
            img.check_value_type(
                id.symbolic_id(),
                &T::spec_type(),
                std::any::type_name::<T>(),
            )?;
        }
        Ok((slot, image))
    }
}
