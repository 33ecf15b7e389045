//! The post-link: PTX of several translation units in, device images out.
//!
//! 1. parse every input ([`crate::ptx`]);
//! 2. [`link`] them into one module;
//! 3. [`analyze`] it: getter calls, their constants, the call graph;
//! 4. split the kernels into device images;
//! 5. per image: number the constants it reaches in first-encounter order,
//!    lay out its buffer ([`crate::layout`]), [`rewrite`] its getters, and
//!    write its property sets and kernel signatures.
//!
//! Everything happens in memory; [`write_images`] writes the files only when
//! all of it succeeded.

pub mod analyze;
pub mod features;
pub mod link;
pub mod rewrite;

pub use link::Location;
pub use rewrite::specialize;

// Internal maps of the post-link, keyed by item indices and names: FxHash
// (see crate::fasthash), not SipHash.
use crate::fasthash::{FxHashMap as HashMap, FxHashSet as HashSet};

use std::path::{Path, PathBuf};

use crate::features::Requirements;
use crate::image::{KernelSignature, Placement};
use crate::layout::{Layout, LayoutError, Numbering, SpecConstant};
use crate::props::{ImageProps, LtoSymbol, PropertySets, SpecConstProps};
use crate::ptx::{self, Edits, ItemKind, Module, ParseError, TokenKind};

/// Errors of the post-link, each naming what and where.
#[derive(Debug, thiserror::Error)]
pub enum PostLinkError {
    #[error("no input PTX")]
    NoInput,
    /// An input with no functions or variables: an empty file, or a header
    /// alone.
    #[error(
        "{file}: no PTX functions or variables in this input (an empty file, or only a header? a unit \
         of device functions compiled without -rdc=true keeps none)"
    )]
    Empty { file: String },
    /// Calls of functions, or uses of variables, that no input defines
    /// (SYCL's `link_program_error`).
    #[error("{}", unresolved_message(.0))]
    Unresolved(Vec<Unresolved>),
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error("cannot link: {0}")]
    Link(String),
    #[error(
        "{second}: duplicate definition of .visible symbol '{name}' (first defined at {first})"
    )]
    DuplicateSymbol {
        name: String,
        first: Location,
        second: Location,
    },
    #[error("{at}: in function {function}: {what}")]
    Getter {
        at: Location,
        function: String,
        what: String,
    },
    #[error("{at}: {source}")]
    Layout { at: Location, source: LayoutError },
    /// `--buffer param` for an image that cannot take it.
    #[error("image {image}: the buffer cannot go in the parameter space: {reason}")]
    Placement { image: String, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

/// A symbol that no input defines, and the first place that uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unresolved {
    pub symbol: String,
    pub at: Location,
}

fn unresolved_message(list: &[Unresolved]) -> String {
    let mut msg = format!(
        "link_program_error: {} undefined symbol{} (no input defines {}):",
        list.len(),
        if list.len() == 1 { "" } else { "s" },
        if list.len() == 1 { "it" } else { "them" }
    );
    for u in list {
        msg.push_str(&format!("\n  {}: {}", u.at, u.symbol));
    }
    msg
}

/// What getters become.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Loads from the specialization-constant buffer (values set at run time).
    #[default]
    Emulated,
    /// Immediates of the default values (values cannot change).
    Aot,
}

/// How kernels are grouped into device images.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Split {
    /// Per input file, as DPC++'s default.
    #[default]
    Auto,
    /// One image with everything.
    Off,
    PerKernel,
    PerSource,
}

/// Where emulated kernels find the specialization-constant buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BufferPlacement {
    /// A pointer to the buffer in global memory (the `kernel_handler`).
    Global,
    /// The buffer's contents in the kernel's parameter space: the values
    /// travel with each launch, no upload (sm_70 and later; at most
    /// [`PARAM_SPACE_BYTES`] of parameters).
    Param,
    /// The parameter space where it can be used, global memory elsewhere.
    #[default]
    Auto,
}

/// Post-link options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub mode: Mode,
    pub split: Split,
    pub buffer: BufferPlacement,
}

