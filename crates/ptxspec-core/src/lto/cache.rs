//! Caches of linked cubins: in memory by (image, values, architecture), and
//! on disk so that a second run of a program finds what the first linked.
//!
//! Disk entries live in `PTXSPEC_CACHE_DIR` (default: `$XDG_CACHE_HOME/
//! ptxspec` or `~/.cache/ptxspec`), one file each, named by a hash of
//! everything that determines the cubin. A file carries its key's hash and
//! a checksum of its contents: a damaged or foreign file reads as a miss and
//! is rebuilt. Files are written to a temporary name and renamed into place,
//! so two processes can share the folder; the folder is kept under
//! `PTXSPEC_CACHE_MAX_MB` (default 256) by removing the least recently
//! used entries. Settings that are not valid are errors naming the
//! variable (`DiskSettings::from_env`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A 128-bit hash of bytes (not cryptographic: for cache keys and
/// checksums; fixed, so that it is the same in every process and build).
pub fn hash128(data: &[u8]) -> u128 {
    const P1: u64 = 0x9E37_79B9_7F4A_7C15;
    const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    const P3: u64 = 0x1656_67B1_9E37_79F9;
    let fmix = |mut h: u64| {
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    };
    let mut a = P1 ^ data.len() as u64;
    let mut b = P2.wrapping_add(data.len() as u64);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let v = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        a = (a ^ v).rotate_left(31).wrapping_mul(P1);
        b = (b ^ v.wrapping_mul(P3)).rotate_left(29).wrapping_mul(P2);
    }
    let mut last = [0u8; 8];
    let rest = chunks.remainder();
    last[..rest.len()].copy_from_slice(rest);
    let v = u64::from_le_bytes(last) ^ ((rest.len() as u64) << 56);
    a = (a ^ v).rotate_left(31).wrapping_mul(P1);
    b = (b ^ v.wrapping_mul(P3)).rotate_left(29).wrapping_mul(P2);
    let (x, y) = (fmix(a ^ b.rotate_left(17)), fmix(b ^ a.rotate_left(43)));
    ((x as u128) << 64) | y as u128
}

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

const MAGIC: &[u8; 8] = b"PXSCUB01";
const HEADER: usize = 8 + 16 + 8 + 16;

/// Where disk entries go and how much they may take, from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DiskSettings {
    /// `None`: no folder could be found (no `PTXSPEC_CACHE_DIR`, no
    /// `XDG_CACHE_HOME`, no `HOME`): no disk cache.
    pub dir: Option<PathBuf>,
    /// The most bytes the folder may hold.
    pub max_bytes: u64,
}

/// The largest `PTXSPEC_CACHE_MAX_MB` taken: 16 TiB, far past any disk
/// cache and far below where megabytes overflow a byte count.
pub(crate) const MAX_CACHE_MB: u64 = 16 << 20;

impl DiskSettings {
    /// The settings `PTXSPEC_CACHE_DIR` and `PTXSPEC_CACHE_MAX_MB` give
    /// (defaults: `$XDG_CACHE_HOME/ptxspec` or `~/.cache/ptxspec`, 256 MB).
    /// A value that is not one is an error naming the variable: an empty
    /// folder (it meant the working directory), a size that is not a whole
    /// number of megabytes from 1 to [`MAX_CACHE_MB`].
    pub(crate) fn from_env() -> Result<DiskSettings, crate::toolkit::ToolkitError> {
        let get = |name: &str| std::env::var_os(name);
        DiskSettings::from_values(
            get("PTXSPEC_CACHE_DIR"),
            get("PTXSPEC_CACHE_MAX_MB"),
            || {
                get("XDG_CACHE_HOME")
                    .filter(|d| !d.is_empty())
                    .map(|d| PathBuf::from(d).join("ptxspec"))
                    .or_else(|| {
                        get("HOME")
                            .filter(|h| !h.is_empty())
                            .map(|h| PathBuf::from(h).join(".cache/ptxspec"))
                    })
            },
        )
    }

