//! `ptxspec specialize`: values baked into one device image (PTX
//! immediates or an LTO cubin) or one SPIR-V module.

use std::path::{Path, PathBuf};

use ptxspec_cli::views::{self, Format};
use ptxspec_core::toolkit::worker::Toolkit;

use crate::args::ViaArg;
use crate::io::{
    isolated_toolkit, read_input, read_written_image, refuse_overwrite, write_atomically,
};

/// `specialize INPUT --set NAME=VALUE... [--arg INDEX=VALUE...] -o OUT`.
#[allow(clippy::too_many_arguments)] // one per command-line option
pub(crate) fn run(
    input: &PathBuf,
    set: &[String],
    args: &[String],
    via: ViaArg,
    arch: Option<&str>,
    kernel: Option<&str>,
    freeze: bool,
    out: &Path,
) -> Result<(), String> {
    let bytes = read_input(input)?;
    // Never write over an input: the file given, and for a device
    // image the files beside its .prop.
    let beside: Vec<PathBuf> = match views::detect(&bytes) {
        Format::Prop => ["ptx", "ltoir"].map(|ext| input.with_extension(ext)).into(),
        _ => Vec::new(),
    };
    refuse_overwrite(out, std::iter::once(input).chain(&beside))?;
    let mut seen = std::collections::HashSet::new();
    for s in set {
        let name = s.split_once('=').map_or(s.as_str(), |(n, _)| n);
        if !seen.insert(name) {
            return Err(format!(
                "--set {name}=... is given twice: set each constant once"
            ));
        }
    }
    match views::detect(&bytes) {
        Format::Spirv if !args.is_empty() => Err(
            "--arg fixes a kernel's parameters in a device image; a SPIR-V module has none to fix"
                .into(),
        ),
        Format::Spirv => specialize_spirv(input, &bytes, set, freeze, out),
        Format::Prop => {
            if freeze {
                return Err(
                    "--freeze is for SPIR-V modules; a device image is baked with --via".into(),
                );
            }
            // The output's name says what the user expects in it:
            // PTX text in a .cubin (or a cubin in a .ptx) is a
            // surprise found only when a loader refuses it.
            let ext = out.extension().and_then(|e| e.to_str()).unwrap_or("");
            if via == ViaArg::Ptx && ext.eq_ignore_ascii_case("cubin") {
                return Err(format!(
                    "{}: --via ptx (the default) writes PTX text; for a cubin pass --via lto \
                     --arch sm_XX (sm_90 for an H100), or name the output .ptx",
                    out.display()
                ));
            }
            if via == ViaArg::Lto && ext.eq_ignore_ascii_case("ptx") {
                return Err(format!(
                    "{}: --via lto writes a cubin (machine code), not PTX; name the output \
                     .cubin, or pass --via ptx for PTX",
                    out.display()
                ));
            }
            if kernel.is_some() && via != ViaArg::Lto && args.is_empty() {
                return Err(
                    "--kernel is for --via lto or --arg (the PTX of an image keeps every kernel)"
                        .into(),
                );
            }
            if !args.is_empty() && kernel.is_none() {
                return Err("--arg fixes parameters of one kernel: name it with --kernel".into());
            }
            specialize_image(input, set, args, via, arch, kernel, Some(out), "")
        }
        f => Err(format!(
            "{}: is {}; specialize takes a device image's .prop or a SPIR-V module",
            input.display(),
            f.describe()
        )),
    }
}

