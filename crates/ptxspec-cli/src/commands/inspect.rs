//! `ptxspec inspect`: what a .prop, .ptx, .spv or .ltoir file holds.

use std::path::Path;

use ptxspec_cli::views::{self, Format};
use ptxspec_core::postlink;

use crate::io::{read_as, read_input, read_written_image};

/// `inspect FILE [--json]`.
pub(crate) fn run(file: &Path, json: bool) -> Result<(), String> {
    let bytes = read_input(file)?;
    inspect_file(file, &bytes, json)
}

/// An image that post-link or compile wrote (its `.prop` and the `.ptx`
/// beside it), shown as it is.
fn inspect_written_image(prop: &Path, json: bool) -> Result<(), String> {
    let (image, props) = read_written_image(prop, ptxspec_core::image::LtoIrFile::Ignore)?;
    let shown = if json {
        views::written_image_json(&image, &props)
    } else {
        views::written_image_report(&image, &props)
    };
    outln!(
        "{}",
        shown
            .map_err(|e| format!("{}: {e}", prop.display()))?
            .trim_end()
    );
    Ok(())
}

fn inspect_file(file: &Path, bytes: &[u8], json: bool) -> Result<(), String> {
    let name = file.display().to_string();
    match views::detect(bytes) {
        Format::Spirv => {
            let constants = ptxspec_core::spirv::read(bytes, &Default::default())
                .map_err(|e| format!("{name}: {e}"))?;
            let sets = ptxspec_core::spirv::property_sets(&constants);
            let report = views::PropReport::from_sets(&sets).map_err(|e| e.to_string())?;
            if json {
                outln!("{}", report.to_json());
            } else {
                for c in &constants {
                    outln!("{}: {}", c.name, c.ty.describe());
                }
                out!("{}", report.to_human());
            }
        }
        Format::Ptx => {
            if let Some(prop) = ptxspec_core::image::prop_beside(file) {
                return inspect_written_image(&prop, json);
            }
            let text = read_as(file, Format::Ptx)?;
            // What `post-link` with its defaults would write.
            let images = postlink::post_link(vec![(name.clone(), text)], &Default::default())
                .map_err(|e| e.to_string())?;
            if json {
                outln!(
                    "{}",
                    views::images_json(&images).map_err(|e| e.to_string())?
                );
            } else {
                for img in &images {
                    out!("{}", views::image_report(img));
                }
            }
        }
        Format::Prop => {
            let text = read_as(file, Format::Prop)?;
            let report = views::PropReport::from_text(&text).map_err(|e| format!("{name}: {e}"))?;
            if json {
                // The property sets' shape, which scripts rely on (the
                // image's PTX gives the kernels' parameters in its own).
                outln!("{}", report.to_json());
            } else {
                out!("{}", report.to_human());
                // An image's .prop with its .ptx beside it: the kernels'
                // parameters too (what `--arg INDEX` names).
                if file.with_extension("ptx").is_file()
                    && let Ok((image, _)) =
                        read_written_image(file, ptxspec_core::image::LtoIrFile::Ignore)
                {
                    for (k, params) in views::kernel_params(&image) {
                        outln!("kernel {}:", k.name);
                        for p in params {
                            outln!("  parameter {}: {} bytes, {}", p.index, p.size, p.kind);
                        }
                    }
                }
            }
        }
        Format::LtoIr => {
            let c =
                ptxspec_core::lto::LtoIr::from_bytes(bytes).map_err(|e| format!("{name}: {e}"))?;
            if json {
                outln!("{}", views::ltoir_json(&c.units));
            } else {
                outln!("LTO-IR of {} translation unit(s):", c.units.len());
                for (n, ir) in &c.units {
                    outln!("  {n}: {} bytes", ir.len());
                }
            }
        }
        f => {
            return Err(format!(
                "{name}: is {}; inspect reads PTX, .prop, SPIR-V and .ltoir files",
                f.describe()
            ));
        }
    }
    Ok(())
}
