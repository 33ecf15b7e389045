//! Specialization by link-time optimization: an image's LTO-IR, in which
//! every specialization constant is an external device constant (the
//! header's LTO flavour), is linked by nvJitLink with a small generated unit
//! that defines those constants with the values. NVVM then optimizes the
//! whole program with the values known — loops bounded by a constant unroll
//! as they do for a literal — and the result is a cubin for one
//! architecture.
//!
//! The definitions are NVVM IR compiled by libNVVM, or CUDA C++ compiled
//! by NVRTC where libNVVM is missing (slower: most of it NVRTC's start;
//! `cargo bench --bench postlink -- lto/`, BENCHMARKS.md). Cubins are cached in memory and on disk ([`cache`]).

pub mod cache;
mod container;
#[cfg(feature = "remote")]
pub mod remote;
#[cfg(not(feature = "remote"))]
#[path = "remote_off.rs"]
mod remote;

pub use container::{ContainerError, LtoIr};

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::arguments::FixedArguments;
use crate::digest::{Digest, KeyEncoder};
use crate::toolkit::worker::Toolkit;
use crate::toolkit::{self, ToolkitError, nvjitlink, nvrtc, nvvm};

/// One external device constant and the bytes that define it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Definition<'a> {
    /// `ptxspec::detail::lto_slot<KEY, SIZE, ALIGN>`, mangled.
    pub symbol: &'a str,
    /// The alignment the declaration promises.
    pub align: u32,
    /// The value's bytes.
    pub bytes: &'a [u8],
}

/// Which compiler turns the definitions into LTO-IR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefinitionsCompiler {
    /// libNVVM from NVVM IR text (the default where libNVVM is found).
    Nvvm,
    /// NVRTC from CUDA C++.
    Nvrtc,
}

impl DefinitionsCompiler {
    /// libNVVM where the one that loads belongs with the linker (beside
    /// nvJitLink, or named by `PTXSPEC_NVVM`: its LTO-IR must not be newer
    /// than the linker), NVRTC otherwise.
    pub(crate) fn preferred() -> DefinitionsCompiler {
        if toolkit::nvvm_matches_linker() {
            DefinitionsCompiler::Nvvm
        } else {
            DefinitionsCompiler::Nvrtc
        }
    }
}

/// The definitions as NVVM IR: one `addrspace(1)` constant byte array per
/// symbol, of the NVVM IR version libNVVM reads (`ir_version`).
pub(crate) fn nvvm_ir(defs: &[Definition<'_>], ir_version: (i32, i32, i32, i32)) -> String {
    let mut ir = String::from(
        "target datalayout = \"e-i64:64-i128:128-v16:16-v32:32-n16:32:64\"\n\
         target triple = \"nvptx64-nvidia-cuda\"\n",
    );
    for d in defs {
        let _ = write!(
            ir,
            "@{} = addrspace(1) constant [{} x i8] c\"",
            d.symbol,
            d.bytes.len()
        );
        for b in d.bytes {
            let _ = write!(ir, "\\{b:02X}");
        }
        let _ = writeln!(ir, "\", align {}", d.align.max(1));
    }
    let (a, b, c, e) = ir_version;
    let _ = write!(
        ir,
        "!nvvmir.version = !{{!0}}\n!0 = !{{i32 {a}, i32 {b}, i32 {c}, i32 {e}}}\n"
    );
    ir
}

/// The definitions as CUDA C++ for NVRTC.
pub(crate) fn cuda_source(defs: &[Definition<'_>]) -> String {
    let mut src = String::new();
    for d in defs {
        let bytes: Vec<String> = d.bytes.iter().map(u8::to_string).collect();
        let _ = writeln!(
            src,
            "extern \"C\" __device__ __align__({}) const unsigned char {}[{}] = {{{}}};",
            d.align.max(1),
            d.symbol,
            d.bytes.len().max(1),
            bytes.join(",")
        );
    }
    src
}

/// Runs, once per process, what a background link runs — libNVVM
/// compiling definitions, nvJitLink linking LTO-IR and compiling PTX — on a
/// one-byte program, then registers the exit hook (`toolkit::exit`) after
/// it: the libraries register destructors as their code first runs, and
/// exit must run the hook (which waits for links in progress) before those.
/// A tier worker runs it before its first link (the libraries' start); until it is
/// over, the exit of the threads that asked for links waits
/// (`toolkit::exit::guard_this_thread`). Failures are left to the links
/// themselves to report.
pub fn warm_up() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let defs = [Definition {
            symbol: "ptxspec_warm_up",
            align: 1,
            bytes: &[0],
        }];
        let toolkit = Toolkit::InProcess;
        if let Ok(ir) = compile_definitions(&defs, 75, DefinitionsCompiler::preferred(), &toolkit)
        {
            let _ = toolkit.link(
                &[(nvjitlink::InputKind::LtoIr, &ir, "warm-up")],
                &["-arch=sm_75".into(), "-lto".into(), "-O3".into()],
            );
        }
        let ptx = ".version 7.0\n.target sm_75\n.address_size 64\n.visible .entry ptxspec_warm_up() { ret; }\n";
        let _ = toolkit.link(
            &[(nvjitlink::InputKind::Ptx, ptx.as_bytes(), "warm-up.ptx")],
            &["-arch=sm_75".into()],
        );
        toolkit::exit::register_now();
        toolkit::exit::first_use_over();
    });
}

