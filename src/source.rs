//! Kernel bundles from CUDA C++ source made at run time — SYCL's
//! `create_kernel_bundle_from_source` (`sycl_ext_oneapi_kernel_compiler`),
//! for programs that write their kernels as they run.
//!
//! ```no_run
//! use ptxspec::{SourceOptions, SpecId, SpecMode, build, kernel_bundle_from_source};
//! let source = r#"
//!     #include "ptxspec.cuh"
//!     constexpr ptxspec::specialization_id<int> scale{2};
//!     extern "C" __global__ void scaled(int *x, ptxspec::kernel_handler h) {
//!       x[threadIdx.x] *= h.get_specialization_constant<scale>();
//!     }
//! "#;
//! let mut input = kernel_bundle_from_source(&[("scaled.cu", source)], &SourceOptions::default())?;
//! input.set_specialization_constant(&SpecId::<i32>::new("scale"), 3)?;
//! let exe = build(&input.with_mode(SpecMode::Lto))?;
//! # Ok::<(), ptxspec::Error>(())
//! ```
//!
//! Each source is one translation unit, compiled by NVRTC (found at run time
//! as for LTO links: `PTXSPEC_NVRTC`, the library path, `CUDA_PATH`, pip's
//! `nvidia-cuda-nvrtc-cu12`) with the device header `ptxspec.cuh` on the
//! include path, then post-linked like a build script's units: the bundle
//! works as an embedded one does, in every mode, with the same symbolic IDs
//! (docs/guide/writing-kernels.md) and handler values. Compiled units are
//! cached by source and options in memory and on disk, where cubins are
//! (`PTXSPEC_CACHE_DIR`, `PTXSPEC_CACHE_MAX_MB`).

use std::path::PathBuf;
use std::sync::Arc;

use ptxspec_core::compile::{self, CompileError, CompileOptions};
use ptxspec_core::digest::{Digest, KeyEncoder};
use ptxspec_core::postlink;
use ptxspec_core::toolkit::ToolkitError;

use crate::bundle::{Input, KernelBundle};
use crate::error::Error;
use crate::image::ImageData;

/// How [`kernel_bundle_from_source`] compiles. Start from
/// `SourceOptions::default()` (compute_75 PTX, LTO-IR too, no extra
/// options) and change what you need with its `with_` methods.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SourceOptions {
    /// The virtual architecture (`compute_75` when empty; `compute_70`
    /// for Volta).
    pub arch: String,
    /// More NVRTC options (`-DNAME=1`, `--use_fast_math`, ...).
    pub options: Vec<String>,
    /// Include folders, searched after the device header's and before the
    /// CUDA headers found.
    pub include: Vec<PathBuf>,
    /// Also compile LTO-IR, so that the bundle can be built with
    /// [`SpecMode::Lto`](crate::SpecMode::Lto) (and `Auto` and `Tiered`
    /// link rather than specialize PTX). On by default; off halves the
    /// compilation's time.
    pub lto: bool,
}

impl Default for SourceOptions {
    fn default() -> Self {
        SourceOptions {
            arch: String::new(),
            options: Vec::new(),
            include: Vec::new(),
            lto: true,
        }
    }
}

impl SourceOptions {
    /// The virtual architecture (`compute_80`, ...).
    #[must_use]
    pub fn with_arch(mut self, arch: impl Into<String>) -> Self {
        self.arch = arch.into();
        self
    }

    /// One NVRTC option more.
    #[must_use]
    pub fn with_option(mut self, option: impl Into<String>) -> Self {
        self.options.push(option.into());
        self
    }

    /// One include folder more.
    #[must_use]
    pub fn with_include(mut self, dir: impl Into<PathBuf>) -> Self {
        self.include.push(dir.into());
        self
    }

    /// Whether to compile LTO-IR too.
    #[must_use]
    pub fn with_lto(mut self, lto: bool) -> Self {
        self.lto = lto;
        self
    }
}

/// An input bundle of the kernels of `sources` (`(name, text)` pairs, one
/// translation unit each; the name is what NVRTC's messages name, and the
/// images' IDs begin with its stem). A compile error is [`Error::Compile`]
/// with NVRTC's log, whose lines point into the source by its name.
///
/// The images also join the program's registered kernels, as embedded ones
/// are: a launch by kernel name without a bundle (handler values) finds
/// them — an embedded kernel of the same name first, else the newest source
/// that defines it.
pub fn kernel_bundle_from_source(
    sources: &[(&str, &str)],
    opts: &SourceOptions,
) -> Result<KernelBundle<Input>, Error> {
    if sources.is_empty() {
        return Err(Error::invalid(
            crate::error::Misuse::EmptyList,
            "kernel_bundle_from_source of no source".into(),
        ));
    }
    let copts = CompileOptions {
        arch: opts.arch.clone(),
        include: opts.include.clone(),
        extra: opts.options.clone(),
        lto: opts.lto,
        ..CompileOptions::default()
    };
    let header = compile::header_dir(None).map_err(compile_error("the device header"))?;
    let (units, unit_keys): (Vec<_>, Vec<_>) = sources
        .iter()
        .map(|&(name, text)| {
            compile::compile_unit_cached(name, text, &copts, &header).map_err(compile_error(name))
        })
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .map(|c| (c.unit, c.key))
        .unzip();
    let images = compile::post_link_units(&units, &postlink::Options::default())
        .map_err(compile_error("the post-link of the compiled sources"))?;
    let images = images
        .into_iter()
        .map(|img| {
            // Named by stem and content: a source compiled again with other
            // text is another image, never one of the same ID.
            let props = img.props.to_text();
            let content = Digest::of_parts([img.ptx.as_bytes(), props.as_bytes()]);
            let id = format!("{}-{}", img.stem, &content.hex()[..8]);
            let image = ImageData::new(id, img.ptx, &props)?;
            // Known in the cubin caches by the units it was compiled from
            // (NVRTC's LTO-IR bytes differ from compile to compile): the
            // same in every process, so that a fleet shares its links. A
            // unit that could not be keyed (its files unknown before
            // compiling) leaves the image known by its LTO-IR's own bytes.
            let keys: Option<Vec<Digest>> = img
                .sources
                .iter()
                .map(|&s| unit_keys.get(s).copied().flatten())
                .collect();
            let image = match (&img.ltoir, keys) {
                (Some(ir), Some(keys)) => {
                    let mut identity = KeyEncoder::new("ptxspec image of source units v1");
                    identity.list(keys.iter().map(|k| &k.as_bytes()[..]));
                    image.with_ltoir_known_as(&ir.to_bytes(), identity.digest())?
                }
                (Some(ir), None) => image.with_ltoir(&ir.to_bytes())?,
                (None, _) => image,
            };
            Ok(Arc::new(image))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    crate::registry::register_runtime(&images);
    Ok(KernelBundle::from_image_data(images))
}

/// A compilation's error as the runtime's: NVRTC's rejection with its log,
/// a post-link's error as itself, a missing toolkit as a toolkit error.
fn compile_error(what: &str) -> impl Fn(CompileError) -> Error + '_ {
    move |e| match e {
        CompileError::Toolkit(ToolkitError::Failed {
            library: "NVRTC",
            log,
            ..
        }) => Error::Compile {
            what: what.to_string(),
            log,
        },
        CompileError::Toolkit(t) => Error::Toolkit(t),
        CompileError::PostLink(p) => Error::PostLink(p),
        other => Error::Compile {
            what: what.to_string(),
            log: other.to_string(),
        },
    }
}
