//! The post-link: PTX of several translation units in, device images out.
//!
//! 1. parse every input ([`crate::ptx`]);
//! 2. `link` them into one module;
//! 3. `analyze` it: getter calls, their constants, the call graph;
//! 4. split the kernels into device images;
//! 5. per image: number the constants it reaches in first-encounter order,
//!    lay out its buffer ([`crate::layout`]), `rewrite` its getters, and
//!    write its property sets and kernel signatures.
//!
//! Everything happens in memory; [`write_images`] writes the files only when
//! all of it succeeded.
//!
//! This module is the pipeline; each job has its own: `link`, `analyze`,
//! `features` (requirements), `resolve` (symbols no input defines),
//! `images` (one image: items, placement, rewrite, property sets),
//! `rewrite` (getters into loads or immediates), `output` (the files).

pub(crate) mod analyze;
mod images;
pub(crate) mod link;
pub(crate) mod needs;
mod output_folder;
mod resolve;
pub(crate) mod rewrite;

pub(crate) use images::PARAM_SPACE_BYTES;
use images::{References, Shared, post_link_image};
pub use link::Location;
pub use output_folder::{read_image, read_lock, write_images};
use resolve::check_resolved;
pub use rewrite::specialize;

// Internal maps of the post-link, keyed by item indices and names: FxHash
// (see crate::fasthash), not SipHash.
use crate::fasthash::FxHashSet as HashSet;

use std::path::{Path, PathBuf};

use crate::features::Requirements;
use crate::image::KernelSignature;
use crate::layout::{Layout, LayoutError};
use crate::props::{ImageProps, PropertySets};
use crate::ptx::{self, ItemKind, ParseError};

/// Errors of the post-link, each naming what and where.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostLinkError {
    #[error("no input PTX")]
    /// No input was given.
    NoInput,
    /// An input that is a device image post-linked already (its `.prop` is
    /// beside it): its getters are gone, and a second post-link would
    /// find no constants.
    #[error(
        "{}: a device image post-linked already ({} is beside it): embed or load it as it is \
         (ptxspec_build::embed_images_dir, `ptxspec inspect` shows it), or post-link the PTX that your \
         CUDA compiler wrote",
        file.display(),
        prop.display()
    )]
    AlreadyPostLinked {
        /// The PTX file.
        file: std::path::PathBuf,
        /// The property file beside it.
        prop: std::path::PathBuf,
    },
    /// An input with no functions or variables: an empty file, or a header
    /// alone.
    #[error(
        "{file}: no PTX functions or variables in this input (an empty file, or only a header? a unit \
         of device functions compiled without -rdc=true keeps none)"
    )]
    Empty {
        /// The input.
        file: String,
    },
    /// Calls of functions, or uses of variables, that no input defines
    /// (SYCL's `link_program_error`).
    #[error("{}", unresolved_message(.0))]
    Unresolved(Vec<Unresolved>),
    #[error(transparent)]
    /// An input that is not PTX the parser reads.
    Parse(#[from] ParseError),
    #[error("cannot link: {0}")]
    /// Inputs that cannot be linked into one module (their headers disagree, ...).
    Link(String),
    #[error(
        "{second}: duplicate definition of .visible symbol '{name}' (first defined at {first})"
    )]
    /// Two inputs define one `.visible` symbol.
    DuplicateSymbol {
        /// The symbol.
        name: String,
        /// Its first definition.
        first: Location,
        /// Its second definition.
        second: Location,
    },
    #[error("{at}: in function {function}: {what}")]
    /// A getter call whose arguments cannot be traced, or whose shape is unknown.
    Getter {
        /// The call.
        at: Location,
        /// The function it is in.
        function: String,
        /// What could not be traced.
        what: String,
    },
    #[error("{at}: {source}")]
    /// Constants whose sizes, defaults or types do not fit together.
    Layout {
        /// Where the constant is read.
        at: Location,
        /// What does not fit.
        source: LayoutError,
    },
    /// `--buffer param` for an image that cannot take it.
    #[error("image {image}: the buffer cannot go in the parameter space: {reason}")]
    Placement {
        /// The image's stem.
        image: String,
        /// Why not.
        reason: String,
    },
    #[error("{path}: {source}")]
    /// A file that could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    #[error("internal error: {0}")]
    /// A broken invariant of the post-link (a bug: please report it).
    Internal(String),
}

