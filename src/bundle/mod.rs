//! Kernel bundles (SYCL 2020, the SYCL modules proposal): device images in the `Input`,
//! `Object` or `Executable` state, with specialization-constant values.
//!
//! Everything here is CPU-side: building an executable bundle computes each
//! image's buffer contents (emulated), specializes its PTX with the values
//! (native), or prepares the link of its LTO-IR with the values (LTO); a
//! [`Queue`](crate::runtime::Queue) loads the result onto a device when a
//! kernel is first launched from it. Bundles are cheap to clone (one `Arc`)
//! and `Send + Sync`.
//!
//! **Modes** ([`SpecMode`]; what each costs, measured, is in BENCHMARKS.md):
//!
//! | mode | what the GPU runs | a new value set costs |
//! |---|---|---|
//! | `Auto` (default) | `Lto` where the image has LTO-IR and nvJitLink loads, else `Native` | — |
//! | `Lto` | the LTO-IR linked by nvJitLink with the values: NVVM sees literals | a link (tens of milliseconds); a value set linked before: a memory, disk or remote cache hit |
//! | `Native` | the PTX with the values as immediates, JIT-compiled by the driver | the driver's JIT (tens of milliseconds) |
//! | `Emulated` | the post-link's PTX, reading the values that travel with each launch | nothing |
//! | `Tiered` | `Emulated` at once, then the `Lto` (or natively compiled) cubin once a background worker linked it | a few microseconds on the first launch |
//!
//! A bundle is built once with its values and launched many times, so
//! paying for the specialization once buys kernels that see the values as
//! constants: LTO gives the literal's time on every bench kernel, where
//! native code (the driver's JIT sees the values, NVVM does not) can fall
//! short of it on loops a constant bounds.
//! Choose [`SpecMode::Native`] to need nothing but the driver,
//! [`SpecMode::Emulated`] where values change often, and
//! [`SpecMode::Tiered`] where the first launch of a value set must not wait
//! (a kernel launched for `PTXSPEC_TIER_AFTER_MS` with one value set is
//! linked in the background; results are not bit-exact across the switch).

mod adaptive;
pub(crate) mod built;
mod device;
mod device_image;
mod options;
mod registered;
mod state;
pub(crate) mod tier;
mod transitions;

use crate::image::{ImageData, Slot};
pub use crate::registry::registered_images;
pub use adaptive::AdaptiveArguments;
pub use built::BuiltImage;
pub(crate) use built::Code;
pub use device::Device;
pub use device_image::DeviceImage;
use options::Log;
pub use options::{BuildOptions, LogSink};
pub use registered::{
    get_kernel_bundle, get_kernel_bundle_for, get_kernel_bundle_on, get_kernel_bundle_selected,
    get_kernel_bundle_selected_on, get_kernel_id, get_kernel_ids, has_kernel_bundle,
    has_kernel_bundle_in, has_kernel_bundle_of, is_compatible,
};
pub use transitions::{
    build, build_with, build_with_options, compile, compile_with, join, link, link_with,
};

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::Error;
use crate::image::KernelSignature;
use crate::spec_id::{SpecConstType, SpecId};

pub use state::{BundleState, Executable, Input, Object};
/// How a bundle delivers specialization-constant values to kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SpecMode {
    /// Per image: [`Lto`](SpecMode::Lto) where it carries LTO-IR and
    /// nvJitLink can be loaded, [`Native`](SpecMode::Native) elsewhere. A
    /// built image records which it got.
    #[default]
    Auto,
    /// The PTX is specialized with the values (immediates) before the
    /// driver's JIT compiles it.
    Native,
    /// Kernels read the values at run time: from the kernel's parameter
    /// space or a device buffer, as the post-link placed them.
    Emulated,
    /// The image's LTO-IR is linked with the values (nvJitLink), so that
    /// NVVM optimizes with them; needs an image built with LTO-IR.
    Lto,
    /// Building returns at once and launches start at once: they run the
    /// emulated image; once a kernel has kept being launched for 5 ms
    /// (`PTXSPEC_TIER_AFTER_MS`), a background worker links the specialized
    /// code for the same values (LTO where the image has LTO-IR, else the
    /// specialized PTX compiled by nvJitLink); launches after it is ready
    /// run that. A value set done sooner is never linked; one whose cubin
    /// this process has already (linked before by any bundle) starts there
    /// at its first launch. A failed link
    /// leaves the kernel emulated (the build log says why); a launch never
    /// waits for or fails because of tiering. Building loads nothing of
    /// the toolkit: the worker loads and warms it up before the process's
    /// first link, and a thread that built a tiered image or asked for a
    /// link waits for that warm-up when it ends (see
    /// `ptxspec_core::toolkit::exit`).
    /// [`KernelBundle::wait_for_tier_up`] waits for it;
    /// [`Queue::last_launch_mode`](crate::runtime::Queue::last_launch_mode)
    /// says which tier a launch used. Results may differ between the tiers
    /// in the last bits of floating-point arithmetic (the specialized code
    /// may contract `a * b + c` into an FMA where a value became a
    /// constant): choose a single-tier mode for bit-exact reproducibility.
    Tiered,
}