/// One output device image.
#[derive(Clone, Debug)]
pub struct DeviceImage {
    /// File stem: `<stem>.ptx`, `<stem>.prop`, `<stem>.sym`.
    pub stem: String,
    pub ptx: String,
    pub layout: Layout,
    pub kernels: Vec<KernelSignature>,
    /// What the image needs of a device (also in `props`).
    pub requirements: Requirements,
    /// Warnings about functions of this image (undeclared aspects, debug
    /// information the link could not keep).
    pub warnings: Vec<String>,
    /// What the image says of itself (AOT, device runtime, LTO symbols);
    /// also in `props`.
    pub info: ImageProps,
    /// Indices of the inputs whose functions the image holds (whose LTO-IR
    /// an LTO build of the image links).
    pub sources: Vec<usize>,
    /// The LTO-IR of those inputs, when they were compiled with it
    /// (`ptxspec compile --lto`); written as `<stem>.ltoir`.
    pub ltoir: Option<crate::lto::LtoIr>,
    pub props: PropertySets,
}

impl DeviceImage {
    /// The `.sym` file: kernel names, one a line.
    pub fn symbols(&self) -> String {
        self.kernels
            .iter()
            .map(|k| format!("{}\n", k.name))
            .collect()
    }
}

/// Time spent in each stage of one post-link.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    pub parse: std::time::Duration,
    pub link: std::time::Duration,
    pub analyze: std::time::Duration,
    pub images: std::time::Duration,
}

/// Post-links `(file name, PTX text)` inputs into device images.
pub fn post_link(
    inputs: Vec<(String, String)>,
    opts: &Options,
) -> Result<Vec<DeviceImage>, PostLinkError> {
    post_link_timed(inputs, opts).map(|(images, _)| images)
}

