//! Writing files so that a reader sees the old content or the new, never a
//! part: the bytes go to a temporary file beside the target, which is then
//! renamed over it (a rename within one folder is atomic on POSIX systems).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` atomically. The temporary file
/// (`.<name>.tmp-<pid>-<n>` in the same folder) is unique to this process
/// and call, made afresh (never through a link planted at its name), so
/// that concurrent writers of one path do not collide; it is removed again
/// when writing or renaming fails.
///
/// The last component of `path` is never resolved: in a folder others can
/// write, a symbolic link there may be anyone's. A link is replaced by the
/// new file (its target is left as it is) — or, where the folder does not
/// let this user replace it (a sticky folder, another user's link), the
/// write is an error. Special files are written through, never replaced:
/// a device, FIFO or socket at `path`, or behind a link that this user or
/// the system owns (`/dev/stdout`, a link of one's own to `/dev/null`);
/// their errors are reported (`/dev/full`: no space). A path that names one
/// of this process's open files — `/dev/stdout`, `/dev/stderr`,
/// `/dev/fd/N`, `/proc/self/fd/N`, or a link (of this user's or the
/// system's) whose chain reaches one — is that open file, whatever it is (a
/// terminal, a pipe, a regular file the shell redirected to): the bytes go
/// to it at its own offset, never to a new file in place of the link.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(fd) = open_file_of_this_process(path) {
        return write_to_descriptor(fd, path, bytes);
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let kind = meta.file_type();
        if kind.is_symlink() {
            if owned_by_this_user_or_system(&meta)
                && std::fs::metadata(path).is_ok_and(|t| is_special(&t))
            {
                return write_through(path, bytes);
            }
        } else if is_special(&meta) {
            return write_through(path, bytes);
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
    let mut tries = 0;
    let tmp = loop {
        let tmp = dir.join(format!(
            "{}{}-{}",
            temporary_prefix(&name),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        match create_new(&tmp) {
            Ok(f) => break (tmp, f),
            // Someone else's file (or link) at that name: another name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 16 => tries += 1,
            Err(e) => return Err(e),
        }
    };
    let (tmp, mut file) = tmp;
    let result = {
        use std::io::Write as _;
        file.write_all(bytes)
            .and_then(|()| file.flush())
            .and_then(|()| std::fs::rename(&tmp, path))
    };
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A new file at `path`, opened for writing: an error where anything (a
/// file, a link, dangling or not) is there already.
pub fn create_new(path: &Path) -> io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

/// A device, FIFO or socket (what is written through, not replaced).
fn is_special(meta: &std::fs::Metadata) -> bool {
    !(meta.is_file() || meta.is_dir() || meta.file_type().is_symlink())
}

/// The descriptor of this process's open file that `path` names, directly
/// or through links of this user's or the system's (at most 8): the
/// standard streams' device names, `/dev/fd/N`, `/proc/self/fd/N` and
/// `/proc/PID/fd/N` of this process.
fn open_file_of_this_process(path: &Path) -> Option<u32> {
    let mut at = path.to_path_buf();
    for _ in 0..8 {
        if let Some(fd) = descriptor_named(&at) {
            return Some(fd);
        }
        let meta = std::fs::symlink_metadata(&at).ok()?;
        if !meta.file_type().is_symlink() || !owned_by_this_user_or_system(&meta) {
            return None;
        }
        let next = std::fs::read_link(&at).ok()?;
        at = match at.parent() {
            Some(dir) if next.is_relative() => dir.join(next),
            _ => next,
        };
    }
    None
}

/// The descriptor a path of the process's own open files names.
fn descriptor_named(path: &Path) -> Option<u32> {
    let text = path.to_str()?;
    match text {
        "/dev/stdin" => return Some(0),
        "/dev/stdout" => return Some(1),
        "/dev/stderr" => return Some(2),
        _ => {}
    }
    let own = format!("/proc/{}/fd/", std::process::id());
    ["/dev/fd/", "/proc/self/fd/", own.as_str()]
        .iter()
        .find_map(|prefix| text.strip_prefix(prefix))
        .and_then(|n| n.parse().ok())
}

/// Writes `bytes` to the process's open file `fd`: standard output and
/// error through Rust's own handles (their offset, as the shell opened
/// them); another descriptor by its `/proc` path, appending.
fn write_to_descriptor(fd: u32, path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    match fd {
        1 => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes).and_then(|()| out.flush())
        }
        2 => {
            let mut err = std::io::stderr().lock();
            err.write_all(bytes).and_then(|()| err.flush())
        }
        _ => {
            let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
            f.write_all(bytes).and_then(|()| f.flush())
        }
    }
}

/// Whether `meta` (of a link, not followed) belongs to this user or to the
/// system (root): a link no one else planted.
fn owned_by_this_user_or_system(meta: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let owner = meta.uid();
        owner == 0 || owner == effective_uid()
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        false
    }
}

/// This process's effective user.
#[cfg(unix)]
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A folder made afresh in `parent`, named `<prefix><pid>-<n>`, private
/// to this user (mode 0700): never one that exists already (a folder or
/// link someone else put at a predictable name is passed over).
pub fn fresh_folder(parent: &Path, prefix: &str) -> io::Result<PathBuf> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let mut last = None;
    for _ in 0..64 {
        let path = parent.join(format!(
            "{prefix}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match builder.create(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no fresh folder could be made")))
}

