//! Writing images into an output directory, all at once or not at all.

use std::path::{Path, PathBuf};

use super::{PostLinkError, PostLinkedImage};
use crate::props::{ImageFile, record_file_hash};

/// Writes `table.txt` and every image's `.ptx`, `.prop`, `.sym` (and
/// `.ltoir`) into `dir`, creating it if needed.
///
/// Files are written into a temporary folder inside `dir`; once all are
/// there a journal of the change is written, then they are renamed into
/// place (`table.txt` last) and the images that an earlier `table.txt`
/// listed and this one does not are removed, so that `dir` holds exactly
/// the new images. A failure before the journal leaves nothing behind (and
/// removes `dir` if this call created it); an interruption after it is
/// finished by the next post-link into `dir` (or reader through
/// [`read_lock`]), which also removes the temporary folders of runs killed
/// earlier. Post-links into one folder wait for each other (a lock on the
/// folder). A file of `protect` (the inputs) that an output would replace,
/// or remove, is an error or kept, before anything is written.
pub fn write_images(
    dir: &Path,
    images: &[PostLinkedImage],
    protect: &[PathBuf],
) -> Result<Vec<PathBuf>, PostLinkError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PostLinkError::Io { path, source }
    };
    let files = image_files(images);
    let protected: Vec<PathBuf> = protect.iter().filter_map(|p| canonical(p)).collect();
    refuse_replacing_inputs(dir, &files, &protected)?;
    let created = !dir.exists();
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let result = (|| {
        // One post-link into a folder at a time; what an interrupted one
        // left is finished or removed first.
        let _lock = crate::files::FolderLock::wait(dir, true).map_err(io(dir))?;
        recover(dir).map_err(io(dir))?;
        // A rename cannot replace a folder: found now, not half-way.
        for (f, _) in &files {
            if dir.join(f).is_dir() {
                return Err(PostLinkError::Io {
                    path: dir.join(f),
                    source: std::io::Error::new(
                        std::io::ErrorKind::IsADirectory,
                        "a folder is where this output goes",
                    ),
                });
            }
        }
        // Made afresh (mode 0700), never one that exists: a folder or link
        // someone planted at a predictable name in a shared output folder
        // would otherwise receive the images.
        let tmp = crate::files::fresh_folder(dir, TMP_PREFIX).map_err(io(dir))?;
        let written = (|| {
            for (f, content) in &files {
                std::fs::write(tmp.join(f), content).map_err(io(&dir.join(f)))?;
            }
            let journal = Journal {
                tmp: tmp
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                files: files.iter().map(|(f, _)| f.clone()).collect(),
                stale: stale_files(dir, &files, &protected),
            };
            // The commit point: from here on, a later run finishes the
            // change if this one cannot.
            crate::files::write_atomically(&dir.join(JOURNAL), journal.to_text().as_bytes())
                .map_err(io(&dir.join(JOURNAL)))?;
            journal.apply(dir).map_err(io(dir))?;
            Ok(files.iter().map(|(f, _)| dir.join(f)).collect())
        })();
        if written.is_err() && !dir.join(JOURNAL).exists() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        written
    })();
    if result.is_err() && created && !dir.join(JOURNAL).exists() {
        let _ = std::fs::remove_dir_all(dir);
    }
    result
}

/// `path` with links and `..` resolved, where it exists.
fn canonical(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// The files a post-link of `images` writes, by name: each image's `.ptx`,
/// `.prop` (recording the hash of the files beside it, which every reader
/// checks: `image::read_written`), `.sym` and `.ltoir`, then `table.txt`.
fn image_files(images: &[PostLinkedImage]) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut table = String::from("[Code|Properties|Symbols]\n");
    for img in images {
        let (p, r, s) = (
            format!("{}.ptx", img.stem),
            format!("{}.prop", img.stem),
            format!("{}.sym", img.stem),
        );
        table.push_str(&format!("{p}|{r}|{s}\n"));
        let mut props = img.props.clone();
        record_file_hash(&mut props, ImageFile::Ptx, img.ptx.as_bytes());
        let ltoir = img.ltoir.as_ref().map(|ir| ir.to_bytes());
        if let Some(ir) = &ltoir {
            record_file_hash(&mut props, ImageFile::LtoIr, ir);
        }
        files.push((p, img.ptx.clone().into_bytes()));
        files.push((r, props.to_text().into_bytes()));
        files.push((s, img.symbols().into_bytes()));
        if let Some(ir) = ltoir {
            files.push((format!("{}.ltoir", img.stem), ir));
        }
    }
    files.push(("table.txt".into(), table.into_bytes()));
    files
}

/// Never write over an input: an error, before anything is written, where
/// one of `files` in `dir` is one of the `protected` paths (canonical).
fn refuse_replacing_inputs(
    dir: &Path,
    files: &[(String, Vec<u8>)],
    protected: &[PathBuf],
) -> Result<(), PostLinkError> {
    for (f, _) in files {
        let target = dir.join(f);
        if canonical(&target).is_some_and(|t| protected.contains(&t)) {
            return Err(PostLinkError::Io {
                path: target,
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "this output would replace an input: choose another output directory",
                ),
            });
        }
    }
    Ok(())
}