/// The definitions compiled to LTO-IR for `compute_<arch>`.
pub fn compile_definitions(
    defs: &[Definition<'_>],
    arch: u32,
    compiler: DefinitionsCompiler,
    toolkit: &Toolkit,
) -> Result<Vec<u8>, ToolkitError> {
    match compiler {
        DefinitionsCompiler::Nvvm => {
            static VERSION: OnceLock<Result<(i32, i32, i32, i32), ToolkitError>> = OnceLock::new();
            let v = VERSION.get_or_init(nvvm::ir_version).clone()?;
            toolkit.nvvm(
                &nvvm_ir(defs, v),
                "ptxspec-definitions",
                &["-gen-lto".into(), format!("-arch=compute_{arch}")],
            )
        }
        DefinitionsCompiler::Nvrtc => toolkit
            .nvrtc(
                &cuda_source(defs),
                "ptxspec-definitions.cu",
                &[
                    "-rdc=true".into(),
                    "-dlto".into(),
                    format!("-arch=compute_{arch}"),
                ],
                nvrtc::Output::LtoIr,
            )
            .map(|c| c.code)
            .map_err(neither_definitions_compiler),
    }
}

/// NVRTC is missing and libNVVM was not usable either: say that either
/// would do, and where each is.
fn neither_definitions_compiler(e: ToolkitError) -> ToolkitError {
    let ToolkitError::Missing { mut searched, .. } = e else {
        return e;
    };
    let nvvm = match toolkit::require(toolkit::Lib::Nvvm) {
        Err(ToolkitError::Missing { searched: s, .. }) => s,
        Err(other) => vec![other.to_string()],
        Ok(()) => vec!["a libNVVM that is not nvJitLink's toolkit's (so not used)".into()],
    };
    searched.extend(nvvm);
    ToolkitError::Missing {
        library: "libNVVM or libnvrtc",
        what: "a compiler for the definitions of the values, which nvJitLink then links: \
               libNVVM of nvJitLink's toolkit, else NVRTC",
        wheel: "nvidia-cuda-nvcc-cu12 (libNVVM, the same version as nvJitLink) or nvidia-cuda-nvrtc-cu12",
        env: "PTXSPEC_NVVM or PTXSPEC_NVRTC",
        searched,
    }
}

/// Where a cubin came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// This process's memory cache.
    Memory,
    /// The disk cache (`PTXSPEC_CACHE_DIR`).
    Disk,
    /// The remote cache (`PTXSPEC_REMOTE_CACHE`), signed by a trusted key.
    Remote,
    /// Linked now; `stored`: also written to the disk cache; `uploaded`:
    /// also signed and written to the remote store (a writer's link).
    Linked {
        /// Whether it was also written to the disk cache.
        stored: bool,
        /// Whether it was also uploaded to the remote store.
        uploaded: bool,
    },
}

impl Source {
    /// The tier's name, as `tracing` events and logs give it: `memory`,
    /// `disk`, `remote`, `linked`.
    pub fn tier(self) -> &'static str {
        match self {
            Source::Memory => "memory",
            Source::Disk => "disk",
            Source::Remote => "remote",
            Source::Linked { .. } => "linked",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Memory => f.write_str("this process's memory cache"),
            Source::Disk => f.write_str("the disk cache"),
            Source::Remote => f.write_str("the remote cache (signed by a trusted key)"),
            Source::Linked { stored, uploaded } => {
                f.write_str("linked here")?;
                match (stored, uploaded) {
                    (true, true) => {
                        f.write_str(" (stored on disk and uploaded to the remote store)")
                    }
                    (true, false) => f.write_str(" (stored on disk)"),
                    (false, true) => f.write_str(" (uploaded to the remote store)"),
                    (false, false) => Ok(()),
                }
            }
        }
    }
}