fn specialize_spirv(
    input: &Path,
    bytes: &[u8],
    set: &[String],
    freeze: bool,
    out: &Path,
) -> Result<(), String> {
    let constants = ptxspec_core::spirv::read(bytes, &Default::default())
        .map_err(|e| format!("{}: {e}", input.display()))?;
    let values = set
        .iter()
        .map(|s| ptxspec_core::spirv::parse_value(&constants, s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let spv = ptxspec_core::spirv::specialize(bytes, &values, freeze)
        .map_err(|e| format!("{}: {e}", input.display()))?;
    write_atomically(out, &spv)?;
    eprintln!(
        "ptxspec: {}: {} value(s) set{}",
        out.display(),
        values.len(),
        if freeze { ", frozen" } else { "" }
    );
    Ok(())
}

/// The bytes of `NAME=VALUE` for a constant of `image`.
fn image_value(
    image: &ptxspec_core::image::ImageData,
    arg: &str,
) -> Result<(String, Vec<u8>), String> {
    let (name, value) = arg
        .split_once('=')
        .ok_or_else(|| format!("--set {arg}: expected NAME=VALUE"))?;
    let slot = image.slot(name).ok_or_else(|| {
        let mut known: Vec<&str> = image
            .info()
            .value_types
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        known.sort_unstable();
        format!(
            "--set {name}: image {} has no specialization constant {name:?} (it has: {})",
            image.id(),
            known.join(", ")
        )
    })?;
    let size = slot.size as usize;
    let leaves = image
        .info()
        .value_types
        .iter()
        .find(|(n, _)| n == name)
        .map_or(&[][..], |(_, l)| l.as_slice());
    let offset = slot.offset as usize;
    let base = image
        .default_blob()
        .get(offset..offset + size)
        .ok_or_else(|| {
            format!("--set {name}: the image's default values are shorter than its layout")
        })?;
    let bytes = ptxspec_core::layout::text::parse_value(value, size, leaves, base)
        .map_err(|what| format!("--set {name}: {what}"))?;
    Ok((name.to_string(), bytes))
}

/// The arguments `args` (`INDEX=VALUE`) of `kernel` of `image` (read from
/// `prop`), each a by-value parameter that is neither a pointer nor the
/// kernel's handler.
fn fixed_arguments(
    prop: &Path,
    image: &ptxspec_core::image::ImageData,
    kernel: &str,
    args: &[String],
) -> Result<ptxspec::arguments::FixedArguments, String> {
    use ptxspec::arguments::{FixedArguments, KernelParams};
    let Some(signature) = image.kernels().iter().find(|k| k.name == kernel) else {
        let names: Vec<&str> = image.kernels().iter().map(|k| k.name.as_str()).collect();
        return Err(format!(
            "--kernel {kernel}: image {} has no such kernel (it has {})",
            image.id(),
            names.join(", ")
        ));
    };
    let params = KernelParams::from_ptx(image.ptx(), kernel)
        .map_err(|e| format!("{}: {e}", prop.with_extension("ptx").display()))?;
    let mut fixed = Vec::new();
    for arg in args {
        let (index, value) = arg
            .split_once('=')
            .and_then(|(i, v)| Some((i.trim().parse::<usize>().ok()?, v)))
            .ok_or_else(|| {
                format!(
                    "--arg {arg}: expected INDEX=VALUE, INDEX counting the kernel's parameters from 0"
                )
            })?;
        if signature.handler.is_some_and(|h| h.index == index) {
            return Err(format!(
                "--arg {arg}: parameter {index} of kernel {kernel} is its kernel_handler, which \
                 carries the specialization constants (set those with --set)"
            ));
        }
        let bytes = params
            .value(index, value)
            .map_err(|e| format!("--arg {arg}: {e}"))?;
        fixed.push((index, bytes));
    }
    FixedArguments::new(&params, fixed)
        .and_then(|f| f.with_handler(signature.handler.map(|h| h.index)))
        .map_err(|e| format!("--arg: {e}"))
}

/// Builds `prop` with `set` in the mode `via` names; writes the PTX or
/// the cubin for `arch` to `out` where one is given (`cache warm` gives
/// none: the caches keep the cubin). The lines it says about the cubin
/// start with `said` after `ptxspec: ` (`cache warm` names the value set
/// there: its links run side by side).
#[allow(clippy::too_many_arguments)]
pub(crate) fn specialize_image(
    prop: &Path,
    set: &[String],
    args: &[String],
    via: ViaArg,
    arch: Option<&str>,
    kernel: Option<&str>,
    out: Option<&Path>,
    said: &str,
) -> Result<(), String> {
    use ptxspec::{KernelBundle, SpecMode};
    let ltoir = match via {
        ViaArg::Lto => ptxspec_core::image::LtoIrFile::Required,
        ViaArg::Ptx => ptxspec_core::image::LtoIrFile::Ignore,
    };
    let (image, _) = read_written_image(prop, ltoir).map_err(|e| match via {
        ViaArg::Lto if e.contains(".ltoir: No such file") => {
            format!("{e}: --via lto needs the image's LTO-IR (ptxspec compile --lto writes it)")
        }
        _ => e,
    })?;
    // The bundle takes the image as ptxspec's API gives it (the checks
    // below read the contract's slots and signatures); a kernel is named as
    // the image has it, or by its C++ name, as launches resolve it.
    let bundled = ptxspec::image::Image::read(prop).map_err(|e| e.to_string())?;
    let resolved = resolved_kernel(&bundled, &image, kernel)?;
    let kernel = resolved.as_deref();
    let arch = lto_arch(via, arch)?;
    let fixed = match kernel {
        Some(k) if !args.is_empty() => Some(fixed_arguments(prop, &image, k, args)?),
        _ => None,
    };
    let mut input = KernelBundle::from_images([bundled]);
    for s in set {
        let (name, bytes) = image_value(&image, s)?;
        input
            .set_specialization_constant_bytes(&name, &bytes)
            .map_err(|e| e.to_string())?;
    }
    let mode = match via {
        ViaArg::Ptx => SpecMode::Native,
        ViaArg::Lto => SpecMode::Lto,
    };
    let options = ptxspec::BuildOptions::default().with_toolkit_worker(match isolated_toolkit() {
        Toolkit::Worker(exe) => Some(exe),
        _ => None,
    });
    let exe = ptxspec::build_with_options(&input.with_mode(mode), &options)
        .map_err(|e| format!("{}: {e}", prop.display()))?;
    let built = exe
        .device_images()
        .into_iter()
        .next()
        .and_then(|d| d.built().cloned())
        .ok_or("the image has no kernels")?;
    match arch {
        None => {
            let ptx = built.ptx().ok_or("no PTX was built")?;
            let ptx = match &fixed {
                Some(f) => {
                    std::borrow::Cow::Owned(f.in_ptx(ptx).map_err(|e| format!("--arg: {e}"))?)
                }
                None => std::borrow::Cow::Borrowed(ptx),
            };
            assembled(&ptx, said)?;
            if let Some(out) = out {
                write_atomically(out, ptx.as_bytes())?;
            }
        }
        Some(a) => {
            let cubin = match (&fixed, kernel) {
                (Some(f), _) => built.cubin_with_arguments(a, f),
                (None, Some(k)) => built.cubin_for_kernel(a, k),
                (None, None) => built.cubin(a),
            }
            .map_err(|e| match e {
                // A setting is the problem, not the image's file.
                ptxspec::Error::Setting(_)
                | ptxspec::Error::Toolkit(ptxspec::error::ToolkitError::Setting(_)) => {
                    e.to_string()
                }
                e => format!("{}: {e}", prop.with_extension("ltoir").display()),
            })?;
            if let Some(out) = out {
                write_atomically(out, &cubin.bytes)?;
            }
            if !cubin.log.trim().is_empty() {
                eprintln!("ptxspec: {said}nvJitLink: {}", cubin.log.trim());
            }
            // One line in a form scripts rely on: `cubin: linked`, `cubin:
            // memory cache`, `cubin: disk cache` or `cubin: remote cache`,
            // more words after.
            let source = source_words(&cubin.source);
            eprintln!("ptxspec: {said}cubin: {source} (sm_{a})");
        }
    }
    if let Some(out) = out {
        say_written(out, &image, set.len(), fixed.as_ref(), via, kernel);
    }
    Ok(())
}

/// The kernel `--kernel` names, as the image has it: by that name, or by
/// its C++ name, as launches resolve it.
/// PTX a rewrite made, assembled before it is written: nvJitLink (in the
/// toolkit's worker process) compiles it for the architecture its `.target`
/// names, so that text ptxas would refuse is an error here, not a file.
/// PTX that calls functions only a link resolves (the device runtime) is
/// not assembled alone, and a machine without nvJitLink cannot assemble:
/// each is said, and the PTX written.
fn assembled(ptx: &str, said: &str) -> Result<(), String> {
    use ptxspec_core::toolkit::ToolkitError;
    use ptxspec_core::toolkit::nvjitlink::InputKind;
    let Some(arch) = ptx.lines().find_map(|l| {
        let target = l.trim().strip_prefix(".target")?;
        target
            .split([' ', '\t', ','])
            .find_map(|w| w.trim().strip_prefix("sm_"))
            .map(|n| n.trim_end_matches(['a', 'f']).to_string())
    }) else {
        return Err("the specialized PTX names no .target sm_XX to assemble it for".into());
    };
    if ptx.contains(".extern .func") {
        eprintln!(
            "ptxspec: {said}the PTX calls functions a link resolves (the device runtime): not assembled alone"
        );
        return Ok(());
    }
    let options = vec![format!("-arch=sm_{arch}")];
    match isolated_toolkit().link(
        &[(InputKind::Ptx, ptx.as_bytes(), "specialized.ptx")],
        &options,
    ) {
        Ok(_) => Ok(()),
        Err(ToolkitError::Missing { .. }) => {
            eprintln!(
                "ptxspec: {said}not assembled: nvJitLink is not installed (the PTX is written unchecked)"
            );
            Ok(())
        }
        Err(e) => Err(format!(
            "the specialized PTX does not assemble for sm_{arch} (nothing written): {e}"
        )),
    }
}

fn resolved_kernel(
    bundled: &ptxspec::image::Image,
    image: &ptxspec_core::image::ImageData,
    kernel: Option<&str>,
) -> Result<Option<String>, String> {
    let Some(k) = kernel else {
        return Ok(None);
    };
    let found = bundled.resolve_kernel(k).ok_or_else(|| {
        let names: Vec<&str> = image.kernels().iter().map(|s| s.name.as_str()).collect();
        format!(
            "--kernel {k}: image {} has no such kernel, or several of that C++ name (it has {})",
            image.id(),
            names.join(", ")
        )
    })?;
    Ok(Some(found.to_string()))
}

/// `--arch`'s number for `--via lto` (which needs one), checked against
/// what this toolkit compiles for; `None` for `--via ptx`.
fn lto_arch(via: ViaArg, arch: Option<&str>) -> Result<Option<u32>, String> {
    match (via, arch) {
        (ViaArg::Lto, None) => Err("--via lto needs --arch (sm_90 for an H100)".into()),
        (ViaArg::Lto, Some(a)) => {
            let n = a
                .strip_prefix("sm_")
                .and_then(|n| n.parse::<u32>().ok())
                .ok_or_else(|| format!("--arch {a}: expected sm_XX (sm_80, sm_90, ...)"))?;
            supported_arch(a, n)?;
            Ok(Some(n))
        }
        (ViaArg::Ptx, _) => Ok(None),
    }
}

/// Where a cubin came from, in the words of `cubin: …` lines.
fn source_words(source: &ptxspec_core::lto::Source) -> std::borrow::Cow<'static, str> {
    match *source {
        ptxspec_core::lto::Source::Linked { stored, uploaded } => match (stored, uploaded) {
            (true, true) => {
                "linked by nvJitLink, stored in the disk cache and uploaded to the remote cache"
                    .into()
            }
            (true, false) => "linked by nvJitLink, stored in the disk cache".into(),
            (false, true) => {
                "linked by nvJitLink, uploaded to the remote cache; the disk cache did not take it"
                    .into()
            }
            (false, false) => "linked by nvJitLink; the disk cache did not take it".into(),
        },
        ptxspec_core::lto::Source::Disk => "disk cache".into(),
        ptxspec_core::lto::Source::Remote => "remote cache, signed by a trusted key".into(),
        ptxspec_core::lto::Source::Memory => "memory cache".into(),
        // A source newer than this list: the library's words for it.
        ref other => other.to_string().into(),
    }
}

/// What was written to `out`, and what to pass for each kernel's handler
/// when the file is loaded by hand (the values are in the code, but the
/// kernels keep their parameters).
fn say_written(
    out: &Path,
    image: &ptxspec_core::image::ImageData,
    values: usize,
    fixed: Option<&ptxspec::arguments::FixedArguments>,
    via: ViaArg,
    kernel: Option<&str>,
) {
    eprintln!(
        "ptxspec: {}: image {} with {values} value(s) set{}, via {}",
        out.display(),
        image.id(),
        match fixed {
            Some(f) => format!(
                " and {} argument(s) of kernel {} fixed",
                f.fixed().len(),
                f.kernel()
            ),
            None => String::new(),
        },
        if via == ViaArg::Ptx {
            "PTX immediates"
        } else {
            "an LTO link"
        }
    );
    for k in image
        .kernels()
        .iter()
        .filter(|k| kernel.is_none_or(|n| n == k.name))
    {
        if let Some(h) = k.handler {
            eprintln!(
                "ptxspec: kernel {} keeps its kernel_handler as parameter {} ({} bytes): pass 0 for it \
                 when you launch it from {} yourself",
                k.name,
                h.index,
                k.params.get(h.index).map_or(8, |p| p.size),
                out.display()
            );
        }
    }
}

/// Refuses `sm_<n>` (`given`) where this toolkit's NVRTC says it cannot
/// compile for it, naming the architectures it can (libNVVM's own words
/// were "-arch=compute_99 is an unsupported option"). Where NVRTC does not
/// load, the link says what is missing instead.
fn supported_arch(given: &str, n: u32) -> Result<(), String> {
    let Ok(archs) = ptxspec_core::toolkit::nvrtc::supported_archs() else {
        return Ok(());
    };
    if archs.is_empty() || archs.iter().any(|&a| u32::try_from(a) == Ok(n)) {
        return Ok(());
    }
    let release = ptxspec_core::toolkit::nvrtc::version()
        .map(|(a, b)| format!("NVRTC {a}.{b}"))
        .unwrap_or_else(|_| "this NVRTC".into());
    Err(format!(
        "--arch {given}: not an architecture this toolkit compiles for ({release}: {}); a newer \
         toolkit may have it",
        archs
            .iter()
            .map(|a| format!("sm_{a}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}
