//! `ptxspec header`: the device header written out for other compilers.

use std::path::Path;

use crate::io::write_atomically;

/// `header -o DIR`.
pub(crate) fn run(output: &Path) -> Result<(), String> {
    if output.exists() && !output.is_dir() {
        return Err(format!(
            "-o {}: is a file; header -o names a directory, where ptxspec.cuh is written \
             (give its folder, or a new name)",
            output.display()
        ));
    }
    std::fs::create_dir_all(output).map_err(|e| format!("{}: {e}", output.display()))?;
    let file = output.join("ptxspec.cuh");
    write_atomically(&file, ptxspec_core::compile::HEADER.as_bytes())?;
    outln!("{}", file.display());
    Ok(())
}
