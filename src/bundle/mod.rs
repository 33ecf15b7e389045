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

pub(crate) mod built;
mod device;
pub(crate) mod tier;

use crate::image::{Image, Slot};
pub use crate::registry::registered_images;
pub use built::{BuiltImage, Code};
pub use device::Device;

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use crate::error::Error;
use crate::features::Requirements;
use crate::image::KernelSignature;
use crate::spec_id::{SpecConstType, SpecId};

/// Bundle states; only their types matter.
pub mod state {
    /// Device code as the post-link wrote it; values can be set.
    #[derive(Clone, Copy, Debug)]
    pub struct Input;
    /// Compiled: values are fixed.
    #[derive(Clone, Copy, Debug)]
    pub struct Object;
    /// Linked and ready to launch.
    #[derive(Clone, Copy, Debug)]
    pub struct Executable;

    /// One of the three states ([`Input`], [`Object`], [`Executable`]):
    /// what SYCL 2020 asks of a device for a bundle in it.
    pub trait BundleState: sealed::Sealed + 'static {
        /// The aspect every device needs for a bundle in this state:
        /// `online_compiler` for input, `online_linker` for object, none
        /// for executable ([`has_kernel_bundle_in`](crate::has_kernel_bundle_in)).
        const NEEDS: Option<crate::features::Aspect>;
    }
    impl BundleState for Input {
        const NEEDS: Option<crate::features::Aspect> =
            Some(crate::features::Aspect::ONLINE_COMPILER);
    }
    impl BundleState for Object {
        const NEEDS: Option<crate::features::Aspect> = Some(crate::features::Aspect::ONLINE_LINKER);
    }
    impl BundleState for Executable {
        const NEEDS: Option<crate::features::Aspect> = None;
    }
    mod sealed {
        pub trait Sealed {}
        impl Sealed for super::Input {}
        impl Sealed for super::Object {}
        impl Sealed for super::Executable {}
    }
}
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

/// A receiver of build logs.
pub type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Options of `compile`, `link` and `build` (the SYCL modules proposal's
/// `property::module::options`). Start from `BuildOptions::default()` and
/// set what you need with its `with_` methods (or its fields): options added
/// later keep their defaults.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct BuildOptions {
    /// A debug build: the JIT generates line information and does not
    /// optimize (`CU_JIT_GENERATE_LINE_INFO`, `CU_JIT_OPTIMIZATION_LEVEL`
    /// 0); LTO links with `-lineinfo`.
    pub debug: bool,
    /// Receives the build log as it is produced: the driver JIT's info and
    /// error logs, nvJitLink's information log. It is also kept on the
    /// bundle ([`KernelBundle::build_log`]).
    pub log: Option<LogSink>,
    /// Runs the LTO link's NVIDIA libraries (libNVVM or NVRTC, nvJitLink)
    /// in child processes of this `ptxspec` binary (`cargo install
    /// ptxspec-cli`), so that images read from files that are damaged or
    /// hostile make an error ([`Error::Toolkit`]) instead of crashing the
    /// program. Images embedded in the program are trusted: leave it
    /// `None` for them (a link then costs no process start).
    pub toolkit_worker: Option<std::path::PathBuf>,
}

impl BuildOptions {
    /// A debug build (see [`debug`](Self::debug)).
    #[must_use]
    pub fn with_debug(mut self, debug: bool) -> Self {
        self.debug = debug;
        self
    }

    /// Where the build log goes as it is produced (see [`log`](Self::log)).
    #[must_use]
    pub fn with_log(mut self, sink: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.log = Some(Arc::new(sink));
        self
    }

    /// Links in child processes of this `ptxspec` binary (see
    /// [`toolkit_worker`](Self::toolkit_worker)).
    #[must_use]
    pub fn with_toolkit_worker(mut self, ptxspec_binary: Option<std::path::PathBuf>) -> Self {
        self.toolkit_worker = ptxspec_binary;
        self
    }
}

impl std::fmt::Debug for BuildOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildOptions")
            .field("debug", &self.debug)
            .field("log", &self.log.as_ref().map(|_| "sink"))
            .field("toolkit_worker", &self.toolkit_worker)
            .finish()
    }
}