/// The images of an earlier run in `dir` (its `table.txt`) that this one,
/// writing `files`, does not: regular files a post-link writes, never one
/// of the `protected` inputs, whatever the old table says of them.
fn stale_files(dir: &Path, files: &[(String, Vec<u8>)], protected: &[PathBuf]) -> Vec<String> {
    let old: Vec<String> = crate::files::read_input_text(&dir.join("table.txt"))
        .ok()
        .and_then(|t| crate::props::FileTable::parse(&t).ok())
        .map(|t| t.rows.into_iter().flatten().collect())
        .unwrap_or_default();
    let mut stale = Vec::new();
    // Sets: a table may have many rows (linear, not quadratic).
    let writing: std::collections::HashSet<&str> = files.iter().map(|(f, _)| f.as_str()).collect();
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    for name in old {
        // Only names a post-link writes, plain names in `dir`: a table may
        // name anything (a folder, `..`, the journal).
        if !is_image_file_name(&name) {
            continue;
        }
        let ltoir = Path::new(&name)
            .file_stem()
            .map(|s| format!("{}.ltoir", s.to_string_lossy()));
        for n in std::iter::once(name).chain(ltoir) {
            let path = dir.join(&n);
            let regular = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
            let keep = !regular
                || writing.contains(n.as_str())
                || canonical(&path).is_some_and(|p| protected.contains(&p));
            if !keep && seen.insert(n.clone()) {
                stale.push(n);
            }
        }
    }
    stale
}

