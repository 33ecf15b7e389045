//! `ptxspec cache warm`'s publishing: while it is on, a cubin found in
//! this machine's caches is made sure to be in the remote store too, and
//! each look-up records what it did about the store.

use std::sync::atomic::Ordering;

use super::{remote, remote_key};

/// Whether a cubin found in this machine's caches is also made sure to be
/// in the remote store ([`publish_hits`]).
pub(super) static PUBLISH_HITS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

thread_local! {
    /// What the last cubin look-up of this thread did about the remote
    /// store, while [`publish_hits`] is on ([`take_published`]).
    static PUBLISHED: std::cell::RefCell<Option<Published>> = const { std::cell::RefCell::new(None) };
}

/// What a cubin look-up did about the remote store, for `ptxspec cache
/// warm`, whose job is that the fleet finds the cubins.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Published {
    /// Stored in the store now (linked here, or found in this machine's
    /// caches and missing from the store).
    Uploaded,
    /// The store has it already (a trusted entry).
    AlreadyThere,
    /// It could not be stored: why.
    NotUploaded(String),
}

/// From now on, a cubin found in this process's memory or disk cache is
/// also made sure to be in the remote store (uploaded where the store lacks
/// it), and every look-up records what it did about the store for
/// [`take_published`]. For `ptxspec cache warm`: warm means the fleet can
/// find these, whichever tier the cubin came from.
pub fn publish_hits(on: bool) {
    PUBLISH_HITS.store(on, Ordering::Relaxed);
}

/// What this thread's last cubin look-up did about the remote store, while
/// [`publish_hits`] is on (`None`: there is no remote store, or it was not
/// looked at).
pub fn take_published() -> Option<Published> {
    PUBLISHED.with(|p| p.borrow_mut().take())
}

pub(super) fn published(what: Published) {
    if PUBLISH_HITS.load(Ordering::Relaxed) {
        PUBLISHED.with(|p| *p.borrow_mut() = Some(what));
    }
}

/// Where publishing is on, makes sure the remote store holds a cubin found
/// in this machine's caches.
pub(super) fn publish_hit(
    remote: Option<&'static remote::Remote>,
    key: &[u8],
    arch: u32,
    bytes: &[u8],
) {
    if !PUBLISH_HITS.load(Ordering::Relaxed) {
        return;
    }
    if let Some(r) = remote {
        published(remote::ensure_stored(
            r,
            &remote_key(key, arch),
            arch,
            bytes,
        ));
    }
}

/// Where publishing is on and this look-up said nothing yet: it could not
/// upload, for `why`.
pub(super) fn not_uploaded(why: &str) {
    if PUBLISH_HITS.load(Ordering::Relaxed) {
        PUBLISHED.with(|p| {
            let mut p = p.borrow_mut();
            if p.is_none() {
                *p = Some(Published::NotUploaded(why.into()));
            }
        });
    }
}
