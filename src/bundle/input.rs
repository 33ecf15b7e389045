//! What an input bundle does: its images and kernels, values set and read
//! back (SYCL's behaviour for constants no image has, or the strict check a
//! program asks for), the mode and adaptive arguments a build will take.

use super::*;

impl KernelBundle<Input> {
    /// An input bundle of these images with all their kernels.
    pub fn from_images(images: impl IntoIterator<Item = crate::image::Image>) -> Self {
        Self::from_image_data(
            images
                .into_iter()
                .map(crate::image::Image::into_data)
                .collect(),
        )
    }

    /// [`from_images`](Self::from_images) of images as the runtime reads
    /// them.
    pub(crate) fn from_image_data(images: Vec<Arc<ImageData>>) -> Self {
        // A process's first bundle starts the remote cache's connection in
        // the background, well before its first launch looks a cubin up
        // (nothing where no store is set; once per process).
        ptxspec_core::lto::connect_early();
        let kernels = images
            .iter()
            .flat_map(|i| i.kernels().iter().map(|k| KernelId(k.name.clone())))
            .fold(Vec::new(), |mut v, k| {
                if !v.contains(&k) {
                    v.push(k);
                }
                v
            });
        Self::wrap(Inner {
            images: Arc::new(images),
            kernels: Arc::new(kernels),
            ..Inner::empty()
        })
    }

    /// SYCL's behaviour for a specialization constant that no image of the
    /// bundle has, which is every bundle's unless it was made
    /// [`rejecting_unknown_constants`](Self::rejecting_unknown_constants):
    /// setting it keeps the value (`get_specialization_constant` reads it
    /// back; no kernel sees it), said once per name in the build log and as
    /// a warning. Kept by joins, modes and builds of the bundle.
    #[must_use]
    pub fn keeping_unknown_constants(mut self) -> Self {
        Arc::make_mut(&mut self.inner).rejects_unknown_constants = false;
        self
    }

    /// A stricter bundle than SYCL's: setting a specialization constant that
    /// no image of the bundle has is an error (`spec_const_error`) naming it
    /// and the names near it, where SYCL keeps the value — most often such a
    /// name is a typo that would run with the default value. (Typed
    /// constants from the build, `spec_ids::NAME`, cannot be misspelled at
    /// all.) Kept by modes and builds of the bundle; a join rejects where
    /// any bundle it joins does.
    #[must_use]
    pub fn rejecting_unknown_constants(mut self) -> Self {
        Arc::make_mut(&mut self.inner).rejects_unknown_constants = true;
        self
    }

    /// Sets the value of a specialization constant (input bundles only, as
    /// SYCL 2020). A constant of an image compiled ahead of time with its
    /// defaults cannot be set (`spec_const_error`). A constant that no image
    /// has is kept and read back, as SYCL 2020 says (said once in the build
    /// log), unless the bundle is
    /// [`rejecting_unknown_constants`](Self::rejecting_unknown_constants):
    /// then it is an error (`spec_const_error`, naming the near names).
    pub fn set_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &mut self,
        id: &SpecId<T>,
        value: T,
    ) -> Result<(), Error> {
        if self.slot(id.symbolic_id()).is_none() {
            return self.keep_unknown(id.symbolic_id(), bytemuck::bytes_of(&value));
        }
        self.checked_slot(id)?;
        self.set_specialization_constant_bytes(id.symbolic_id(), bytemuck::bytes_of(&value))
    }

    /// Sets a constant from its bytes (as laid out in memory), for tools
    /// that know constants by name and size only; the same checks as
    /// [`set_specialization_constant`](Self::set_specialization_constant).
    pub fn set_specialization_constant_bytes(
        &mut self,
        symbolic_id: &str,
        bytes: &[u8],
    ) -> Result<(), Error> {
        let Some((slot, _)) = self.slot(symbolic_id) else {
            return self.keep_unknown(symbolic_id, bytes);
        };
        if slot.size as usize != bytes.len() {
            return Err(Error::spec_const(
                symbolic_id,
                format!(
                    "specialization constant '{symbolic_id}' has {} bytes, {} given",
                    slot.size,
                    bytes.len()
                ),
            ));
        }
        for img in self
            .inner
            .images
            .iter()
            .filter(|i| i.slot(symbolic_id).is_some())
        {
            img.check_settable(symbolic_id)?;
        }
        Arc::make_mut(&mut Arc::make_mut(&mut self.inner).values)
            .insert(symbolic_id.to_string(), bytes.to_vec());
        Ok(())
    }

    /// A value for a constant no image of the bundle has: kept (SYCL), said
    /// once per name in the build log and as a warning — or, in a bundle
    /// [`rejecting_unknown_constants`](Self::rejecting_unknown_constants),
    /// an error naming it and the names near it.
    pub(super) fn keep_unknown(&mut self, symbolic_id: &str, bytes: &[u8]) -> Result<(), Error> {
        // The names near it, for the words that say so (not on every set of
        // a kept value).
        let near = || {
            let known = self.inner.images.iter().flat_map(|i| i.symbolic_ids());
            crate::near::near_suffix(symbolic_id, known)
        };
        if self.inner.rejects_unknown_constants {
            return Err(Error::spec_const(
                symbolic_id,
                format!(
                    "no image of this bundle has specialization constant '{symbolic_id}'{} (the \
                     bundle is rejecting_unknown_constants; SYCL's bundles keep such a value)",
                    near()
                ),
            ));
        }
        // Kept (SYCL): said in the build log and as a warning — once per name
        // and bundle, so that a program setting it again and again does not
        // grow the log.
        if !self.inner.values.contains_key(symbolic_id) {
            let text = format!(
                "specialization constant '{symbolic_id}' is set, but no image of this bundle has it \
                 (kept, and read back){}",
                near()
            );
            tracing::warn!(target: "ptxspec::bundle", constant = symbolic_id, "{text}");
            self.inner.log.push(&text);
        }
        Arc::make_mut(&mut Arc::make_mut(&mut self.inner).values)
            .insert(symbolic_id.to_string(), bytes.to_vec());
        Ok(())
    }

    /// The same bundle delivering values in `mode`.
    #[must_use]
    pub fn with_mode(mut self, mode: SpecMode) -> Self {
        Arc::make_mut(&mut self.inner).mode = mode;
        self
    }

    /// The same bundle, whose launches adapt to by-value arguments that
    /// keep recurring: each such set is linked in the background with its
    /// values as literals, and later launches with byte-equal arguments
    /// run that variant ([`AdaptiveArguments`] says which arguments, how
    /// many variants, and when). The built bundle keeps it.
    #[must_use]
    pub fn with_adaptive_arguments(mut self, adaptive: AdaptiveArguments) -> Self {
        Arc::make_mut(&mut self.inner).adaptive = Some(Arc::new(adaptive));
        self
    }
}
