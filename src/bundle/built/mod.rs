//! Executable images: what a launch loads for an image, a mode and values
//! ([`build_image`]); how it then passes the values is the image contract's
//! [`delivery`](crate::image::delivery) of the image's placement and the
//! code loaded. The runtime only follows [`Code`] and [`Delivery`]. A tiered
//! image's background links (`tier`) are part of building one.

pub(crate) mod tier;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use super::SpecMode;
use crate::error::Error;
use crate::image::{self, CodeForm, Delivery, ImageData};
use ptxspec_core::arguments::FixedArguments;
use ptxspec_core::lto;
use ptxspec_core::postlink;
use tier::TierUp;

/// What a queue loads for a built image.
#[derive(Debug)]
pub(crate) enum Code {
    /// PTX, JIT-compiled by the driver: the post-link's (emulated), or
    /// specialized with the values as immediates (native).
    Ptx(Arc<String>),
    /// A cubin per architecture, linked by nvJitLink when first needed,
    /// then cached: from the image's LTO-IR with the values (LTO), or from
    /// the PTX specialized with them (a tiered image's native tier).
    Lto(LtoCode),
}

/// An image of an executable bundle: the code to load, the values and how
/// they are delivered, all fixed.
#[derive(Debug)]
pub struct BuiltImage {
    image: Arc<ImageData>,
    code: Code,
    /// The buffer contents (defaults patched with the values).
    blob: Arc<Vec<u8>>,
    delivery: Delivery,
    mode: SpecMode,
    /// Why `SpecMode::Auto` built this image natively rather than by LTO.
    fallback: Option<String>,
    /// Extra JIT and link options (debug builds).
    pub(crate) debug: bool,
    /// Where its links run, its variants' too ([`BuildOptions::toolkit_worker`](super::BuildOptions::toolkit_worker)).
    pub(crate) toolkit: ptxspec_core::toolkit::worker::Toolkit,
    /// A tiered image's specialized tier (the emulated code is `code`).
    pub(crate) tier: Option<Arc<TierUp>>,
    /// Its kernels' parameters as the image's PTX declares them, read once
    /// when a queue first watches a kernel's arguments (adaptive
    /// arguments): a plan is made under the queue's lock, and reading them
    /// parses the whole module.
    kernel_params: OnceLock<Vec<ptxspec_core::arguments::KernelParams>>,
}

/// LTO code: the values as definitions, linked per architecture.
#[derive(Debug)]
pub(crate) struct LtoCode {
    /// What is linked.
    from: LinkFrom,
    /// Cubins by `sm_` number and kernel (`None`: all the image's kernels),
    /// each in a slot of its own: the list's lock is held for a lookup
    /// only, and a slot's only by the thread linking that cubin, so that a
    /// launch asking whether a cubin is there never waits for a link
    /// (another queue's first launch while a worker links, issue 31).
    linked: Mutex<Vec<LinkedCubin>>,
    /// nvJitLink's logs so far.
    pub(crate) log: Mutex<String>,
}

impl LtoCode {
    fn new(from: LinkFrom) -> LtoCode {
        LtoCode {
            from,
            linked: Mutex::new(Vec::new()),
            log: Mutex::new(String::new()),
        }
    }
}

/// What an [`LtoCode`] links.
#[derive(Debug)]
enum LinkFrom {
    /// The image's LTO-IR with the values' definitions.
    LtoIr,
    /// PTX with the values as immediates, compiled whole (nvJitLink's
    /// ptxas): a tiered image's tier where it has no LTO-IR.
    Ptx(Arc<String>),
}

/// The slot of a cubin for one architecture and kernel (`None`: every
/// kernel): empty until linked.
type LinkedCubin = (u32, Option<String>, CubinSlot);

/// One cubin, filled once by the thread that links it (holding the lock
/// while it links: others who need that cubin wait for it, not for others).
type CubinSlot = Arc<Mutex<Option<Arc<Vec<u8>>>>>;

