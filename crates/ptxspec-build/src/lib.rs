//! What a `build.rs` calls to turn device code into registered images: the
//! generated Rust registers each image (its PTX, property sets — kernel
//! signatures included — and LTO-IR) with `inventory::submit!`, and the
//! crate `include!`s it.
//!
//! From CUDA sources, compiled by NVRTC at build time (found like at run
//! time: `PTXSPEC_NVRTC`, the library path, `CUDA_PATH`, `/usr/local/cuda`,
//! pip's `nvidia-cuda-nvrtc-cu12`):
//! ```no_run
//! let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("kernels.rs");
//! ptxspec_build::CudaBuild::new("kernels")
//!     .lto(true) // LTO-IR too, for SpecMode::Lto
//!     .embed(&out)
//!     .unwrap();
//! ```
//! or from images that `ptxspec compile`/`post-link` wrote, committed with
//! the crate ([`embed_images_dir`]), or from PTX committed with the crate
//! (no CUDA tools at build time):
//! ```no_run
//! let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("kernels.rs");
//! ptxspec_build::embed_ptx_dir("kernels/ptx", &out).unwrap();
//! ```
//! and in the crate: `include!(concat!(env!("OUT_DIR"), "/kernels.rs"));`.
//! The files of the folder are the translation units of one program:
//! linked together and split per source (emulated mode), one image per file
//! that defines kernels, named after it.

#![forbid(unsafe_code)]
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ptxspec_core::compile::{self, Unit};
use ptxspec_core::digest::{Digest, KeyEncoder};
use ptxspec_core::postlink::{self, Mode, Options, PostLinkedImage, Split};

pub use ptxspec_core::compile::{CompileError, CompileOptions};
pub use ptxspec_core::postlink::{BufferPlacement, PostLinkError};

/// Whether NVRTC can be loaded here (what [`CudaBuild`] needs; see
/// [`CudaBuild`] for where it is looked for). A build script can fall back
/// to [`embed_ptx_dir`] where it is not.
pub fn nvrtc_available() -> bool {
    ptxspec_core::toolkit::available(ptxspec_core::toolkit::Lib::Nvrtc)
}

/// The `.ext` files of `dir`, sorted.
fn files_with(dir: &Path, ext: &str) -> Result<Vec<PathBuf>, std::io::Error> {
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    Ok(files)
}

/// Post-links every `*.ptx` of `dir` and writes Rust source registering
/// the images to `out`. Prints `cargo:rerun-if-changed`
/// lines for the folder and each file. Needs no CUDA tools.
pub fn embed_ptx_dir(dir: impl AsRef<Path>, out: impl AsRef<Path>) -> Result<(), PostLinkError> {
    let dir = dir.as_ref();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PostLinkError::Io { path, source }
    };
    let files = files_with(dir, "ptx").map_err(io(dir))?;
    println!("cargo:rerun-if-changed={}", dir.display());
    postlink::refuse_post_linked(&files)?;
    let mut inputs = Vec::with_capacity(files.len());
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        let text = ptxspec_core::files::read_input_text(file).map_err(io(file))?;
        inputs.push((file.display().to_string(), text));
    }
    let images = if inputs.is_empty() {
        Vec::new()
    } else {
        postlink::post_link(inputs, &embed_options(BufferPlacement::default()))?
    };
    let out = out.as_ref();
    std::fs::write(out, generate(&images, &[])).map_err(io(out))
}

