//! A cubin's look-up: the walk through the tiers (`tiers.rs`) — this
//! process's memory, the disk cache, the fleet's store — and the link after
//! them, with the cubins' observer ([`Seen`]): the counts (`stats`), the
//! trace, the fleet's tallies and publishing, so that no tier's code counts
//! or publishes by hand.

use std::sync::Arc;

use super::cubin_cache;
use super::publish::{self, PUBLISH_HITS, publish_hit, published};
use super::stats::{LINK_FAILURES, LINK_NANOS, LINKS, found, missed};
use super::tiers::{Observer, Tier, Walk, walk};
use super::{CUBINS, Cubin, Published, Source, disk_key, remote, remote_key};
use crate::digest::Digest;
use crate::toolkit::{ToolkitError, nvjitlink};
use std::sync::atomic::Ordering;

/// The observer of a look-up: what each tier did, counted, traced, told to
/// the fleet's tallies and — where publishing is on — the store made sure
/// to hold a cubin found in this machine's caches.
struct Seen {
    arch: u32,
}

impl Observer for Seen {
    type Error = ToolkitError;

    fn hit(&self, tier: &Tier, key: &[u8], bytes: &[u8]) -> Result<(), ToolkitError> {
        found(source(tier), self.arch, bytes.len());
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
        missed(tier.name(), self.arch);
    }
}

/// Where a cubin a tier gave came from.
fn source(tier: &Tier) -> Source {
    match tier {
        Tier::Memory => Source::Memory,
        Tier::Disk(..) => Source::Disk,
        Tier::Remote(..) => Source::Remote,
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
    let (walked, mut lease) = match walk(tiers(&key, arch), &key, arch, &seen, |_| Some(()))? {
        Walk::Found { bytes, tier, .. } => {
            return Ok(Cubin {
                bytes,
                source: source(&tier),
                log: String::new(),
            });
        }
        Walk::Missed { walked, lease } => (walked, lease),
    };
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
