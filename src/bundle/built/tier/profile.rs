//! The tier profile: the value sets (and argument sets) a process tiered
//! up, recorded in `PTXSPEC_TIER_PROFILE`'s file (each once, within its
//! bounds) and read by the next process, which fetches their cubins from the
//! caches at start (warm starts).

use std::collections::HashSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use ptxspec_core::digest::Digest;
use ptxspec_core::tier_profile::{self, GraphVerdict, Kept, MAX_BYTES, MAX_LINES, ProfileLine};

use crate::bundle::BuiltImage;

/// A variant's fixed arguments: (parameter index, bytes), by index.
pub(crate) type ArgumentSet = Vec<(usize, Vec<u8>)>;

fn file() -> Option<&'static PathBuf> {
    super::settings().ok()?.profile.as_ref()
}

/// The profile's lines as this process knows them: those the file held
/// when first read, and those this process appended since. `None`:
/// the file is over its bound (not read, not appended to).
fn known(path: &Path) -> &'static Mutex<Option<HashSet<String>>> {
    static KNOWN: OnceLock<Mutex<Option<HashSet<String>>>> = OnceLock::new();
    KNOWN.get_or_init(|| Mutex::new(read(path).map(|lines| lines.into_iter().collect())))
}

/// The profile's distinct lines in order; `None`, said once, where it
/// is over its bound. A file that is not there yet is empty.
fn read(path: &Path) -> Option<Vec<String>> {
    let meta = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(Vec::new()),
        other => other,
    };
    // The profile decides what a process links and keeps: read only a file
    // that passes the trusted-keys file's checks (a regular file of this
    // user's or the system's that no one else may write, in folders no one
    // else may write) — in a shared folder, another user's lines are never
    // taken.
    if let Err(fault) = ptxspec_core::files::check_protected_file(path) {
        refused(path, &fault.to_string());
        return None;
    }
    let bytes = match meta {
        Ok(m) if m.len() > MAX_BYTES => {
            refused(
                path,
                &format!("{} bytes, over its bound of {MAX_BYTES}", m.len()),
            );
            return None;
        }
        _ => match ptxspec_core::files::read_input(path) {
            Ok(b) => b,
            Err(e) => {
                refused(path, &e.to_string());
                return None;
            }
        },
    };
    tier_profile::lines(&bytes)
        .map_err(|e| refused(path, &e.to_string()))
        .ok()
}

fn refused(path: &Path, why: &str) {
    ptxspec_core::notice::once(format!(
        "the tier profile {} is not used: {why} (delete it, or name another file)",
        path.display()
    ));
}

/// Appends a tiered-up value set the profile does not hold yet (best
/// effort: a profile is a hint).
pub(super) fn record(specialized: &BuiltImage, arch: u32, kernel: &str) {
    record_line(specialized, arch, kernel, Vec::new(), None);
}

/// Appends a variant of adaptive arguments of `built`'s, and what its
/// trial kept, where the profile does not hold that line yet.
pub(super) fn record_arguments(
    built: &BuiltImage,
    arch: u32,
    kernel: &str,
    arguments: Vec<(usize, Vec<u8>)>,
    kept: Option<Kept>,
) {
    record_line(built, arch, kernel, arguments, kept);
}

/// The argument sets of `kernel` of `built` (its image and values) for
/// `sm_<arch>` that the profile holds — the variants a process made
/// before, or this one — each once, with what a trial kept. Where lines
/// disagree (processes of other versions, or trials that ended apart),
/// the generic code wins over a variant, and a verdict over none: a set
/// is never made faster than a trial found it.
pub(super) fn argument_sets(
    built: &BuiltImage,
    arch: u32,
    kernel: &str,
) -> Vec<(ArgumentSet, Option<Kept>)> {
    let Some(path) = file() else {
        return Vec::new();
    };
    let known = known(path).lock().unwrap_or_else(|p| p.into_inner());
    let Some(lines) = known.as_ref() else {
        return Vec::new();
    };
    let mut sets: std::collections::BTreeMap<ArgumentSet, Option<Kept>> = Default::default();
    for p in lines
        .iter()
        .filter_map(|l| ProfileLine::parse(l))
        .filter(|p| {
            !p.arguments.is_empty()
                && p.image == built.image_data().id()
                && p.arch == arch
                && p.kernel == kernel
                && p.values == built.blob()
        })
    {
        let kept = sets.entry(p.arguments).or_default();
        *kept = stricter(*kept, p.kept);
    }
    // In the map's order (the hash set's is not): the same in every process.
    sets.into_iter().collect()
}

