//! Files the commands read and write: inputs checked for their format,
//! outputs written atomically and never over an input, device images as
//! post-link wrote them, NVIDIA's libraries in a child process.

use std::path::{Path, PathBuf};

use ptxspec_cli::views::{self, Format};
use ptxspec_core::device_config::DeviceConfig;
use ptxspec_core::postlink;
use ptxspec_core::toolkit::worker::Toolkit;

/// A file given on the command line (a regular file, within
/// `files::INPUT_LIMIT`).
pub(crate) fn read_input(path: &Path) -> Result<Vec<u8>, String> {
    ptxspec_core::files::read_input(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// A file's text, which must be UTF-8 and, unless `expect` is
/// `Unknown`, of that format.
pub(crate) fn read_as(path: &Path, expect: Format) -> Result<String, String> {
    let bytes = read_input(path)?;
    let wanted = if expect == Format::Unknown {
        "CUDA C++ source"
    } else {
        expect.describe()
    };
    let found = views::detect(&bytes);
    // Text formats: a file that is not UTF-8 is said to be so first.
    if matches!(found, Format::Unknown)
        && let Err(e) = std::str::from_utf8(&bytes)
    {
        return Err(format!(
            "{}: not UTF-8 text (the byte at offset {} is not): expected {wanted}",
            path.display(),
            e.valid_up_to()
        ));
    }
    if expect != Format::Unknown && found != expect {
        return Err(format!(
            "{}: expected {}, but the file holds {}",
            path.display(),
            expect.describe(),
            found.describe()
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{}: not UTF-8 text (the byte at offset {} is not): expected {wanted}",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// An error when `out` is one of `inputs` (the same file, however named).
pub(crate) fn refuse_overwrite<'a>(
    out: &Path,
    inputs: impl IntoIterator<Item = &'a PathBuf>,
) -> Result<(), String> {
    let Ok(target) = std::fs::canonicalize(out) else {
        return Ok(()); // not there yet: it is no input
    };
    for input in inputs {
        if std::fs::canonicalize(input).is_ok_and(|i| i == target) {
            return Err(format!(
                "-o {}: that is the input {}; write the output elsewhere",
                out.display(),
                input.display()
            ));
        }
    }
    Ok(())
}

/// `--device-config FILE`, or the built-in NVIDIA table.
pub(crate) fn load_config(path: Option<&Path>) -> Result<DeviceConfig, String> {
    match path {
        None => Ok(DeviceConfig::nvidia().clone()),
        Some(p) => {
            let text = String::from_utf8(read_input(p)?).map_err(|_| {
                format!(
                    "{}: not UTF-8 text: not a device configuration",
                    p.display()
                )
            })?;
            DeviceConfig::parse(&text, &p.display().to_string()).map_err(|e| e.to_string())
        }
    }
}

/// Writes `bytes` to `out` through a temporary file in the same folder.
pub(crate) fn write_atomically(out: &Path, bytes: &[u8]) -> Result<(), String> {
    if out.is_dir() {
        return Err(format!(
            "{}: is a directory; -o names the output file",
            out.display()
        ));
    }
    ptxspec_core::files::write_atomically(out, bytes).map_err(|e| format!("{}: {e}", out.display()))
}

/// NVIDIA's libraries run on the CLI's inputs in a child process of this
/// binary: a damaged or hostile file that crashes them is then an error
/// naming it, not a dead `ptxspec`. (Where this binary's path is unknown,
/// in-process.)
pub(crate) fn isolated_toolkit() -> Toolkit {
    std::env::current_exe().map_or(Toolkit::InProcess, Toolkit::Worker)
}

/// The image that post-link or compile wrote as `prop` and the `.ptx`
/// beside it (named by their stem), and the property sets' text.
pub(crate) fn read_written_image(
    prop: &Path,
    ltoir: ptxspec_core::image::LtoIrFile,
) -> Result<(ptxspec_core::image::ImageData, String), String> {
    // The files of one post-link, not one of each of two; both callers
    // recognized `prop` as property sets already.
    let written = postlink::read_image(prop, ltoir).map_err(|e| e.to_string())?;
    Ok((written.image, written.props))
}
