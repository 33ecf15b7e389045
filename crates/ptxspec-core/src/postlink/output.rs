//! Writing images into an output directory, all at once or not at all.

use std::path::{Path, PathBuf};

use super::{DeviceImage, PostLinkError};

/// Writes `table.txt` and every image's `.ptx`, `.prop`, `.sym` (and
/// `.ltoir`) into `dir`, creating it if needed.
///
/// Files are written into a temporary folder inside `dir` and renamed into
/// place only when all were written; on any failure nothing is left behind
/// (and `dir` is removed again if this call created it). Images that an
/// earlier `table.txt` in `dir` listed and this one does not are removed,
/// so that `dir` holds exactly the new images. A file of `protect` (the
/// inputs) that an output would replace is an error before anything is
/// written.
pub fn write_images(
    dir: &Path,
    images: &[DeviceImage],
    protect: &[PathBuf],
) -> Result<Vec<PathBuf>, PostLinkError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PostLinkError::Io { path, source }
    };
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut table = String::from("[Code|Properties|Symbols]\n");
    for img in images {
        let (p, r, s) = (
            format!("{}.ptx", img.stem),
            format!("{}.prop", img.stem),
            format!("{}.sym", img.stem),
        );
        table.push_str(&format!("{p}|{r}|{s}\n"));
        files.push((p, img.ptx.clone().into_bytes()));
        files.push((r, img.props.to_text().into_bytes()));
        files.push((s, img.symbols().into_bytes()));
        if let Some(ir) = &img.ltoir {
            files.push((format!("{}.ltoir", img.stem), ir.to_bytes()));
        }
    }
    files.push(("table.txt".into(), table.into_bytes()));
    // Never write over an input.
    let canonical = |p: &Path| std::fs::canonicalize(p).ok();
    let protected: Vec<PathBuf> = protect.iter().filter_map(|p| canonical(p)).collect();
    for (f, _) in &files {
        let target = dir.join(f);
        if let Some(t) = canonical(&target)
            && protected.contains(&t)
        {
            return Err(PostLinkError::Io {
                path: target,
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "this output would replace an input: choose another output directory",
                ),
            });
        }
    }
    let created = !dir.exists();
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let tmp = dir.join(format!(".ptxspec-tmp-{}", std::process::id()));
    let undo = |tmp: &Path| {
        let _ = std::fs::remove_dir_all(tmp);
        if created {
            let _ = std::fs::remove_dir_all(dir);
        }
    };
    let result = (|| {
        std::fs::create_dir_all(&tmp).map_err(io(dir))?;
        for (f, content) in &files {
            std::fs::write(tmp.join(f), content).map_err(io(&dir.join(f)))?;
        }
        // Images of an earlier run that this one does not write.
        let old: Vec<String> = std::fs::read_to_string(dir.join("table.txt"))
            .ok()
            .and_then(|t| crate::props::FileTable::parse(&t).ok())
            .map(|t| t.rows.into_iter().flatten().collect())
            .unwrap_or_default();
        let mut written = Vec::new();
        for (f, _) in &files {
            let to = dir.join(f);
            std::fs::rename(tmp.join(f), &to).map_err(io(&to))?;
            written.push(to);
        }
        for stale in old {
            let name = Path::new(&stale);
            // Only plain names in `dir`: a table may name anything.
            if name.components().count() != 1 || files.iter().any(|(f, _)| *f == stale) {
                continue;
            }
            // Never an input, whatever an old table says of it.
            let remove = |path: PathBuf| {
                if canonical(&path).is_none_or(|p| !protected.contains(&p)) {
                    let _ = std::fs::remove_file(path);
                }
            };
            remove(dir.join(name));
            if let Some(stem) = name.file_stem() {
                let ltoir = dir.join(format!("{}.ltoir", stem.to_string_lossy()));
                if !files.iter().any(|(f, _)| dir.join(f) == ltoir) {
                    remove(ltoir);
                }
            }
        }
        Ok(written)
    })();
    match result {
        Ok(w) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(w)
        }
        Err(e) => {
            undo(&tmp);
            Err(e)
        }
    }
}
