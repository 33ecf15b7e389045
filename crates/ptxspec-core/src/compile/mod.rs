//! CUDA C++ translation units compiled with NVRTC (loaded at run time):
//! PTX in the header's PTX flavour for the post-link and, when asked,
//! LTO-IR in its LTO flavour (`-DPTXSPEC_LTO -dlto`) for
//! `ptxspec::SpecMode::Lto`. What `ptxspec compile` and
//! `ptxspec_build::CudaBuild` share.

use std::path::{Path, PathBuf};

pub mod includes;
mod unit_cache;
pub use unit_cache::{
    CachedUnit, UnitCacheStats, UnitFrom, UnitKey, compile_unit_cached, unit_cache_stats, unit_key,
};

use crate::lto::LtoIr;
use crate::postlink::{self, Options, PostLinkError, PostLinkedImage};
use crate::toolkit::{self, ToolkitError, nvrtc};

/// The device header, `ptxspec.cuh`, as shipped with this crate.
pub const HEADER: &str = include_str!("../../include/ptxspec.cuh");

/// The virtual architecture compiled for when none is given: the oldest
/// that no NVRTC deprecates (CUDA 12 warns for everything before Turing's
/// sm_75 on every compilation; CUDA 13 dropped Volta). Its PTX runs on
/// Turing and every later GPU; ask for `compute_70` to run on Volta too.
pub(crate) const DEFAULT_ARCH: &str = "compute_75";

/// How to compile.
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// The virtual architecture of the PTX and LTO-IR; empty:
    /// `DEFAULT_ARCH`.
    pub arch: String,
    /// Include folders (`-I`), searched after the folder holding
    /// `ptxspec.cuh` and the CUDA headers that are found.
    pub include: Vec<PathBuf>,
    /// More NVRTC options (`-DNAME=1`, `--use_fast_math`, ...).
    pub extra: Vec<String>,
    /// Also compile LTO-IR.
    pub lto: bool,
    /// Where NVRTC runs: the CLI compiles files in its toolkit worker.
    pub toolkit: crate::toolkit::worker::Toolkit,
}

/// One compiled translation unit.
#[derive(Clone, Debug)]
pub struct Unit {
    /// The source's path, as given.
    pub name: String,
    /// The PTX NVRTC made of it.
    pub ptx: String,
    /// LTO-IR, when asked for.
    pub ltoir: Option<Vec<u8>>,
    /// NVRTC's warnings.
    pub log: String,
}

/// Why compiling failed.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("{path}: {source}")]
    /// A source or output file that could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    #[error(transparent)]
    /// NVRTC is missing, or rejected a unit (its log says where).
    Toolkit(#[from] ToolkitError),
    #[error(transparent)]
    /// The post-link of PTX read from files.
    PostLink(#[from] PostLinkError),
    /// The post-link of PTX that NVRTC made in memory: its places name
    /// `<stem>.ptx`, which is on disk only where `keep_ptx` wrote it.
    #[error(
        "{error}\nnote: {} NVRTC's PTX of {}, {}",
        ptx_names(units),
        units.iter().map(|(_, src)| src.as_str()).collect::<Vec<_>>().join(", "),
        match kept {
            Some(dir) => format!("written to {}", dir.display()),
            None => "held in memory: `ptxspec compile --keep-ptx DIR` writes it".to_string(),
        }
    )]
    PostLinkOfCompiled {
        /// The post-link's error.
        error: Box<PostLinkError>,
        /// (PTX name in the error, source file) per unit.
        units: Vec<(String, String)>,
        /// Where the PTX was written, if it was.
        kept: Option<PathBuf>,
    },
    #[error("{0}")]
    /// Anything else, said in words.
    Other(String),
}

fn ptx_names(units: &[(String, String)]) -> String {
    let names: Vec<&str> = units.iter().map(|(p, _)| p.as_str()).collect();
    match names.as_slice() {
        [one] => format!("{one} is"),
        many => format!("{} are", many.join(", ")),
    }
}

/// A folder holding `ptxspec.cuh` for NVRTC's include path: a build
/// script's (under its `OUT_DIR`, kept), or a private one of this
/// compilation's, removed when this is dropped.
#[derive(Debug)]
pub struct HeaderDir {
    path: PathBuf,
    /// Made for this compilation: removed on drop.
    temporary: bool,
}