/// What a folder check reads of a path (not following a link).
#[cfg(unix)]
struct Stat {
    mode: u32,
    uid: u32,
}

// `mode_t` is 32 bits here and 16 on other Unix targets: widened either way.
#[cfg(unix)]
#[allow(clippy::unnecessary_cast)]
impl Stat {
    fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT as u32 == libc::S_IFDIR as u32
    }
    fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT as u32 == libc::S_IFREG as u32
    }
    fn is_link(&self) -> bool {
        self.mode & libc::S_IFMT as u32 == libc::S_IFLNK as u32
    }
}

/// `lstat` of `path`: one system call. (Not `std::fs::symlink_metadata`,
/// whose first use in a process probes for `statx` with a second call: a
/// new process's first disk-cache hit checks its folder with a few of
/// these.)
#[cfg(unix)]
fn lstat(path: &Path) -> io::Result<Stat> {
    use std::os::unix::ffi::OsStrExt as _;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call,
    // and `st` points to memory for one `struct stat`, which `lstat` fills
    // when it returns 0.
    if unsafe { libc::lstat(c_path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `lstat` returned 0, so it wrote the whole struct.
    let st = unsafe { st.assume_init() };
    // The fields' types differ between Unix targets: widened or narrowed
    // to what the checks compare.
    #[allow(clippy::unnecessary_cast)]
    Ok(Stat {
        mode: st.st_mode as u32,
        uid: st.st_uid as u32,
    })
}

/// Why a folder that would hold a cache is not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsafeFolder {
    /// The folder (or the component of its path) at fault.
    pub path: PathBuf,
    /// What is wrong with it.
    pub why: String,
}

impl std::fmt::Display for UnsafeFolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.why)
    }
}

/// `root` joined with `below`, where that folder is this user's alone, as
/// ssh requires of `~/.ssh`: `root` (after its links: the user named it)
/// and each folder of `below` are directories this user owns that no one
/// else may write; each folder of `below` is a real folder, not a link
/// (made, mode 0700, where missing); and every folder above `root` belongs
/// to this user or the system and is writable by others only where it is
/// sticky (as `/tmp` is), so that no one else can put another folder in
/// its place. A cache in a folder others can write would let them plant
/// the code a program runs.
pub fn private_folder(root: &Path, below: &[&str]) -> Result<PathBuf, UnsafeFolder> {
    match checked_folder(root, below, true)? {
        Some(path) => Ok(path),
        None => Err(UnsafeFolder {
            path: root.to_path_buf(),
            why: "cannot be made".into(),
        }),
    }
}

