//! `ptxspec aspect-filter`: the rows of a file table a target can run.

use std::path::{Path, PathBuf};

use ptxspec_cli::views::{self, Format};
use ptxspec_core::device_config::aspect_filter;
use ptxspec_core::props::FileTable;

use crate::io::{load_config, read_as, refuse_overwrite, write_atomically};

/// `aspect-filter --target TARGET IN_TABLE -o OUT_TABLE`.
pub(crate) fn run(
    target: &str,
    device_config_file: Option<&Path>,
    input: &PathBuf,
    out: &Path,
) -> Result<(), String> {
    // The table lists the images the next post-link must remove as
    // stale: it is never written over.
    refuse_overwrite(out, [input])?;
    let config = load_config(device_config_file)?;
    let text = read_as(input, Format::FileTable)?;
    let table = FileTable::parse(&text).map_err(|e| format!("{}: {e}", input.display()))?;
    let dir = input.parent().unwrap_or(Path::new("."));
    let kept = aspect_filter(&table, dir, &config, target)?;
    // Rows resolve where the table is written, not where it was read.
    let out_dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let kept = kept
        .rebased(
            if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            },
            out_dir,
        )
        .map_err(|e| format!("{} or {}: {e}", dir.display(), out_dir.display()))?;
    write_atomically(out, kept.to_text().as_bytes())?;
    eprintln!(
        "ptxspec: {target}: kept {} of {} in {}",
        kept.rows.len(),
        views::count(table.rows.len(), "row", "rows"),
        out.display()
    );
    Ok(())
}