/// Embeds the device images of `dir` exactly as `ptxspec post-link` or
/// `ptxspec compile` wrote them (committed with the crate, say): the rows
/// of `dir/table.txt`, each image's `.ptx` and `.prop` (and `.ltoir` where
/// there is one), read and checked now — a damaged image fails the build,
/// not the program. Writes Rust source registering them to `out`; prints
/// `cargo:rerun-if-changed` lines. Needs no CUDA tools.
pub fn embed_images_dir(dir: impl AsRef<Path>, out: impl AsRef<Path>) -> Result<(), EmbedError> {
    let dir = dir.as_ref();
    let table_path = dir.join("table.txt");
    println!("cargo:rerun-if-changed={}", table_path.display());
    // The images of one post-link, not a mix of two.
    let _lock = ptxspec_core::postlink::read_lock(dir).map_err(|source| EmbedError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let read = |path: &Path| {
        ptxspec_core::files::read_input(path).map_err(|source| EmbedError::Io {
            path: path.to_path_buf(),
            source,
        })
    };
    let text = String::from_utf8_lossy(&read(&table_path)?).into_owned();
    let table = ptxspec_core::props::FileTable::parse(&text).map_err(|e| EmbedError::Image {
        path: table_path.clone(),
        what: e.to_string(),
    })?;
    let column = |name: &str| {
        table
            .columns
            .iter()
            .position(|c| c == name)
            .ok_or_else(|| EmbedError::Image {
                path: table_path.clone(),
                what: format!("no {name} column: not a table that ptxspec wrote"),
            })
    };
    let (code, props) = (column("Code")?, column("Properties")?);
    let mut generated = Registrations::default();
    let mut read_back = Vec::new();
    for row in &table.rows {
        let ptx_path = dir.join(&row[code]);
        let prop_path = dir.join(&row[props]);
        let ltoir_path = ptx_path.with_extension("ltoir");
        for p in [&ptx_path, &prop_path, &ltoir_path] {
            println!("cargo:rerun-if-changed={}", p.display());
        }
        // Read as the runtime will read it, the files' hashes checked: a
        // damaged or mismatched image fails here.
        use ptxspec_core::image::{LtoIrFile, WrittenImageError, read_written};
        if ptx_path != prop_path.with_extension("ptx") {
            return Err(EmbedError::Image {
                path: table_path.clone(),
                what: format!(
                    "row {} | {}: an image's .ptx and .prop share their stem in tables ptxspec writes",
                    row[code], row[props]
                ),
            });
        }
        let written = read_written(&prop_path, LtoIrFile::IfPresent).map_err(|e| match e {
            WrittenImageError::Io { path, source } => EmbedError::Io { path, source },
            WrittenImageError::Bad { path, what } => EmbedError::Image { path, what },
        })?;
        let (id, ptx, prop) = (
            written.image.id().to_string(),
            written.image.ptx().as_str(),
            &written.props,
        );
        let lto = written.image.ltoir().map(|l| EmbeddedLtoIr {
            bytes: format!(
                "include_bytes!({:?})",
                absolute(&ltoir_path).display().to_string()
            ),
            sha256: l.identity,
        });
        generated.add(&id, ptx, prop, lto.as_ref(), Some(&written.image));
        read_back.push(written.image);
    }
    let out = out.as_ref();
    // The typed constants, as every generated file declares them.
    let code = generated.finish() + &spec_ids_module(&typed_constants_said(&read_back));
    std::fs::write(out, code).map_err(|source| EmbedError::Io {
        path: out.to_path_buf(),
        source,
    })
}

/// An image's `.ltoir` for its registration: the expression of its bytes
/// and their SHA-256 (the LTO-IR's identity in the cubin caches).
struct EmbeddedLtoIr {
    bytes: String,
    sha256: Digest,
}

/// The registrations of one generated file. The images' names (IDs and
/// kernels) are written side by side in one string that each registration
/// slices: a process's first bundle reads every image's names (to order
/// the images and find a kernel's), then from one place rather than from
/// beside each image's PTX, a page apart.
#[derive(Default)]
struct Registrations {
    names: String,
    items: String,
}

impl Registrations {
    /// The expression of `name` in the generated file: a slice of `NAMES`.
    fn name(&mut self, name: &str) -> String {
        let at = self.names.len();
        self.names.push_str(name);
        format!("NAMES.split_at({at}).1.split_at({}).0", name.len())
    }

    /// Registers one image: its ID, PTX and property text, its LTO-IR
    /// where it has one, and what `image` (the image as the runtime will
    /// read it, where it reads back) tells ahead of time — the kernels it
    /// defines, whether its PTX declares an external function — so that a
    /// process's first bundle and build need not find them out.
    fn add(
        &mut self,
        id: &str,
        ptx: &str,
        props: &str,
        lto: Option<&EmbeddedLtoIr>,
        image: Option<&ptxspec_core::image::ImageData>,
    ) {
        let id = self.name(id);
        let kernels: Vec<String> = image
            .map(|i| i.kernels().iter().map(|k| self.name(&k.name)).collect())
            .unwrap_or_default();
        let declares = image.map(|i| i.declares_extern_function());
        let (ltoir, ltoir_sha256) = match lto {
            Some(l) => (l.bytes.as_str(), format!("Some({:?})", l.sha256.0)),
            None => ("&[]", "None".to_string()),
        };
        let _ = writeln!(
            self.items,
            // The versioned entry point, never a struct literal of a type
            // of another crate's release (see `EmbeddedImage::v1`).
            "    ::ptxspec::inventory::submit! {{ ::ptxspec::registry::EmbeddedImage::v1({id}, {ptx:?}, \
             {props:?}, {ltoir}, &[{}], {declares:?}, {ltoir_sha256}) }}",
            kernels.join(", ")
        );
    }

    /// The generated file.
    fn finish(self) -> String {
        format!(
            "// Generated by ptxspec-build. Do not edit.\n\
             const _: () = {{\n    \
             #[allow(dead_code)]\n    \
             const NAMES: &str = {:?};\n{}}};\n",
            self.names, self.items
        )
    }
}

/// `path` from the root, for `include_bytes!` in generated code (which
/// resolves relative paths against the generated file).
fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Why [`embed_images_dir`] could not embed a folder of images.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    #[error("{}: {source}", path.display())]
    /// A file or folder that could not be read or written.
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A file that is not what a device image's file must be.
    #[error("{}: {what}", path.display())]
    Image {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
}

fn embed_options(buffer: BufferPlacement) -> Options {
    Options {
        mode: Mode::Emulated,
        split: Split::PerSource,
        buffer,
    }
}

/// The Rust type of a constant whose value is one scalar of `kind`, in the
/// generated code (`None`: a kind with no Rust type of its own — an integer
/// of unrecorded signedness).
fn rust_type(kind: ptxspec_core::layout::ScalarKind) -> Option<&'static str> {
    use ptxspec_core::layout::ScalarKind as K;
    Some(match kind {
        K::Bool => "::ptxspec::Bool",
        K::I8 => "i8",
        K::U8 => "u8",
        K::I16 => "i16",
        K::U16 => "u16",
        K::I32 => "i32",
        K::U32 => "u32",
        K::I64 => "i64",
        K::U64 => "u64",
        K::F16 => "::ptxspec::F16",
        K::BF16 => "::ptxspec::BF16",
        K::F32 => "f32",
        K::F64 => "f64",
        // Integers of unrecorded signedness, and kinds newer than this list.
        _ => return None,
    })
}