/// What the cubin caches and links did in this process: counters a program
/// reads without a `tracing` subscriber.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CubinStats {
    /// Cubins found in this process's memory cache.
    pub memory_hits: u64,
    /// Cubins read from the disk cache.
    pub disk_hits: u64,
    /// Cubins loaded from the remote store (signed by a trusted key).
    pub remote_hits: u64,
    /// Links (LTO, or PTX compiled whole) that made a cubin.
    pub links: u64,
    /// Links that failed.
    pub link_failures: u64,
    /// The time those links took, in all.
    pub link_time: std::time::Duration,
}

/// Whether a cubin found in this machine's caches is also made sure to be
/// in the remote store ([`publish_hits`]).
static PUBLISH_HITS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

thread_local! {
    /// What the last cubin look-up of this thread did about the remote
    /// store, while [`publish_hits`] is on ([`take_published`]).
    static PUBLISHED: std::cell::RefCell<Option<Published>> = const { std::cell::RefCell::new(None) };
}

/// What a cubin look-up did about the remote store, for `ptxspec cache
/// warm`, whose job is that the fleet finds the cubins.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Published {
    /// Stored in the store now (linked here, or found in this machine's
    /// caches and missing from the store).
    Uploaded,
    /// The store has it already (a trusted entry).
    AlreadyThere,
    /// It could not be stored: why.
    NotUploaded(String),
}

/// From now on, a cubin found in this process's memory or disk cache is
/// also made sure to be in the remote store (uploaded where the store lacks
/// it), and every look-up records what it did about the store for
/// [`take_published`]. For `ptxspec cache warm`: warm means the fleet can
/// find these, whichever tier the cubin came from.
pub fn publish_hits(on: bool) {
    PUBLISH_HITS.store(on, Ordering::Relaxed);
}

/// What this thread's last cubin look-up did about the remote store, while
/// [`publish_hits`] is on (`None`: there is no remote store, or it was not
/// looked at).
pub fn take_published() -> Option<Published> {
    PUBLISHED.with(|p| p.borrow_mut().take())
}

fn published(what: Published) {
    if PUBLISH_HITS.load(Ordering::Relaxed) {
        PUBLISHED.with(|p| *p.borrow_mut() = Some(what));
    }
}

/// Where publishing is on, makes sure the remote store holds a cubin found
/// in this machine's caches.
fn publish_hit(remote: Option<&remote::Remote>, key: &[u8], arch: u32, bytes: &[u8]) {
    if !PUBLISH_HITS.load(Ordering::Relaxed) {
        return;
    }
    if let Some(r) = remote {
        published(remote::ensure_stored(
            r,
            &remote_key(key, arch),
            arch,
            bytes,
        ));
    }
}

static MEMORY_HITS: AtomicU64 = AtomicU64::new(0);
static DISK_HITS: AtomicU64 = AtomicU64::new(0);
static REMOTE_HITS: AtomicU64 = AtomicU64::new(0);
static LINKS: AtomicU64 = AtomicU64::new(0);
static LINK_FAILURES: AtomicU64 = AtomicU64::new(0);
static LINK_NANOS: AtomicU64 = AtomicU64::new(0);

/// The cubin caches' and links' counts so far, in this process.
pub fn stats() -> CubinStats {
    CubinStats {
        memory_hits: MEMORY_HITS.load(Ordering::Relaxed),
        disk_hits: DISK_HITS.load(Ordering::Relaxed),
        remote_hits: REMOTE_HITS.load(Ordering::Relaxed),
        links: LINKS.load(Ordering::Relaxed),
        link_failures: LINK_FAILURES.load(Ordering::Relaxed),
        link_time: std::time::Duration::from_nanos(LINK_NANOS.load(Ordering::Relaxed)),
    }
}

/// Counts a cubin from `source` and says it to `tracing` (target
/// `ptxspec::cubin`: the tier, the architecture, the size).
fn found(source: Source, arch: u32, bytes: usize) {
    let counter = match source {
        Source::Memory => &MEMORY_HITS,
        Source::Disk => &DISK_HITS,
        Source::Remote => &REMOTE_HITS,
        Source::Linked { .. } => return,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(target: "ptxspec::cubin", tier = source.tier(), outcome = "hit", arch, bytes);
}

/// Says that `tier` did not hold the cubin.
fn missed(tier: &'static str, arch: u32) {
    tracing::debug!(target: "ptxspec::cubin", tier, outcome = "miss", arch);
}

/// A cubin for one image, value set and architecture.
#[derive(Clone)]
#[non_exhaustive]
pub struct Cubin {
    /// The ELF file nvJitLink wrote.
    pub bytes: Arc<Vec<u8>>,
    /// Where it came from.
    pub source: Source,
    /// nvJitLink's information log (empty for cache hits).
    pub log: String,
}

/// Its size, not its bytes: a cubin is tens of kilobytes.
impl std::fmt::Debug for Cubin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cubin")
            .field("bytes", &format_args!("<{} bytes>", self.bytes.len()))
            .field("source", &self.source)
            .field("log", &self.log)
            .finish()
    }
}