/// A symbol that no input defines, and the first place that uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unresolved {
    /// The symbol's name.
    pub symbol: String,
    /// Where it is first used.
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
    /// One image per kernel.
    PerKernel,
    /// One image per input file, explicitly.
    PerSource,
}

/// Where emulated kernels find the specialization-constant buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BufferPlacement {
    /// A pointer to the buffer in global memory (the `kernel_handler`).
    Global,
    /// The buffer's contents in the kernel's parameter space: the values
    /// travel with each launch, no upload (sm_70 and later; at most
    /// `PARAM_SPACE_BYTES` of parameters).
    Param,
    /// The parameter space where it can be used, global memory elsewhere.
    #[default]
    Auto,
}

/// Post-link options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// What getters become.
    pub mode: Mode,
    /// How kernels are grouped into images.
    pub split: Split,
    /// Where emulated kernels find the values.
    pub buffer: BufferPlacement,
}

/// One device image as the post-link makes it (its PTX, layout, kernels
/// and property sets), before it is written; [`ImageData`](crate::image::ImageData)
/// is an image read back from such files, `ptxspec::DeviceImage` SYCL's
/// view of one in a bundle.
#[derive(Clone, Debug)]
pub struct PostLinkedImage {
    /// File stem: `<stem>.ptx`, `<stem>.prop`, `<stem>.sym`.
    pub stem: String,
    /// The rewritten PTX.
    pub ptx: String,
    /// The buffer's layout: constants, IDs, offsets, default values.
    pub layout: Layout,
    /// The image's kernels, each with its handler marked.
    pub kernels: Vec<KernelSignature>,
    /// Where the image's kernels find the values (written into the kernel
    /// signatures; [`ImageData::placement`](crate::image::ImageData::placement)
    /// reads it back).
    pub placement: crate::image::Delivery,
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
    /// The property sets written as `<stem>.prop`.
    pub props: PropertySets,
}

impl PostLinkedImage {
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
    /// Parsing the inputs.
    pub parse: std::time::Duration,
    /// Linking them into one module.
    pub link: std::time::Duration,
    /// Finding getters, constants and call graphs.
    pub analyze: std::time::Duration,
    /// Making the images.
    pub images: std::time::Duration,
}

/// The longest stem kept as it is. Image files are `<stem>.ptx`, `.prop`,
/// `.sym`, `.ltoir`, and file systems take names of at most 255 bytes.
const STEM_BYTES: usize = 100;

/// The file stem of an image named `name` (an input's stem or a kernel's
/// name): the name itself where it is a plain file name of at most
/// [`STEM_BYTES`]; else its characters with `|`, `/`, `\` and control
/// characters replaced (a file table is `|`-separated lines), cut to 80
/// bytes, and a hash of the whole name, which keeps stems apart.
fn file_stem(name: &str) -> String {
    let plain = |c: char| !(c == '|' || c == '/' || c == '\\' || c.is_control());
    if !name.is_empty()
        && name.len() <= STEM_BYTES
        && name != "."
        && name != ".."
        && !name.starts_with('.')
        && name.chars().all(plain)
    {
        return name.to_string();
    }
    let mut cut = String::new();
    for c in name.chars().map(|c| if plain(c) { c } else { '_' }) {
        if cut.len() + c.len_utf8() > 80 {
            break;
        }
        cut.push(c);
    }
    let hash = crate::digest::Digest::of(name.as_bytes()).hex();
    format!("{}_{}", cut.trim_start_matches('.'), &hash[..16])
}

/// The file stem of the input named `name` (`two_tu_kernel` for
/// `dir/two_tu_kernel.ptx`): its image's stem when images are split per
/// source, and its unit's name in symbolic IDs. `None` for a name with no
/// file name in it.
pub(crate) fn input_stem(name: &str) -> Option<&str> {
    Path::new(name).file_stem().and_then(|s| s.to_str())
}

/// The first of `files` that is a device image post-linked already (its
/// `.prop` beside it), as the error to give.
pub fn refuse_post_linked(files: &[PathBuf]) -> Result<(), PostLinkError> {
    for file in files {
        if let Some(prop) = crate::image::prop_beside(file) {
            return Err(PostLinkError::AlreadyPostLinked {
                file: file.clone(),
                prop,
            });
        }
    }
    Ok(())
}