/// A kernel's identity: its name in the PTX.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelId(String);

impl KernelId {
    /// A kernel's ID from its (mangled) name.
    pub fn new(name: impl Into<String>) -> Self {
        KernelId(name.into())
    }
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

/// A bundle's state. The lists a build copies from its input are shared
/// (copied on write): a repeat build of a value set seen before allocates
/// for what it makes, not for what it reads.
///
/// `devices` first, beside the reference counts: every launch from a bundle
/// reads it ([`KernelBundle::runs_on`]) and nothing else of it.
#[derive(Clone, Debug)]
#[repr(C)]
struct Inner {
    /// Ordinals of the devices the bundle was built for; `None`: any.
    devices: Option<Vec<usize>>,
    images: Arc<Vec<Arc<ImageData>>>,
    /// Kernels of the bundle (all kernels of its images unless chosen).
    kernels: Arc<Vec<KernelId>>,
    mode: SpecMode,
    values: Arc<BTreeMap<String, Vec<u8>>>,
    built: Vec<Arc<BuiltImage>>,
    debug: bool,
    log: Arc<Log>,
    /// How launches adapt to recurring by-value arguments; `None`: they
    /// do not.
    adaptive: Option<Arc<AdaptiveArguments>>,
    /// Setting a constant no image has is an error (a program's choice);
    /// otherwise SYCL's behaviour: kept, read back, seen by no kernel.
    rejects_unknown_constants: bool,
}

impl Inner {
    /// No images, no kernels, no values, for any device.
    fn empty() -> Inner {
        Inner {
            devices: None,
            images: Arc::default(),
            kernels: Arc::default(),
            mode: SpecMode::default(),
            values: Arc::default(),
            built: Vec::new(),
            debug: false,
            log: Arc::default(),
            adaptive: None,
            rejects_unknown_constants: false,
        }
    }
}

/// A kernel bundle in state `S` ([`Input`], [`Object`] or [`Executable`]).
pub struct KernelBundle<S> {
    inner: Arc<Inner>,
    _state: PhantomData<fn() -> S>,
}

impl<S> Clone for KernelBundle<S> {
    fn clone(&self) -> Self {
        KernelBundle {
            inner: Arc::clone(&self.inner),
            _state: PhantomData,
        }
    }
}

impl<S> std::fmt::Debug for KernelBundle<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(std::any::type_name::<S>())
            .field(
                "images",
                &self.inner.images.iter().map(|i| i.id()).collect::<Vec<_>>(),
            )
            .field("kernels", &self.inner.kernels)
            .field("mode", &self.inner.mode)
            .finish()
    }
}

