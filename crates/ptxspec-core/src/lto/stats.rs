//! Where a cubin came from, and what the caches and links did in this
//! process: the counters [`stats`] reads, said to `tracing` as they count.

use std::sync::atomic::{AtomicU64, Ordering};

/// Where a cubin came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// This process's memory cache.
    Memory,
    /// The disk cache (`PTXSPEC_CACHE_DIR`).
    Disk,
    /// The remote cache (`PTXSPEC_REMOTE_CACHE`), signed by a trusted key.
    Remote,
    /// Linked now; `stored`: also written to the disk cache; `uploaded`:
    /// also signed and written to the remote store (a writer's link).
    Linked {
        /// Whether it was also written to the disk cache.
        stored: bool,
        /// Whether it was also uploaded to the remote store.
        uploaded: bool,
    },
}

impl Source {
    /// The tier's name, as `tracing` events and logs give it: `memory`,
    /// `disk`, `remote`, `linked`.
    pub fn tier(self) -> &'static str {
        match self {
            Source::Memory => "memory",
            Source::Disk => "disk",
            Source::Remote => "remote",
            Source::Linked { .. } => "linked",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Memory => f.write_str("this process's memory cache"),
            Source::Disk => f.write_str("the disk cache"),
            Source::Remote => f.write_str("the remote cache (signed by a trusted key)"),
            Source::Linked { stored, uploaded } => {
                f.write_str("linked here")?;
                match (stored, uploaded) {
                    (true, true) => {
                        f.write_str(" (stored on disk and uploaded to the remote store)")
                    }
                    (true, false) => f.write_str(" (stored on disk)"),
                    (false, true) => f.write_str(" (uploaded to the remote store)"),
                    (false, false) => Ok(()),
                }
            }
        }
    }
}

/// What the cubin caches and links did in this process: counters a program
/// reads without a `tracing` subscriber.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CubinStats {
    /// Cubins found in this process's memory cache.
    pub memory_hits: u64,
    /// Cubins read from the disk cache.
    pub disk_hits: u64,
    /// Cubins loaded from the remote store (signed by a trusted key).
    pub remote_hits: u64,
    /// Links (LTO, or PTX compiled whole) that made a cubin.
    pub links: u64,
    /// Links that failed.
    pub link_failures: u64,
    /// The time those links took, in all.
    pub link_time: std::time::Duration,
}

pub(super) static MEMORY_HITS: AtomicU64 = AtomicU64::new(0);
pub(super) static DISK_HITS: AtomicU64 = AtomicU64::new(0);
pub(super) static REMOTE_HITS: AtomicU64 = AtomicU64::new(0);
pub(super) static LINKS: AtomicU64 = AtomicU64::new(0);
pub(super) static LINK_FAILURES: AtomicU64 = AtomicU64::new(0);
pub(super) static LINK_NANOS: AtomicU64 = AtomicU64::new(0);

/// The cubin caches' and links' counts so far, in this process.
pub fn stats() -> CubinStats {
    CubinStats {
        memory_hits: MEMORY_HITS.load(Ordering::Relaxed),
        disk_hits: DISK_HITS.load(Ordering::Relaxed),
        remote_hits: REMOTE_HITS.load(Ordering::Relaxed),
        links: LINKS.load(Ordering::Relaxed),
        link_failures: LINK_FAILURES.load(Ordering::Relaxed),
        link_time: std::time::Duration::from_nanos(LINK_NANOS.load(Ordering::Relaxed)),
    }
}

/// Counts a cubin from `source` and says it to `tracing` (target
/// `ptxspec::cubin`: the tier, the architecture, the size).
pub(super) fn found(source: Source, arch: u32, bytes: usize) {
    let counter = match source {
        Source::Memory => &MEMORY_HITS,
        Source::Disk => &DISK_HITS,
        Source::Remote => &REMOTE_HITS,
        Source::Linked { .. } => return,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(target: "ptxspec::cubin", tier = source.tier(), outcome = "hit", arch, bytes);
    crate::trace::instant(
        &format!("cubin look-up: {} hit", source.tier()),
        "cache",
        &[
            ("tier", crate::trace::Arg::Text(source.tier())),
            ("arch", crate::trace::Arg::Number(arch.into())),
            ("bytes", crate::trace::Arg::Number(bytes as u64)),
        ],
    );
}

/// Says that `tier` did not hold the cubin.
pub(super) fn missed(tier: &'static str, arch: u32) {
    tracing::debug!(target: "ptxspec::cubin", tier, outcome = "miss", arch);
    crate::trace::instant(
        &format!("cubin look-up: {tier} miss"),
        "cache",
        &[
            ("tier", crate::trace::Arg::Text(tier)),
            ("arch", crate::trace::Arg::Number(arch.into())),
        ],
    );
}