/// Of two lines' verdicts on one set, the one that trusts a variant less.
fn stricter(a: Option<Kept>, b: Option<Kept>) -> Option<Kept> {
    match (a, b) {
        (Some(Kept::Generic), _) | (_, Some(Kept::Generic)) => Some(Kept::Generic),
        (Some(a), Some(b)) if a != b => Some(Kept::Generic),
        (Some(k), _) | (_, Some(k)) => Some(k),
        (None, None) => None,
    }
}

fn record_line(
    built: &BuiltImage,
    arch: u32,
    kernel: &str,
    arguments: Vec<(usize, Vec<u8>)>,
    kept: Option<Kept>,
) {
    let line = ProfileLine {
        image: built.image_data().id().to_string(),
        arch,
        kernel: kernel.to_string(),
        values: built.blob().to_vec(),
        arguments,
        kept,
    }
    .to_line();
    if let Some(line) = line {
        append(line);
    }
}

/// What a trial of a graph's replays kept under `key`, where the profile
/// holds it: the contender (0: the graph as captured). Where lines
/// disagree, the graph as captured wins, as a variant does not over the
/// generic code for a launch.
pub(super) fn graph_verdict(key: &Digest) -> Option<usize> {
    let path = file()?;
    let known = known(path).lock().unwrap_or_else(|p| p.into_inner());
    graph_verdict_of(known.as_ref()?.iter(), key)
}

/// The contender the lines' graph verdicts under `key` keep: the one they
/// agree on, else 0 (the graph as captured).
fn graph_verdict_of<'a>(lines: impl Iterator<Item = &'a String>, key: &Digest) -> Option<usize> {
    let mut kept = None;
    for v in lines
        .filter_map(|l| GraphVerdict::parse(l))
        .filter(|v| v.key == *key)
    {
        kept = match kept {
            Some(k) if k != v.kept => Some(0),
            _ => Some(v.kept),
        };
    }
    kept
}

/// Appends what a trial of a graph's replays kept, where the profile does
/// not hold that line yet.
pub(super) fn record_graph_verdict(key: Digest, kept: usize) {
    if let Some(line) = (GraphVerdict { key, kept }).to_line() {
        append(line);
    }
}

/// Appends `line` where a profile is named and does not hold it yet.
fn append(line: String) {
    let Some(path) = file() else { return };
    let mut known = known(path).lock().unwrap_or_else(|p| p.into_inner());
    let Some(lines) = known.as_mut() else { return };
    if lines.contains(&line) {
        return;
    }
    if lines.len() >= MAX_LINES {
        ptxspec_core::notice::once(format!(
            "the tier profile {} holds {MAX_LINES} value sets, its bound: no more are recorded",
            path.display()
        ));
        return;
    }
    if let Some(mut f) = appendable(path)
        // One write of a whole line: appends of processes do not mix.
        && f.write_all(format!("{line}\n").as_bytes()).is_ok()
    {
        lines.insert(line);
    }
}

/// The profile opened to append to: made new (nothing followed: a link or
/// anything else in the way is refused), or one that passes the checks its
/// reading does; `None`, said once, where it does not.
fn appendable(path: &Path) -> Option<std::fs::File> {
    let opened = match ptxspec_core::files::create_new(path) {
        Ok(f) => Ok(f),
        // Another process made it meanwhile, or it was there: checked.
        Err(_) => ptxspec_core::files::check_protected_file(path)
            .map_err(|fault| fault.to_string())
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(path)
                    .map_err(|e| e.to_string())
            }),
    };
    // A new file's folders are checked too (one others may write would let
    // them replace it).
    let checked = opened.and_then(|f| {
        ptxspec_core::files::check_protected_file(path)
            .map(|()| f)
            .map_err(|fault| fault.to_string())
    });
    match checked {
        Ok(f) => Some(f),
        Err(why) => {
            refused(path, &why);
            None
        }
    }
}

/// Starts fetching the profile's value sets, once per process.
pub(super) fn warm_once() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        if let Some(path) = file() {
            let _ = std::thread::Builder::new()
                .name("ptxspec-tier-profile".into())
                .spawn(move || {
                    ptxspec_core::toolkit::exit::this_thread_works_in_the_background();
                    warm(path)
                });
        }
    });
}