/// Whether `name` is one a post-link writes for an image: a plain file
/// name (no folder, not hidden) ending in `.ptx`, `.prop`, `.sym` or
/// `.ltoir` — what an old table's rows may have it remove.
fn is_image_file_name(name: &str) -> bool {
    let plain = Path::new(name).components().count() == 1
        && !name.starts_with('.')
        && Path::new(name).file_name().is_some_and(|n| n == name);
    plain
        && [".ptx", ".prop", ".sym", ".ltoir"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

/// The temporary folder of one post-link, inside the output folder.
const TMP_PREFIX: &str = ".ptxspec-tmp-";
/// What a post-link is changing in its output folder, written once all new
/// files are in its temporary folder and removed when the change is done.
const JOURNAL: &str = ".ptxspec-journal";

/// A change of an output folder: move these files from `tmp` into place,
/// then remove the stale ones. Applying it again is harmless, so a run that
/// was interrupted is finished by the next.
struct Journal {
    tmp: String,
    files: Vec<String>,
    stale: Vec<String>,
}

impl Journal {
    fn to_text(&self) -> String {
        let mut t = format!("tmp {}\n", self.tmp);
        for f in &self.files {
            t.push_str(&format!("file {f}\n"));
        }
        for f in &self.stale {
            t.push_str(&format!("stale {f}\n"));
        }
        t
    }

    /// A journal's text; `None` for one that is not (it is then ignored and
    /// removed, as nothing was moved before it was complete).
    fn parse(text: &str) -> Option<Journal> {
        let mut j = Journal {
            tmp: String::new(),
            files: Vec::new(),
            stale: Vec::new(),
        };
        let plain = |n: &str| Path::new(n).components().count() == 1;
        for line in text.lines() {
            let (key, name) = line.split_once(' ')?;
            if !plain(name) {
                return None;
            }
            match key {
                "tmp" if name.starts_with(TMP_PREFIX) => j.tmp = name.to_string(),
                "file" => j.files.push(name.to_string()),
                "stale" if is_image_file_name(name) => j.stale.push(name.to_string()),
                "stale" => {}
                _ => return None,
            }
        }
        (!j.tmp.is_empty()).then_some(j)
    }

    fn apply(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join(&self.tmp);
        // table.txt last: a reader without the lock that finds the new
        // table finds the new images.
        let table_last = self
            .files
            .iter()
            .filter(|f| *f != "table.txt")
            .chain(self.files.iter().filter(|f| *f == "table.txt"));
        for f in table_last {
            match std::fs::rename(tmp.join(f), dir.join(f)) {
                // Moved by the run this one finishes.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir.join(f).exists() => {}
                r => r?,
            }
        }
        // The new images are in place: a stale file that cannot go (it
        // is no longer a file, its folder is read-only) stays, and the
        // folder is never left wedged behind a journal for it.
        for f in &self.stale {
            let path = dir.join(f);
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
                let _ = std::fs::remove_file(&path);
            }
        }
        std::fs::remove_file(dir.join(JOURNAL))?;
        let _ = std::fs::remove_dir_all(&tmp);
        Ok(())
    }
}

/// Finishes the change an interrupted post-link journaled in `dir`, and
/// removes the temporary folders of runs interrupted before they journaled
/// one and the journal's temporary file of a run interrupted while it wrote
/// it (the caller holds the folder's lock: no other run is writing).
fn recover(dir: &Path) -> std::io::Result<()> {
    let journal = dir.join(JOURNAL);
    if journal.exists() {
        let text = crate::files::read_input(&journal)?;
        match Journal::parse(&String::from_utf8_lossy(&text)) {
            Some(j) => j.apply(dir)?,
            None => std::fs::remove_file(&journal)?,
        }
    }
    let journal_tmp = crate::files::temporary_prefix(JOURNAL);
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type()?;
        if name.starts_with(TMP_PREFIX) && kind.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else if name.starts_with(&journal_tmp) && kind.is_file() {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Reads the image whose property file is `prop`
/// ([`read_written`](crate::image::read_written)) once no post-link writes
/// into its folder, holding the folder's read lock while it reads: the
/// files are one post-link's. A lock that cannot be taken is
/// [`WrittenImageError::Io`](crate::image::WrittenImageError::Io) naming the folder.
pub fn read_image(
    prop: &Path,
    ltoir: crate::image::LtoIrFile,
) -> Result<crate::image::WrittenImage, crate::image::WrittenImageError> {
    let folder = prop
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let _lock = read_lock(folder).map_err(|source| crate::image::WrittenImageError::Io {
        path: folder.to_path_buf(),
        source,
    })?;
    crate::image::read_written(prop, ltoir)
}

/// Waits for post-links writing into `dir` to end and finishes one that
/// was interrupted, for readers of the folder: they then see the images of
/// one post-link (while the returned lock is held).
pub fn read_lock(dir: &Path) -> std::io::Result<crate::files::FolderLock> {
    if dir.join(JOURNAL).exists() {
        let _lock = crate::files::FolderLock::wait(dir, true)?;
        recover(dir)?;
    }
    crate::files::FolderLock::wait(dir, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn an_interrupted_change_is_finished_and_leftovers_removed() {
        let dir = std::env::temp_dir().join(format!("ptxspec-journal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // The old set, and a run killed after its commit point: the new
        // files in its folder, its journal, one file already moved.
        std::fs::write(
            dir.join("table.txt"),
            "[Code|Properties|Symbols]\nold.ptx|old.prop|old.sym\n",
        )
        .unwrap();
        for f in ["old.ptx", "old.prop", "old.sym", "old.ltoir"] {
            std::fs::write(dir.join(f), "old").unwrap();
        }
        let tmp = dir.join(".ptxspec-tmp-4242");
        std::fs::create_dir_all(&tmp).unwrap();
        for f in ["new.prop", "new.sym"] {
            std::fs::write(tmp.join(f), "new").unwrap();
        }
        std::fs::write(
            tmp.join("table.txt"),
            "[Code|Properties|Symbols]\nnew.ptx|new.prop|new.sym\n",
        )
        .unwrap();
        std::fs::write(dir.join("new.ptx"), "new").unwrap();
        let journal = Journal {
            tmp: ".ptxspec-tmp-4242".into(),
            files: ["new.ptx", "new.prop", "new.sym", "table.txt"]
                .map(String::from)
                .to_vec(),
            stale: ["old.ptx", "old.prop", "old.sym", "old.ltoir"]
                .map(String::from)
                .to_vec(),
        };
        std::fs::write(dir.join(JOURNAL), journal.to_text()).unwrap();
        // And a run killed before its commit point.
        std::fs::create_dir_all(dir.join(".ptxspec-tmp-77/sub")).unwrap();
        std::fs::write(dir.join(".ptxspec-tmp-77/x.ptx"), "half").unwrap();
        // A reader finishes the change (and, holding the lock, removes the
        // other run's leftovers): the new set only.
        drop(read_lock(&dir).unwrap());
        assert_eq!(
            listing(&dir),
            ["new.prop", "new.ptx", "new.sym", "table.txt"]
        );
        // A run killed before its commit point, one killed while it wrote
        // its journal, then a writer: their leftovers go, and the stale
        // images; another file's temporary name is not the post-link's to
        // remove.
        std::fs::create_dir_all(dir.join(".ptxspec-tmp-78")).unwrap();
        std::fs::write(dir.join("..ptxspec-journal.tmp-79-0"), "tmp half").unwrap();
        std::fs::write(dir.join(".notes.txt.tmp-79-1"), "someone's").unwrap();
        write_images(&dir, &[], &[]).unwrap();
        assert_eq!(listing(&dir), [".notes.txt.tmp-79-1", "table.txt"]);
        std::fs::remove_file(dir.join(".notes.txt.tmp-79-1")).unwrap();
        // A journal that is not one is removed, nothing moved.
        std::fs::write(dir.join(JOURNAL), "tmp ../../etc\nfile x\n").unwrap();
        drop(read_lock(&dir).unwrap());
        assert_eq!(listing(&dir), ["table.txt"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
