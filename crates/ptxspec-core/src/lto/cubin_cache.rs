//! Caches of linked cubins: in memory by (image, values, architecture), and
//! on disk so that a second run of a program finds what the first linked.
//!
//! Disk entries live in `PTXSPEC_CACHE_DIR` (default: `$XDG_CACHE_HOME/
//! ptxspec` or `~/.cache/ptxspec`), in a folder per kind and layout version
//! (`cubins-v2`, `units-v2`: entries of an older layout are never read),
//! one file each, named by the SHA-256 of everything that determines its
//! content ([`crate::digest`]). A file carries its whole key and the SHA-256
//! of its contents: a foreign file (another key's) or a damaged one reads as
//! a miss and is rebuilt — any change, not only the ones a checksum sees (an
//! Adler-32 missed three bytes changed by +1, −2, +1). No one but the
//! folder's owner can write there; the hash is against damage, at the cost
//! of hashing each entry read (BENCHMARKS.md: a disk hit).
//! The folder is used only where it is the user's own and no one else can
//! write it ([`crate::files::private_folder`]); otherwise the build goes on
//! without the disk tier, and says so once. Files are written to a
//! temporary name and renamed into place, so two processes can share the
//! folder; no link is followed while reading, writing or trimming it; the
//! folder is kept under `PTXSPEC_CACHE_MAX_MB` (default 256) by removing
//! the least recently used entries. Settings that are not valid are errors
//! naming the variable ([`DiskSettings::read`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::digest::Digest;
use crate::settings::{Env, SettingError};

/// In-memory entries kept before the oldest half is dropped.
const MEMORY_ENTRIES: usize = 512;

/// The in-memory cache: key → cubin. The key is the caller's (image
/// identity, values, architecture), compared whole.
/// Key → (last use, cubin). Hashed with FxHash: the keys are made by
/// ptxspec from images and values (no one chooses them to collide), and a
/// memory hit is on the path of every repeat build.
type Entries = crate::fasthash::FxHashMap<Vec<u8>, (u64, Arc<Vec<u8>>)>;

pub(crate) struct MemoryCache {
    map: Mutex<Entries>,
    clock: AtomicU64,
}

impl MemoryCache {
    pub fn global() -> &'static MemoryCache {
        static CACHE: OnceLock<MemoryCache> = OnceLock::new();
        CACHE.get_or_init(|| MemoryCache {
            map: Mutex::new(Entries::default()),
            clock: AtomicU64::new(0),
        })
    }

    pub fn get(&self, key: &[u8]) -> Option<Arc<Vec<u8>>> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        map.get_mut(key).map(|(used, v)| {
            *used = now;
            Arc::clone(v)
        })
    }

    pub fn insert(&self, key: Vec<u8>, value: Arc<Vec<u8>>) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MEMORY_ENTRIES {
            let mut ages: Vec<u64> = map.values().map(|(u, _)| *u).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            map.retain(|_, (u, _)| *u > cut);
        }
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        map.insert(key, (now, value));
    }
}

/// The entry layout's magic: `PXSCUB03` carries a SHA-256 (`02`'s Adler-32
/// entries read as misses, and are rebuilt).
const MAGIC: &[u8; 8] = b"PXSCUB03";
/// Magic, key, length, the contents' SHA-256.
const HEADER: usize = 8 + 32 + 8 + 32;

/// Where disk entries go and how much they may take, from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskSettings {
    /// The folder the user named (or the system's cache folder) and the
    /// folders below it that ptxspec keeps its own in: the check of the
    /// folder ([`crate::files::private_folder`]) follows links in the
    /// first, never in the others. `None`: no folder could be found (no
    /// `PTXSPEC_CACHE_DIR`, no `XDG_CACHE_HOME`, no `HOME`): no disk cache.
    pub root: Option<(PathBuf, &'static [&'static str])>,
    /// The most bytes the folder may hold.
    pub max_bytes: u64,
}

/// The largest `PTXSPEC_CACHE_MAX_MB` taken: 16 TiB, far past any disk
/// cache and far below where megabytes overflow a byte count.
pub const MAX_CACHE_MB: u64 = 16 << 20;