/// [`post_link`], also reporting how long each stage took.
pub fn post_link_timed(
    inputs: Vec<(String, String)>,
    opts: &Options,
) -> Result<(Vec<DeviceImage>, Timings), PostLinkError> {
    let mut timings = Timings::default();
    let mut clock = std::time::Instant::now();
    let mut lap = |slot: &mut std::time::Duration| {
        let now = std::time::Instant::now();
        *slot = now - clock;
        clock = now;
    };
    if inputs.is_empty() {
        return Err(PostLinkError::NoInput);
    }
    let stems: Vec<String> = inputs
        .iter()
        .map(|(name, _)| {
            Path::new(name)
                .file_stem()
                .map_or_else(|| "image".to_string(), |s| s.to_string_lossy().into_owned())
        })
        .collect();
    let modules = inputs
        .into_iter()
        .map(|(name, text)| ptx::parse(name, text))
        .collect::<Result<Vec<_>, _>>()?;
    for m in &modules {
        if !m
            .items
            .iter()
            .any(|i| matches!(i.kind, ItemKind::Function(_) | ItemKind::Variable(_)))
        {
            return Err(PostLinkError::Empty {
                file: m.file.clone(),
            });
        }
    }
    lap(&mut timings.parse);
    let linked = link::link(modules)?;
    lap(&mut timings.link);
    let analysis = analyze::analyze(&linked)?;
    check_resolved(&linked, &analysis)?;
    let feats = features::analyze(&linked, &analysis.callees)?;
    lap(&mut timings.analyze);
    let m = &linked.module;

    let kernels: Vec<usize> = (0..m.items.len())
        .filter(|&i| matches!(&m.items[i].kind, ItemKind::Function(f) if f.is_kernel && f.body.is_some()))
        .collect();
    // Kernel groups, each with the name of its image: the source file's
    // stem per source, the kernel's name per kernel, the first input's stem
    // for one image of everything.
    let first_stem = stems.first().cloned().unwrap_or_default();
    let groups: Vec<(String, Vec<usize>)> = match opts.split {
        _ if kernels.is_empty() => vec![(first_stem, vec![])],
        Split::Off => vec![(first_stem, kernels.clone())],
        Split::PerKernel => kernels
            .iter()
            .map(|&k| (analyze::func_name(m, k), vec![k]))
            .collect(),
        Split::Auto | Split::PerSource => {
            let mut by_origin: Vec<(usize, Vec<usize>)> = Vec::new();
            for &k in &kernels {
                let o = linked.origin[k];
                match by_origin.iter_mut().find(|(oo, _)| *oo == o) {
                    Some((_, g)) => g.push(k),
                    None => by_origin.push((o, vec![k])),
                }
            }
            by_origin
                .into_iter()
                .map(|(o, g)| (stems.get(o).cloned().unwrap_or_default(), g))
                .collect()
        }
    };
    // Seed 003's extra split: an image holds only kernels with equal
    // requirements (aspects, work-group size, sub-group size).
    let groups: Vec<(String, Vec<usize>, Requirements)> = groups
        .into_iter()
        .flat_map(|(name, ks)| {
            let mut parts: Vec<(Requirements, Vec<usize>)> = Vec::new();
            for k in ks {
                let r = feats.kernels.get(&k).cloned().unwrap_or_default();
                match parts.iter_mut().find(|(pr, _)| *pr == r) {
                    Some((_, v)) => v.push(k),
                    None => parts.push((r, vec![k])),
                }
            }
            if parts.is_empty() {
                parts.push((Requirements::default(), Vec::new()));
            }
            parts.into_iter().map(move |(r, ks)| (name.clone(), ks, r))
        })
        .collect();
    let debug = link::is_debug_target(m);
    let shared = Shared::new(&linked, &analysis);
    let mut used: HashSet<String> = HashSet::default();
    let mut refs = References::new(m);
    let mut images = Vec::with_capacity(groups.len());
    for (name, group, requirements) in &groups {
        // Names are file names: keep them unique.
        let mut stem = name.clone();
        let mut k = 1;
        while !used.insert(stem.clone()) {
            stem = format!("{name}_{k}");
            k += 1;
        }
        // An image with every kernel keeps every item, as `off` does; so
        // does every image of a debug build, whose DWARF describes every
        // function of the module.
        let selected = if opts.split == Split::Off || group.len() == kernels.len() || debug {
            (0..m.items.len()).collect()
        } else {
            refs.closure(group, &analysis.callees)?
        };
        let mut image = build_image(&shared, &selected, group, opts.mode, opts.buffer, stem)?;
        requirements.write(&mut image.props);
        image.requirements = requirements.clone();
        image.warnings = feats
            .warnings
            .iter()
            .filter(|(f, _)| selected.contains(f))
            .map(|(_, w)| w.clone())
            .chain(linked.warnings.iter().cloned())
            .collect();
        image.info.write(&mut image.props);
        images.push(image);
    }
    lap(&mut timings.images);
    Ok((images, timings))
}

/// Adds the LTO symbol of `site`'s constant to `symbols`, unless the
/// constant has one there or the getter has no LTO markup; with its default
/// value for constants of other images (which the image's LTO link needs
/// defined).
fn add_lto_symbol(symbols: &mut Vec<LtoSymbol>, site: &analyze::Site, with_default: bool) {
    let Some(symbol) = &site.lto_symbol else {
        return;
    };
    if symbols.iter().any(|s| *s.symbolic_id == *site.symbolic_id) {
        return;
    }
    symbols.push(LtoSymbol {
        symbolic_id: site.symbolic_id.to_string(),
        symbol: symbol.to_string(),
        align: site.align,
        default: with_default.then(|| site.default.clone()),
    });
}

/// The most bytes of kernel parameters every CUDA driver takes (newer ones
/// take 32 764 on Volta and later, with PTX ISA 8.1): what `auto` allows.
pub const PARAM_SPACE_BYTES: u32 = 4096;

/// A kernel's reads of its kernel_handler pointer (statement, register).
type ParamReads = Vec<(ptx::Span, String)>;

