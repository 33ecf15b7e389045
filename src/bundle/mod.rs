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
mod every_state;
mod input;
mod options;
mod registered;
mod state;
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
    /// this process has already (linked before by any bundle) needs no
    /// link: its code loads on the loader thread while the first launches
    /// run emulated (where the queue has it loaded already, the first launch
    /// runs it). A failed link
    /// leaves the kernel emulated (the build log says why); a launch never
    /// waits for or fails because of tiering. The process's first tiered
    /// build loads and warms up NVIDIA's libraries on the building thread
    /// (once per process; `ptxspec_core::lto::warm_up`): no background
    /// thread is the first to run their code, which an exit from another
    /// thread would tear down under it (`ptxspec_core::toolkit::exit`).
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
    /// Inline for up to two: the check reads no other cache line.
    devices: Option<smallvec::SmallVec<[usize; 2]>>,
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
    #[inline]
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
pub(crate) mod tests;