impl Cubin {
    /// A cubin this process holds already (no log: nothing was linked).
    pub fn in_memory(bytes: Arc<Vec<u8>>) -> Cubin {
        Cubin {
            bytes,
            source: Source::Memory,
            log: String::new(),
        }
    }
}

/// What a link needs: the image's units and identity, the definitions and
/// the target.
pub struct LinkRequest<'a> {
    /// The image's LTO-IR.
    pub ltoir: &'a LtoIr,
    /// The image's identity in the caches: the SHA-256 of its `.ltoir`
    /// bytes (or of what it was compiled from, for images compiled at run
    /// time: see `Image::with_ltoir_known_as`).
    pub ltoir_identity: Digest,
    /// The constants' definitions: the values.
    pub definitions: &'a [Definition<'a>],
    /// `sm_<arch>`: 90 for an H100.
    pub arch: u32,
    /// Extra nvJitLink options (`-lineinfo`, `-g`, ...).
    pub options: &'a [String],
    /// Where NVIDIA's libraries run: a worker process for images read from
    /// files ([`toolkit::worker`]).
    pub toolkit: &'a Toolkit,
    /// Compile only this kernel of the image (nvJitLink's
    /// `-kernels-used`): a cold link of one kernel of several costs a
    /// fraction of the whole. `None`: every kernel.
    pub kernel: Option<&'a str>,
    /// Some of `kernel`'s by-value parameters fixed to values
    /// ([`crate::arguments`]): the cubin holds that kernel alone, NVVM
    /// having seen the values as literals. `None`: none fixed.
    pub arguments: Option<&'a FixedArguments>,
}

/// A name no kernel has: nvJitLink matches a lone `-kernels-used=NAME` as a
/// substring of kernel names (`matmul` keeps `matmul_rolled` too), a list
/// of two exactly; this second entry makes the list.
const NO_KERNEL: &str = "ptxspec.no.kernel.has.this.name";

/// nvJitLink's option that keeps `kernel` alone.
pub fn kernels_used(kernel: &str) -> String {
    format!("-kernels-used={kernel},{NO_KERNEL}")
}

/// The disk cache's folder of cubins (its layout's version: entries of
/// older layouts are never read).
const CUBINS: &str = "cubins-v2";

/// The canonical key of `req`: everything that makes its cubin in this
/// process ([`crate::digest::KeyEncoder`]); compared whole in the memory
/// cache, hashed with the linker's identity for the other tiers.
fn memory_key(req: &LinkRequest<'_>) -> Vec<u8> {
    let mut key = KeyEncoder::new("ptxspec lto cubin v4");
    key.digest_field(&req.ltoir_identity)
        .u64(req.arch.into())
        .u64(req.definitions.len() as u64);
    for d in req.definitions {
        key.str(d.symbol).u64(d.align.into()).bytes(d.bytes);
    }
    key.list(req.options.iter().map(|o| o.as_bytes()))
        .optional(req.kernel.map(str::as_bytes));
    // Fields added only where arguments are fixed: the keys of links
    // without them stay what they were (and every cache's entries valid).
    if let Some(a) = req.arguments {
        a.key(&mut key);
    }
    key.into_encoded()
}

/// The key of a cubin on disk: the memory key and the linker — another
/// nvJitLink (a toolkit upgrade) compiles differently and may fix bugs, so
/// its cubins are its own. Its file's identity serves without loading it (a
/// disk hit in a new process then loads no library); where the file cannot
/// be told, its version.
fn disk_key(memory_key: &[u8]) -> Result<Digest, ToolkitError> {
    let linker = match toolkit::file_identity(toolkit::Lib::NvJitLink) {
        Some(file) => file,
        None => format!("version {:?}", nvjitlink::version()?).into_bytes(),
    };
    Ok(KeyEncoder::new("ptxspec disk cubin v4")
        .bytes(memory_key)
        .bytes(&linker)
        .digest())
}

/// The key of a cubin in the remote store: the memory key (image, values,
/// kernel, options, architecture) and the linker's release — its file's
/// name and size, the same on every machine that has that release.
fn remote_key(memory_key: &[u8], arch: u32) -> Digest {
    let linker = toolkit::library_release(toolkit::Lib::NvJitLink).unwrap_or_default();
    KeyEncoder::new("ptxspec remote cubin v4")
        .bytes(memory_key)
        .str(&linker)
        .u64(arch.into())
        .digest()
}