    fn from_values(
        dir: Option<std::ffi::OsString>,
        max_mb: Option<std::ffi::OsString>,
        default_dir: impl FnOnce() -> Option<PathBuf>,
    ) -> Result<DiskSettings, crate::toolkit::ToolkitError> {
        let bad = |variable: &'static str, value: &std::ffi::OsStr, what: &str| {
            crate::toolkit::ToolkitError::Setting {
                variable,
                value: value.to_string_lossy().into_owned(),
                what: what.to_string(),
            }
        };
        let base = match dir {
            Some(d) if d.is_empty() => {
                return Err(bad(
                    "PTXSPEC_CACHE_DIR",
                    &d,
                    "empty: name a folder, or unset it for the default",
                ));
            }
            Some(d) => Some(PathBuf::from(d)),
            None => default_dir(),
        };
        let max_bytes = match max_mb {
            None => 256 << 20,
            Some(v) => {
                let mb = v
                    .to_str()
                    .and_then(|t| t.trim().parse::<u64>().ok())
                    .filter(|mb| (1..=MAX_CACHE_MB).contains(mb))
                    .ok_or_else(|| {
                        bad(
                            "PTXSPEC_CACHE_MAX_MB",
                            &v,
                            &format!("not a whole number of megabytes from 1 to {MAX_CACHE_MB}"),
                        )
                    })?;
                mb << 20
            }
        };
        Ok(DiskSettings {
            dir: base.map(|b| b.join("lto-v1")),
            max_bytes,
        })
    }
}

fn entry_path(dir: &Path, key: u128) -> PathBuf {
    dir.join(format!("{key:032x}.cubin"))
}