impl std::ops::Deref for HeaderDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl Drop for HeaderDir {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The device header written for NVRTC: into `dir` (a build script's
/// `OUT_DIR`, which is its own) when given, else into a folder made afresh
/// under the system's temporary folder — never one that exists already (a
/// name someone else chose, or a symlink planted there, is skipped), private
/// to this user, the header created there without following any link, and
/// removed when the returned value is dropped.
pub fn header_dir(dir: Option<&Path>) -> Result<HeaderDir, CompileError> {
    match dir {
        Some(d) => {
            let dir = d.join("ptxspec-include");
            let path = dir.join("ptxspec.cuh");
            if crate::files::read_input_text(&path).ok().as_deref() != Some(HEADER) {
                let io = |source| CompileError::Io {
                    path: path.clone(),
                    source,
                };
                std::fs::create_dir_all(&dir).map_err(io)?;
                std::fs::write(&path, HEADER).map_err(io)?;
            }
            Ok(HeaderDir {
                path: dir,
                temporary: false,
            })
        }
        None => private_header_dir(),
    }
}

/// A fresh folder `ptxspec-include-<pid>-<n>` under the temporary folder
/// with the header in it.
fn private_header_dir() -> Result<HeaderDir, CompileError> {
    use std::io::Write as _;
    let tmp = std::env::temp_dir();
    // A name that exists is never used (someone else's folder or link).
    let dir = crate::files::fresh_folder(&tmp, "ptxspec-include-")
        .map_err(|source| CompileError::Io { path: tmp, source })?;
    let guard = HeaderDir {
        path: dir,
        temporary: true,
    };
    let path = guard.path.join("ptxspec.cuh");
    // A new file in a folder only we can write: nothing to follow.
    crate::files::create_new(&path)
        .and_then(|mut f| f.write_all(HEADER.as_bytes()))
        .map_err(|source| CompileError::Io { path, source })?;
    Ok(guard)
}

/// The NVRTC options of a compilation: relocatable device code, C++17,
/// the architecture, the includes (ptxspec's header first, then the CUDA
/// headers found), the extras; and the LTO flavour's additions.
pub fn nvrtc_options(
    opts: &CompileOptions,
    header: &Path,
    lto: bool,
) -> Result<Vec<String>, ToolkitError> {
    let arch = if opts.arch.is_empty() {
        DEFAULT_ARCH.to_string()
    } else {
        opts.arch.clone()
    };
    let mut o = vec![
        "-rdc=true".to_string(),
        "-std=c++17".to_string(),
        format!("-arch={arch}"),
    ];
    o.extend(
        std::iter::once(header.to_path_buf())
            .chain(opts.include.iter().cloned())
            .chain(toolkit::cuda_include_dirs()?)
            .map(|i| format!("-I{}", i.display())),
    );
    o.extend(opts.extra.iter().cloned());
    if lto {
        o.extend(["-dlto".to_string(), "-DPTXSPEC_LTO".to_string()]);
    }
    Ok(o)
}

/// Where NVRTC looks for the files a compilation with `opts` includes, in
/// its order — the folders of the `-I` options [`nvrtc_options`] gives and
/// of those among the extra options — and the headers the extra options
/// include before the source (`-include`, `--pre-include`).
pub fn include_search(
    opts: &CompileOptions,
    header: &Path,
) -> Result<(Vec<includes::SearchDir>, Vec<String>), ToolkitError> {
    let dir = |path: PathBuf| includes::SearchDir {
        path,
        stable_name: None,
        toolkit: false,
    };
    let mut search = vec![includes::SearchDir {
        path: header.to_path_buf(),
        stable_name: Some("ptxspec device header"),
        toolkit: false,
    }];
    search.extend(opts.include.iter().cloned().map(dir));
    search.extend(
        toolkit::cuda_include_dirs()?
            .into_iter()
            .map(|path| includes::SearchDir {
                path,
                stable_name: None,
                toolkit: true,
            }),
    );
    let given = ExtraOptions::read(&opts.extra);
    search.extend(given.include_dirs.into_iter().map(dir));
    Ok((search, given.pre_includes))
}

/// What NVRTC's extra options (`-Xnvrtc`) say of the files it reads, each
/// option in every spelling NVRTC takes (`-I DIR`, `-IDIR`, `-I=DIR`,
/// `--include-path DIR`, `--include-path=DIR`; the same for `-include` /
/// `--pre-include` and `-D` / `--define-macro`): read once, so that the
/// include search, the FIFO guard and a cached unit's key see exactly the
/// files NVRTC will.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ExtraOptions {
    /// Folders searched for included files, in order.
    pub include_dirs: Vec<PathBuf>,
    /// Headers included before the source.
    pub pre_includes: Vec<String>,
    /// Macros defined (`NAME`, `VALUE`; `1` where no value is given).
    pub defines: Vec<(String, String)>,
    /// Options that make NVRTC read or write a file ptxspec does not check
    /// (precompiled headers, time traces), as given.
    pub unchecked: Vec<String>,
}

impl ExtraOptions {
    /// Reads `extra`, NVRTC's options beyond ptxspec's own.
    pub fn read(extra: &[String]) -> ExtraOptions {
        let mut out = ExtraOptions::default();
        let mut it = extra.iter();
        while let Some(o) = it.next() {
            // (short, long) spellings of each option that takes a value.
            let takes = |short: &str, long: &str| -> Option<Option<&str>> {
                if o == short || o == long {
                    return Some(None);
                }
                let v = o
                    .strip_prefix(&format!("{long}="))
                    .or_else(|| o.strip_prefix(&format!("{short}=")))
                    .or_else(|| o.strip_prefix(short).filter(|_| short.len() == 2))?;
                Some(Some(v))
            };
            let mut value = |inline: Option<&str>| -> Option<String> {
                match inline {
                    Some(v) => Some(v.to_string()),
                    None => it.next().cloned(),
                }
            };
            if let Some(v) = takes("-I", "--include-path") {
                out.include_dirs.extend(value(v).map(PathBuf::from));
            } else if let Some(v) = takes("-include", "--pre-include") {
                out.pre_includes.extend(value(v));
            } else if let Some(v) = takes("-D", "--define-macro") {
                if let Some(d) = value(v) {
                    let (name, val) = d.split_once('=').unwrap_or((&d, "1"));
                    out.defines.push((name.to_string(), val.to_string()));
                }
            } else if [
                "--pch-dir",
                "--create-pch",
                "--use-pch",
                "--time",
                "-fdevice-time-trace",
            ]
            .iter()
            .any(|p| o == p || o.starts_with(&format!("{p}=")))
                || o == "-pch"
                || o == "--pch"
            {
                out.unchecked.push(o.clone());
            }
        }
        out
    }