/// [`private_folder`] for reading: a folder that is not there is `None`
/// (nothing in it to read), and nothing is made.
pub fn existing_private_folder(
    root: &Path,
    below: &[&str],
) -> Result<Option<PathBuf>, UnsafeFolder> {
    checked_folder(root, below, false)
}

/// [`private_folder`]'s check, making missing folders where `make`.
fn checked_folder(
    root: &Path,
    below: &[&str],
    make: bool,
) -> Result<Option<PathBuf>, UnsafeFolder> {
    if make {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(root)
            .map_err(|e| unsafe_folder(root, format!("cannot be made ({e})")))?;
    }
    #[cfg(unix)]
    {
        let uid = effective_uid();
        let Some(root_dir) = walked_to(root, make, uid)? else {
            return Ok(None);
        };
        checked_below(root_dir, below, make, uid)
    }
    #[cfg(not(unix))]
    {
        let mut path = match std::fs::canonicalize(root) {
            Ok(c) => c,
            Err(e) if !make && e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(unsafe_folder(root, format!("cannot be resolved ({e})"))),
        };
        for part in below {
            path.push(part);
            if make {
                std::fs::create_dir_all(&path)
                    .map_err(|e| unsafe_folder(&path, format!("cannot be made ({e})")))?;
            } else if !path.is_dir() {
                return Ok(None);
            }
        }
        Ok(Some(path))
    }
}

fn unsafe_folder(path: &Path, why: String) -> UnsafeFolder {
    UnsafeFolder {
        path: path.to_path_buf(),
        why,
    }
}

/// A folder's own fault as one of ptxspec's: not a folder, another user's,
/// or writable by others.
#[cfg(unix)]
fn owner_fault(path: &Path, st: &Stat, uid: u32) -> Result<(), UnsafeFolder> {
    if !st.is_dir() {
        return Err(unsafe_folder(path, "is not a folder".into()));
    }
    if st.uid != uid {
        return Err(unsafe_folder(
            path,
            format!("belongs to user {}, not to this user ({uid})", st.uid),
        ));
    }
    if st.mode & 0o022 != 0 {
        return Err(unsafe_folder(
            path,
            format!(
                "mode {:04o}: others may write it; {}",
                st.mode & 0o7777,
                advice_for_shared(path, st)
            ),
        ));
    }
    Ok(())
}

/// `root` checked from `/` down: each folder above it safe to be under
/// (`folder_above_fault`), `root` itself this user's alone
/// (`owner_fault`). `None` where it is not there (and not to be made).
#[cfg(unix)]
fn walked_to(root: &Path, make: bool, uid: u32) -> Result<Option<PathBuf>, UnsafeFolder> {
    let above_rule = |path: &Path, st: &Stat| -> Result<(), UnsafeFolder> {
        match folder_above_fault(st, uid, "the cache folder") {
            Some(why) => Err(unsafe_folder(path, why)),
            None => Ok(()),
        }
    };
    // Each folder from `/` down to the root, not following links: one
    // `lstat` each, which checks it too. A link on the way (the user's
    // own choice) is resolved once, and the walk made again on the
    // resolved path, which has none.
    let absolute = if root.is_absolute() {
        root.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| unsafe_folder(root, format!("cannot be resolved ({e})")))?
            .join(root)
    };
    let mut walked = absolute;
    let mut resolved = false;
    let root_dir = 'walk: loop {
        let plain = walked.components().all(|c| {
            matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        });
        if plain {
            let mut prefix = PathBuf::new();
            let parts: Vec<_> = walked.components().collect();
            for (i, part) in parts.iter().enumerate() {
                prefix.push(part);
                let st = match lstat(&prefix) {
                    Ok(st) => st,
                    Err(e) if !make && e.kind() == io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => {
                        return Err(unsafe_folder(&prefix, format!("cannot be read ({e})")));
                    }
                };
                if st.is_link() {
                    break;
                }
                if i + 1 == parts.len() {
                    owner_fault(&prefix, &st, uid)?;
                    break 'walk prefix;
                }
                above_rule(&prefix, &st)?;
            }
        }
        if resolved {
            return Err(unsafe_folder(root, "cannot be resolved".into()));
        }
        walked = match std::fs::canonicalize(&walked) {
            Ok(c) => c,
            Err(e) if !make && e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(unsafe_folder(root, format!("cannot be resolved ({e})"))),
        };
        resolved = true;
    };
    Ok(Some(root_dir))
}