/// An entry's time stamp is renewed on a hit only where it is older than
/// this: eviction needs the order of use to a minute, not a write to the
/// file system on every hit.
const TOUCH_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// The cubin stored under `key`, if a whole, matching entry is there.
///
/// One open, one `fstat`, one read (and a time stamp at most once a
/// minute): a disk hit is on the path of a new process's first launch.
/// The file is read, not mapped: a mapped file that another process
/// truncates raises `SIGBUS`, where a read just comes up short.
pub(crate) fn disk_get(dir: &Path, key: u128) -> Option<Vec<u8>> {
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
    let stored_key = u128::from_le_bytes(bytes[8..24].try_into().ok()?);
    let len = u64::from_le_bytes(bytes[24..32].try_into().ok()?);
    let sum = u128::from_le_bytes(bytes[32..48].try_into().ok()?);
    let payload = &bytes[HEADER..];
    if stored_key != key || payload.len() as u64 != len || hash128(payload) != sum {
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

/// Stores `cubin` under `key` (atomically: a temporary file renamed into
/// place), then trims the folder to `max_bytes`. Whether it was stored:
/// failures are not errors, the cache is an optimization.
pub(crate) fn disk_put(dir: &Path, key: u128, cubin: &[u8], max_bytes: u64) -> bool {
    if std::fs::create_dir_all(dir).is_err() {
        return false;
    }
    let mut bytes = Vec::with_capacity(HEADER + cubin.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&key.to_le_bytes());
    bytes.extend_from_slice(&(cubin.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&hash128(cubin).to_le_bytes());
    bytes.extend_from_slice(cubin);
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
/// while writing, and go first.
pub fn trim(dir: &Path, max: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = Vec::new();
    let mut total: u64 = 0;
    for e in entries.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        let temporary = name.starts_with('.') && name.contains(".cubin.tmp-");
        if !name.ends_with(".cubin") && !temporary {
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

    #[test]
    fn settings_are_checked_and_name_the_variable() {
        use std::ffi::OsString;
        let home = || Some(PathBuf::from("/home/u/.cache/ptxspec"));
        let s = |dir: Option<&str>, mb: Option<&str>| {
            DiskSettings::from_values(dir.map(OsString::from), mb.map(OsString::from), home)
        };
        assert_eq!(
            s(None, None),
            Ok(DiskSettings {
                dir: Some(PathBuf::from("/home/u/.cache/ptxspec/lto-v1")),
                max_bytes: 256 << 20
            })
        );
        assert_eq!(s(Some("/c"), Some("1")).unwrap().max_bytes, 1 << 20);
        // 2^44 MB wrapped to 0 bytes: the cache emptied itself on every write.
        for bad in ["17592186044416", "0", "-1", "1.5", "lots", ""] {
            let e = s(None, Some(bad)).unwrap_err().to_string();
            assert!(e.contains("PTXSPEC_CACHE_MAX_MB"), "{bad}: {e}");
        }
        let e = s(Some(""), None).unwrap_err().to_string();
        assert!(
            e.contains("PTXSPEC_CACHE_DIR") && e.contains("empty"),
            "{e}"
        );
    }

    #[test]
    fn entries_are_regular_files_and_leftovers_are_trimmed() {
        let dir = std::env::temp_dir().join(format!("ptxspec-cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(disk_put(&dir, 7, b"cubin", 1 << 20));
        assert_eq!(disk_get(&dir, 7).as_deref(), Some(&b"cubin"[..]));
        // A link in place of an entry: not followed, not touched.
        let outside = dir.join("outside");
        std::fs::write(&outside, b"x").unwrap();
        let before = std::fs::metadata(&outside).unwrap().modified().unwrap();
        std::fs::remove_file(entry_path(&dir, 8)).ok();
        std::os::unix::fs::symlink(&outside, entry_path(&dir, 8)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(disk_get(&dir, 8), None);
        assert_eq!(
            std::fs::metadata(&outside).unwrap().modified().unwrap(),
            before
        );
        // A temporary file an hour old is a leftover: trimmed.
        let leftover = dir.join(".x.cubin.tmp-1-0");
        std::fs::write(&leftover, vec![0; 1000]).unwrap();
        set_age(&leftover, 7200);
        trim(&dir, 1 << 20);
        assert!(!leftover.exists());
        assert!(entry_path(&dir, 7).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn hash_is_stable_and_spreads() {
        // Fixed values: a change of the function would silently orphan
        // every disk entry, so it is pinned here.
        assert_eq!(hash128(b""), hash128(b""));
        assert_ne!(hash128(b"a"), hash128(b"b"));
        assert_ne!(hash128(b"abcdefgh"), hash128(b"abcdefgh\0"));
        assert_ne!(hash128(&[0u8; 16]), hash128(&[0u8; 17]));
        let mut seen = std::collections::HashSet::new();
        for i in 0u32..10_000 {
            assert!(seen.insert(hash128(&i.to_le_bytes())));
        }
    }

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ptxspec-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn disk_round_trip_corruption_and_trim() {
        let dir = tempdir("disk");
        assert_eq!(disk_get(&dir, 7), None);
        assert!(disk_put(&dir, 7, b"cubin bytes", 256 << 20));
        assert_eq!(disk_get(&dir, 7).as_deref(), Some(&b"cubin bytes"[..]));
        // A flipped byte, a truncation, a foreign key: misses.
        let path = entry_path(&dir, 7);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(disk_get(&dir, 7), None);
        std::fs::write(&path, &bytes[..20]).unwrap();
        assert_eq!(disk_get(&dir, 7), None);
        assert!(disk_put(&dir, 8, b"eight", 256 << 20));
        std::fs::rename(entry_path(&dir, 8), entry_path(&dir, 9)).unwrap();
        assert_eq!(disk_get(&dir, 9), None);
        // Rebuilt after corruption.
        assert!(disk_put(&dir, 7, b"cubin bytes", 256 << 20));
        assert_eq!(disk_get(&dir, 7).as_deref(), Some(&b"cubin bytes"[..]));
        // Trim keeps the newest.
        for k in 100..110u128 {
            assert!(disk_put(&dir, k, &[k as u8; 1000], 256 << 20));
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        trim(&dir, 4000);
        assert!(disk_get(&dir, 109).is_some());
        assert!(disk_get(&dir, 100).is_none());
        let leftovers = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with(".tmp")
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
        assert!(disk_put(&dir, 1, b"one", 256 << 20));
        let path = entry_path(&dir, 1);
        let stamp = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
        // A day old: the hit renews it (eviction keeps what is used).
        let old = set_age(&path, 86_400);
        assert_eq!(disk_get(&dir, 1).as_deref(), Some(&b"one"[..]));
        let renewed = stamp(&path);
        assert!(renewed > old + std::time::Duration::from_secs(86_000));
        // Used within the minute: left as it is.
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(disk_get(&dir, 1).as_deref(), Some(&b"one"[..]));
        assert_eq!(stamp(&path), renewed);
        // A folder or a FIFO in an entry's place: a miss, at once (a FIFO
        // opened for reading would wait for a writer).
        std::fs::create_dir(entry_path(&dir, 2)).unwrap();
        assert_eq!(disk_get(&dir, 2), None);
        let fifo =
            std::ffi::CString::new(entry_path(&dir, 3).into_os_string().into_encoded_bytes())
                .unwrap();
        // SAFETY: `fifo` is a NUL-terminated path that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let (done, wait) = std::sync::mpsc::channel();
        let d = dir.clone();
        std::thread::spawn(move || done.send(disk_get(&d, 3)));
        assert_eq!(
            wait.recv_timeout(std::time::Duration::from_secs(10)),
            Ok(None)
        );
        let _ = std::fs::remove_dir_all(&dir);
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