/// The profile's lines, each fetched where a cache has its cubin; lines
/// that name no registered image, or values of another size, are
/// skipped (the profile may be another program's).
fn warm(path: &Path) {
    let Some(lines) = read(path) else {
        return;
    };
    let Ok(images) = crate::registry::all_images() else {
        return;
    };
    // Variants of adaptive arguments are made by the plans that adapt
    // (their links find these cubins in the caches).
    for set in lines
        .iter()
        .filter_map(|l| ProfileLine::parse(l))
        .filter(|p| p.arguments.is_empty())
    {
        let Some(image) = images
            .iter()
            .find(|i| i.id() == set.image && i.default_blob().len() == set.values.len())
        else {
            continue;
        };
        let toolkit = ptxspec_core::toolkit::worker::Toolkit::InProcess;
        if let Ok(tier) = super::specialized_tier(image, &set.values, false, &toolkit) {
            tier.prefetch(set.arch, &set.kernel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A graph's verdict is the one its lines agree on; lines that disagree
    /// (in either order) keep the graph as captured; other graphs' lines and
    /// value sets do not count.
    #[test]
    fn graph_verdicts_agree_or_keep_the_graph_as_captured() {
        let key = Digest::of(b"graph");
        let other = Digest::of(b"other");
        let line = |k: &Digest, kept| GraphVerdict { key: *k, kept }.to_line().unwrap();
        let of = |lines: Vec<String>| graph_verdict_of(lines.iter(), &key);
        assert_eq!(of(vec![]), None);
        assert_eq!(of(vec![line(&other, 1), "m sm_90 k 01".into()]), None);
        assert_eq!(of(vec![line(&key, 2)]), Some(2));
        assert_eq!(of(vec![line(&key, 2), line(&other, 1)]), Some(2));
        assert_eq!(of(vec![line(&key, 2), line(&key, 1)]), Some(0));
        assert_eq!(of(vec![line(&key, 1), line(&key, 2)]), Some(0));
        assert_eq!(of(vec![line(&key, 0), line(&key, 1)]), Some(0));
        assert_eq!(
            of(vec![line(&key, 1), line(&key, 0), line(&key, 1)]),
            Some(0)
        );
    }

    /// Lines that disagree on a set's verdict, in either order: the generic
    /// code wins over a variant, two different routes give the generic
    /// code, a verdict wins over none.
    #[test]
    fn the_stricter_verdict_wins() {
        let all = [None, Some(Kept::Lto), Some(Kept::Ptx), Some(Kept::Generic)];
        for a in all {
            for b in all {
                let want = match (a, b) {
                    (x, y) if x == y => x,
                    (None, k) | (k, None) => k,
                    _ => Some(Kept::Generic),
                };
                assert_eq!(stricter(a, b), want, "{a:?} {b:?}");
                assert_eq!(stricter(b, a), want, "{b:?} {a:?}");
            }
        }
    }

    /// Round 5, 8: the profile is read and appended to only where the
    /// trusted-keys file would be — a file others may write, or one in a
    /// folder others may write and replace it in, is not used (the process
    /// tiers as without one); a link planted where the profile is to be
    /// made is never followed to write; a file of this user's in a folder of
    /// this user's is.
    #[cfg(unix)]
    #[test]
    fn a_profile_others_may_write_is_never_used() {
        use std::os::unix::fs::PermissionsExt;
        let base =
            std::env::temp_dir().join(format!("ptxspec-profile-checks-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        };
        let mine = base.join("mine");
        std::fs::create_dir_all(&mine).unwrap();
        mode(&base, 0o755);
        mode(&mine, 0o755);
        let line = "a line\n";
        // Writable by others: refused.
        let open_file = mine.join("open.txt");
        std::fs::write(&open_file, line).unwrap();
        mode(&open_file, 0o666);
        assert_eq!(read(&open_file), None);
        assert!(appendable(&open_file).is_none());
        // In a folder others may write (not sticky): refused, made or not.
        let shared = base.join("shared");
        std::fs::create_dir_all(&shared).unwrap();
        mode(&shared, 0o777);
        let in_shared = shared.join("profile.txt");
        std::fs::write(&in_shared, line).unwrap();
        mode(&in_shared, 0o644);
        assert_eq!(read(&in_shared), None);
        assert!(appendable(&shared.join("new.txt")).is_none());
        // A link where the profile is to be made, to a file elsewhere: the
        // target is checked as the profile, and a target others may write
        // is neither read nor written through.
        let target = mine.join("target.txt");
        std::fs::write(&target, "").unwrap();
        mode(&target, 0o666);
        let link = mine.join("link.txt");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(appendable(&link).is_none());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
        // This user's file in this user's folder: read, appended to, made.
        let good = mine.join("good.txt");
        std::fs::write(&good, line).unwrap();
        mode(&good, 0o644);
        assert!(read(&good).is_some());
        assert!(appendable(&good).is_some());
        assert!(appendable(&mine.join("made.txt")).is_some());
        let _ = std::fs::remove_dir_all(&base);
    }
}