/// Where the image's buffer goes: `Global` for AOT images, images without
/// constants, or when asked; the parameter space when asked (an error
/// where it cannot be) or, for `auto`, where it can — then with each
/// buffer kernel's reads of its pointer, in the order of `buffer_kernels`.
fn choose_placement(
    m: &Module,
    asked: BufferPlacement,
    mode: Mode,
    layout: &Layout,
    buffer_kernels: &[(usize, usize)],
) -> Result<(Placement, Vec<ParamReads>), String> {
    if mode == Mode::Aot || layout.is_empty() || buffer_kernels.is_empty() {
        return Ok((Placement::Global, Vec::new()));
    }
    let align = layout
        .constants()
        .iter()
        .map(|c| c.constant.align())
        .max()
        .unwrap_or(8)
        .max(8);
    let size = (layout.default_blob().len() as u32)
        .max(1)
        .next_multiple_of(align);
    let param = Placement::Param { size, align };
    let possible = || rewrite::param_placement_possible(m, buffer_kernels, size, align);
    match asked {
        BufferPlacement::Global => Ok((Placement::Global, Vec::new())),
        BufferPlacement::Param => possible().map(|r| (param, r)),
        BufferPlacement::Auto => Ok(match possible() {
            Ok(r) => (param, r),
            Err(_) => (Placement::Global, Vec::new()),
        }),
    }
}

/// What every image of a module needs, worked out once rather than per
/// image (with thousands of kernels split per kernel, per-image passes over
/// the whole module would make the post-link quadratic).
struct Shared<'a> {
    linked: &'a link::Linked,
    analysis: &'a analyze::Analysis<'a>,
    /// Items every image keeps: the header, and the line and debug
    /// information that every function's `.loc`s refer to.
    header: Vec<usize>,
    /// Per input: the first getter site of each constant with an LTO
    /// symbol, ascending.
    lto_sites: Vec<Vec<usize>>,
}

impl<'a> Shared<'a> {
    fn new(linked: &'a link::Linked, analysis: &'a analyze::Analysis<'a>) -> Self {
        let m = &linked.module;
        let header = (0..m.items.len())
            .filter(|&i| {
                matches!(
                    m.items[i].kind,
                    ItemKind::Version
                        | ItemKind::Target
                        | ItemKind::AddressSize
                        | ItemKind::File
                        | ItemKind::Section
                )
            })
            .collect();
        let inputs = linked.origin.iter().max().map_or(0, |&o| o + 1);
        let mut lto_sites: Vec<Vec<usize>> = vec![Vec::new(); inputs];
        let mut seen: Vec<HashSet<&str>> = vec![HashSet::default(); inputs];
        for (n, site) in analysis.sites.iter().enumerate() {
            let origin = linked.origin[site.func];
            if site.lto_symbol.is_some() && seen[origin].insert(&site.symbolic_id) {
                lto_sites[origin].push(n);
            }
        }
        Shared {
            linked,
            analysis,
            header,
            lto_sites,
        }
    }
}