/// The folders `below` `root_dir`, each made where missing (and `make`)
/// and checked as this user's alone; none may be a link. `None` where one
/// is not there (and not to be made).
#[cfg(unix)]
fn checked_below(
    root_dir: PathBuf,
    below: &[&str],
    make: bool,
    uid: u32,
) -> Result<Option<PathBuf>, UnsafeFolder> {
    let mut path = root_dir;
    for part in below {
        path.push(part);
        let st = match lstat(&path) {
            Ok(st) => st,
            Err(e) if !make && e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let mut one = std::fs::DirBuilder::new();
                std::os::unix::fs::DirBuilderExt::mode(&mut one, 0o700);
                match one.create(&path) {
                    Ok(()) => {}
                    // Made by another process of this user meanwhile.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => {
                        return Err(unsafe_folder(&path, format!("cannot be made ({e})")));
                    }
                }
                lstat(&path).map_err(|e| unsafe_folder(&path, format!("cannot be read ({e})")))?
            }
            Err(e) => return Err(unsafe_folder(&path, format!("cannot be read ({e})"))),
        };
        if st.is_link() {
            return Err(unsafe_folder(
                &path,
                "is a symbolic link: a cache folder below the one named is never one".into(),
            ));
        }
        owner_fault(&path, &st, uid)?;
    }
    Ok(Some(path))
}

/// What to do about a folder others may write: never to change a folder
/// that is shared by design (sticky, as `/tmp` is) or a system folder —
/// loosening or tightening either breaks other users — but to name a
/// private folder below it, which ptxspec makes mode 0700; only a folder of
/// the user's own, in the user's home, is worth `chmod go-w`.
#[cfg(unix)]
fn advice_for_shared(path: &Path, st: &Stat) -> String {
    let shared = st.mode & 0o1000 != 0
        || [
            "/", "/tmp", "/var", "/var/tmp", "/usr", "/opt", "/srv", "/run", "/dev", "/home",
        ]
        .iter()
        .any(|system| Path::new(system) == path);
    let user = std::env::var("USER")
        .ok()
        .filter(|u| {
            !u.is_empty()
                && u.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        })
        .unwrap_or_else(|| format!("{}", effective_uid()));
    if shared {
        format!(
            "it is a shared folder, which must stay so: name a private folder below it instead \
             (for example {}), which ptxspec makes mode 0700",
            path.join(format!("ptxspec-{user}")).display()
        )
    } else {
        format!(
            "make it the user's alone (chmod go-w {}), or name a private folder below it \
             (for example {})",
            path.display(),
            path.join("ptxspec").display()
        )
    }
}

/// What is wrong with a folder above `what` (`st`, of this user `uid`),
/// where another user could replace `what` through it: owned by another
/// user than this one or the system, or writable by others and not sticky
/// (a sticky folder, as `/tmp`, lets no one replace another's entry).
#[cfg(unix)]
fn folder_above_fault(st: &Stat, uid: u32, what: &str) -> Option<String> {
    if st.uid != uid && st.uid != 0 {
        return Some(format!(
            "belongs to user {}, neither this user nor the system: it could replace {what}",
            st.uid
        ));
    }
    if st.mode & 0o022 != 0 && st.mode & 0o1000 == 0 {
        return Some(format!(
            "mode {:04o}: others may write it and replace {what}",
            st.mode & 0o7777
        ));
    }
    None
}