/// Brings the cubin of `req` into this process's memory cache where some
/// cache holds it — disk, or the remote store (without a lease or a wait)
/// — linking nothing: whether it is there now. What a profile's value sets
/// are warmed with at a process's start.
pub fn prefetch(req: &LinkRequest<'_>) -> bool {
    let key = memory_key(req);
    let mem = cache::MemoryCache::global();
    if mem.get(&key).is_some() {
        return true;
    }
    let Ok(disk_key) = disk_key(&key) else {
        return false;
    };
    let disk = cache::DiskSettings::from_env()
        .ok()
        .and_then(|s| s.cache(CUBINS));
    let bytes = match disk.as_ref().and_then(|d| d.get(&disk_key)) {
        Some(b) => b,
        None => {
            let Ok(Some(r)) = remote::tier() else {
                return false;
            };
            match remote::peek(r, &remote_key(&key, req.arch), req.arch) {
                Some(b) => {
                    if let Some(d) = &disk {
                        d.put(&disk_key, &b);
                    }
                    b
                }
                None => return false,
            }
        }
    };
    mem.insert(key, Arc::new(bytes));
    true
}

/// The cubin of `req` where this process linked or read it before (the
/// memory cache alone: no file is read, no library loaded, nothing linked).
pub fn cubin_in_memory(req: &LinkRequest<'_>) -> Option<Cubin> {
    cache::MemoryCache::global()
        .get(&memory_key(req))
        .map(Cubin::in_memory)
}

/// The cubin of `req`: from memory, from disk, from the remote store, or
/// linked (and then stored in each).
pub fn cubin(req: &LinkRequest<'_>) -> Result<Cubin, ToolkitError> {
    cached(memory_key(req), req.arch, || {
        let defs = compile_definitions(
            req.definitions,
            req.arch,
            DefinitionsCompiler::preferred(),
            req.toolkit,
        )?;
        let mut inputs: Vec<(nvjitlink::InputKind, &[u8], &str)> = req
            .ltoir
            .units
            .iter()
            .map(|(name, ir)| (nvjitlink::InputKind::LtoIr, &ir[..], name.as_str()))
            .collect();
        inputs.push((nvjitlink::InputKind::LtoIr, &defs, "ptxspec-definitions"));
        let mut options = vec![
            format!("-arch=sm_{}", req.arch),
            "-lto".into(),
            "-O3".into(),
        ];
        options.extend(req.options.iter().cloned());
        if let Some(arguments) = req.arguments {
            return link_with_fixed_arguments(req, arguments, inputs, options);
        }
        if let Some(k) = req.kernel {
            options.push(kernels_used(k));
        }
        let linked = req.toolkit.link(&inputs, &options)?;
        unresolved_constants(&linked)?;
        Ok(linked)
    })
}

/// The link of `req` with its fixed arguments: the wrapper kernel
/// ([`FixedArguments::wrapper_ir`], compiled by libNVVM) linked with the
/// image's units and the definitions into PTX that holds the wrapper
/// alone, renamed to the kernel and compiled.
fn link_with_fixed_arguments(
    req: &LinkRequest<'_>,
    arguments: &FixedArguments,
    inputs: Vec<(nvjitlink::InputKind, &[u8], &str)>,
    mut options: Vec<String>,
) -> Result<nvjitlink::Linked, ToolkitError> {
    let failed = |code: String| ToolkitError::Failed {
        library: "nvJitLink",
        function: "link with fixed arguments",
        code,
        log: String::new(),
    };
    if req.kernel != Some(arguments.kernel()) {
        return Err(failed(format!(
            "the arguments are fixed for kernel {}, the link is of {}",
            arguments.kernel(),
            req.kernel.unwrap_or("every kernel")
        )));
    }
    arguments.check_lto().map_err(|e| failed(e.to_string()))?;
    toolkit::require(toolkit::Lib::Nvvm)?;
    let version = nvvm::ir_version()?;
    let wrapper = req.toolkit.nvvm(
        &arguments.wrapper_ir(version),
        "ptxspec-fixed-arguments",
        &["-gen-lto".into(), format!("-arch=compute_{}", req.arch)],
    )?;
    let inputs: Vec<(nvjitlink::InputKind, &[u8], &str)> = inputs
        .into_iter()
        .chain([(
            nvjitlink::InputKind::LtoIr,
            &wrapper[..],
            "ptxspec-fixed-arguments",
        )])
        .collect();
    options.push(kernels_used(&arguments.wrapper_name()));
    options.push("-ptx".into());
    let linked = req.toolkit.link(&inputs, &options)?;
    unresolved_constants(&linked)?;
    let ptx = String::from_utf8_lossy(&linked.code);
    let renamed = arguments.renamed(&ptx).map_err(|e| failed(e.to_string()))?;
    let mut compiled = req.toolkit.link(
        &[(
            nvjitlink::InputKind::Ptx,
            renamed.as_bytes(),
            "ptxspec-fixed-arguments.ptx",
        )],
        &[format!("-arch=sm_{}", req.arch)],
    )?;
    compiled.info_log = [linked.info_log, compiled.info_log]
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    Ok(compiled)
}

