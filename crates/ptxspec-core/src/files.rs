//! Writing files so that a reader sees the old content or the new, never a
//! part: the bytes go to a temporary file beside the target, which is then
//! renamed over it (a rename within one folder is atomic on POSIX systems).

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` atomically. The temporary file
/// (`.<name>.tmp-<pid>-<n>` in the same folder) is unique to this process
/// and call, so that concurrent writers of one path do not collide; it is
/// removed again when writing or renaming fails.
///
/// A path that is not a regular file is never replaced: a device, FIFO or
/// socket (`/dev/null`, `/dev/stdout`) is written through, its errors
/// reported (`/dev/full`: no space); a symbolic link to a regular file has
/// that file replaced atomically (the link stays); a link to nothing is an
/// error.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let link = meta.file_type().is_symlink();
        if link || !(meta.is_file() || meta.is_dir()) {
            let target = std::fs::metadata(path).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("a symbolic link to nothing that can be written ({e})"),
                )
            })?;
            if target.is_file() {
                // The canonical path has no links left: replaced there.
                return write_atomically(&std::fs::canonicalize(path)?, bytes);
            }
            if !target.is_dir() {
                return write_through(path, bytes);
            }
        }
    }
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(
        "{}{}-{}",
        temporary_prefix(&name),
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let result = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// How the temporary files [`write_atomically`] makes for a file `name`
/// begin: what a writer killed before its rename leaves behind, for the
/// owner of the folder to clean up.
pub fn temporary_prefix(name: &str) -> String {
    format!(".{name}.tmp-")
}

/// Writes `bytes` into the special file `path` (a device, FIFO or socket)
/// as it is, reporting what the write or the flush says.
fn write_through(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(bytes)?;
    f.flush()
}

/// The most bytes [`read_input`] reads: far above any PTX module, property
/// file or LTO-IR container ptxspec writes, far below what would exhaust a
/// machine.
pub const INPUT_LIMIT: u64 = 1 << 30;

/// Reads an input file: only a regular file (a FIFO would hang, a device
/// such as `/dev/zero` would never end), and at most [`INPUT_LIMIT`]
/// bytes; anything else is an error saying what the path is.
pub fn read_input(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file (a device, FIFO or socket)"
        };
        return Err(io::Error::new(io::ErrorKind::InvalidInput, what));
    }
    if meta.len() > INPUT_LIMIT {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} bytes: more than ptxspec reads ({INPUT_LIMIT})",
                meta.len()
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // The file may grow while it is read: the limit holds anyway.
    std::fs::File::open(path)?
        .take(INPUT_LIMIT + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > INPUT_LIMIT {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("more than ptxspec reads ({INPUT_LIMIT} bytes)"),
        ));
    }
    Ok(bytes)
}

/// A lock on a folder of images (the folder itself, `flock`ed: no file is
/// added to it), held until dropped. Post-links into the folder take it
/// exclusively, so that they run one after the other; readers of the folder
/// take it shared, so that they see the images of one post-link.
pub struct FolderLock(#[allow(dead_code)] std::fs::File);

impl FolderLock {
    /// Waits for the folder's lock: `exclusive` for writers.
    pub fn wait(dir: &Path, exclusive: bool) -> io::Result<FolderLock> {
        let f = std::fs::File::open(dir)?;
        if exclusive {
            f.lock()?
        } else {
            f.lock_shared()?
        }
        Ok(FolderLock(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read() {
        let e = read_input(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = read_input(Path::new("/")).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
    }

    #[test]
    fn replaces_whole_and_leaves_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("ptxspec-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.bin");
        write_atomically(&path, b"first").unwrap();
        write_atomically(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        // A target that cannot be renamed over (a folder): an error, and
        // the temporary file is gone.
        let sub = dir.join("sub");
        std::fs::create_dir_all(sub.join("inside")).unwrap();
        assert!(write_atomically(&sub, b"x").is_err());
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["a.bin", "sub"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