/// Post-links `(file name, PTX text)` inputs into device images.
pub fn post_link(
    inputs: Vec<(String, String)>,
    opts: &Options,
) -> Result<Vec<PostLinkedImage>, PostLinkError> {
    post_link_timed(inputs, opts).map(|(images, _)| images)
}

/// [`post_link`], also reporting how long each stage took.
pub fn post_link_timed(
    inputs: Vec<(String, String)>,
    opts: &Options,
) -> Result<(Vec<PostLinkedImage>, Timings), PostLinkError> {
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
        .map(|(name, _)| input_stem(name).unwrap_or("image").to_string())
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
    let feats = needs::analyze(&linked, &analysis.callees)?;
    lap(&mut timings.analyze);
    let m = &linked.module;

    let kernels: Vec<usize> = (0..m.items.len())
        .filter(|&i| matches!(&m.items[i].kind, ItemKind::Function(f) if f.is_kernel && f.body.is_some()))
        .collect();
    let groups = kernel_groups(&linked, &kernels, &stems, opts.split, &feats);
    let debug = link::is_debug_target(m);
    let shared = Shared::new(&linked, &analysis);
    let mut used: HashSet<String> = HashSet::default();
    let mut refs = References::new(m);
    let mut images = Vec::with_capacity(groups.len());
    for (name, group, requirements) in &groups {
        // Names are file names: safe ones, and unique.
        let base = file_stem(name);
        let mut stem = base.clone();
        let mut k = 1;
        while !used.insert(stem.clone()) {
            stem = format!("{base}_{k}");
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
        let mut image = post_link_image(
            &shared,
            &mut refs,
            &selected,
            group,
            opts.mode,
            opts.buffer,
            stem,
        )?;
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

/// The kernels of each image, with the image's name and the requirements
/// its kernels share: grouped as `split` says (the source file's stem per
/// source, the kernel's name per kernel, the first input's stem for one
/// image of everything), then split again by requirements (DPC++'s
/// optional kernel features design: an image holds only kernels with
/// equal aspects, work-group size and sub-group size).
fn kernel_groups(
    linked: &link::Linked,
    kernels: &[usize],
    stems: &[String],
    split: Split,
    feats: &needs::Features,
) -> Vec<(String, Vec<usize>, Requirements)> {
    let m = &linked.module;
    // Kernel groups, each with the name of its image: the source file's
    // stem per source, the kernel's name per kernel, the first input's stem
    // for one image of everything.
    let first_stem = stems.first().cloned().unwrap_or_default();
    let groups: Vec<(String, Vec<usize>)> = match split {
        _ if kernels.is_empty() => vec![(first_stem, vec![])],
        Split::Off => vec![(first_stem, kernels.to_vec())],
        Split::PerKernel => kernels
            .iter()
            .map(|&k| (analyze::func_name(m, k), vec![k]))
            .collect(),
        Split::Auto | Split::PerSource => {
            let mut by_origin: Vec<(usize, Vec<usize>)> = Vec::new();
            for &k in kernels {
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
    // DPC++'s optional kernel features design's extra split: an image holds only kernels with equal
    // requirements (aspects, work-group size, sub-group size).
    groups
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
        .collect()
}

#[cfg(test)]
mod file_stem_tests {
    use super::file_stem;

    #[test]
    fn stems_are_safe_file_names() {
        assert_eq!(file_stem("matmul"), "matmul");
        assert_eq!(file_stem("_Z6kernelIfEvPT_"), "_Z6kernelIfEvPT_");
        let pipe = file_stem("a|b");
        assert!(pipe.starts_with("a_b_") && !pipe.contains('|'), "{pipe}");
        let newline = file_stem("a\nb");
        assert!(
            newline.starts_with("a_b_") && !newline.contains('\n'),
            "{newline}"
        );
        assert_ne!(pipe, newline, "the hash keeps them apart");
        let long = "k".repeat(300);
        let s = file_stem(&long);
        assert!(s.len() <= 100 && s.starts_with(&"k".repeat(80)), "{s}");
        assert_ne!(file_stem(&"k".repeat(301)), s);
        assert!(!file_stem(".hidden").starts_with('.'));
        assert!(!file_stem("..").is_empty() && file_stem("..") != "..");
        let wide = "é".repeat(60);
        assert!(file_stem(&wide).len() <= 100);
    }
}