/// A value that does not reach the code is an error, not a cubin without
/// it: nvJitLink links a unit that uses a constant nobody defines (its
/// symbol renamed or missing in the .prop) and only warns. (The symbols
/// cannot be looked for in the LTO-IR beforehand: bitcode does not keep
/// names as plain bytes.)
fn unresolved_constants(linked: &nvjitlink::Linked) -> Result<(), ToolkitError> {
    match linked
        .info_log
        .lines()
        .find(|l| l.contains("Unresolved extern variable"))
    {
        Some(line) => Err(ToolkitError::Failed {
            library: "nvJitLink",
            function: "link",
            code: "a specialization constant has no definition".into(),
            log: format!(
                "{}: the image's property sets name no value for it (the .prop and .ltoir do not \
                 belong together?)",
                line.trim()
            ),
        }),
        None => Ok(()),
    }
}

/// The cubin of PTX (`name` for messages) compiled whole by nvJitLink's
/// ptxas for `sm_<arch>` — a tiered image's native tier, where it has no
/// LTO-IR — through the same caches as LTO links.
pub fn cubin_of_ptx(
    ptx: &str,
    name: &str,
    arch: u32,
    toolkit: &toolkit::worker::Toolkit,
) -> Result<Cubin, ToolkitError> {
    let key = KeyEncoder::new("ptxspec ptx cubin v2")
        .digest_field(&Digest::of(ptx.as_bytes()))
        .u64(arch.into())
        .encoded()
        .to_vec();
    cached(key, arch, || {
        toolkit.link(
            &[(nvjitlink::InputKind::Ptx, ptx.as_bytes(), name)],
            &[format!("-arch=sm_{arch}")],
        )
    })
}

