//! A cubin's look-up, as one walk: the tiers in order — this process's
//! memory, the disk cache, the fleet's store — each asked once, and the
//! link after them; the tiers above the one that held the cubin filled from
//! it. What the walk saw is told to one observer ([`Seen`]): the counts
//! (`stats`), the trace, the fleet's tallies and publishing, so that no
//! tier's code counts or publishes by hand.

use std::sync::Arc;

use super::cubin_cache::{self, DiskCache, MemoryCache};
use super::publish::{self, PUBLISH_HITS, publish_hit, published};
use super::stats::{LINK_FAILURES, LINK_NANOS, LINKS, found, missed};
use super::{CUBINS, Cubin, Published, Source, background, disk_key, remote, remote_key};
use crate::digest::Digest;
use crate::toolkit::{ToolkitError, nvjitlink};
use std::sync::atomic::Ordering;

/// One tier of the cubin caches.
enum Tier {
    /// This process's memory.
    Memory,
    /// The disk cache, and the cubin's key there.
    Disk(DiskCache, Digest),
    /// The fleet's store, and the cubin's key there.
    Remote(&'static remote::Remote, Digest),
}

/// What a tier gave the walk.
enum Gave {
    /// The cubin.
    Cubin(Arc<Vec<u8>>),
    /// Nothing; from the store, perhaps this process's lease on linking it
    /// for the fleet.
    Nothing(Option<remote::Lease>),
}

impl Tier {
    /// Where a cubin this tier gave came from.
    fn source(&self) -> Source {
        match self {
            Tier::Memory => Source::Memory,
            Tier::Disk(..) => Source::Disk,
            Tier::Remote(..) => Source::Remote,
        }
    }

    /// What it holds under memory key `key`: asked once (the store's
    /// look-up may wait for another process's link, and takes the lease
    /// where this process is to link).
    fn get(&self, key: &[u8], arch: u32) -> Gave {
        match self {
            Tier::Memory => match MemoryCache::global().get(key) {
                Some(hit) => Gave::Cubin(hit),
                None => Gave::Nothing(None),
            },
            Tier::Disk(cache, disk_key) => match cache.get(disk_key) {
                Some(bytes) => Gave::Cubin(Arc::new(bytes)),
                None => Gave::Nothing(None),
            },
            Tier::Remote(r, remote_key) => match remote::fetch(r, remote_key, arch) {
                remote::Fetched::Cubin(bytes) => Gave::Cubin(Arc::new(bytes)),
                remote::Fetched::Link(lease) => Gave::Nothing(lease),
            },
        }
    }

    /// Keeps a cubin a tier below gave: in memory at once; on disk after
    /// the look-up, off its path (a folder check, a file, a rename and a
    /// trim of the folder). The store is filled by the link's upload alone.
    fn fill(&self, key: &[u8], bytes: &Arc<Vec<u8>>) {
        match self {
            Tier::Memory => MemoryCache::global().insert(key.to_vec(), Arc::clone(bytes)),
            Tier::Disk(cache, disk_key) => {
                let (cache, disk_key, bytes) = (cache.clone(), *disk_key, Arc::clone(bytes));
                background::after(move || {
                    cache.put(&disk_key, &bytes);
                });
            }
            Tier::Remote(..) => {}
        }
    }
}

/// The observer of a look-up: what each tier did, counted, traced, told to
/// the fleet's tallies and — where publishing is on — the store made sure
/// to hold a cubin found in this machine's caches.
struct Seen {
    arch: u32,
}

impl Seen {
    fn hit(&self, tier: &Tier, key: &[u8], bytes: &[u8]) -> Result<(), ToolkitError> {
        found(tier.source(), self.arch, bytes.len());
        match tier {
            // The store's settings are read for a memory hit only where
            // publishing asks for them: a process's every launch finds its
            // cubins in memory.
            Tier::Memory => {
                if PUBLISH_HITS.load(Ordering::Relaxed) {
                    publish_hit(remote::tier()?, key, self.arch, bytes);
                }
            }
            Tier::Disk(..) => {
                let r = remote::tier()?;
                remote::note(r, "disk hits");
                publish_hit(r, key, self.arch, bytes);
            }
            Tier::Remote(..) => published(Published::AlreadyThere),
        }
        Ok(())
    }

    fn miss(&self, tier: &Tier) {
        missed(
            match tier {
                Tier::Memory => "memory",
                Tier::Disk(..) => "disk",
                Tier::Remote(..) => "remote",
            },
            self.arch,
        );
    }
}

/// The tiers in the order a look-up walks them: memory; then — their
/// settings read only once memory missed (a process's every launch after
/// its first finds its cubins there), a setting that is not valid an error
/// — the disk cache and the fleet's store, where set.
fn tiers(key: &[u8], arch: u32) -> impl Iterator<Item = Result<Tier, ToolkitError>> + '_ {
    let below = std::iter::once_with(move || -> Result<Vec<Tier>, ToolkitError> {
        let disk_key = disk_key(key)?;
        let disk = cubin_cache::DiskSettings::from_env()?.cache(CUBINS);
        let store = remote::tier()?;
        Ok(disk
            .map(|d| Tier::Disk(d, disk_key))
            .into_iter()
            .chain(store.map(|r| Tier::Remote(r, remote_key(key, arch))))
            .collect())
    });
    std::iter::once(Ok(Tier::Memory)).chain(below.flat_map(|tiers| match tiers {
        Ok(tiers) => tiers.into_iter().map(Ok).collect::<Vec<_>>(),
        Err(e) => vec![Err(e)],
    }))
}