/// The build log of an executable bundle, shared by its clones and the
/// queues that load its images.
#[derive(Default)]
pub(crate) struct Log {
    text: Mutex<String>,
    sink: Option<LogSink>,
}

impl Log {
    pub(crate) fn push(&self, what: &str) {
        if what.trim().is_empty() {
            return;
        }
        let mut t = self.text.lock().unwrap_or_else(|p| p.into_inner());
        t.push_str(what);
        if !what.ends_with('\n') {
            t.push('\n');
        }
        if let Some(sink) = &self.sink {
            sink(what);
        }
    }
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Log")
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
    images: Arc<Vec<Arc<Image>>>,
    /// Kernels of the bundle (all kernels of its images unless chosen).
    kernels: Arc<Vec<KernelId>>,
    mode: SpecMode,
    values: Arc<BTreeMap<String, Vec<u8>>>,
    built: Vec<Arc<BuiltImage>>,
    debug: bool,
    log: Arc<Log>,
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

/// A device image of a bundle, in the bundle's state (SYCL's
/// `device_image`). In an executable bundle it is one built image: the
/// same image built natively and emulated is two device images.
pub struct DeviceImage<S> {
    image: Arc<Image>,
    built: Option<Arc<BuiltImage>>,
    mode: SpecMode,
    _state: PhantomData<fn() -> S>,
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
    pub fn image(&self) -> &Arc<Image> {
        &self.image
    }

    /// The built image (executable bundles only).
    pub fn built(&self) -> Option<&Arc<BuiltImage>> {
        self.built.as_ref()
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
            && self
                .inner
                .images
                .iter()
                .any(|i| i.kernel(name).is_some() && device.check(i.requirements()).is_ok())
    }

    /// The bundle's kernel that `name` names: itself, or the one mangled
    /// kernel whose C++ function is `name` ([`get_kernel_id`]).
    pub(crate) fn find_kernel(&self, name: &str) -> Option<&KernelId> {
        let found = crate::near::resolve_kernel(name, self.inner.kernels.iter().map(|k| k.name()))?;
        self.inner.kernels.iter().find(|k| k.0 == found)
    }

    /// The device images the bundle was made from.
    pub fn images(&self) -> &[Arc<Image>] {
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
                    image: Arc::clone(b.image()),
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

    fn slot(&self, symbolic_id: &str) -> Option<(Slot, &Arc<Image>)> {
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
                _ => Err(Error::SpecConst(format!(
                    "no image of this bundle has specialization constant '{}', no value was set for it \
                     and its SpecId carries no default (SpecId::with_default)",
                    id.symbolic_id()
                ))),
            };
        }
        let (slot, image) = self.checked_slot(id)?;
        let bytes = match self.inner.values.get(id.symbolic_id()) {
            Some(v) => v.as_slice(),
            None => &image.default_blob()[slot.offset as usize..(slot.offset + slot.size) as usize],
        };
        Ok(bytemuck::pod_read_unaligned(bytes))
    }

    fn checked_slot<T: SpecConstType>(&self, id: &SpecId<T>) -> Result<(Slot, &Arc<Image>), Error> {
        let (slot, image) = self.slot(id.symbolic_id()).ok_or_else(|| {
            Error::SpecConst(format!(
                "no image of this bundle has specialization constant '{}'",
                id.symbolic_id()
            ))
        })?;
        let size = std::mem::size_of::<T>();
        if slot.size as usize != size {
            return Err(Error::SpecConst(format!(
                "specialization constant '{}' has {} bytes, but {} has {size}",
                id.symbolic_id(),
                slot.size,
                std::any::type_name::<T>()
            )));
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
            )
            .map_err(Error::SpecConst)?;
        }
        Ok((slot, image))
    }
}