impl LtoCode {
    /// The slot for `sm_<arch>` and `kernel`, made empty where none is.
    fn slot(&self, arch: u32, kernel: Option<&str>) -> CubinSlot {
        let mut linked = self.linked.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, _, slot)) = linked
            .iter()
            .find(|(a, k, _)| *a == arch && k.as_deref() == kernel)
        {
            return Arc::clone(slot);
        }
        let slot = CubinSlot::default();
        linked.push((arch, kernel.map(str::to_string), Arc::clone(&slot)));
        slot
    }

    /// The cubin for `sm_<arch>` and `kernel` where it is linked — without
    /// waiting: a slot whose link is under way answers `None`.
    fn peek(&self, arch: u32, kernel: Option<&str>) -> Option<Arc<Vec<u8>>> {
        let slot = {
            let linked = self.linked.lock().unwrap_or_else(|p| p.into_inner());
            let (_, _, slot) = linked
                .iter()
                .find(|(a, k, _)| *a == arch && k.as_deref() == kernel)?;
            Arc::clone(slot)
        };
        match slot.try_lock() {
            Ok(cubin) => cubin.clone(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().clone(),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

impl BuiltImage {
    /// The image it was built from.
    pub fn image(&self) -> crate::image::Image {
        crate::image::Image::from_data(Arc::clone(&self.image))
    }

    /// The image it was built from, as the runtime reads it.
    pub(crate) fn image_data(&self) -> &Arc<ImageData> {
        &self.image
    }

    /// The parameters of `kernel` as the image's PTX declares them (its
    /// module parsed once per built image); `None` where the PTX does not
    /// parse or does not define the kernel.
    pub(crate) fn kernel_params(
        &self,
        kernel: &str,
    ) -> Option<&ptxspec_core::arguments::KernelParams> {
        self.kernel_params
            .get_or_init(|| {
                ptxspec_core::arguments::KernelParams::all_from_ptx(self.image.ptx())
                    .unwrap_or_default()
            })
            .iter()
            .find(|p| p.kernel() == kernel)
    }

    /// What a queue loads.
    pub(crate) fn code(&self) -> &Code {
        &self.code
    }

    /// The buffer contents: the defaults patched with the bundle's values.
    pub fn blob(&self) -> &[u8] {
        &self.blob
    }

    /// How the values reach the kernels.
    pub fn delivery(&self) -> Delivery {
        self.delivery
    }

    /// The mode it was built in (`Auto` resolved to what it chose).
    pub fn mode(&self) -> SpecMode {
        self.mode
    }

    /// The same image built the same way (mode, debug, toolkit) with other
    /// values: `blob`, the buffer contents (a graph node's new values).
    pub(crate) fn with_blob(&self, blob: Vec<u8>) -> Result<Arc<BuiltImage>, Error> {
        build_image_with_blob(&self.image, blob, self.mode, self.debug, &self.toolkit)
    }

    /// For a [`SpecMode::Tiered`] image: the mode of its specialized tier
    /// (LTO, or native), which launches switch to once linked.
    pub fn tier_mode(&self) -> Option<SpecMode> {
        self.tier.as_ref().map(|t| t.specialized().mode())
    }

    /// Why [`SpecMode::Auto`] built this image natively rather than by JIT
    /// LTO: the image has no LTO-IR, or nvJitLink did not load (the reason
    /// names where it was looked for). `None` when it chose LTO, or the mode
    /// was chosen by the caller. The bundle's build log says it too.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The PTX a queue loads (native and emulated builds), or `None` for an
    /// LTO build.
    pub fn ptx(&self) -> Option<&str> {
        match &self.code {
            Code::Ptx(p) => Some(p),
            Code::Lto(_) => None,
        }
    }

    /// The cubin of an LTO build for `sm_<arch>`, linking it on first use
    /// (a lookup in the caches when the values were seen before), and where
    /// it came from.
    pub fn cubin(&self, arch: u32) -> Result<lto::Cubin, Error> {
        self.link(arch, None)
    }

    /// A cubin for `sm_<arch>` that holds `kernel`: the whole image's where
    /// it was linked already, else one linked for that kernel alone
    /// (nvJitLink compiles only it) — what a launch uses. An image of one
    /// kernel links it whole. A kernel the image lacks is
    /// `kernel_not_found`, naming those it has.
    pub fn cubin_for_kernel(&self, arch: u32, kernel: &str) -> Result<lto::Cubin, Error> {
        self.defines(kernel)?;
        let alone = self.links_kernels_alone();
        if alone
            && let Code::Lto(code) = &self.code
            && let Some(c) = code.peek(arch, None)
        {
            return Ok(lto::Cubin::in_memory(c));
        }
        self.link(arch, alone.then_some(kernel))
    }

    /// A cubin for `sm_<arch>` of the kernel `arguments` names alone, with
    /// those of its by-value parameters fixed to their values: this build's
    /// values and the image's LTO-IR linked with a wrapper that passes the
    /// literals, so NVVM optimizes with them known
    /// ([`crate::arguments`]). The kernel keeps its name and parameters.
    /// Through the same caches as every link (the values are in the key).
    /// Any mode's build serves (its values are linked); an image without
    /// LTO-IR is an error.
    pub fn cubin_with_arguments(
        &self,
        arch: u32,
        arguments: &FixedArguments,
    ) -> Result<lto::Cubin, Error> {
        let kernel = arguments.kernel();
        self.defines(kernel)?;
        Ok(self.with_link_request(arch, Some(kernel), Some(arguments), lto::cubin)??)
    }

    /// `Ok` where the image defines `kernel`; else `kernel_not_found`,
    /// naming the kernels it has.
    fn defines(&self, kernel: &str) -> Result<(), Error> {
        let kernels = self.image.kernels();
        if kernels.iter().any(|k| k.name == kernel) {
            return Ok(());
        }
        let names: Vec<&str> = kernels.iter().map(|k| k.name.as_str()).collect();
        Err(Error::kernel_not_found(
            kernel,
            format!(
                "kernel {kernel}: image {} has no such kernel (it has {})",
                self.image.id(),
                names.join(", ")
            ),
        ))
    }

    /// Whether a launch's cubin holds its kernel alone (an LTO image of
    /// several kernels: nvJitLink then compiles only that one), not the
    /// whole image.
    fn links_kernels_alone(&self) -> bool {
        let from_ptx = matches!(&self.code, Code::Lto(c) if matches!(c.from, LinkFrom::Ptx(_)));
        self.image.kernels().len() > 1 && !from_ptx
    }

    fn link(&self, arch: u32, kernel: Option<&str>) -> Result<lto::Cubin, Error> {
        let Code::Lto(code) = &self.code else {
            return Err(Error::invalid(
                crate::error::Misuse::NotBuiltForIt,
                format!("image {} was not built in LTO mode", self.image.id()),
            ));
        };
        // A PTX link is whole: one cubin serves every kernel.
        let kernel = match code.from {
            LinkFrom::Ptx(_) => None,
            LinkFrom::LtoIr => kernel,
        };
        let slot = code.slot(arch, kernel);
        let mut linked = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = &*linked {
            return Ok(lto::Cubin::in_memory(Arc::clone(c)));
        }
        let image = &self.image;
        let cubin = match &code.from {
            LinkFrom::Ptx(ptx) => {
                lto::cubin_of_ptx(ptx, &format!("{}.ptx", image.id()), arch, &self.toolkit)?
            }
            LinkFrom::LtoIr => self.with_link_request(arch, kernel, None, lto::cubin)??,
        };
        // The build log says where each cubin came from (a remote hit or a
        // link alike), then what nvJitLink said of it.
        let mut log = code.log.lock().unwrap_or_else(|p| p.into_inner());
        log.push_str(&format!(
            "cubin of image {}{} for sm_{arch}: {}\n",
            image.id(),
            kernel.map(|k| format!(" (kernel {k})")).unwrap_or_default(),
            cubin.source
        ));
        log.push_str(&cubin.log);
        drop(log);
        *linked = Some(Arc::clone(&cubin.bytes));
        Ok(cubin)
    }
}

impl BuiltImage {
    /// nvJitLink options beyond the target: for a debug build, line
    /// information and the linker's account of what it did (registers,
    /// spills) in the build log.
    fn link_options(&self) -> Vec<String> {
        if self.debug {
            vec!["-lineinfo".into(), "-verbose".into()]
        } else {
            Vec::new()
        }
    }

    /// Whether this process holds a cubin with `kernel` for `sm_<arch>` of
    /// this build already — linked for it, or for the same image and values
    /// before (the LTO memory cache) — so that a launch would find it
    /// without a link. For a [`SpecMode::Tiered`] image: its specialized
    /// tier's (a tiered launch then starts there).
    pub fn cubin_is_cached(&self, arch: u32, kernel: &str) -> bool {
        if let Some(tier) = &self.tier {
            return tier.specialized().cubin_is_cached(arch, kernel);
        }
        let Code::Lto(code) = &self.code else {
            return false;
        };
        // What `cubin_for_kernel` would take: the whole image's cubin, or
        // (where kernels are linked alone) this kernel's.
        let alone = self.links_kernels_alone().then_some(kernel);
        if code.peek(arch, None).is_some()
            || alone.is_some_and(|k| code.peek(arch, Some(k)).is_some())
        {
            return true;
        }
        if !matches!(code.from, LinkFrom::LtoIr) {
            return false;
        }
        self.with_link_request(arch, alone, None, |request| {
            let whole = lto::LinkRequest {
                kernel: None,
                ..*request
            };
            lto::cubin_in_memory(&whole).is_some()
                || (alone.is_some() && lto::cubin_in_memory(request).is_some())
        })
        .unwrap_or(false)
    }

    /// Brings this LTO build's cubin for `kernel` on `sm_<arch>` into the
    /// memory cache where a cache holds it (disk, the remote store), linking
    /// nothing: whether it is there now.
    pub(crate) fn prefetch(&self, arch: u32, kernel: &str) -> bool {
        let alone = self.links_kernels_alone().then_some(kernel);
        matches!(&self.code, Code::Lto(c) if matches!(c.from, LinkFrom::LtoIr))
            && self
                .with_link_request(arch, alone, None, lto::prefetch)
                .unwrap_or(false)
    }

    /// The LTO link of this build for `sm_<arch>` (of `kernel` alone, or
    /// the whole image; with `arguments` fixed), handed to `use_it`.
    fn with_link_request<R>(
        &self,
        arch: u32,
        kernel: Option<&str>,
        arguments: Option<&FixedArguments>,
        use_it: impl FnOnce(&lto::LinkRequest<'_>) -> R,
    ) -> Result<R, Error> {
        let lto_image = self.image.ltoir().ok_or_else(|| no_ltoir(&self.image))?;
        let definitions = self.image.lto_definitions(&self.blob)?;
        let options = self.link_options();
        Ok(use_it(&lto::LinkRequest {
            ltoir: &lto_image.ir,
            ltoir_identity: lto_image.identity,
            definitions: &definitions,
            arch,
            options: &options,
            toolkit: &self.toolkit,
            kernel,
            arguments,
        }))
    }
}

fn no_ltoir(image: &ImageData) -> Error {
    Error::invalid(
        crate::error::Misuse::NotBuiltForIt,
        format!(
            "image {} has no LTO-IR: build it with `ptxspec compile --lto` or build_support's LTO option \
         to use SpecMode::Lto",
            image.id()
        ),
    )
}

/// The image's PTX by address (the cache holds the `Arc`, so the address is
/// not reused while the entry lives) and the values.
type SpecializedKey = (usize, Vec<u8>);

/// Specialized PTX by image and values: a repeat build is a lookup. Keyed by
/// the PTX itself, not the image's name: two images may share a name (a
/// kernel joined in two versions) and differ in code.
pub(crate) fn specialized(image: &ImageData, blob: &[u8]) -> Result<Arc<String>, Error> {
    type Entries = HashMap<SpecializedKey, (Arc<String>, Arc<String>)>;
    static CACHE: OnceLock<Mutex<Entries>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (Arc::as_ptr(image.ptx()) as usize, blob.to_vec());
    if let Some((_, hit)) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(Arc::clone(hit));
    }
    let ptx = Arc::new(postlink::specialize(
        &format!("{}.ptx", image.id()),
        image.ptx(),
        blob,
    )?);
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    // Bounded: past 256 value sets the cache starts over (all entries go;
    // a value set seen again is specialized again).
    if map.len() >= 256 {
        map.clear();
    }
    map.insert(key, (Arc::clone(image.ptx()), Arc::clone(&ptx)));
    Ok(ptx)
}

/// Builds `image` with `values` in `mode`: the one decision of what code a
/// launch loads and how it passes the values.
pub(crate) fn build_image(
    image: &Arc<ImageData>,
    values: &BTreeMap<String, Vec<u8>>,
    mode: SpecMode,
    debug: bool,
    toolkit: &ptxspec_core::toolkit::worker::Toolkit,
) -> Result<Arc<BuiltImage>, Error> {
    build_image_with_blob(image, image.blob_with(values)?, mode, debug, toolkit)
}

/// [`build_image`] with the values already laid out: `blob` is the
/// image's buffer contents (a graph node's values, changed in place). A
/// build of what a live built image was built from (the same image, mode,
/// options and values) shares it — its code, its linked cubins and, tiered,
/// its links — so that a repeat build of values seen before is a lookup.
pub(crate) fn build_image_with_blob(
    image: &Arc<ImageData>,
    blob: Vec<u8>,
    mode: SpecMode,
    debug: bool,
    toolkit: &ptxspec_core::toolkit::worker::Toolkit,
) -> Result<Arc<BuiltImage>, Error> {
    type Key = (usize, SpecMode, bool, Option<std::path::PathBuf>, Vec<u8>);
    /// The live built images by what they were built from, and the most
    /// recent builds, kept alive: a program that drops a bundle and builds
    /// the same values again (a server alternating among a few value sets)
    /// gets the same built image back, its cubins linked already, rather
    /// than a new one that looks them up again. Tiered images are not
    /// kept: dropping their bundle drops their queued links.
    #[derive(Default)]
    struct Shared {
        live: HashMap<Key, std::sync::Weak<BuiltImage>>,
        recent: std::collections::VecDeque<Arc<BuiltImage>>,
    }
    static BUILT: OnceLock<Mutex<Shared>> = OnceLock::new();
    let worker = match toolkit {
        ptxspec_core::toolkit::worker::Toolkit::InProcess => None,
        ptxspec_core::toolkit::worker::Toolkit::Worker(path) => Some(path.clone()),
    };
    // The image's address is its identity while a built image of it lives
    // (it holds the image); a dead entry is a miss.
    let key: Key = (Arc::as_ptr(image) as usize, mode, debug, worker, blob);
    let built = BUILT.get_or_init(Default::default);
    if let Some(hit) = built
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .live
        .get(&key)
        .and_then(std::sync::Weak::upgrade)
    {
        return Ok(hit);
    }
    let made = build_unshared(image, key.4.clone(), mode, debug, toolkit)?;
    let mut shared = built.lock().unwrap_or_else(|p| p.into_inner());
    // Bounded: dead entries go first, then, past the bound, all of them.
    if shared.live.len() >= SHARED_BUILDS {
        shared.live.retain(|_, w| w.strong_count() > 0);
        if shared.live.len() >= SHARED_BUILDS {
            shared.live.clear();
        }
    }
    shared.live.insert(key, Arc::downgrade(&made));
    if made.tier.is_none() {
        if shared.recent.len() >= RECENT_BUILDS {
            shared.recent.pop_back();
        }
        shared.recent.push_front(Arc::clone(&made));
    }
    Ok(made)
}

/// How many built images [`build_image_with_blob`] remembers.
const SHARED_BUILDS: usize = 1024;
/// How many of the most recent builds it keeps alive.
const RECENT_BUILDS: usize = 16;

fn build_unshared(
    image: &Arc<ImageData>,
    blob: Vec<u8>,
    mode: SpecMode,
    debug: bool,
    toolkit: &ptxspec_core::toolkit::worker::Toolkit,
) -> Result<Arc<BuiltImage>, Error> {
    let aot = image.info().spec_consts_replaced_with_default;
    let (mode, fallback) = match mode {
        SpecMode::Auto if !image.has_constants() || aot => (SpecMode::Native, None),
        SpecMode::Auto => match (
            image.ltoir(),
            ptxspec_core::toolkit::require(ptxspec_core::toolkit::Lib::NvJitLink),
        ) {
            (Some(_), Ok(())) => (SpecMode::Lto, None),
            (None, _) => (
                SpecMode::Native,
                Some(format!(
                    "image {}: SpecMode::Auto built it natively (PTX with the values as immediates), not by JIT LTO: \
                     it carries no LTO-IR (compile it with `ptxspec compile --lto` or `CudaBuild::lto(true)`)",
                    image.id()
                )),
            ),
            (Some(_), Err(e)) => (
                SpecMode::Native,
                Some(format!(
                    "image {}: SpecMode::Auto built it natively (PTX with the values as immediates), not by JIT LTO: {e}",
                    image.id()
                )),
            ),
        },
        m => (m, None),
    };
    let mut tier = None;
    // An image without constants has nothing to specialize: its PTX as it
    // is — unless LTO was asked for explicitly and it carries LTO-IR (the
    // generic LTO cubin, to compare a fixed-argument one with).
    let generic_lto = mode == SpecMode::Lto && !aot && image.ltoir().is_some();
    let (code, form) = match mode {
        _ if (!image.has_constants() || aot) && !generic_lto => {
            (Code::Ptx(Arc::clone(image.ptx())), CodeForm::Specialized)
        }
        SpecMode::Tiered => {
            tier::settings()?;
            ptxspec_core::toolkit::exit::guard_this_thread();
            tier = Some(Arc::new(TierUp::new(tier::specialized_tier(
                image, &blob, debug, toolkit,
            )?)));
            (Code::Ptx(Arc::clone(image.ptx())), CodeForm::Emulated)
        }
        SpecMode::Native | SpecMode::Auto => {
            (Code::Ptx(specialized(image, &blob)?), CodeForm::Specialized)
        }
        SpecMode::Emulated => (Code::Ptx(Arc::clone(image.ptx())), CodeForm::Emulated),
        SpecMode::Lto => {
            if image.ltoir().is_none() {
                return Err(no_ltoir(image));
            }
            (
                Code::Lto(LtoCode::new(LinkFrom::LtoIr)),
                CodeForm::Specialized,
            )
        }
    };
    let delivery = image::delivery(image.placement(), form);
    Ok(Arc::new(BuiltImage {
        image: Arc::clone(image),
        code,
        blob: Arc::new(blob),
        delivery,
        mode,
        fallback,
        debug,
        toolkit: toolkit.clone(),
        tier,
        kernel_params: OnceLock::new(),
    }))
}

#[cfg(test)]
mod slot_tests;