/// The cubin of memory key `key` for `sm_<arch>`: from the first tier that
/// holds it — memory, disk, the fleet's store (waiting for another
/// process's link where it holds the lease) — each tier above it filled;
/// or made by `link` and stored in every tier (in the store by writers).
/// A setting of the disk or remote tier that is not valid is an error; a
/// tier that misbehaves is not.
pub(super) fn cached(
    key: Vec<u8>,
    arch: u32,
    link: impl FnOnce() -> Result<nvjitlink::Linked, ToolkitError>,
) -> Result<Cubin, ToolkitError> {
    let seen = Seen { arch };
    let mut walked: Vec<Tier> = Vec::with_capacity(3);
    let mut lease = None;
    for tier in tiers(&key, arch) {
        let tier = tier?;
        match tier.get(&key, arch) {
            Gave::Cubin(bytes) => {
                seen.hit(&tier, &key, &bytes)?;
                for above in &walked {
                    above.fill(&key, &bytes);
                }
                return Ok(Cubin {
                    bytes,
                    source: tier.source(),
                    log: String::new(),
                });
            }
            Gave::Nothing(leased) => {
                seen.miss(&tier);
                lease = lease.or(leased);
            }
        }
        walked.push(tier);
    }
    let (mut disk, mut store) = (None, None);
    for tier in &walked {
        match tier {
            Tier::Memory => {}
            Tier::Disk(cache, disk_key) => disk = Some((cache, disk_key)),
            Tier::Remote(r, remote_key) => store = Some((*r, remote_key, lease.take())),
        }
    }
    let cubin = linked_and_stored(link, arch, disk, store)?;
    Tier::Memory.fill(&key, &cubin.bytes);
    Ok(cubin)
}

/// The cubin `link` makes, counted and timed, stored in the disk cache
/// (under its key) and in the remote store: under the lease this process
/// holds, or — publishing hits — without one where the store lacks it.
fn linked_and_stored(
    link: impl FnOnce() -> Result<nvjitlink::Linked, ToolkitError>,
    arch: u32,
    disk: Option<(&cubin_cache::DiskCache, &Digest)>,
    remote: Option<(&'static remote::Remote, &Digest, Option<remote::Lease>)>,
) -> Result<Cubin, ToolkitError> {
    let started = std::time::Instant::now();
    let mut span = crate::trace::span("link (nvJitLink)", "link");
    span.arg("arch", format!("sm_{arch}"));
    let linked = match link() {
        Ok(linked) => {
            span.arg("bytes", linked.code.len());
            drop(span);
            linked
        }
        Err(e) => {
            span.arg("failed", &e);
            drop(span);
            LINK_FAILURES.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(target: "ptxspec::link", arch, outcome = "failed", error = %e);
            return Err(e);
        }
    };
    let took = started.elapsed();
    LINKS.fetch_add(1, Ordering::Relaxed);
    LINK_NANOS.fetch_add(
        u64::try_from(took.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    // Counted now, before the upload: a link takes far longer than the
    // count, and a host cut off while it uploads still counts its link
    // (hits are counted after, off their path).
    remote::note_now(remote.as_ref().map(|(r, _, _)| *r), "links");
    let has_remote = remote.is_some();
    let bytes = Arc::new(linked.code);
    let stored = disk.is_some_and(|(d, disk_key)| d.put(disk_key, &bytes));
    let uploaded = match remote {
        None => false,
        Some((_, _, Some(lease))) => lease.store(arch, &bytes),
        // Publishing: a process that could not take the lease (another
        // held it and gave it back without an entry) stores it anyway.
        Some((r, remote_key, None)) if PUBLISH_HITS.load(Ordering::Relaxed) => {
            let outcome = remote::ensure_stored(r, remote_key, arch, &bytes);
            let uploaded = outcome == Published::Uploaded;
            published(outcome);
            uploaded
        }
        Some(_) => false,
    };
    if uploaded {
        published(Published::Uploaded);
    } else if has_remote {
        publish::not_uploaded("the upload failed");
    }
    tracing::info!(
        target: "ptxspec::link",
        arch,
        outcome = "linked",
        duration_us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
        bytes = bytes.len(),
        stored,
        uploaded,
    );
    Ok(Cubin {
        bytes,
        source: Source::Linked { stored, uploaded },
        log: linked.info_log,
    })
}
