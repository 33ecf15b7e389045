//! The tiers of a cache a look-up walks in order — this process's memory,
//! the disk cache, the fleet's store — each asked once; the tiers above the
//! one that held the bytes filled from it; what each tier did told to one
//! [`Observer`]. Cubins (`lookup.rs`) walk all three; compiled units
//! (`compile::unit_cache`) memory and disk.

use std::sync::Arc;

use super::background;
use super::cubin_cache::{DiskCache, MemoryCache};
use super::remote;
use crate::digest::Digest;

/// One tier of a cache.
pub(crate) enum Tier {
    /// This process's memory.
    Memory,
    /// The disk cache, and the key there.
    Disk(DiskCache, Digest),
    /// The fleet's store, and the key there.
    Remote(&'static remote::Remote, Digest),
}

/// What a tier gave the walk.
enum Gave {
    /// The bytes it holds.
    Bytes(Arc<Vec<u8>>),
    /// Nothing; from the store, perhaps this process's lease on linking it
    /// for the fleet.
    Nothing(Option<remote::Lease>),
}

impl Tier {
    /// Its name in counts, the trace and messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Tier::Memory => "memory",
            Tier::Disk(..) => "disk",
            Tier::Remote(..) => "remote",
        }
    }

    /// What it holds under memory key `key`: asked once (the store's
    /// look-up may wait for another process's link, and takes the lease
    /// where this process is to link).
    fn get(&self, key: &[u8], arch: u32) -> Gave {
        match self {
            Tier::Memory => match MemoryCache::global().get(key) {
                Some(hit) => Gave::Bytes(hit),
                None => Gave::Nothing(None),
            },
            Tier::Disk(cache, disk_key) => match cache.get(disk_key) {
                Some(bytes) => Gave::Bytes(Arc::new(bytes)),
                None => Gave::Nothing(None),
            },
            Tier::Remote(r, remote_key) => match remote::fetch(r, remote_key, arch) {
                remote::Fetched::Cubin(bytes) => Gave::Bytes(Arc::new(bytes)),
                remote::Fetched::Link(lease) => Gave::Nothing(lease),
            },
        }
    }

    /// Keeps what a tier below gave: in memory at once; on disk after
    /// the look-up, off its path (a folder check, a file, a rename and a
    /// trim of the folder). The store is filled by the link's upload alone.
    pub(crate) fn fill(&self, key: &[u8], bytes: &Arc<Vec<u8>>) {
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

/// What a walk tells its observer.
pub(crate) trait Observer {
    /// What a tier's observation can fail with (a setting read then).
    type Error;
    /// `tier` held `bytes` (of memory key `key`), and they were usable.
    fn hit(&self, tier: &Tier, key: &[u8], bytes: &[u8]) -> Result<(), Self::Error>;
    /// `tier` held nothing usable.
    fn miss(&self, tier: &Tier);
}

/// Where a walk ended.
pub(crate) enum Walk<T> {
    /// A tier held usable bytes (`usable`'s reading of them: `value`); the
    /// tiers above it are filled.
    Found {
        value: T,
        bytes: Arc<Vec<u8>>,
        tier: Tier,
    },
    /// No tier did: the tiers walked, in order, for the maker's stores, and
    /// the fleet's lease on making it, where the store gave this process one.
    Missed {
        walked: Vec<Tier>,
        lease: Option<remote::Lease>,
    },
}

/// Walks `tiers` in order for memory key `key` (`arch`: the store's), each
/// asked once: the first that holds bytes `usable` reads (bytes it cannot
/// read are a miss) ends the walk, the tiers before it filled. A tier that
/// cannot be made (a setting that is not valid) ends it with that error.
pub(crate) fn walk<O: Observer, T>(
    tiers: impl Iterator<Item = Result<Tier, O::Error>>,
    key: &[u8],
    arch: u32,
    seen: &O,
    usable: impl Fn(&[u8]) -> Option<T>,
) -> Result<Walk<T>, O::Error> {
    let mut walked: Vec<Tier> = Vec::with_capacity(3);
    let mut lease = None;
    for tier in tiers {
        let tier = tier?;
        match tier.get(key, arch) {
            Gave::Bytes(bytes) => {
                if let Some(value) = usable(&bytes) {
                    seen.hit(&tier, key, &bytes)?;
                    for above in &walked {
                        above.fill(key, &bytes);
                    }
                    return Ok(Walk::Found { value, bytes, tier });
                }
                seen.miss(&tier);
            }
            Gave::Nothing(leased) => {
                seen.miss(&tier);
                lease = lease.or(leased);
            }
        }
        walked.push(tier);
    }
    Ok(Walk::Missed { walked, lease })
}