fn build_image(
    shared: &Shared,
    selected: &HashSet<usize>,
    kernels: &[usize],
    mode: Mode,
    buffer: BufferPlacement,
    stem: String,
) -> Result<DeviceImage, PostLinkError> {
    let (linked, analysis) = (shared.linked, shared.analysis);
    let m = &linked.module;
    // The image's items in module order (getter declarations go), and its
    // getter sites: those of its functions.
    let mut items: Vec<usize> = shared
        .header
        .iter()
        .chain(
            selected
                .iter()
                .filter(|i| !analysis.getter_decls.contains(i)),
        )
        .copied()
        .collect();
    items.sort_unstable();
    items.dedup();
    let sites = || items.iter().flat_map(|&i| analysis.sites_of(i));
    // Number and place the constants first (first encounter in module
    // order), then write each item with the edits of its own getters only:
    // the whole module's edits never exist at once. `offsets` follows
    // `sites()`.
    let mut layout = Layout::new(Numbering::Emulated);
    let mut offsets: Vec<u32> = Vec::new();
    let mut uses_buffer: HashSet<usize> = HashSet::default();
    let mut growth = 0isize;
    let mut lto_symbols: Vec<LtoSymbol> = Vec::new();
    let mut value_types: Vec<(String, Vec<(u32, crate::layout::ScalarKind)>)> = Vec::new();
    for n in sites() {
        let site = &analysis.sites[n];
        // Most getters name a constant placed before: only the first of
        // each makes one (and a size that disagrees fails in `add`).
        let known = layout
            .get(&site.symbolic_id)
            .filter(|p| p.constant.size() == site.size);
        if let Some(placed) = known {
            offsets.push(placed.offset);
        } else {
            let at = || linked.map.locate(&m.src, site.at);
            let c = SpecConstant::opaque(
                site.symbolic_id.to_string(),
                site.size,
                site.align,
                site.default.clone(),
            )
            .map_err(|source| PostLinkError::Layout { at: at(), source })?;
            let i = layout
                .add(c)
                .map_err(|source| PostLinkError::Layout { at: at(), source })?;
            offsets.push(layout.constants()[i].offset);
        }
        add_lto_symbol(&mut lto_symbols, site, false);
        match value_types
            .iter_mut()
            .find(|(id, _)| **id == *site.symbolic_id)
        {
            // A scalar's one leaf (offset 0) is the same at every getter.
            Some((_, leaves)) if site.scalar_kind.is_some() && leaves.iter().any(|l| l.0 == 0) => {}
            Some((_, leaves)) => {
                for l in &site.leaves() {
                    if !leaves.iter().any(|x| x.0 == l.0) {
                        leaves.push(*l);
                    }
                }
                leaves.sort_by_key(|l| l.0);
            }
            None => value_types.push((site.symbolic_id.to_string(), site.leaves())),
        }
        uses_buffer.insert(site.func);
        // About what the rewrite adds: each piece becomes ~100 bytes of
        // loads, the call sequence goes (an upper bound close enough that
        // the output is neither copied while it grows nor much too big).
        let removed: u32 = site.removed.iter().map(|r| r.end - r.start).sum();
        growth += 128 * site.pieces.len() as isize - removed as isize;
    }
    // The translation units the image's functions come from; an LTO link
    // of them needs every constant they declare, also those of kernels in
    // other images (with their defaults).
    let mut sources: Vec<usize> = selected
        .iter()
        .filter(|&&i| matches!(m.items[i].kind, ItemKind::Function(_)))
        .map(|&i| linked.origin[i])
        .collect();
    sources.sort_unstable();
    sources.dedup();
    let mut others: Vec<usize> = sources
        .iter()
        .flat_map(|&o| shared.lto_sites.get(o).into_iter().flatten().copied())
        .collect();
    others.sort_unstable();
    for n in others {
        add_lto_symbol(&mut lto_symbols, &analysis.sites[n], true);
    }
    // Sized exactly for an image of everything (an upper bound otherwise),
    // so that the output is never copied while it grows.
    // Where the kernels find the buffer: a pointer to global memory, or the
    // contents in the parameter space.
    let buffer_kernels: Vec<(usize, usize)> = kernels
        .iter()
        .filter(|&&k| {
            analyze::reachable(&analysis.callees, k).any(|f| uses_buffer.contains(&f))
                || (!layout.is_empty() && analysis.launchers.contains(&k))
        })
        .filter_map(|&k| analysis.buffer_params.get(&k).map(|&p| (k, p)))
        .collect();
    // Kernels launched from device code (dynamic parallelism) are passed
    // the 8-byte kernel_handler their parent has: their buffer stays a
    // pointer to global memory.
    let needs_device_runtime = selected.iter().any(|&f| {
        analysis.extern_calls[f]
            .iter()
            .any(|&(d, _)| is_device_runtime(&analyze::func_name(m, d)))
    });
    let buffer = match (buffer, needs_device_runtime) {
        (BufferPlacement::Auto, true) => BufferPlacement::Global,
        (BufferPlacement::Param, true) => {
            return Err(PostLinkError::Placement {
                image: stem,
                reason: "it launches kernels from device code (CUDA's device runtime), which pass \
                         each other the kernel_handler's pointer"
                    .into(),
            });
        }
        (b, _) => b,
    };
    let (placement, reads) =
        choose_placement(m, buffer, mode, &layout, &buffer_kernels).map_err(|reason| {
            PostLinkError::Placement {
                image: stem.clone(),
                reason,
            }
        })?;
    // Per buffer kernel: its buffer parameter's index and name, and (in
    // the parameter space) its reads of the pointer.
    let param_names: HashMap<usize, (usize, &str)> = buffer_kernels
        .iter()
        .filter_map(|&(k, p)| match &m.items[k].kind {
            ItemKind::Function(f) => f.params.get(p).map(|q| (k, (p, m.text(q.name)))),
            _ => None,
        })
        .collect();
    let reads_of: HashMap<usize, &ParamReads> =
        buffer_kernels.iter().map(|&(k, _)| k).zip(&reads).collect();
    let mut text = String::with_capacity((m.src.len() as isize + growth).max(0) as usize);
    let mut offsets = offsets.into_iter();
    for &i in &items {
        let item = &m.items[i];
        // A kernel's parameter and its reads of the pointer come before
        // its getters in the text: edits made in text order need no sort.
        let mut edits = Edits::new();
        if let Placement::Param { size, align } = placement {
            if item.kind == ItemKind::Version {
                rewrite::at_least_version(m, item, (7, 7), &mut edits);
            }
            if let (Some(&(_, name)), Some(r)) = (param_names.get(&i), reads_of.get(&i)) {
                rewrite::param_buffer_kernel(m, i, name, (size, align), r, &mut edits);
            }
        }
        for site in &analysis.sites[analysis.sites_of(i)] {
            let form = match placement {
                Placement::Global => rewrite::LoadForm::Global,
                Placement::Param { .. } => match (param_names.get(&i), site.buffer_param) {
                    (Some(&(_, k)), Some(p)) if k == p => rewrite::LoadForm::Param(k),
                    _ => rewrite::LoadForm::Generic,
                },
            };
            let base = offsets.next().ok_or_else(|| {
                PostLinkError::Internal("a getter site without a buffer offset".into())
            })?;
            rewrite::emulate_site(site, base, form, &mut edits);
        }
        edits.apply_range(&m.src, item.full, &mut text);
    }
    if let Some(last) = m.items.last() {
        text.push_str(&m.src[last.full.end as usize..]);
    }
    if mode == Mode::Aot {
        text = rewrite::specialize(&format!("{stem}.ptx"), &text, layout.default_blob())?;
    }
    let signatures = kernels
        .iter()
        .map(|&k| {
            let buffer = param_names.get(&k).map(|&(p, _)| (p, placement));
            KernelSignature::of(m, k, buffer)
        })
        .collect::<Vec<_>>();
    let mut props = PropertySets::default();
    SpecConstProps::write(&layout, &mut props);
    crate::image::write_signatures(&signatures, &mut props);
    let info = ImageProps {
        spec_consts_replaced_with_default: mode == Mode::Aot && !layout.is_empty(),
        needs_device_runtime,
        lto_symbols,
        value_types,
    };
    Ok(DeviceImage {
        stem,
        ptx: text,
        layout,
        kernels: signatures,
        requirements: Requirements::default(),
        warnings: Vec::new(),
        info,
        sources,
        ltoir: None,
        props,
    })
}