impl<S> KernelBundle<S> {
    fn wrap(inner: Inner) -> Self {
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

    fn slot(&self, symbolic_id: &str) -> Option<(Slot, &Arc<ImageData>)> {
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

    fn checked_slot<T: SpecConstType>(
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
    fn keep_unknown(&mut self, symbolic_id: &str, bytes: &[u8]) -> Result<(), Error> {
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

impl KernelBundle<Executable> {
    /// The first built image that defines `id`.
    pub fn built_image(&self, id: &KernelId) -> Result<&Arc<BuiltImage>, Error> {
        self.built_image_named(&id.0)
    }

    /// `"; near: …"`: the bundle's kernels near `name`, or nothing.
    fn near_kernels(&self, name: &str) -> String {
        crate::near::near_suffix(name, self.inner.kernels.iter().map(|k| k.0.as_str()))
    }

    /// [`built_image`](Self::built_image) by the kernel's name.
    pub fn built_image_named(&self, name: &str) -> Result<&Arc<BuiltImage>, Error> {
        let Some(KernelId(name)) = self.find_kernel(name) else {
            return Err(Error::kernel_not_found(
                name,
                format!(
                    "kernel {name} is not in this bundle{}",
                    self.near_kernels(name)
                ),
            ));
        };
        self.inner
            .built
            .iter()
            .find(|b| b.image_data().kernel(name).is_some())
            .ok_or_else(|| {
                Error::kernel_not_found(
                    name,
                    format!("no image of this bundle defines kernel {name}"),
                )
            })
    }

    /// Waits until the specialized tier of a [`SpecMode::Tiered`] image is
    /// linked for kernel `id` on `sm_<arch>` (asking a worker for it when no
    /// launch has yet), at most `timeout`, and returns the mode of that
    /// tier ([`SpecMode::Lto`] or [`SpecMode::Native`]). It waits for the
    /// link, not for a switch: a queue's (or graph's) next launch starts
    /// loading the linked code in the background and may still run
    /// emulated; a launch after that load runs the tier. An image of
    /// another mode answers its own at once. A failed link is `Error::Build` with the
    /// linker's log (launches stay emulated). For tests and benchmarks: a
    /// program need not wait, launches switch by themselves.
    pub fn wait_for_tier_up(
        &self,
        id: &KernelId,
        arch: u32,
        timeout: std::time::Duration,
    ) -> Result<SpecMode, Error> {
        let built = self.built_image(id)?;
        match &built.tier {
            Some(tier) => tier.wait(arch, &id.0, timeout),
            None => Ok(built.mode()),
        }
    }

    /// Every built image that defines `id` (after a `join`, the same kernel
    /// may be in several, built in different modes).
    pub fn built_images<'a>(
        &'a self,
        id: &'a KernelId,
    ) -> Result<impl Iterator<Item = &'a Arc<BuiltImage>> + 'a, Error> {
        let Some(KernelId(name)) = self.find_kernel(&id.0) else {
            return Err(Error::kernel_not_found(
                &id.0,
                format!(
                    "kernel {} is not in this bundle{}",
                    id.0,
                    self.near_kernels(&id.0)
                ),
            ));
        };
        Ok(self
            .inner
            .built
            .iter()
            .filter(move |b| b.image_data().kernel(name).is_some()))
    }

    /// A kernel of the bundle.
    pub fn get_kernel(&self, id: &KernelId) -> Result<Kernel, Error> {
        let built = Arc::clone(self.built_image(id)?);
        let id = self.find_kernel(&id.0).unwrap_or(id).clone();
        let signature = built.image_data().kernel(&id.0).cloned().ok_or_else(|| {
            Error::kernel_not_found(
                &id.0,
                format!("no image of this bundle defines kernel {}", id.0),
            )
        })?;
        Ok(Kernel {
            id,
            built,
            signature,
        })
    }

    /// What building and loading the bundle's images logged so far: the
    /// driver JIT's messages (when a queue loads an image) and nvJitLink's.
    pub fn build_log(&self) -> String {
        let mut log = self
            .inner
            .log
            .text
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for b in &self.inner.built {
            if let Code::Lto(l) = &b.code() {
                log.push_str(&l.log.lock().unwrap_or_else(|p| p.into_inner()));
            }
            if let Some(t) = &b.tier {
                if let Code::Lto(l) = t.specialized().code() {
                    log.push_str(&l.log.lock().unwrap_or_else(|p| p.into_inner()));
                }
                log.push_str(&t.log.lock().unwrap_or_else(|p| p.into_inner()));
            }
        }
        log
    }

    /// Whether the bundle may be launched on the device with this ordinal.
    pub fn runs_on(&self, ordinal: usize) -> bool {
        self.inner
            .devices
            .as_ref()
            .is_none_or(|d| d.contains(&ordinal))
    }

    /// The address of the bundle's shared state: equal for clones, and not
    /// reused while any clone lives.
    /// How its launches adapt to recurring by-value arguments, if they do.
    pub(crate) fn adaptive_arguments(&self) -> Option<&Arc<AdaptiveArguments>> {
        self.inner.adaptive.as_ref()
    }

    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    pub(crate) fn log(&self) -> &Arc<Log> {
        &self.inner.log
    }

    pub(crate) fn debug(&self) -> bool {
        self.inner.debug
    }
}

/// A kernel as a launch (or a look-up) names it: its name (`"conv3x3"`, a
/// `String`), its [`KernelId`], or a [`Kernel`] of a bundle. A C++ kernel
/// may be named by its C++ name where one kernel has it.
pub trait KernelName {
    /// The name.
    fn kernel_name(&self) -> &str;
}

impl KernelName for str {
    fn kernel_name(&self) -> &str {
        self
    }
}

impl KernelName for String {
    fn kernel_name(&self) -> &str {
        self
    }
}

impl KernelName for KernelId {
    fn kernel_name(&self) -> &str {
        &self.0
    }
}

impl KernelName for Kernel {
    fn kernel_name(&self) -> &str {
        &self.id.0
    }
}

/// A kernel of an executable bundle (from [`KernelBundle::get_kernel`]):
/// its ID, the built image that holds it and its signature; launched as a
/// name is (`handler.launch(&kernel, ...)`).
#[derive(Clone, Debug)]
pub struct Kernel {
    id: KernelId,
    built: Arc<BuiltImage>,
    signature: KernelSignature,
}

impl Kernel {
    /// The kernel's ID (its name).
    pub fn id(&self) -> &KernelId {
        &self.id
    }

    /// The built image that holds it.
    pub fn built_image(&self) -> &Arc<BuiltImage> {
        &self.built
    }

    /// Its parameters, with the `kernel_handler` the runtime fills in
    /// marked.
    pub fn signature(&self) -> &KernelSignature {
        &self.signature
    }
}

#[cfg(test)]
mod tests;