/// The cubin of memory key `key` for `sm_<arch>`: from memory, from disk,
/// from the remote store (waiting for another process's link where it holds
/// the lease), or made by `link` — and then stored in each tier (remotely
/// by writers). A setting of the disk or remote tier that is not valid is
/// an error; a tier that misbehaves is not.
fn cached(
    key: Vec<u8>,
    arch: u32,
    link: impl FnOnce() -> Result<nvjitlink::Linked, ToolkitError>,
) -> Result<Cubin, ToolkitError> {
    let mem = cache::MemoryCache::global();
    if let Some(hit) = mem.get(&key) {
        found(Source::Memory, arch, hit.len());
        if PUBLISH_HITS.load(Ordering::Relaxed) {
            publish_hit(remote::tier()?, &key, arch, &hit);
        }
        return Ok(Cubin::in_memory(hit));
    }
    missed("memory", arch);
    let disk_key = disk_key(&key)?;
    let disk = cache::DiskSettings::from_env()?.cache(CUBINS);
    let remote = remote::tier()?;
    if let Some(bytes) = disk.as_ref().and_then(|d| d.get(&disk_key)) {
        found(Source::Disk, arch, bytes.len());
        remote::note(remote, "disk hits");
        publish_hit(remote, &key, arch, &bytes);
        let bytes = Arc::new(bytes);
        mem.insert(key, Arc::clone(&bytes));
        return Ok(Cubin {
            bytes,
            source: Source::Disk,
            log: String::new(),
        });
    }
    if disk.is_some() {
        missed("disk", arch);
    }
    // Across machines: the same key and the same linker release (not its
    // path or time stamp, which differ from machine to machine).
    let remote_key = remote_key(&key, arch);
    let lease = match remote.map(|r| remote::fetch(r, &remote_key, arch)) {
        None => None,
        Some(remote::Fetched::Link(lease)) => lease,
        Some(remote::Fetched::Cubin(bytes)) => {
            found(Source::Remote, arch, bytes.len());
            published(Published::AlreadyThere);
            let bytes = Arc::new(bytes);
            if let Some(d) = &disk {
                d.put(&disk_key, &bytes);
            }
            mem.insert(key, Arc::clone(&bytes));
            return Ok(Cubin {
                bytes,
                source: Source::Remote,
                log: String::new(),
            });
        }
    };
    if remote.is_some() {
        missed("remote", arch);
    }
    let started = std::time::Instant::now();
    let linked = match link() {
        Ok(linked) => linked,
        Err(e) => {
            LINK_FAILURES.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(target: "ptxspec::link", arch, outcome = "failed", error = %e);
            return Err(e);
        }
    };
    let took = started.elapsed();
    LINKS.fetch_add(1, Ordering::Relaxed);
    LINK_NANOS.fetch_add(
        u64::try_from(took.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    remote::note(remote, "links");
    let bytes = Arc::new(linked.code);
    let stored = disk.as_ref().is_some_and(|d| d.put(&disk_key, &bytes));
    let uploaded = match lease {
        Some(lease) => lease.store(arch, &bytes),
        // Publishing: a process that could not take the lease (another
        // held it and gave it back without an entry) stores it anyway.
        None => {
            if let Some(r) = remote.filter(|_| PUBLISH_HITS.load(Ordering::Relaxed)) {
                let outcome = remote::ensure_stored(r, &remote_key, arch, &bytes);
                let uploaded = outcome == Published::Uploaded;
                published(outcome);
                uploaded
            } else {
                false
            }
        }
    };
    if uploaded {
        published(Published::Uploaded);
    } else if remote.is_some() && PUBLISH_HITS.load(Ordering::Relaxed) {
        PUBLISHED.with(|p| {
            let mut p = p.borrow_mut();
            if p.is_none() {
                *p = Some(Published::NotUploaded("the upload failed".into()));
            }
        });
    }
    tracing::info!(
        target: "ptxspec::link",
        arch,
        outcome = "linked",
        duration_us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
        bytes = bytes.len(),
        stored,
        uploaded,
    );

    mem.insert(key, Arc::clone(&bytes));
    Ok(Cubin {
        bytes,
        source: Source::Linked { stored, uploaded },
        log: linked.info_log,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cubin_debugs_as_its_size_not_its_bytes() {
        let c = Cubin::in_memory(Arc::new(vec![0x7f; 40_000]));
        let shown = format!("{c:?}");
        assert_eq!(
            shown,
            "Cubin { bytes: <40000 bytes>, source: Memory, log: \"\" }"
        );
    }

    /// Fixed kernel arguments are in the key — their values, which
    /// parameter, the kernel's parameter types — and a link without any has
    /// the key it had before they existed (the canonical encoding above).
    #[test]
    fn fixed_arguments_are_in_the_key() {
        use crate::arguments::{FixedArguments, KernelParams};
        let ptx = |ty: &str| {
            format!(
                ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(\n\t.param .u32 k_param_0,\n\t.param .{ty} k_param_1\n)\n{{\n\tret;\n}}\n"
            )
        };
        let fixed = |ty: &str, index: usize, value: u32| {
            let p = KernelParams::from_ptx(&ptx(ty), "k").unwrap();
            FixedArguments::new(&p, vec![(index, value.to_le_bytes().to_vec())]).unwrap()
        };
        let toolkit = Toolkit::InProcess;
        let ir = LtoIr::owned(vec![]);
        let key = |arguments: Option<&FixedArguments>| {
            memory_key(&LinkRequest {
                ltoir: &ir,
                ltoir_identity: Digest([1; 32]),
                definitions: &[],
                arch: 90,
                options: &[],
                toolkit: &toolkit,
                kernel: Some("k"),
                arguments,
            })
        };
        let family = [
            fixed("u32", 0, 16),
            fixed("u32", 0, 32),
            fixed("u32", 1, 16),
            fixed("f32", 0, 16),
        ];
        let mut keys: Vec<Vec<u8>> = family.iter().map(|f| key(Some(f))).collect();
        let without = key(None);
        assert!(
            keys.iter()
                .all(|k| k.starts_with(&without) && k.len() > without.len())
        );
        keys.push(without);
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "every request its own key");
    }

    /// The cubin key is the canonical encoding its docs describe, written
    /// out here byte by byte (each field a little-endian u64 length and its
    /// bytes): its SHA-256 keys the other tiers. (Keys of value sets once
    /// collided under a 128-bit non-cryptographic hash.) And a family of
    /// requests that differ in one part each — values, the same bytes cut
    /// between two constants another way, alignment, symbol, architecture,
    /// options, kernel, identity — have distinct keys.
    #[test]
    fn cubin_keys_are_the_sha256_of_a_canonical_encoding() {
        let toolkit = Toolkit::InProcess;
        let ir = LtoIr::owned(vec![]);
        let request = |defs: &'static [Definition<'static>],
                       arch: u32,
                       options: &'static [String],
                       kernel: Option<&'static str>,
                       identity: u8| {
            memory_key(&LinkRequest {
                ltoir: &ir,
                ltoir_identity: Digest([identity; 32]),
                definitions: defs,
                arch,
                options,
                toolkit: &toolkit,
                kernel,
                arguments: None,
            })
        };
        const A: &[Definition<'static>] = &[Definition {
            symbol: "s",
            align: 4,
            bytes: &[1, 0, 0, 0],
        }];
        let field = |b: &[u8]| [&(b.len() as u64).to_le_bytes()[..], b].concat();
        let mut want = field(b"ptxspec lto cubin v4");
        want.extend(field(&[7; 32]));
        want.extend(field(&90u64.to_le_bytes()));
        want.extend(field(&1u64.to_le_bytes()));
        want.extend(field(b"s"));
        want.extend(field(&4u64.to_le_bytes()));
        want.extend(field(&[1, 0, 0, 0]));
        want.extend(field(&0u64.to_le_bytes()));
        want.extend(field(&0u64.to_le_bytes()));
        let key = request(A, 90, &[], None, 7);
        assert_eq!(key, want);
        assert_eq!(
            remote_key(&key, 90),
            Digest::of(&{
                let mut r = field(b"ptxspec remote cubin v4");
                r.extend(field(&want));
                r.extend(field(
                    toolkit::library_release(toolkit::Lib::NvJitLink)
                        .unwrap_or_default()
                        .as_bytes(),
                ));
                r.extend(field(&90u64.to_le_bytes()));
                r
            })
        );
        const SPLIT_1: &[Definition<'static>] = &[
            Definition {
                symbol: "a",
                align: 1,
                bytes: &[1, 2],
            },
            Definition {
                symbol: "b",
                align: 1,
                bytes: &[3],
            },
        ];
        const SPLIT_2: &[Definition<'static>] = &[
            Definition {
                symbol: "a",
                align: 1,
                bytes: &[1],
            },
            Definition {
                symbol: "b",
                align: 1,
                bytes: &[2, 3],
            },
        ];
        const OTHER_VALUE: &[Definition<'static>] = &[Definition {
            symbol: "s",
            align: 4,
            bytes: &[2, 0, 0, 0],
        }];
        const OTHER_ALIGN: &[Definition<'static>] = &[Definition {
            symbol: "s",
            align: 8,
            bytes: &[1, 0, 0, 0],
        }];
        const OTHER_SYMBOL: &[Definition<'static>] = &[Definition {
            symbol: "t",
            align: 4,
            bytes: &[1, 0, 0, 0],
        }];
        static LINEINFO: std::sync::LazyLock<Vec<String>> =
            std::sync::LazyLock::new(|| vec!["-lineinfo".into()]);
        let keys = [
            key.clone(),
            request(SPLIT_1, 90, &[], None, 7),
            request(SPLIT_2, 90, &[], None, 7),
            request(OTHER_VALUE, 90, &[], None, 7),
            request(OTHER_ALIGN, 90, &[], None, 7),
            request(OTHER_SYMBOL, 90, &[], None, 7),
            request(A, 80, &[], None, 7),
            request(A, 90, LINEINFO.as_slice(), None, 7),
            request(A, 90, &[], Some("k"), 7),
            request(A, 90, &[], Some(""), 7),
            request(A, 90, &[], None, 8),
        ];
        let distinct: std::collections::HashSet<&Vec<u8>> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len());
        let digests: std::collections::HashSet<Digest> =
            keys.iter().map(|k| remote_key(k, 90)).collect();
        assert_eq!(digests.len(), keys.len());
    }

    #[test]
    fn definitions_as_ir_and_cuda() {
        let defs = [Definition {
            symbol: "ptxspec_lto_bs",
            align: 4,
            bytes: &[16, 0, 0, 0],
        }];
        let ir = nvvm_ir(&defs, (2, 0, 3, 1));
        assert!(
            ir.contains(
                "@ptxspec_lto_bs = addrspace(1) constant [4 x i8] c\"\\10\\00\\00\\00\", align 4\n"
            ),
            "{ir}"
        );
        assert!(ir.ends_with("!0 = !{i32 2, i32 0, i32 3, i32 1}\n"), "{ir}");
        assert_eq!(
            cuda_source(&defs),
            "extern \"C\" __device__ __align__(4) const unsigned char ptxspec_lto_bs[4] = {16,0,0,0};\n"
        );
    }
}
