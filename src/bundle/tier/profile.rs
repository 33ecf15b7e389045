//! The tier profile: the value sets (and argument sets) a process tiered
//! up, recorded in `PTXSPEC_TIER_PROFILE`'s file (each once, within its
//! bounds) and read by the next process, which fetches their cubins from the
//! caches at start (warm starts).

use std::collections::HashSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use ptxspec_core::tier_profile::{self, Kept, MAX_BYTES, MAX_LINES, ProfileLine};

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
    let bytes = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(Vec::new()),
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
    let Some(path) = file() else { return };
    let Some(line) = (ProfileLine {
        image: built.image_data().id().to_string(),
        arch,
        kernel: kernel.to_string(),
        values: built.blob().to_vec(),
        arguments,
        kept,
    })
    .to_line() else {
        return;
    };
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
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        // One write of a whole line: appends of processes do not mix.
        && f.write_all(format!("{line}\n").as_bytes()).is_ok()
    {
        lines.insert(line);
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
        if let Ok(tier) = super::super::built::specialized_tier(image, &set.values, false, &toolkit)
        {
            tier.prefetch(set.arch, &set.kernel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