/// Functions that the CUDA driver provides to every module (PTX's system
/// calls): calls of them are resolved at load time.
const DRIVER_FUNCTIONS: &[&str] = &["vprintf", "malloc", "free", "__assertfail"];

/// Whether the driver resolves calls of `name` when it loads a module: its
/// system calls and the device runtime.
pub fn is_resolved_by_driver(name: &str) -> bool {
    DRIVER_FUNCTIONS.contains(&name) || is_device_runtime(name)
}

/// Functions of CUDA's device runtime (`libcudadevrt.a`: dynamic
/// parallelism, device-side streams, grid sync), linked by the driver.
pub fn is_device_runtime(name: &str) -> bool {
    name.starts_with("cuda") || name.starts_with("__cudaCDP") || name.starts_with("__cudaCG")
}

/// Fails with every symbol that is used but that no input defines, except
/// what the driver resolves (its system calls and the device runtime).
/// `.extern .shared` arrays are dynamic shared memory, not references.
fn check_resolved(
    linked: &link::Linked,
    analysis: &analyze::Analysis,
) -> Result<(), PostLinkError> {
    let m = &linked.module;
    let mut missing: Vec<(u32, String)> = Vec::new();
    for calls in &analysis.extern_calls {
        for &(d, at) in calls {
            let name = analyze::func_name(m, d);
            if !is_resolved_by_driver(&name) && !missing.iter().any(|(_, n)| *n == name) {
                missing.push((at, name));
            }
        }
    }
    // Extern variables (and functions whose address is taken rather than
    // called) that nothing defines, where the module mentions them.
    let defined: HashSet<&str> = m
        .items
        .iter()
        .filter(|i| match &i.kind {
            ItemKind::Function(f) => f.body.is_some(),
            ItemKind::Variable(v) => v.linkage != ptx::Linkage::Extern,
            _ => false,
        })
        .filter_map(|i| i.name().map(|n| m.text(n)))
        .collect();
    for (i, item) in m.items.iter().enumerate() {
        let name = match &item.kind {
            ItemKind::Variable(v) if v.linkage == ptx::Linkage::Extern && v.space != "shared" => {
                m.text(v.name)
            }
            ItemKind::Function(f) if f.body.is_none() && !analysis.getter_decls.contains(&i) => {
                m.text(f.name)
            }
            _ => continue,
        };
        if defined.contains(name)
            || is_resolved_by_driver(name)
            || missing.iter().any(|(_, n)| n == name)
        {
            continue;
        }
        if let Some(at) = first_use(m, name, item.span.end) {
            missing.push((at, name.to_string()));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    missing.sort();
    Err(PostLinkError::Unresolved(
        missing
            .into_iter()
            .map(|(at, symbol)| Unresolved {
                symbol,
                at: linked.map.locate(&m.src, at),
            })
            .collect(),
    ))
}

/// The offset of the first mention of `name` as a whole word after `from`.
fn first_use(m: &Module, name: &str, from: u32) -> Option<u32> {
    ptx::lex::word_positions(m.src.get(from as usize..)?, name)
        .next()
        .map(|i| from + i as u32)
}

/// Which module-scope symbols each item mentions, computed on demand.
struct References<'a> {
    m: &'a Module,
    by_name: HashMap<&'a str, Vec<usize>>,
    cache: HashMap<usize, Vec<usize>>,
}

impl<'a> References<'a> {
    fn new(m: &'a Module) -> Self {
        let mut by_name: HashMap<&str, Vec<usize>> = HashMap::default();
        for (i, item) in m.items.iter().enumerate() {
            if let Some(n) = item.name() {
                by_name.entry(m.text(n)).or_default().push(i);
            }
        }
        References {
            m,
            by_name,
            cache: HashMap::default(),
        }
    }

    fn of(&mut self, item: usize) -> Result<&[usize], PostLinkError> {
        if !self.cache.contains_key(&item) {
            let span = self.m.items[item].span;
            let toks = ptx::lex::tokens(&self.m.src, span.start, span.end)
                .map_err(|e| self.m.error_at(e.offset, e.what))?;
            let mut out: Vec<usize> = Vec::new();
            for t in toks {
                if t.kind == TokenKind::Word {
                    for &i in self
                        .by_name
                        .get(t.text(&self.m.src))
                        .map_or(&[][..], |v| v.as_slice())
                    {
                        if i != item && !out.contains(&i) {
                            out.push(i);
                        }
                    }
                }
            }
            self.cache.insert(item, out);
        }
        Ok(self.cache.get(&item).map_or(&[], |v| v.as_slice()))
    }

    /// The kernels, everything they call, and every symbol those mention.
    fn closure(
        &mut self,
        kernels: &[usize],
        callees: &[Vec<usize>],
    ) -> Result<HashSet<usize>, PostLinkError> {
        let mut seen: HashSet<usize> = HashSet::default();
        let mut stack: Vec<usize> = kernels.to_vec();
        while let Some(i) = stack.pop() {
            if !seen.insert(i) {
                continue;
            }
            stack.extend(callees.get(i).into_iter().flatten().copied());
            let refs = self.of(i)?.to_vec();
            stack.extend(refs);
        }
        // Other kernels mentioned by name are not part of this image.
        let m = self.m;
        seen.retain(|&i| {
            kernels.contains(&i)
                || !matches!(&m.items[i].kind, ItemKind::Function(f) if f.is_kernel)
        });
        Ok(seen)
    }
}

/// Writes `table.txt` and every image's `.ptx`, `.prop`, `.sym` (and
/// `.ltoir`) into `dir`, creating it if needed.
///
/// Files are written into a temporary folder inside `dir` and renamed into
/// place only when all were written; on any failure nothing is left behind
/// (and `dir` is removed again if this call created it). Images that an
/// earlier `table.txt` in `dir` listed and this one does not are removed,
/// so that `dir` holds exactly the new images. A file of `protect` (the
/// inputs) that an output would replace is an error before anything is
/// written.
pub fn write_images(
    dir: &Path,
    images: &[DeviceImage],
    protect: &[PathBuf],
) -> Result<Vec<PathBuf>, PostLinkError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PostLinkError::Io { path, source }
    };
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut table = String::from("[Code|Properties|Symbols]\n");
    for img in images {
        let (p, r, s) = (
            format!("{}.ptx", img.stem),
            format!("{}.prop", img.stem),
            format!("{}.sym", img.stem),
        );
        table.push_str(&format!("{p}|{r}|{s}\n"));
        files.push((p, img.ptx.clone().into_bytes()));
        files.push((r, img.props.to_text().into_bytes()));
        files.push((s, img.symbols().into_bytes()));
        if let Some(ir) = &img.ltoir {
            files.push((format!("{}.ltoir", img.stem), ir.to_bytes()));
        }
    }
    files.push(("table.txt".into(), table.into_bytes()));
    // Never write over an input.
    let canonical = |p: &Path| std::fs::canonicalize(p).ok();
    let protected: Vec<PathBuf> = protect.iter().filter_map(|p| canonical(p)).collect();
    for (f, _) in &files {
        let target = dir.join(f);
        if let Some(t) = canonical(&target)
            && protected.contains(&t)
        {
            return Err(PostLinkError::Io {
                path: target,
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "this output would replace an input: choose another output directory",
                ),
            });
        }
    }
    let created = !dir.exists();
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let tmp = dir.join(format!(".ptxspec-tmp-{}", std::process::id()));
    let undo = |tmp: &Path| {
        let _ = std::fs::remove_dir_all(tmp);
        if created {
            let _ = std::fs::remove_dir_all(dir);
        }
    };
    let result = (|| {
        std::fs::create_dir_all(&tmp).map_err(io(dir))?;
        for (f, content) in &files {
            std::fs::write(tmp.join(f), content).map_err(io(&dir.join(f)))?;
        }
        // Images of an earlier run that this one does not write.
        let old: Vec<String> = std::fs::read_to_string(dir.join("table.txt"))
            .ok()
            .and_then(|t| crate::props::FileTable::parse(&t).ok())
            .map(|t| t.rows.into_iter().flatten().collect())
            .unwrap_or_default();
        let mut written = Vec::new();
        for (f, _) in &files {
            let to = dir.join(f);
            std::fs::rename(tmp.join(f), &to).map_err(io(&to))?;
            written.push(to);
        }
        for stale in old {
            let name = Path::new(&stale);
            // Only plain names in `dir`: a table may name anything.
            if name.components().count() != 1 || files.iter().any(|(f, _)| *f == stale) {
                continue;
            }
            let _ = std::fs::remove_file(dir.join(name));
            if let Some(stem) = name.file_stem() {
                let ltoir = dir.join(format!("{}.ltoir", stem.to_string_lossy()));
                if !files.iter().any(|(f, _)| dir.join(f) == ltoir) {
                    let _ = std::fs::remove_file(ltoir);
                }
            }
        }
        Ok(written)
    })();
    match result {
        Ok(w) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(w)
        }
        Err(e) => {
            undo(&tmp);
            Err(e)
        }
    }
}