impl KernelBundle<Input> {
    /// An input bundle of these images with all their kernels.
    pub fn from_images(images: Vec<Arc<Image>>) -> Self {
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

    /// Sets the value of a specialization constant (input bundles only, as
    /// SYCL 2020). A constant of an image compiled ahead of time with its
    /// defaults cannot be set (`spec_const_error`). A constant that no image
    /// uses keeps the value (`get_specialization_constant` reads it back;
    /// no kernel sees it).
    pub fn set_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &mut self,
        id: &SpecId<T>,
        value: T,
    ) -> Result<(), Error> {
        if self.slot(id.symbolic_id()).is_none() {
            // SYCL keeps a value no image uses (it reads back); a name no
            // image has is still most often a typo: say so, with the near
            // names, in the build log and as a warning — once per name and
            // bundle, so that a program setting it again and again does not
            // grow the log.
            if !self.inner.values.contains_key(id.symbolic_id()) {
                let known = self.inner.images.iter().flat_map(|i| i.symbolic_ids());
                let near = crate::near::near_suffix(id.symbolic_id(), known);
                let text = format!(
                    "specialization constant '{}' is set, but no image of this bundle has it \
                     (kept, and read back){near}",
                    id.symbolic_id()
                );
                tracing::warn!(target: "ptxspec::bundle", constant = id.symbolic_id(), "{text}");
                self.inner.log.push(&text);
            }
            Arc::make_mut(&mut Arc::make_mut(&mut self.inner).values).insert(
                id.symbolic_id().to_string(),
                bytemuck::bytes_of(&value).to_vec(),
            );
            return Ok(());
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
        let (slot, _) = self.slot(symbolic_id).ok_or_else(|| {
            let known = self.inner.images.iter().flat_map(|i| i.symbolic_ids());
            Error::SpecConst(format!(
                "no image of this bundle has specialization constant '{symbolic_id}'{}",
                crate::near::near_suffix(symbolic_id, known)
            ))
        })?;
        if slot.size as usize != bytes.len() {
            return Err(Error::SpecConst(format!(
                "specialization constant '{symbolic_id}' has {} bytes, {} given",
                slot.size,
                bytes.len()
            )));
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

    /// The same bundle delivering values in `mode`.
    #[must_use]
    pub fn with_mode(mut self, mode: SpecMode) -> Self {
        Arc::make_mut(&mut self.inner).mode = mode;
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
            return Err(Error::KernelNotFound(format!(
                "kernel {name} is not in this bundle{}",
                self.near_kernels(name)
            )));
        };
        self.inner
            .built
            .iter()
            .find(|b| b.image().kernel(name).is_some())
            .ok_or_else(|| {
                Error::KernelNotFound(format!("no image of this bundle defines kernel {name}"))
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
            return Err(Error::KernelNotFound(format!(
                "kernel {} is not in this bundle{}",
                id.0,
                self.near_kernels(&id.0)
            )));
        };
        Ok(self
            .inner
            .built
            .iter()
            .filter(move |b| b.image().kernel(name).is_some()))
    }

    /// A kernel of the bundle.
    pub fn get_kernel(&self, id: &KernelId) -> Result<Kernel, Error> {
        let built = Arc::clone(self.built_image(id)?);
        let id = self.find_kernel(&id.0).unwrap_or(id).clone();
        let signature = built
            .image()
            .kernel(&id.0)
            .cloned()
            .ok_or_else(|| Error::KernelNotFound(id.0.clone()))?;
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

/// A kernel of an executable bundle, ready to launch.
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

/// The IDs of every registered kernel.
pub fn get_kernel_ids() -> Result<Vec<KernelId>, Error> {
    let mut ids: Vec<KernelId> = Vec::new();
    for img in registered_images()? {
        for k in img.kernels() {
            let id = KernelId(k.name.clone());
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    Ok(ids)
}

/// The ID of the registered kernel `name` (SYCL 2020's
/// `get_kernel_id<KernelName>()`, by the kernel's name): the name its image
/// has, or — for a kernel declared without `extern "C"` — the one mangled
/// kernel whose C++ function is `name` (`damp`, `ns::damp`). None, or
/// several (overloads), is `kernel_not_found` listing the near names.
pub fn get_kernel_id(name: &str) -> Result<KernelId, Error> {
    match crate::registry::resolve_kernel(name)? {
        Some(found) => Ok(KernelId(found)),
        None => {
            let images = registered_images()?;
            let names = images
                .iter()
                .flat_map(|i| i.kernels())
                .map(|s| s.name.as_str());
            Err(Error::KernelNotFound(format!(
                "no registered image defines kernel {name}{}",
                crate::near::near_suffix(name, names)
            )))
        }
    }
}

/// An input bundle of every registered image.
pub fn get_kernel_bundle() -> Result<KernelBundle<Input>, Error> {
    Ok(KernelBundle::from_images(registered_images()?))
}

/// An input bundle of the registered images that define `kernels`, holding
/// just those kernels; an unknown kernel is `kernel_not_found`, with the
/// names near it. A kernel declared without `extern "C"` is found by its
/// C++ name too (`damp` for `_Z4dampPfi`) where one kernel has it; the
/// bundle holds it by the name its image has.
pub fn get_kernel_bundle_for(kernels: &[KernelId]) -> Result<KernelBundle<Input>, Error> {
    let mut images: Vec<Arc<Image>> = Vec::new();
    let mut ids = Vec::with_capacity(kernels.len());
    for k in kernels {
        let mut img = crate::registry::image_defining(&k.0)?;
        let mut id = k.clone();
        if img.is_none()
            && let Some(name) = crate::registry::resolve_kernel(&k.0)?
        {
            img = crate::registry::image_defining(&name)?;
            id = KernelId(name);
        }
        let Some(img) = img else {
            let images = crate::registry::registered_images()?;
            let names = images
                .iter()
                .flat_map(|i| i.kernels())
                .map(|s| s.name.as_str());
            return Err(Error::KernelNotFound(format!(
                "no registered image defines kernel {}{}",
                k.0,
                crate::near::near_suffix(&k.0, names)
            )));
        };
        if !images.iter().any(|i| Arc::ptr_eq(i, &img)) {
            images.push(img);
        }
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    let mut b = KernelBundle::from_images(images);
    Arc::make_mut(&mut b.inner).kernels = Arc::new(ids);
    Ok(b)
}

/// Whether every device can run the image (its requirements are met).
fn runs_on_all(image: &Image, devices: &[Device]) -> bool {
    devices
        .iter()
        .all(|d| d.check(image.requirements()).is_ok())
}

/// An input bundle of the registered images that `selector` keeps and
/// that every device of `devices` can run — empty when it keeps none, as
/// SYCL 2020's `get_kernel_bundle(context, devices, selector)`
/// ([`KernelBundle::is_empty`]). An empty device list is `invalid_object`,
/// as SYCL 2020 says; [`get_kernel_bundle_selected`] asks for no device.
pub fn get_kernel_bundle_with(
    devices: &[Device],
    selector: impl Fn(&DeviceImage<Input>) -> bool,
) -> Result<KernelBundle<Input>, Error> {
    no_devices("get_kernel_bundle_with", devices)?;
    selected(Some(devices), selector)
}

/// An input bundle of the registered images that `selector` keeps, for any
/// device (SYCL 2020's `get_kernel_bundle(context, selector)`, the
/// context's devices being every device) — empty when it keeps none.
pub fn get_kernel_bundle_selected(
    selector: impl Fn(&DeviceImage<Input>) -> bool,
) -> Result<KernelBundle<Input>, Error> {
    selected(None, selector)
}

/// SYCL 2020's `errc::invalid` for an empty list of devices, where a call
/// takes devices.
fn no_devices(what: &str, devices: &[Device]) -> Result<(), Error> {
    match devices {
        [] => Err(Error::InvalidObject(format!(
            "{what} of an empty list of devices (SYCL 2020: errc::invalid)"
        ))),
        _ => Ok(()),
    }
}

/// The registered images `selector` keeps and every device of `devices`
/// (where given) can run.
fn selected(
    devices: Option<&[Device]>,
    selector: impl Fn(&DeviceImage<Input>) -> bool,
) -> Result<KernelBundle<Input>, Error> {
    let all = registered_images()?;
    let mut kept = Vec::new();
    for img in &all {
        let di = DeviceImage {
            image: Arc::clone(img),
            built: None,
            mode: SpecMode::default(),
            _state: PhantomData,
        };
        if !selector(&di) {
            continue;
        }
        if runs_on_all(img, devices.unwrap_or_default()) {
            kept.push(Arc::clone(img));
        }
    }
    let mut b = KernelBundle::from_images(kept);
    if let Some(devices) = devices {
        Arc::make_mut(&mut b.inner).devices = Some(devices.iter().map(|d| d.ordinal).collect());
    }
    Ok(b)
}

/// Whether the registered images hold an executable bundle that can run on
/// every device of `devices` ([`has_kernel_bundle_in`] asks of any state).
/// An empty device list is `invalid_object` (SYCL 2020).
pub fn has_kernel_bundle(devices: &[Device]) -> Result<bool, Error> {
    has_kernel_bundle_in::<Executable>(devices)
}

/// SYCL 2020's `has_kernel_bundle<State>(context, devices)`: whether a
/// registered image runs on every device of `devices`, and, for a bundle
/// in the input state, every device has `online_compiler`; in the object
/// state, `online_linker` ([`Device::has`]: NVRTC and nvJitLink load).
/// An empty device list is `invalid_object` (SYCL-CTS
/// `has_kernel_bundle_core_all_states_dev.cpp`,
/// `has_kernel_bundle_zero_device.h`).
pub fn has_kernel_bundle_in<S: BundleState>(devices: &[Device]) -> Result<bool, Error> {
    no_devices("has_kernel_bundle", devices)?;
    Ok(devices_can_hold::<S>(devices)
        && registered_images()?.iter().any(|i| runs_on_all(i, devices)))
}

/// SYCL 2020's `has_kernel_bundle<State>(context, devices, kernel_ids)`:
/// as [`has_kernel_bundle_in`], for bundles that hold every kernel of
/// `kernels`, each defined by a registered image that some device of
/// `devices` can run (SYCL-CTS `has_kernel_bundle_core_*_k_id`). An empty
/// device list is `invalid_object`.
pub fn has_kernel_bundle_of<S: BundleState>(
    devices: &[Device],
    kernels: &[KernelId],
) -> Result<bool, Error> {
    no_devices("has_kernel_bundle", devices)?;
    if !devices_can_hold::<S>(devices) {
        return Ok(false);
    }
    let all = registered_images()?;
    let names = || {
        all.iter()
            .flat_map(|i| i.kernels())
            .map(|k| k.name.as_str())
    };
    Ok(kernels.iter().all(|k| {
        crate::near::resolve_kernel(&k.0, names()).is_some_and(|name| {
            all.iter().any(|i| {
                i.kernel(name).is_some()
                    && devices.iter().any(|d| d.check(i.requirements()).is_ok())
            })
        })
    }))
}

/// Whether every device has what a bundle in state `S` needs.
fn devices_can_hold<S: BundleState>(devices: &[Device]) -> bool {
    S::NEEDS.is_none_or(|aspect| devices.iter().all(|d| d.has(aspect)))
}

/// SYCL 2020's `errc::invalid` where a call names a device that `bundle`
/// was not made for (a bundle of device 0 built for devices 0 and 1;
/// SYCL-CTS `sycl_build_different_device_for_sycl_build.cpp`,
/// `sycl_compile_exception_if_dev_not_in_set.cpp`).
fn devices_within<S>(
    what: &str,
    bundle: &KernelBundle<S>,
    devices: &[Device],
) -> Result<(), Error> {
    let Some(made_for) = bundle.devices() else {
        return Ok(());
    };
    match devices.iter().find(|d| !made_for.contains(&d.ordinal)) {
        None => Ok(()),
        Some(d) => Err(Error::InvalidObject(format!(
            "{what} for device {} ({}), which the bundle was not made for (its devices: {made_for:?}; \
             SYCL 2020: errc::invalid)",
            d.ordinal, d.name
        ))),
    }
}

/// Images of `images` that some device of `devices` cannot run are
/// `kernel_not_supported`, naming the image and the device.
fn check_images_run_on(images: &[Arc<Image>], devices: &[Device]) -> Result<(), Error> {
    for img in images {
        for d in devices {
            d.check(img.requirements()).map_err(|e| match e {
                Error::KernelNotSupported(m) => {
                    Error::KernelNotSupported(format!("image {} on {}: {m}", img.id(), d.name))
                }
                e => e,
            })?;
        }
    }
    Ok(())
}

/// SYCL 2020's `get_kernel_bundle<input>(context, devices, kernel_ids)`:
/// an input bundle for `devices` of the registered images that define
/// `kernels`, holding just those kernels. A kernel that no device of
/// `devices` can run, or that no image defines, is an error
/// (`invalid_object`; SYCL-CTS
/// `get_kernel_bundle_with_incompatible_kernels.cpp`); so is an empty
/// device list.
pub fn get_kernel_bundle_on(
    devices: &[Device],
    kernels: &[KernelId],
) -> Result<KernelBundle<Input>, Error> {
    no_devices("get_kernel_bundle_on", devices)?;
    let mut b = get_kernel_bundle_for(kernels)?;
    for k in b.kernel_ids() {
        let runs = b.images().iter().any(|i| {
            i.kernel(&k.0).is_some() && devices.iter().any(|d| d.check(i.requirements()).is_ok())
        });
        if !runs {
            let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
            return Err(Error::InvalidObject(format!(
                "kernel {} is compatible with none of the devices {names:?} (SYCL 2020: errc::invalid)",
                k.0
            )));
        }
    }
    Arc::make_mut(&mut b.inner).devices = Some(devices.iter().map(|d| d.ordinal).collect());
    Ok(b)
}

/// Whether `device` can run every kernel of `kernels`: each is defined by
/// a registered image whose requirements the device meets (aspects,
/// sub-group size, work-group size).
pub fn is_compatible(kernels: &[KernelId], device: &Device) -> Result<bool, Error> {
    let all = registered_images()?;
    Ok(kernels.iter().all(|k| {
        all.iter()
            .any(|i| i.kernel(&k.0).is_some() && device.check(i.requirements()).is_ok())
    }))
}

/// Compiles an input bundle for `devices` with `options` (SYCL 2020's
/// `compile(input, devices, properties)`): the object bundle is for those
/// devices only, and its link for them. A device the input was not made
/// for, or an empty list, is `invalid_object` (SYCL-CTS
/// `sycl_compile_exception_for_zero_devices.cpp`,
/// `sycl_compile_exception_if_dev_not_in_set.cpp`); an image a device
/// cannot run is `kernel_not_supported`.
pub fn compile_with(
    input: &KernelBundle<Input>,
    devices: &[Device],
    options: &BuildOptions,
) -> Result<KernelBundle<Object>, Error> {
    no_devices("compile_with", devices)?;
    devices_within("compile_with", input, devices)?;
    check_images_run_on(input.images(), devices)?;
    let mut object = compile(input)?;
    let inner = Arc::make_mut(&mut object.inner);
    inner.devices = Some(devices.iter().map(|d| d.ordinal).collect());
    inner.debug = options.debug;
    Ok(object)
}

/// Compiles an input bundle: its values are fixed from here on.
pub fn compile(input: &KernelBundle<Input>) -> Result<KernelBundle<Object>, Error> {
    // Shared, not copied: a bundle's state is copied on write (a value set
    // on the input afterwards copies the input's).
    Ok(KernelBundle {
        inner: Arc::clone(&input.inner),
        _state: PhantomData,
    })
}

/// Links object bundles into an executable one. An empty list is
/// `invalid_object`, two values for one constant too; a function that an
/// image calls and that no image of the link defines is
/// `link_program_error`, naming it.
pub fn link(objects: &[KernelBundle<Object>]) -> Result<KernelBundle<Executable>, Error> {
    link_for(objects, &[], &BuildOptions::default())
}

/// Links object bundles for `devices` with `options` (SYCL 2020's
/// `link(objects, devices, properties)`): as [`build_with`] builds. A
/// device that one of the bundles was not made for, or an empty list, is
/// `invalid_object` (SYCL-CTS `sycl_link_zero_device.cpp`); an image a
/// device cannot run is `kernel_not_supported`.
pub fn link_with(
    objects: &[KernelBundle<Object>],
    devices: &[Device],
    options: &BuildOptions,
) -> Result<KernelBundle<Executable>, Error> {
    no_devices("link_with", devices)?;
    for o in objects {
        devices_within("link_with", o, devices)?;
        check_images_run_on(o.images(), devices)?;
    }
    link_for(objects, devices, options)
}

/// The link of [`link`], [`link_with`] and the builds: for `devices` where
/// any are given (checked by the caller), for any device otherwise.
fn link_for(
    objects: &[KernelBundle<Object>],
    devices: &[Device],
    options: &BuildOptions,
) -> Result<KernelBundle<Executable>, Error> {
    let mut inner = merge(objects, "link")?;
    check_links(&inner.images)?;
    inner.debug = options.debug;
    // The executable's own log, which starts with what the input bundle
    // noted (a constant set that no image has).
    let earlier = inner
        .log
        .text
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    inner.log = Arc::new(Log {
        text: Mutex::new(String::new()),
        sink: options.log.clone(),
    });
    inner.log.push(&earlier);
    let debug = options.debug;
    let toolkit = match &options.toolkit_worker {
        Some(exe) => crate::toolkit::worker::Toolkit::Worker(exe.clone()),
        None => crate::toolkit::worker::Toolkit::InProcess,
    };
    inner.built = inner
        .images
        .iter()
        .map(|img| built::build_image(img, &inner.values, inner.mode, debug, &toolkit))
        .collect::<Result<_, _>>()?;
    // Why Auto did not choose LTO, once per reason.
    let mut said = std::collections::HashSet::new();
    for why in inner.built.iter().filter_map(|b| b.fallback()) {
        if said.insert(why) {
            inner.log.push(why);
        }
    }
    if !devices.is_empty() {
        inner.devices = Some(devices.iter().map(|d| d.ordinal).collect());
        // LTO: link for each device's architecture now, not at the first
        // launch.
        for b in inner
            .built
            .iter()
            .filter(|b| matches!(b.code(), Code::Lto(_)))
        {
            for d in devices {
                b.cubin(d.arch())?;
            }
        }
        for b in &inner.built {
            if let Code::Lto(l) = &b.code() {
                let text = std::mem::take(&mut *l.log.lock().unwrap_or_else(|p| p.into_inner()));
                inner.log.push(&text);
            }
        }
    }
    Ok(KernelBundle::wrap(inner))
}

/// Fails with `link_program_error` when an image calls a function that no
/// image of the link defines.
fn check_links(images: &[Arc<Image>]) -> Result<(), Error> {
    // A function called but not defined is declared `.extern .func`: PTX
    // without such a declaration calls nothing outside itself, and need not
    // be parsed (the parse is most of a process's first build).
    if !images.iter().any(|i| i.declares_extern_function()) {
        return Ok(());
    }
    let defined: Vec<&String> = images.iter().flat_map(|i| &i.link_symbols().1).collect();
    let mut missing: Vec<String> = Vec::new();
    for img in images {
        for u in &img.link_symbols().0 {
            if !defined.contains(&u) {
                missing.push(format!("{u} (called by image {})", img.id()));
            }
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::LinkProgram(missing))
    }
}

/// Compiles and links an input bundle into an executable one, each image in
/// the bundle's mode ([`KernelBundle::with_mode`], [`SpecMode::Auto`] by
/// default): emulated images keep their PTX and compute their buffer
/// contents; native ones get PTX with the values as immediates; LTO ones
/// are linked with the values by nvJitLink (when a queue first loads them,
/// per architecture, or at once for bundles built for devices); tiered ones
/// start emulated and are linked in the background. The values are the
/// bundle's (defaults for those not set). The module guide's table says
/// what each mode costs.
pub fn build(input: &KernelBundle<Input>) -> Result<KernelBundle<Executable>, Error> {
    link(&[compile(input)?])
}

/// Builds an input bundle for `devices` with `options`: the result runs on
/// those devices only (a launch on another is `invalid_object`), an LTO
/// build links for their architectures now, and the build log goes to
/// `options.log`. Images a device cannot run are `kernel_not_supported`;
/// an empty device list, or a device the input was not made for (a bundle
/// of [`get_kernel_bundle_with`] for device 0 built for devices 0 and 1),
/// is `invalid_object`, as SYCL 2020 says ([`build_with_options`] builds
/// for any device).
pub fn build_with(
    input: &KernelBundle<Input>,
    devices: &[Device],
    options: &BuildOptions,
) -> Result<KernelBundle<Executable>, Error> {
    no_devices("build_with", devices)?;
    devices_within("build_with", input, devices)?;
    check_images_run_on(input.images(), devices)?;
    link_for(&[compile(input)?], devices, options)
}

/// Builds an input bundle for any device, with `options` (a debug build,
/// a log sink, NVIDIA's libraries in a worker process).
pub fn build_with_options(
    input: &KernelBundle<Input>,
    options: &BuildOptions,
) -> Result<KernelBundle<Executable>, Error> {
    link_for(&[compile(input)?], &[], options)
}

/// Joins bundles of one state. Built images are all kept, also when two
/// hold the same kernel (built in different modes, say): a selector at
/// dispatch chooses between them. Joining none is an empty bundle of that
/// state, for any device (SYCL 2020; SYCL-CTS
/// `sycl_join_zero_kernel_bundles.cpp`).
pub fn join<S>(bundles: &[KernelBundle<S>]) -> Result<KernelBundle<S>, Error> {
    if bundles.is_empty() {
        return Ok(KernelBundle::wrap(Inner::empty()));
    }
    let mut inner = merge(bundles, "join")?;
    let mut built: Vec<Arc<BuiltImage>> = Vec::new();
    for b in bundles {
        for bi in &b.inner.built {
            if !built.iter().any(|x| Arc::ptr_eq(x, bi)) {
                built.push(Arc::clone(bi));
            }
        }
    }
    inner.built = built;
    Ok(KernelBundle::wrap(inner))
}

/// Two different images of one ID (two crates embedding images of one file
/// stem): one would be lost.
fn two_images_of_one_id(id: &str, what: &str) -> Error {
    Error::InvalidObject(format!(
        "{what}: two different device images are named {id} (two crates or folders with an image of that \
         file stem?): one would be lost. Rename one source file"
    ))
}

/// Images, kernels and values of several bundles (first mode, options and
/// log win; devices: those all bundles allow).
fn merge<S>(bundles: &[KernelBundle<S>], what: &str) -> Result<Inner, Error> {
    let first = bundles.first().ok_or_else(|| {
        Error::InvalidObject(format!("{what} of an empty list of kernel bundles"))
    })?;
    // One bundle (what `build` links): its state, as it is.
    if let [only] = bundles {
        let mut inner = (*only.inner).clone();
        inner.built.clear();
        return Ok(inner);
    }
    let (mut images, mut kernels, mut values) = (Vec::new(), Vec::new(), BTreeMap::new());
    let mut inner = Inner {
        images: Arc::default(),
        kernels: Arc::default(),
        mode: first.inner.mode,
        values: Arc::default(),
        built: Vec::new(),
        devices: first.inner.devices.clone(),
        debug: first.inner.debug,
        log: Arc::clone(&first.inner.log),
    };
    for b in bundles {
        for img in b.inner.images.iter() {
            match images.iter().find(|i: &&Arc<Image>| i.id() == img.id()) {
                None => images.push(Arc::clone(img)),
                Some(i) if Arc::ptr_eq(i, img) || i.same_as(img) => {}
                Some(_) => return Err(two_images_of_one_id(img.id(), what)),
            }
        }
        for k in b.inner.kernels.iter() {
            if !kernels.contains(k) {
                kernels.push(k.clone());
            }
        }
        if let (Some(mine), Some(theirs)) = (&mut inner.devices, &b.inner.devices) {
            mine.retain(|d| theirs.contains(d));
        } else if inner.devices.is_none() {
            inner.devices = b.inner.devices.clone();
        }
        for (id, v) in b.inner.values.iter() {
            match values.get(id) {
                Some(old) if old != v => {
                    return Err(Error::InvalidObject(format!(
                        "{what}: specialization constant '{id}' has different values in the bundles"
                    )));
                }
                _ => {
                    values.insert(id.clone(), v.clone());
                }
            }
        }
    }
    inner.images = Arc::new(images);
    inner.kernels = Arc::new(kernels);
    inner.values = Arc::new(values);
    Ok(inner)
}

#[cfg(test)]
mod tests;
