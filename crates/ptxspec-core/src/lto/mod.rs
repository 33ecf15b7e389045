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
//! `cargo bench --bench postlink -- lto/`, BENCHMARKS.md). Cubins are cached in memory and on disk ([`cubin_cache`]).

mod background;
pub mod cubin_cache;
mod definitions;
mod lookup;
mod publish;
#[cfg(feature = "remote")]
pub mod remote;
#[cfg(not(feature = "remote"))]
#[path = "remote_off.rs"]
mod remote;
mod stats;
pub(crate) mod tiers;

// The container and the definitions are the image contract's (below this
// layer); named here too, where links use them.
pub use crate::image::{ContainerError, Definition, LtoIr};
pub use background::{after as in_background, flush};
pub use definitions::{DefinitionsCompiler, compile_definitions, warm_up};
#[cfg(test)]
use definitions::{cuda_source, nvvm_ir};
use lookup::cached;
pub use publish::{Published, publish_hits, take_published};
pub use stats::{CubinStats, Source, stats};

use std::sync::Arc;

use crate::arguments::FixedArguments;
use crate::digest::{Digest, KeyEncoder};
use crate::toolkit::worker::Toolkit;
use crate::toolkit::{self, ToolkitError, nvjitlink, nvvm};

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
    /// time: see `ImageData::with_ltoir_known_as`).
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

/// Sets up the remote tier now and connects to its store in the background
/// — TCP, TLS, AUTH and SELECT — once per process: the facade calls this
/// when a bundle is made of images (every bundle a program builds starts
/// there), so that the first launch's look-up is one round trip on a
/// connection already made. Nothing where no store is set; a setting that
/// is not valid is the first look-up's error, not this call's.
pub fn connect_early() {
    crate::trace::start_from_env_once();
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(Some(r)) = remote::tier() {
            remote::connect_ahead(r);
        }
    });
}

/// Whose turn the trial of the adaptive variant of identity `key` on
/// `sm_<arch>` is, where a remote store is set (see
/// [`verdict_turn`]).
pub enum VerdictTurn {
    /// The fleet's verdict: a trusted writer's trial kept this.
    Decided(crate::tier_profile::Kept),
    /// Time it here; with `Some`, for the fleet (this process holds the
    /// lease on the trial and shares its verdict through it).
    TimeHere(Option<TrialLease>),
}

/// This process's lease on timing one adaptive variant for the fleet:
/// given back when dropped, with or without a verdict.
pub struct TrialLease(remote::TrialLease);

impl TrialLease {
    /// Stores this process's verdict for the fleet (signed), then gives the
    /// lease back; whether it was stored.
    pub fn share(self, kept: crate::tier_profile::Kept) -> bool {
        self.0.share(kept.word().as_bytes())
    }
}

/// One verdict per fleet: the fleet's verdict on the adaptive variant of
/// identity `key` on `sm_<arch>` where one is stored; else whether this
/// process times it — for the fleet, under a lease, where it writes and no
/// other process times it; else it waits (at most the lease's time) for the
/// verdict of the process that does. Without a store (or with one down)
/// every process times for itself. Called on a variant's link thread: the
/// wait never holds a launch, and ends early once `wanted` says the
/// variant is no longer needed here.
pub fn verdict_turn(key: &Digest, arch: u32, wanted: &dyn Fn() -> bool) -> VerdictTurn {
    let Ok(Some(r)) = remote::tier() else {
        return VerdictTurn::TimeHere(None);
    };
    match remote::trial_turn(r, key, arch, wanted) {
        remote::TrialTurn::Decided(word) => std::str::from_utf8(&word)
            .ok()
            .and_then(crate::tier_profile::Kept::from_word)
            .map_or(VerdictTurn::TimeHere(None), VerdictTurn::Decided),
        remote::TrialTurn::TimeHere(lease) => VerdictTurn::TimeHere(lease.map(TrialLease)),
    }
}

/// Shares what a trial of adaptive arguments kept for the variant of
/// identity `key` on `sm_<arch>` through the remote store, where one is set
/// and this process may write (best effort); whether it was stored.
pub fn share_verdict(key: &Digest, arch: u32, kept: crate::tier_profile::Kept) -> bool {
    match remote::tier() {
        Ok(Some(r)) => remote::store_verdict(r, key, arch, kept.word().as_bytes()),
        _ => false,
    }
}

/// Whether a remote store (the fleet) is set for this process.
pub fn fleet_configured() -> bool {
    matches!(remote::tier(), Ok(Some(_)))
}

/// What a trial of a CUDA graph's replays kept under `key` (the digest of
/// what was on trial, [`crate::tier_profile::GraphVerdict`]) on
/// `sm_<arch>`, where the fleet's store holds it, signed by a trusted key:
/// the contender. `None` without a store, with one down, or where it holds
/// none — then the graph times its own trial (no lease: a graph's trial
/// runs while its program runs, and no process waits for another's).
/// One request, bounded by the store's timeout: called off the replay
/// path.
pub fn graph_verdict(key: &Digest, arch: u32) -> Option<usize> {
    match remote::tier() {
        Ok(Some(r)) => remote::verdict(r, key, arch).and_then(|w| graph_word_kept(&w)),
        _ => None,
    }
}

/// Shares what a trial of a graph's replays kept under `key` on
/// `sm_<arch>` through the remote store, where one is set and this process
/// may write (best effort); whether it was stored.
pub fn share_graph_verdict(key: &Digest, arch: u32, kept: usize) -> bool {
    match remote::tier() {
        Ok(Some(r)) => remote::store_verdict(r, key, arch, graph_word(kept).as_bytes()),
        _ => false,
    }
}

/// A graph verdict's word in the store: `graph=N`, which no variant's
/// verdict reads as its own (and graph keys are of a domain of their own).
fn graph_word(kept: usize) -> String {
    format!("graph={kept}")
}

/// The contender of a graph verdict's word; `None` for any other bytes (a
/// contender at or over [`crate::tier_profile::MAX_GRAPH_CONTENDERS`]).
fn graph_word_kept(word: &[u8]) -> Option<usize> {
    crate::tier_profile::contender(std::str::from_utf8(word).ok()?.strip_prefix("graph=")?)
}

/// Brings the cubin of `req` into this process's memory cache where some
/// cache holds it — disk, or the remote store (without a lease or a wait)
/// — linking nothing: whether it is there now. What a profile's value sets
/// are warmed with at a process's start.
pub fn prefetch(req: &LinkRequest<'_>) -> bool {
    let key = memory_key(req);
    let mem = cubin_cache::MemoryCache::global();
    if mem.get(&key).is_some() {
        return true;
    }
    let Ok(disk_key) = disk_key(&key) else {
        return false;
    };
    let disk = cubin_cache::DiskSettings::from_env()
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
    cubin_cache::MemoryCache::global()
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

#[cfg(test)]
mod tests;