/// Checks a file whose contents decide what code runs (a list of trusted
/// keys), as ssh checks `authorized_keys`: a regular file, owned by this
/// user or the system, that no one else may write, in folders (its own and
/// each one above, after its links: the user named it) that no one else
/// may write — or that are sticky, where no one else can replace it. The
/// error says which path is at fault and why (its mode, its owner).
pub fn check_protected_file(path: &Path) -> Result<(), UnsafeFolder> {
    let fault = |p: &Path, why: String| UnsafeFolder {
        path: p.to_path_buf(),
        why,
    };
    let resolved = std::fs::canonicalize(path)
        .map_err(|e| fault(path, format!("cannot be resolved ({e})")))?;
    #[cfg(unix)]
    {
        let uid = effective_uid();
        let st = lstat(&resolved).map_err(|e| fault(&resolved, format!("cannot be read ({e})")))?;
        if !st.is_file() {
            return Err(fault(&resolved, "is not a regular file".into()));
        }
        if st.uid != uid && st.uid != 0 {
            return Err(fault(
                &resolved,
                format!(
                    "belongs to user {}, neither this user ({uid}) nor the system: its owner could change which keys are trusted",
                    st.uid
                ),
            ));
        }
        if st.mode & 0o022 != 0 {
            return Err(fault(
                &resolved,
                format!(
                    "mode {:04o}: others may write it, and so add a key whose entries this host would load as \
                     trusted code (chmod go-w {})",
                    st.mode & 0o7777,
                    resolved.display()
                ),
            ));
        }
        let mut folder = resolved.parent();
        while let Some(dir) = folder {
            let st = lstat(dir).map_err(|e| fault(dir, format!("cannot be read ({e})")))?;
            let what = format!("the file {}", resolved.display());
            if let Some(why) = folder_above_fault(&st, uid, &what) {
                return Err(fault(dir, why));
            }
            folder = dir.parent();
        }
    }
    Ok(())
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

/// [`read_input`] of a text file: its bytes as UTF-8 (an error where they
/// are not).
pub fn read_input_text(path: &Path) -> io::Result<String> {
    String::from_utf8(read_input(path)?).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (the byte at offset {} is not)",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

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

    /// A shared folder (sticky, or a system path) named as a cache folder
    /// is refused with advice to name a private folder below it — never to
    /// change its mode, which would break the system; a folder of the
    /// user's own that others may write is told `chmod go-w`.
    #[cfg(unix)]
    #[test]
    fn advice_never_changes_a_shared_folder() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("ptxspec-advice-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
        let sticky = base.join("shared");
        std::fs::create_dir(&sticky).unwrap();
        std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let own = base.join("own");
        std::fs::create_dir(&own).unwrap();
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o777)).unwrap();
        let mut shared: Vec<PathBuf> = vec![sticky.clone()];
        // `/tmp` itself where this user owns it (root): the system's folder.
        if lstat(Path::new("/tmp")).is_ok_and(|st| st.uid == effective_uid()) {
            shared.push(PathBuf::from("/tmp"));
        }
        for folder in &shared {
            let e = existing_private_folder(folder, &[]).expect_err("a shared folder");
            assert!(!e.why.contains("chmod"), "{e}");
            assert!(e.why.contains("private folder below it"), "{e}");
            assert!(
                e.why
                    .contains(&folder.join("ptxspec-").display().to_string()),
                "{e}"
            );
        }
        let e = existing_private_folder(&own, &[]).expect_err("a folder others may write");
        assert!(
            e.why.contains(&format!("chmod go-w {}", own.display())),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&base);
    }

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