    /// The refusal of an option that makes NVRTC open a file no check
    /// saw, naming it.
    pub fn refusal(&self) -> Option<String> {
        self.unchecked.first().map(|o| {
            format!(
                "NVRTC option {o:?} makes the compile read or write a file ptxspec does not check \
                 (precompiled headers, time traces): not supported through ptxspec"
            )
        })
    }
}

/// Compiles one source (its text and its name for messages).
pub fn compile_unit(
    name: &str,
    source: &str,
    opts: &CompileOptions,
    header: &Path,
) -> Result<Unit, CompileError> {
    // Every file the compile can open is a regular file: NVRTC would open
    // a FIFO an include names and wait on it for ever.
    let (search, pre) = include_search(opts, header)?;
    let given = ExtraOptions::read(&opts.extra);
    if let Some(why) = given.refusal() {
        return Err(CompileError::Other(why));
    }
    if let includes::Dependencies::Refused(why) =
        includes::dependencies_with(name, source, &search, &pre, &given.defines)
    {
        return Err(CompileError::Other(why));
    }
    let mut span = crate::trace::span(&format!("compile {name} (NVRTC)"), "compile");
    span.arg("lto", opts.lto);
    let ptx = opts.toolkit.nvrtc(
        source,
        name,
        &nvrtc_options(opts, header, false)?,
        nvrtc::Output::Ptx,
    )?;
    let ltoir = if opts.lto {
        Some(
            opts.toolkit
                .nvrtc(
                    source,
                    name,
                    &nvrtc_options(opts, header, true)?,
                    nvrtc::Output::LtoIr,
                )?
                .code,
        )
    } else {
        None
    };
    Ok(Unit {
        name: name.to_string(),
        ptx: String::from_utf8_lossy(&ptx.code).into_owned(),
        ltoir,
        log: ptx.log,
    })
}

/// Compiles `sources` and post-links their PTX into images; with
/// `opts.lto`, each image carries the LTO-IR of the units it comes from.
pub fn compile_and_post_link(
    sources: &[PathBuf],
    opts: &CompileOptions,
    post: &Options,
) -> Result<(Vec<Unit>, Vec<PostLinkedImage>), CompileError> {
    compile_and_post_link_keeping(sources, opts, post, None)
}

/// The most bytes of a CUDA C++ source file `compile` reads (its includes
/// are bounded by [`includes::MAX_BYTES`] together).
pub const MAX_SOURCE_BYTES: u64 = 64 << 20;

/// A CUDA C++ source file's text: a regular file (a FIFO would hang, a
/// device never end) of at most [`MAX_SOURCE_BYTES`], checked before it is
/// read, in UTF-8, with no NUL byte (which NVRTC cannot take: the error
/// names the file, line and column, and quotes a bounded excerpt).
pub fn read_source(path: &Path) -> Result<String, CompileError> {
    let io = |source| CompileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_file() && meta.len() > MAX_SOURCE_BYTES {
        return Err(CompileError::Other(format!(
            "{}: {} bytes, more than a CUDA C++ source ptxspec compiles ({MAX_SOURCE_BYTES})",
            path.display(),
            meta.len()
        )));
    }
    let bytes = crate::files::read_input(path).map_err(io)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        CompileError::Other(format!(
            "{}: not UTF-8 text (the byte at offset {} is not)",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })?;
    if let Some(at) = text.find('\0') {
        return Err(CompileError::Other(format!(
            "{}: {}",
            path.display(),
            crate::toolkit::nul_byte_at(&text, at)
        )));
    }
    Ok(text)
}

/// [`compile_and_post_link`], also writing each unit's PTX as
/// `keep_ptx/<stem>.ptx` before the post-link (so that the places its
/// errors name can be read).
pub fn compile_and_post_link_keeping(
    sources: &[PathBuf],
    opts: &CompileOptions,
    post: &Options,
    keep_ptx: Option<&Path>,
) -> Result<(Vec<Unit>, Vec<PostLinkedImage>), CompileError> {
    let header = header_dir(None)?;
    let mut units = Vec::with_capacity(sources.len());
    for path in sources {
        let text = read_source(path)?;
        units.push(compile_unit(
            &path.display().to_string(),
            &text,
            opts,
            &header,
        )?);
    }
    if let Some(dir) = keep_ptx {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CompileError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        for (u, name) in units.iter().zip(ptx_names_of(&units)) {
            let file = dir.join(name);
            crate::files::write_atomically(&file, u.ptx.as_bytes()).map_err(io(&file))?;
        }
    }
    let images = post_link_units(&units, post).map_err(|e| match e {
        CompileError::PostLink(error) => CompileError::PostLinkOfCompiled {
            error: Box::new(error),
            units: ptx_names_of(&units)
                .into_iter()
                .zip(units.iter().map(|u| u.name.clone()))
                .collect(),
            kept: keep_ptx.map(Path::to_path_buf),
        },
        other => other,
    })?;
    Ok((units, images))
}

/// The name a unit's PTX has in the post-link (and its errors).
/// Each unit's PTX name — what the post-link's messages and internal
/// constants' IDs call it, and the file `--keep-ptx` writes: its source's
/// stem, and for a later unit of the same stem (`a/k.cu`, `b/k.cu`) the
/// stem numbered as the images of one stem are (`k.ptx`, `k_1.ptx`), so
/// that no kept file is written over and no message points into another
/// unit's PTX.
fn ptx_names_of(units: &[Unit]) -> Vec<String> {
    let mut used = std::collections::HashSet::new();
    units
        .iter()
        .map(|u| {
            let stem = Path::new(&u.name)
                .file_stem()
                .map_or_else(|| u.name.clone(), |s| s.to_string_lossy().into_owned());
            let mut name = format!("{stem}.ptx");
            let mut k = 1;
            while !used.insert(name.clone()) {
                name = format!("{stem}_{k}.ptx");
                k += 1;
            }
            name
        })
        .collect()
}

/// Post-links compiled units (their PTX, named `<stem>.ptx`); attaches
/// the units' LTO-IR to each image.
pub fn post_link_units(
    units: &[Unit],
    post: &Options,
) -> Result<Vec<PostLinkedImage>, CompileError> {
    let inputs = ptx_names_of(units)
        .into_iter()
        .zip(units.iter().map(|u| u.ptx.clone()))
        .collect();
    let mut images = postlink::post_link(inputs, post)?;
    for img in &mut images {
        let ir: Option<Vec<(String, Vec<u8>)>> = img
            .sources
            .iter()
            .map(|&s| {
                units
                    .get(s)
                    .and_then(|u| u.ltoir.clone().map(|ir| (u.name.clone(), ir)))
            })
            .collect();
        img.ltoir = ir.filter(|v| !v.is_empty()).map(LtoIr::owned);
    }
    Ok(images)
}