impl DiskSettings {
    /// The settings `PTXSPEC_CACHE_DIR` and `PTXSPEC_CACHE_MAX_MB` give
    /// (defaults: `$XDG_CACHE_HOME/ptxspec` or `~/.cache/ptxspec`, 256 MB).
    /// A value that is not one is an error naming the variable: an empty
    /// folder (it meant the working directory), a size that is not a whole
    /// number of megabytes from 1 to [`MAX_CACHE_MB`].
    pub fn read(env: &Env) -> Result<DiskSettings, SettingError> {
        let root = match env.get("PTXSPEC_CACHE_DIR") {
            Some(d) if d.is_empty() => {
                return Err(SettingError::new(
                    "PTXSPEC_CACHE_DIR",
                    &d,
                    "empty: name a folder, or unset it for the default",
                ));
            }
            Some(d) => Some((PathBuf::from(d), &[][..])),
            None => env
                .get("XDG_CACHE_HOME")
                .filter(|d| !d.is_empty())
                .map(|d| (PathBuf::from(d), &["ptxspec"][..]))
                .or_else(|| {
                    env.get("HOME")
                        .filter(|h| !h.is_empty())
                        .map(|h| (PathBuf::from(h), &[".cache", "ptxspec"][..]))
                }),
        };
        let mb = env.number("PTXSPEC_CACHE_MAX_MB", 1..=MAX_CACHE_MB, 256, "megabytes")?;
        Ok(DiskSettings {
            root,
            max_bytes: mb << 20,
        })
    }

    /// The settings of the process's environment, read once.
    pub fn from_env() -> Result<&'static DiskSettings, SettingError> {
        static SETTINGS: OnceLock<Result<DiskSettings, SettingError>> = OnceLock::new();
        SETTINGS
            .get_or_init(|| DiskSettings::read(&Env::process()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The disk cache of `kind` (a folder name with its layout's version:
    /// `cubins-v2`), where there is a folder for it; its folder is checked
    /// when it is first read or written ([`DiskCache::get`], `put`).
    pub fn cache(&self, kind: &'static str) -> Option<DiskCache> {
        let (root, below) = self.root.as_ref()?;
        Some(DiskCache {
            root: root.clone(),
            below,
            kind,
            max_bytes: self.max_bytes,
        })
    }
}

/// How a folder is checked (see [`verified_folder`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// To read from: nothing made; the verdict kept for the process.
    Read,
    /// To write to: made where missing, checked again every time.
    Write,
}

/// The folder of `kind` below `root`, checked by
/// [`crate::files::private_folder`]: once per process for reading (no one
/// but its owner and the system can change what made it safe; a folder
/// not there yet holds nothing to read), again for each write (the folder
/// may have been removed meanwhile, and is then made again). An unsafe
/// folder is said once, by name.
fn verified_folder(
    root: &Path,
    below: &[&str],
    kind: &'static str,
    check: Check,
) -> Option<PathBuf> {
    type Verified = Vec<((PathBuf, &'static str), PathBuf)>;
    static VERIFIED: Mutex<Verified> = Mutex::new(Vec::new());
    let key = (root.to_path_buf(), kind);
    if check == Check::Read
        && let Some((_, dir)) = VERIFIED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(k, _)| *k == key)
    {
        return Some(dir.clone());
    }
    let mut parts: Vec<&str> = below.to_vec();
    parts.push(kind);
    let checked = match check {
        Check::Read => crate::files::existing_private_folder(root, &parts),
        Check::Write => crate::files::private_folder(root, &parts).map(Some),
    };
    match checked {
        Ok(Some(dir)) => {
            let mut verified = VERIFIED.lock().unwrap_or_else(|p| p.into_inner());
            verified.retain(|(k, _)| *k != key);
            verified.push((key, dir.clone()));
            Some(dir)
        }
        Ok(None) => None,
        Err(why) => {
            crate::notice::once(format!(
                "the disk cache is off: {why} (a cache folder must be yours alone: docs/guide/sharing.md)"
            ));
            None
        }
    }
}

/// One kind of disk entries in its folder, checked before use.
#[derive(Clone, Debug)]
pub struct DiskCache {
    root: PathBuf,
    below: &'static [&'static str],
    kind: &'static str,
    max_bytes: u64,
}

impl DiskCache {
    /// The folder the entries are in, where it is there and safe.
    pub fn dir(&self) -> Option<PathBuf> {
        verified_folder(&self.root, self.below, self.kind, Check::Read)
    }

    /// The entry of `key`, if a whole, matching one is there.
    pub fn get(&self, key: &Digest) -> Option<Vec<u8>> {
        disk_get(&self.dir()?, key)
    }

    /// Stores `bytes` under `key` (the folder checked again first, and
    /// made where missing), then trims the folder; whether it was stored.
    pub fn put(&self, key: &Digest, bytes: &[u8]) -> bool {
        match verified_folder(&self.root, self.below, self.kind, Check::Write) {
            Some(dir) => disk_put(&dir, key, bytes, self.max_bytes),
            None => false,
        }
    }
}

fn entry_path(dir: &Path, key: &Digest) -> PathBuf {
    dir.join(format!("{key}.entry"))
}

/// An entry's time stamp is renewed on a hit only where it is older than
/// this: eviction needs the order of use to a minute, not a write to the
/// file system on every hit.
const TOUCH_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// The entry stored under `key` in `dir`, if a whole, matching one is
/// there.
///
/// One open, one `fstat`, one read (and a time stamp at most once a
/// minute): a disk hit is on the path of a new process's first launch.
/// The file is read, not mapped: a mapped file that another process
/// truncates raises `SIGBUS`, where a read just comes up short.
fn disk_get(dir: &Path, key: &Digest) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let mut file = open_entry(&entry_path(dir, key))?;
    let meta = file.metadata().ok()?;
    let size = usize::try_from(meta.len()).ok()?;
    if !meta.is_file() || size < HEADER || meta.len() > crate::files::INPUT_LIMIT {
        return None;
    }
    // A file that shrank since is short here (a miss); one that grew is
    // checked by its header's length and checksum like any other.
    let mut bytes = vec![0u8; size];
    file.read_exact(&mut bytes).ok()?;
    if &bytes[..8] != MAGIC {
        return None;
    }
    let stored_key = Digest(bytes[8..40].try_into().ok()?);
    let len = u64::from_le_bytes(bytes[40..48].try_into().ok()?);
    let sum = Digest(bytes[48..80].try_into().ok()?);
    let payload = &bytes[HEADER..];
    if stored_key != *key || payload.len() as u64 != len || Digest::of(payload) != sum {
        return None;
    }
    // Recently used: eviction goes by modification time.
    let now = std::time::SystemTime::now();
    if meta
        .modified()
        .ok()
        .and_then(|m| now.duration_since(m).ok())
        .is_none_or(|age| age >= TOUCH_AFTER)
    {
        let _ = file.set_modified(now);
    }
    bytes.copy_within(HEADER.., 0);
    bytes.truncate(size - HEADER);
    Some(bytes)
}

/// The entry at `path` opened for reading, where it is a file of the
/// folder's own: not through a symbolic link (which could make the time
/// stamp touch a file elsewhere), and without blocking on a FIFO (whose
/// open would wait for a writer; `fstat` then tells it from a file).
fn open_entry(path: &Path) -> Option<std::fs::File> {
    let mut options = std::fs::File::options();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        &mut options,
        libc::O_NOFOLLOW | libc::O_NONBLOCK,
    );
    #[cfg(not(unix))]
    if !std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
        return None;
    }
    options.open(path).ok()
}