/// A symbolic ID as a Rust constant's name: upper case, every character
/// that cannot be in a name an underscore (`a::sc` → `A__SC`,
/// `same<float>` → `SAME_FLOAT_`), and an underscore before a leading digit.
fn constant_name(symbolic_id: &str) -> String {
    let mut name: String = symbolic_id
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_uppercase(),
            false => '_',
        })
        .collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// The typed constants of `images`: (name, Rust type, symbolic ID), one per
/// constant whose value is a scalar with a Rust type and whose every image
/// agrees on that type, and whose name no other constant takes. Constants
/// whose names collide are typed under none of them: the second list says
/// so, naming them and how to reach each.
fn typed_constants(
    images: &[ptxspec_core::image::ImageData],
) -> (Vec<(String, &'static str, String)>, Vec<String>) {
    use std::collections::BTreeMap;
    // symbolic ID -> its type in each image (None: no Rust type there).
    let mut types: BTreeMap<String, Vec<Option<&'static str>>> = BTreeMap::new();
    for image in images {
        for id in image.symbolic_ids() {
            let leaves = image
                .info()
                .value_types
                .iter()
                .find(|(v, _)| v == id)
                .map(|(_, leaves)| leaves.as_slice())
                .unwrap_or_default();
            let size = image.slot(id).map(|s| s.size);
            let ty = match leaves {
                [(0, kind)] if Some(kind.size()) == size => rust_type(*kind),
                _ => None,
            };
            types.entry(id.to_string()).or_default().push(ty);
        }
    }
    let mut by_name: BTreeMap<String, Vec<(&'static str, String)>> = BTreeMap::new();
    for (id, tys) in types {
        let Some(Some(first)) = tys.first().copied() else {
            continue;
        };
        // `_` would be an unnamed constant.
        if tys.iter().all(|t| *t == Some(first)) && constant_name(&id) != "_" {
            by_name
                .entry(constant_name(&id))
                .or_default()
                .push((first, id));
        }
    }
    let mut collisions = Vec::new();
    let typed = by_name
        .into_iter()
        .filter_map(|(name, mut ids)| match ids.len() {
            1 => ids.pop().map(|(ty, id)| (name, ty, id)),
            // Two IDs, one name (`a::b` and `a__b`): neither is typed.
            _ => {
                let reach: Vec<String> = ids
                    .iter()
                    .map(|(ty, id)| format!("SpecId::<{ty}>::new({id:?})"))
                    .collect();
                collisions.push(format!(
                    "specialization constants {} would all be spec_ids::{name}: none is typed; \
                     reach each by its ID: {}",
                    ids.iter()
                        .map(|(_, id)| format!("{id:?}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    reach.join(", ")
                ));
                None
            }
        })
        .collect();
    (typed, collisions)
}

/// [`typed_constants`], each collision said as a build warning (IDs
/// escaped: a line break in one would start another of cargo's
/// directives).
fn typed_constants_said(
    images: &[ptxspec_core::image::ImageData],
) -> Vec<(String, &'static str, String)> {
    let (typed, collisions) = typed_constants(images);
    for c in collisions {
        println!("cargo:warning=ptxspec-build: {c}");
    }
    typed
}

/// The generated module of typed constants (see [`generate`]).
fn spec_ids_module(constants: &[(String, &'static str, String)]) -> String {
    let mut code = String::from(
        "/// The specialization constants of the images embedded here, typed: a\n         /// misspelled name or a value of another type does not compile. (Constants\n         /// whose type is not one scalar, or that images give different types,\n         /// are named at run time: `SpecId::new(\"ID\")`.)\n         #[allow(dead_code)]\n         pub mod spec_ids {\n",
    );
    for (name, ty, id) in constants {
        let _ = writeln!(
            code,
            // The ID as a Rust string literal would write it (escaped: a
            // bidirectional-text character raw in a comment fails rustc's
            // deny-by-default lint, a line break would end the comment).
            "    /// The constant {id:?}.\n    pub const {name}: ::ptxspec::SpecId<{ty}> = ::ptxspec::SpecId::new({id:?});"
        );
    }
    code.push_str("}\n");
    code
}

/// The Rust source registering `images`; `ltoir[i]`, when present, is the
/// path of image `i`'s `.ltoir` (embedded with `include_bytes!`). After the
/// registrations, `pub mod spec_ids` holds a typed `SpecId` constant per
/// specialization constant whose type the images record
/// ([`typed_constants`]): `spec_ids::BLOCK_SIZE_ID` where the file is
/// included.
fn generate(images: &[PostLinkedImage], ltoir: &[Option<PathBuf>]) -> String {
    let mut code = Registrations::default();
    let mut read_back = Vec::new();
    for (i, img) in images.iter().enumerate() {
        // The file is embedded as it is now (the build script runs again
        // when it changes): its hash, too.
        let lto = ltoir.get(i).cloned().flatten().and_then(|p| {
            Some(EmbeddedLtoIr {
                sha256: Digest::of(&ptxspec_core::files::read_input(&p).ok()?),
                bytes: format!("include_bytes!({:?})", p.display().to_string()),
            })
        });
        let props = img.props.to_text();
        // The post-link checked these property sets; an image that does not
        // read back tells nothing ahead (the runtime then finds it out).
        let image =
            ptxspec_core::image::ImageData::new(img.stem.as_str(), img.ptx.as_str(), &props).ok();
        code.add(&img.stem, &img.ptx, &props, lto.as_ref(), image.as_ref());
        read_back.extend(image);
    }
    code.finish() + &spec_ids_module(&typed_constants_said(&read_back))
}

/// Compiles a folder of CUDA sources with NVRTC in a build script and
/// embeds the images; each `.cu` is one translation unit, recompiled only
/// when it, a header of its folder or of an include folder, or the options
/// changed.
#[derive(Clone, Debug)]
pub struct CudaBuild {
    dir: PathBuf,
    opts: CompileOptions,
    buffer: BufferPlacement,
}

impl CudaBuild {
    /// The `.cu` files of `dir` (not its subfolders); the folder itself is
    /// on the include path, as is this crate's `ptxspec.cuh`.
    pub fn new(dir: impl Into<PathBuf>) -> CudaBuild {
        let dir = dir.into();
        CudaBuild {
            opts: CompileOptions {
                include: vec![dir.clone()],
                ..CompileOptions::default()
            },
            dir,
            buffer: BufferPlacement::default(),
        }
    }

    /// Adds an include folder.
    #[must_use]
    pub fn include(mut self, dir: impl Into<PathBuf>) -> Self {
        self.opts.include.push(dir.into());
        self
    }

    /// The virtual architecture the PTX (and LTO-IR) is compiled for: the
    /// oldest GPU generation the program must run on, since the driver
    /// compiles PTX for newer GPUs but never for older ones. By default
    /// `compute_75` (Turing and every GPU since; the oldest NVRTC 12 does
    /// not deprecate); `compute_70` for Volta (with NVRTC 12's warning).
    /// Choose a newer one only for what the code needs: `compute_80` for
    /// Ampere's features (`cp.async`, bf16 arithmetic), `compute_90` for
    /// Hopper's (thread-block clusters, TMA, `wgmma`); the image then runs on
    /// that generation and newer only. Tuning needs no newer virtual
    /// architecture: the LTO and native tiers compile for the GPU at hand
    /// (`sm_90` on an H100) when the program runs.
    #[must_use]
    pub fn arch(mut self, arch: impl Into<String>) -> Self {
        self.opts.arch = arch.into();
        self
    }

    /// An extra NVRTC option (`-DNAME=1`, `--use_fast_math`).
    #[must_use]
    pub fn option(mut self, option: impl Into<String>) -> Self {
        self.opts.extra.push(option.into());
        self
    }

    /// Also compile LTO-IR, so that bundles can be built with
    /// `ptxspec::SpecMode::Lto`.
    #[must_use]
    pub fn lto(mut self, lto: bool) -> Self {
        self.opts.lto = lto;
        self
    }

    /// Where emulated kernels find the values (see
    /// [`BufferPlacement`]).
    #[must_use]
    pub fn buffer(mut self, buffer: BufferPlacement) -> Self {
        self.buffer = buffer;
        self
    }

    /// Compiles what changed, post-links, and writes the registering Rust
    /// source to `out` (in `OUT_DIR`, where the compiled units are kept
    /// too). Prints the `cargo:rerun-if-*` lines.
    pub fn embed(self, out: impl AsRef<Path>) -> Result<(), CompileError> {
        let out = out.as_ref();
        let out_dir = out.parent().unwrap_or(Path::new(".")).to_path_buf();
        let sources = files_with(&self.dir, "cu").map_err(io_error(&self.dir))?;
        println!("cargo:rerun-if-changed={}", self.dir.display());
        for env in [
            "PTXSPEC_NVRTC",
            "PTXSPEC_CUDA_INCLUDE",
            "CUDA_PATH",
            "CUDA_HOME",
        ] {
            println!("cargo:rerun-if-env-changed={env}");
        }
        let header = compile::header_dir(Some(&out_dir))?;
        for inc in &self.opts.include {
            println!("cargo:rerun-if-changed={}", inc.display());
        }
        let (search, pre_includes) = compile::include_search(&self.opts, &header)?;
        let units_dir = out_dir.join("ptxspec-units");
        std::fs::create_dir_all(&units_dir).map_err(io_error(&units_dir))?;
        let inputs = UnitInputs {
            shared_key: self.unit_key_base(&header)?,
            search: &search,
            pre_includes: &pre_includes,
            header: &header,
            units_dir: &units_dir,
        };
        let units = sources
            .iter()
            .map(|src| self.unit(src, &inputs))
            .collect::<Result<Vec<Unit>, CompileError>>()?;
        let images = if units.is_empty() {
            Vec::new()
        } else {
            compile::post_link_units(&units, &embed_options(self.buffer))?
        };
        let mut ltoir = Vec::with_capacity(images.len());
        for img in &images {
            ltoir.push(match &img.ltoir {
                Some(ir) => {
                    let p = units_dir.join(format!("{}.ltoir", img.stem));
                    std::fs::write(&p, ir.to_bytes()).map_err(io_error(&p))?;
                    Some(p)
                }
                None => None,
            });
        }
        std::fs::write(out, generate(&images, &ltoir)).map_err(io_error(out))
    }

    /// What every unit's key holds besides its own text and the files it
    /// includes: the options NVRTC is given (as resolved: a default that
    /// changes must recompile every unit), its version, the header.
    fn unit_key_base(&self, header: &Path) -> Result<KeyEncoder, CompileError> {
        let mut shared = KeyEncoder::new("ptxspec-build unit v2");
        shared
            .str(&format!(
                "{:?}",
                compile::nvrtc_options(&self.opts, header, false)?
            ))
            .str(&format!(
                "{:?}",
                self.opts
                    .lto
                    .then(|| compile::nvrtc_options(&self.opts, header, true))
                    .transpose()?
            ))
            .str(&format!("{:?}", ptxspec_core::toolkit::nvrtc::version()?))
            .str(compile::HEADER);
        Ok(shared)
    }

    /// The unit of source file `src`: the one kept in the units folder where
    /// its key (its text, every file it can include, and `inputs`' shared
    /// part) is the one kept beside it, else compiled now and kept. Prints
    /// the `cargo:rerun-if-changed` lines of the files it reads.
    fn unit(&self, src: &Path, inputs: &UnitInputs<'_>) -> Result<Unit, CompileError> {
        println!("cargo:rerun-if-changed={}", src.display());
        let text = compile::read_source(src)?;
        let name = src.display().to_string();
        // Every file the unit can read through its includes: cargo runs
        // this again when one changes, and the unit's key covers them. A
        // unit whose files cannot be known beforehand is compiled every
        // time.
        let defines = compile::ExtraOptions::read(&self.opts.extra).defines;
        let key = match compile::includes::dependencies_with(
            &name,
            &text,
            inputs.search,
            inputs.pre_includes,
            &defines,
        ) {
            compile::includes::Dependencies::Known { files, key: deps } => {
                for f in &files {
                    println!("cargo:rerun-if-changed={}", f.display());
                }
                let mut key = inputs.shared_key.clone();
                key.str(&text).bytes(&deps);
                Some(key.digest().hex())
            }
            compile::includes::Dependencies::Unknown(why) => {
                println!("cargo:warning={name} is compiled on every build: {why}");
                None
            }
            // The compile below refuses it, naming the file.
            compile::includes::Dependencies::Refused(_) => None,
        };
        let stem = src
            .file_stem()
            .map_or_else(|| "unit".into(), |s| s.to_string_lossy().into_owned());
        let (ptx_path, lto_path, key_path) = (
            inputs.units_dir.join(format!("{stem}.ptx")),
            inputs.units_dir.join(format!("{stem}.unit.ltoir")),
            inputs.units_dir.join(format!("{stem}.key")),
        );
        let cached = key.as_ref().is_some_and(|key| {
            ptxspec_core::files::read_input_text(&key_path).is_ok_and(|k| k == *key)
        });
        if cached {
            return Ok(Unit {
                name,
                ptx: ptxspec_core::files::read_input_text(&ptx_path)
                    .map_err(io_error(&ptx_path))?,
                ltoir: if self.opts.lto {
                    Some(ptxspec_core::files::read_input(&lto_path).map_err(io_error(&lto_path))?)
                } else {
                    None
                },
                log: String::new(),
            });
        }
        let unit = compile::compile_unit(&name, &text, &self.opts, inputs.header)?;
        std::fs::write(&ptx_path, &unit.ptx).map_err(io_error(&ptx_path))?;
        if let Some(ir) = &unit.ltoir {
            std::fs::write(&lto_path, ir).map_err(io_error(&lto_path))?;
        }
        match &key {
            Some(key) => std::fs::write(&key_path, key).map_err(io_error(&key_path))?,
            None => {
                let _ = std::fs::remove_file(&key_path);
            }
        }
        Ok(unit)
    }
}

/// What [`CudaBuild::unit`] reads beside the source file: the key's shared
/// part, where includes are searched, and where units are kept.
struct UnitInputs<'a> {
    shared_key: KeyEncoder,
    search: &'a [compile::includes::SearchDir],
    pre_includes: &'a [String],
    header: &'a Path,
    units_dir: &'a Path,
}

/// An I/O failure at `path`, as a compile error naming it.
fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> CompileError + use<> {
    let path = path.to_path_buf();
    move |source| CompileError::Io { path, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything generated is escaped for where it lands (round 5, 5): a
    /// constant's ID holding any of Unicode's bidirectional-text controls
    /// (which rustc's deny-by-default lints refuse in comments and literals
    /// alike), a line break (which would end a doc comment), quotes,
    /// backticks and `*/` reaches the generated module only escaped — no
    /// such character raw, every line one item or one doc line.
    #[test]
    fn generated_names_are_escaped_where_they_land() {
        let controls = [
            '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}',
            '\u{2068}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}',
        ];
        let mut ids: Vec<String> = controls.iter().map(|c| format!("sc{c}x")).collect();
        ids.extend(["a\nb".to_string(), "q\"`*/\\".into(), "tab\tcr\r".into()]);
        let constants: Vec<(String, &'static str, String)> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (format!("C{i}"), "i32", id.clone()))
            .collect();
        let code = spec_ids_module(&constants);
        for c in controls {
            assert!(!code.contains(c), "{:?} raw in:\n{code}", c);
        }
        for line in code.lines() {
            let t = line.trim_start();
            assert!(
                t.starts_with("///")
                    || t.starts_with("pub const C")
                    || t.starts_with("#[allow")
                    || t.starts_with("pub mod")
                    || t == "}",
                "a line the escaping let through: {line:?}"
            );
        }
        assert_eq!(code.matches("pub const C").count(), ids.len());
    }

    /// Every scalar constant of the examples is typed by what its device
    /// code declares; a struct and vectors are not; names are Rust
    /// constants' (a composite ID's `::` and `<>` underscores, a leading
    /// digit prefixed).
    #[test]
    fn typed_constants_follow_the_device_codes_types() {
        let units = ["scalars", "vec_types", "matmul"].map(|n| {
            (
                format!("{n}.ptx"),
                std::fs::read_to_string(format!("../../kernels/ptx/{n}.ptx")).unwrap(),
            )
        });
        let images =
            postlink::post_link(units.to_vec(), &embed_options(BufferPlacement::default()))
                .unwrap();
        let code = generate(&images, &[]);
        for line in [
            r#"pub const CHAR_ID: ::ptxspec::SpecId<i8> = ::ptxspec::SpecId::new("char_id");"#,
            r#"pub const DOUBLE_ID: ::ptxspec::SpecId<f64> = ::ptxspec::SpecId::new("double_id");"#,
            r#"pub const BOOL_ID: ::ptxspec::SpecId<::ptxspec::Bool> = ::ptxspec::SpecId::new("bool_id");"#,
            r#"pub const SHORT_ID: ::ptxspec::SpecId<i16> = ::ptxspec::SpecId::new("short_id");"#,
            r#"pub const U64_ID: ::ptxspec::SpecId<u64> = ::ptxspec::SpecId::new("u64_id");"#,
            r#"pub const BLOCK_SIZE_ID: ::ptxspec::SpecId<i32> = ::ptxspec::SpecId::new("block_size_id");"#,
        ] {
            assert!(code.contains(line), "{line} missing from:\n{code}");
        }
        // A struct and vectors: named at run time only.
        for id in ["padded_id", "vec_f3_id", "vec_d4_id", "marray_c5_id"] {
            assert!(
                !code.contains(&format!("new({id:?})")),
                "{id} typed:\n{code}"
            );
        }
        assert_eq!(constant_name("a::b<int>"), "A__B_INT_");
        assert_eq!(constant_name("1st"), "_1ST");
        assert_eq!(
            constant_name("(anonymous namespace)::x"),
            "_ANONYMOUS_NAMESPACE___X"
        );
    }

    #[test]
    fn a_registration_tells_its_kernels_and_external_functions_ahead() {
        let ptx = include_str!("../../../kernels/ptx/conv3x3.ptx");
        let image = ptxspec_core::postlink::post_link(
            vec![("conv3x3.ptx".to_string(), ptx.to_string())],
            &Default::default(),
        )
        .unwrap()
        .remove(0);
        let props = image.props.to_text();
        let file = |ptx: &str, read: bool| {
            let read_back = ptxspec_core::image::ImageData::new("conv3x3", ptx, &props).unwrap();
            let mut code = Registrations::default();
            code.add("conv3x3", ptx, &props, None, read.then_some(&read_back));
            code.finish()
        };
        // The ID and the kernel are slices of one string of names.
        let plain = file(&image.ptx, true);
        assert!(
            plain.contains(r#"const NAMES: &str = "conv3x3conv3x3";"#)
                && plain.contains("EmbeddedImage::v1(NAMES.split_at(0).1.split_at(7).0, ")
                && plain
                    .contains("&[], &[NAMES.split_at(7).1.split_at(7).0], Some(false), None) }"),
            "{plain}"
        );
        // PTX that declares a function it does not define (another unit's).
        let calling = format!("{}\n.extern .func helper\n(\n);\n", image.ptx);
        let code = file(&calling, true);
        assert!(code.contains("], Some(true), None) }"), "{code}");
        // An image that did not read back tells nothing ahead.
        let unknown = file(&image.ptx, false);
        assert!(
            unknown.contains(r#"const NAMES: &str = "conv3x3";"#)
                && unknown.contains("&[], &[], None, None) }"),
            "{unknown}"
        );
        // LTO-IR: its bytes' expression and their SHA-256, as an array;
        // a second image's names follow the first's.
        let mut code = Registrations::default();
        let mut sha256 = [0u8; 32];
        sha256[0] = 0xfe;
        sha256[31] = 0xed;
        let lto = EmbeddedLtoIr {
            bytes: r#"include_bytes!("/k/conv3x3.ltoir")"#.into(),
            sha256: Digest(sha256),
        };
        code.add("conv3x3", &image.ptx, &props, Some(&lto), None);
        code.add("blur", &image.ptx, &props, None, None);
        let code = code.finish();
        assert!(
            code.contains(r#", include_bytes!("/k/conv3x3.ltoir"), &[], None, "#)
                && code.contains(
                    "None, Some([254, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
                     0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 237])) }"
                )
                && code.contains(r#"const NAMES: &str = "conv3x3blur";"#)
                && code.contains("EmbeddedImage::v1(NAMES.split_at(7).1.split_at(4).0, "),
            "{code}"
        );
    }
}
