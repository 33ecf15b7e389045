//! `ptxspec post-link` and `ptxspec compile`: device images from PTX, or
//! from CUDA C++ through NVRTC, written with their property sets.

use std::path::{Path, PathBuf};

use ptxspec_cli::views::{self, Format};
use ptxspec_core::postlink;

use crate::args::{BufferArg, ModeArg, PostLinkArgs, SplitArg};
use crate::io::{load_config, read_as};

/// `post-link`: links the PTX of `inputs` and writes its images.
pub(crate) fn post_link(args: &PostLinkArgs, inputs: &[PathBuf]) -> Result<(), String> {
    postlink::refuse_post_linked(inputs).map_err(|e| e.to_string())?;
    let texts = inputs
        .iter()
        .map(|p| read_as(p, Format::Ptx).map(|t| (p.display().to_string(), t)))
        .collect::<Result<Vec<_>, _>>()?;
    if args.verbose {
        let bytes: usize = texts.iter().map(|(_, t)| t.len()).sum();
        eprintln!(
            "ptxspec: post-linking {}, {:.1} MB",
            views::count(texts.len(), "file", "files"),
            bytes as f64 / 1e6
        );
    }
    let (images, t) =
        postlink::post_link_timed(texts, &options(args)).map_err(|e| e.to_string())?;
    if args.verbose {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        eprintln!(
            "ptxspec: parse {:.1} ms, link {:.1} ms, analyze {:.1} ms, images {:.1} ms",
            ms(t.parse),
            ms(t.link),
            ms(t.analyze),
            ms(t.images)
        );
    }
    write_and_report(args, &images, inputs)
}

/// `compile`: compiles `inputs` with NVRTC, then post-links them.
pub(crate) fn compile(
    args: &PostLinkArgs,
    lto: bool,
    arch: String,
    include: Vec<PathBuf>,
    extra: Vec<String>,
    keep_ptx: Option<&Path>,
    inputs: &[PathBuf],
) -> Result<(), String> {
    let opts = ptxspec_core::compile::CompileOptions {
        arch,
        include,
        extra,
        lto,
        toolkit: crate::io::isolated_toolkit(),
    };
    let mut source_bytes = 0;
    for p in inputs {
        source_bytes += ptxspec_core::compile::read_source(p)
            .map_err(|e| e.to_string())?
            .len();
        eprintln!("ptxspec: compiling {}", p.display());
    }
    let started = std::time::Instant::now();
    let (units, images) = ptxspec_core::compile::compile_and_post_link_keeping(
        inputs,
        &opts,
        &options(args),
        keep_ptx,
    )
    .map_err(|e| e.to_string())?;
    if args.verbose {
        eprintln!(
            "ptxspec: {} of source compiled and post-linked in {:.1} ms",
            views::count(source_bytes, "byte", "bytes"),
            started.elapsed().as_secs_f64() * 1e3
        );
        for u in &units {
            eprintln!(
                "ptxspec: {}: {} of PTX{}",
                u.name,
                views::count(u.ptx.len(), "byte", "bytes"),
                u.ltoir.as_ref().map_or(String::new(), |ir| format!(
                    ", {} of LTO-IR",
                    views::count(ir.len(), "byte", "bytes")
                ))
            );
        }
    }
    for u in units.iter().filter(|u| !u.log.trim().is_empty()) {
        eprintln!("ptxspec: {}: {}", u.name, u.log.trim());
    }
    write_and_report(args, &images, inputs)
}

fn options(args: &PostLinkArgs) -> postlink::Options {
    postlink::Options {
        mode: match args.mode {
            ModeArg::Emulated => postlink::Mode::Emulated,
            ModeArg::Aot => postlink::Mode::Aot,
        },
        split: match args.split {
            SplitArg::Auto => postlink::Split::Auto,
            SplitArg::Off => postlink::Split::Off,
            SplitArg::PerKernel => postlink::Split::PerKernel,
            SplitArg::PerSource => postlink::Split::PerSource,
        },
        buffer: match args.buffer {
            BufferArg::Global => postlink::BufferPlacement::Global,
            BufferArg::Param => postlink::BufferPlacement::Param,
            BufferArg::Auto => postlink::BufferPlacement::Auto,
        },
    }
}

/// What an image requires, in words.
fn describe(r: &ptxspec_core::features::Requirements) -> String {
    let mut parts: Vec<String> = r.aspects.iter().map(|a| a.to_string()).collect();
    if let Some(s) = r.reqd_sub_group_size {
        parts.push(format!("sub-group size {s}"));
    }
    if let Some(w) = &r.reqd_work_group_size {
        parts.push(format!("work-group size {w:?}"));
    }
    parts.join(", ")
}

/// Writes the images (never over an input) and says what was written.
fn write_and_report(
    args: &PostLinkArgs,
    images: &[postlink::PostLinkedImage],
    inputs: &[PathBuf],
) -> Result<(), String> {
    let config = load_config(args.device_config.as_deref())?;
    let out = &args.out;
    postlink::write_images(out, images, inputs).map_err(|e| e.to_string())?;
    let mut warned = std::collections::HashSet::new();
    for img in images {
        for w in img.warnings.iter().filter(|w| warned.insert(w.to_string())) {
            eprintln!("ptxspec: {w}");
        }
        if !config
            .targets
            .values()
            .any(|t| t.supports(&img.requirements))
        {
            eprintln!(
                "ptxspec: warning: no target of the device configuration can run image {} (requires {})",
                img.stem,
                describe(&img.requirements)
            );
        }
    }
    for img in images {
        let mut names: Vec<&str> = img
            .kernels
            .iter()
            .take(8)
            .map(|k| k.name.as_str())
            .collect();
        let more = format!("... {} kernels in all", img.kernels.len());
        if img.kernels.len() > 8 {
            names.push(&more);
        }
        eprintln!(
            "ptxspec: {}/{}.ptx{}: kernels [{}], {}, {} of values; buffer: {}",
            out.display(),
            img.stem,
            if img.ltoir.is_some() {
                " (+ .ltoir)"
            } else {
                ""
            },
            names.join(", "),
            views::count(
                img.layout.constants().len(),
                "specialization constant",
                "specialization constants"
            ),
            views::count(img.layout.default_blob().len(), "byte", "bytes"),
            views::placement_of(img)
        );
    }
    eprintln!(
        "ptxspec: wrote {} and {}/table.txt",
        views::count(images.len(), "device image", "device images"),
        out.display()
    );
    Ok(())
}