/// Stores `payload` under `key` in `dir` (atomically: a temporary file
/// renamed into place), then trims the folder to `max_bytes`. Whether it
/// was stored: failures are not errors, the cache is an optimization.
fn disk_put(dir: &Path, key: &Digest, payload: &[u8], max_bytes: u64) -> bool {
    let mut bytes = Vec::with_capacity(HEADER + payload.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(key.as_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(Digest::of(payload).as_bytes());
    bytes.extend_from_slice(payload);
    if crate::files::write_atomically(&entry_path(dir, key), &bytes).is_err() {
        return false;
    }
    trim(dir, max_bytes);
    true
}

/// Temporary files older than this are left over from a process that
/// died while writing; trimming removes them.
const STALE_TEMPORARY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes the least recently used entries until the folder holds at most
/// three quarters of `max` (when it holds more than `max`). Temporary files
/// count too; those an hour old are left over from a process that died
/// while writing, and go first. Only regular files directly in `dir` are
/// counted or removed (a link is neither followed nor removed).
pub fn trim(dir: &Path, max: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = Vec::new();
    let mut total: u64 = 0;
    for e in entries.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        let temporary = name.starts_with('.') && name.contains(".entry.tmp-");
        if !name.ends_with(".entry") && !temporary {
            continue;
        }
        // Regular files only (entries are written so): not what a link
        // points to.
        let Ok(md) = e.path().symlink_metadata() else {
            continue;
        };
        if !md.is_file() {
            continue;
        }
        let Ok(modified) = md.modified() else {
            continue;
        };
        if temporary
            && now
                .duration_since(modified)
                .is_ok_and(|age| age > STALE_TEMPORARY)
        {
            let _ = std::fs::remove_file(e.path());
            continue;
        }
        total = total.saturating_add(md.len());
        if !temporary {
            files.push((modified, md.len(), e.path()));
        }
    }
    if total <= max {
        return;
    }
    files.sort();
    for (_, len, path) in files {
        if total <= max / 4 * 3 {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total = total.saturating_sub(len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(
        pairs: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&str) -> Option<std::ffi::OsString> + Sync {
        move |name: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| std::ffi::OsString::from(v))
        }
    }

    #[test]
    fn settings_are_checked_and_name_the_variable() {
        let read = |pairs: &'static [(&'static str, &'static str)]| {
            DiskSettings::read(&Env::from_fn(&env_of(pairs)))
        };
        assert_eq!(
            read(&[("HOME", "/home/u")]),
            Ok(DiskSettings {
                root: Some((PathBuf::from("/home/u"), &[".cache", "ptxspec"][..])),
                max_bytes: 256 << 20
            })
        );
        assert_eq!(
            read(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/x")])
                .unwrap()
                .root,
            Some((PathBuf::from("/x"), &["ptxspec"][..]))
        );
        let s = read(&[("PTXSPEC_CACHE_DIR", "/c"), ("PTXSPEC_CACHE_MAX_MB", "1")]).unwrap();
        assert_eq!(s.max_bytes, 1 << 20);
        assert_eq!(s.root, Some((PathBuf::from("/c"), &[][..])));
        assert_eq!(read(&[]).unwrap().root, None);
        let e = read(&[("PTXSPEC_CACHE_DIR", "")]).unwrap_err().to_string();
        assert!(
            e.contains("PTXSPEC_CACHE_DIR") && e.contains("empty"),
            "{e}"
        );
    }

    fn key(n: u8) -> Digest {
        Digest([n; 32])
    }

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ptxspec-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        set_mode(&d, 0o700);
        d
    }

    fn set_mode(p: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn entries_are_regular_files_and_leftovers_are_trimmed() {
        let dir = tempdir("regular");
        assert!(disk_put(&dir, &key(7), b"cubin", 1 << 20));
        assert_eq!(disk_get(&dir, &key(7)).as_deref(), Some(&b"cubin"[..]));
        // A link in place of an entry: not followed, not touched.
        let outside = dir.join("outside");
        std::fs::write(&outside, b"x").unwrap();
        // An hour old: a touch through the link would move it to now.
        let before = set_age(&outside, 3600);
        std::os::unix::fs::symlink(&outside, entry_path(&dir, &key(8))).unwrap();
        assert_eq!(disk_get(&dir, &key(8)), None);
        assert_eq!(
            std::fs::metadata(&outside).unwrap().modified().unwrap(),
            before
        );
        // A temporary file an hour old is a leftover: trimmed.
        let leftover = dir.join(".x.entry.tmp-1-0");
        std::fs::write(&leftover, vec![0; 1000]).unwrap();
        set_age(&leftover, 7200);
        trim(&dir, 1 << 20);
        assert!(!leftover.exists());
        assert!(entry_path(&dir, &key(7)).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn disk_round_trip_corruption_and_trim() {
        let dir = tempdir("disk");
        assert_eq!(disk_get(&dir, &key(7)), None);
        assert!(disk_put(&dir, &key(7), b"cubin bytes", 256 << 20));
        assert_eq!(
            disk_get(&dir, &key(7)).as_deref(),
            Some(&b"cubin bytes"[..])
        );
        // Every flipped bit and every truncation: misses.
        let path = entry_path(&dir, &key(7));
        let good = std::fs::read(&path).unwrap();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            std::fs::write(&path, &bad).unwrap();
            assert_eq!(disk_get(&dir, &key(7)), None, "byte {i}");
        }
        for cut in 0..good.len() {
            std::fs::write(&path, &good[..cut]).unwrap();
            assert_eq!(disk_get(&dir, &key(7)), None, "cut {cut}");
        }
        // Changes a checksum misses: bytes moved by +1, -2, +1 at every
        // place in the contents (the same sum and the same weighted sum,
        // as Adler-32 computes them), and two bytes swapped.
        let contents = HEADER..good.len();
        for i in contents.start..contents.end - 2 {
            let mut bad = good.clone();
            bad[i] = bad[i].wrapping_add(1);
            bad[i + 1] = bad[i + 1].wrapping_sub(2);
            bad[i + 2] = bad[i + 2].wrapping_add(1);
            std::fs::write(&path, &bad).unwrap();
            assert_eq!(disk_get(&dir, &key(7)), None, "+1 -2 +1 at byte {i}");
            let mut swapped = good.clone();
            swapped.swap(i, i + 1);
            if swapped != good {
                std::fs::write(&path, &swapped).unwrap();
                assert_eq!(
                    disk_get(&dir, &key(7)),
                    None,
                    "bytes {i} and {} swapped",
                    i + 1
                );
            }
        }
        // Another key's entry under this key's name: a miss.
        assert!(disk_put(&dir, &key(8), b"eight", 256 << 20));
        std::fs::rename(entry_path(&dir, &key(8)), entry_path(&dir, &key(9))).unwrap();
        assert_eq!(disk_get(&dir, &key(9)), None);
        // Rebuilt after corruption.
        assert!(disk_put(&dir, &key(7), b"cubin bytes", 256 << 20));
        assert_eq!(
            disk_get(&dir, &key(7)).as_deref(),
            Some(&b"cubin bytes"[..])
        );
        // Trim keeps the newest.
        // Their ages set, not slept for: entry 100 the oldest, 109 the newest.
        for k in 100..110u8 {
            assert!(disk_put(&dir, &key(k), &[k; 1000], 256 << 20));
            set_age(&entry_path(&dir, &key(k)), 10 * u64::from(110 - k));
        }
        trim(&dir, 4000);
        assert!(disk_get(&dir, &key(109)).is_some());
        assert!(disk_get(&dir, &key(100)).is_none());
        let leftovers = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .contains(".tmp-")
            })
            .count();
        assert_eq!(leftovers, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Makes `path` look `seconds` old; returns its new time stamp.
    fn set_age(path: &Path, seconds: u64) -> std::time::SystemTime {
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(seconds);
        std::fs::File::options()
            .append(true)
            .open(path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        old
    }

    #[test]
    fn a_hit_renews_an_old_time_stamp_and_odd_entries_are_misses() {
        let dir = tempdir("touch");
        assert!(disk_put(&dir, &key(1), b"one", 256 << 20));
        let path = entry_path(&dir, &key(1));
        let stamp = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
        // A day old: the hit renews it (eviction keeps what is used).
        let old = set_age(&path, 86_400);
        assert_eq!(disk_get(&dir, &key(1)).as_deref(), Some(&b"one"[..]));
        let renewed = stamp(&path);
        assert!(renewed > old + std::time::Duration::from_secs(86_000));
        // Used within the minute (30 s ago): left as it is — a renewal
        // would move it 30 s on.
        let recent = set_age(&path, 30);
        assert_eq!(disk_get(&dir, &key(1)).as_deref(), Some(&b"one"[..]));
        assert_eq!(stamp(&path), recent);
        // A folder or a FIFO in an entry's place: a miss, at once (a FIFO
        // opened for reading would wait for a writer).
        std::fs::create_dir(entry_path(&dir, &key(2))).unwrap();
        assert_eq!(disk_get(&dir, &key(2)), None);
        let fifo = std::ffi::CString::new(
            entry_path(&dir, &key(3))
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: `fifo` is a NUL-terminated path that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let (done, wait) = std::sync::mpsc::channel();
        let d = dir.clone();
        std::thread::spawn(move || done.send(disk_get(&d, &key(3))));
        assert_eq!(
            wait.recv_timeout(std::time::Duration::from_secs(10)),
            Ok(None)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Every way a cache folder can be another's to write is refused, the
    /// disk tier then off, and nothing of the victim's is written or
    /// trimmed: a root others may write (group, world), a folder below it
    /// that is a link (to a folder of the victim's) or others may write,
    /// one another user owns, a folder above the root that others may
    /// write and is not sticky. A sticky world-writable folder above the
    /// root (`/tmp`) is fine.
    #[test]
    fn cache_folders_others_can_write_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempdir("unsafe");
        let settings = |root: &Path| DiskSettings {
            root: Some((root.to_path_buf(), &["ptxspec"][..])),
            max_bytes: 1,
        };
        // The victim's folder, with two files a trim would remove.
        let victim = base.join("victim");
        std::fs::create_dir(&victim).unwrap();
        for n in [1u8, 2] {
            std::fs::write(entry_path(&victim, &key(n)), vec![n; 100]).unwrap();
        }
        let check_refused = |root: &Path, what: &str| {
            assert!(
                crate::files::private_folder(root, &["ptxspec", "cubins-v2"]).is_err(),
                "{what}: not refused"
            );
            let cache = settings(root).cache("cubins-v2").expect("a cache");
            assert!(!cache.put(&key(9), b"nine"), "{what}: written");
            assert!(cache.get(&key(9)).is_none(), "{what}: read");
            for n in [1u8, 2] {
                assert!(
                    entry_path(&victim, &key(n)).exists(),
                    "{what}: the victim lost a file"
                );
            }
        };
        let mut shapes = 0;
        for mode in [0o770, 0o777, 0o702, 0o720, 0o1777] {
            let root = base.join(format!("root-{mode:o}"));
            std::fs::create_dir(&root).unwrap();
            set_mode(&root, mode);
            check_refused(&root, &format!("a root of mode {mode:o}"));
            shapes += 1;
        }
        // A planted link where ptxspec's own folder goes.
        let root = base.join("linked");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(&victim, root.join("ptxspec")).unwrap();
        check_refused(&root, "a link below the root");
        // The same, one level deeper (the version folder).
        let root = base.join("linked-deeper");
        std::fs::create_dir_all(root.join("ptxspec")).unwrap();
        set_mode(&root.join("ptxspec"), 0o700);
        std::os::unix::fs::symlink(&victim, root.join("ptxspec/cubins-v2")).unwrap();
        check_refused(&root, "a link as the version folder");
        // A folder below that others may write.
        let root = base.join("open-below");
        std::fs::create_dir_all(root.join("ptxspec")).unwrap();
        std::fs::set_permissions(root.join("ptxspec"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        check_refused(&root, "a folder below others may write");
        // A folder above the root others may write, not sticky.
        let open = base.join("open-above");
        std::fs::create_dir(&open).unwrap();
        set_mode(&open, 0o777);
        let root = open.join("root");
        std::fs::create_dir(&root).unwrap();
        check_refused(&root, "a folder above others may write");
        shapes += 4;
        // Another user's folders (where this test may give them away).
        if crate::files::effective_uid() == 0 {
            for at in ["root", "below"] {
                let root = base.join(format!("other-{at}"));
                std::fs::create_dir_all(root.join("ptxspec")).unwrap();
                set_mode(&root, 0o700);
                set_mode(&root.join("ptxspec"), 0o700);
                let owned = if at == "root" {
                    root.clone()
                } else {
                    root.join("ptxspec")
                };
                std::os::unix::fs::chown(&owned, Some(65534), Some(65534)).unwrap();
                check_refused(&root, &format!("another user's folder ({at})"));
                shapes += 1;
            }
        }
        assert!(shapes >= 9);
        // A safe root under a sticky world-writable folder: used, and the
        // entries go below it.
        let sticky = base.join("sticky");
        std::fs::create_dir(&sticky).unwrap();
        set_mode(&sticky, 0o1777);
        let root = sticky.join("mine");
        let roomy = DiskSettings {
            max_bytes: 1 << 20,
            ..settings(&root)
        };
        let cache = roomy.cache("cubins-v2").expect("a safe folder");
        assert!(cache.put(&key(5), b"five"));
        assert_eq!(cache.get(&key(5)).as_deref(), Some(&b"five"[..]));
        assert!(
            cache
                .dir()
                .unwrap()
                .starts_with(std::fs::canonicalize(&root).unwrap())
        );
        // A root named through a link (the user's own choice, as a home
        // folder on another disk): followed, and the folder it names checked.
        let real = base.join("real-root");
        std::fs::create_dir(&real).unwrap();
        set_mode(&real, 0o700);
        let named = base.join("named-root");
        std::os::unix::fs::symlink(&real, &named).unwrap();
        assert!(crate::files::private_folder(&named, &["ptxspec", "cubins-v2"]).is_ok());
        assert!(real.join("ptxspec/cubins-v2").is_dir());
        // Removed while the process runs: made again by the next write.
        std::fs::remove_dir_all(&root).unwrap();
        assert!(cache.put(&key(6), b"six"));
        assert_eq!(cache.get(&key(6)).as_deref(), Some(&b"six"[..]));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn memory_cache_is_bounded() {
        let c = MemoryCache {
            map: Mutex::new(Entries::default()),
            clock: AtomicU64::new(0),
        };
        for i in 0..2000u32 {
            c.insert(i.to_le_bytes().to_vec(), Arc::new(vec![]));
        }
        assert!(c.map.lock().unwrap().len() <= MEMORY_ENTRIES);
        assert!(c.get(&1999u32.to_le_bytes()).is_some());
    }
}
