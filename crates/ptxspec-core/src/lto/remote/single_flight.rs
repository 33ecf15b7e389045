//! Single flight across a fleet: a cubin the local caches lack is looked
//! up in the store; on a miss one writer takes the lease on linking it and
//! the others wait for its entry (at most the lease's time), so that a
//! fleet starting at once links each cubin once.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::counters::{HIT_NANOS, HITS, MISSES, WAITED, WRITES};
use super::keys::{lease_key, store_key};
use super::{
    Found, POLL, Remote, ask, best_effort, entry, lease_held, put_sealed, say_once, tally,
};
use crate::digest::Digest;

/// What to do about a cubin the local caches lack.
pub enum Fetched {
    /// The store's trusted cubin (perhaps after waiting for another
    /// process's link).
    Cubin(Vec<u8>),
    /// Link it here; with `Some`, this process holds the lease and stores
    /// the cubin (then gives the lease back) with [`Lease::store`].
    Link(Option<Lease>),
}

/// This process's lease on linking one cubin for the fleet.
pub struct Lease {
    remote: &'static Remote,
    key: Digest,
    token: String,
}

impl Lease {
    /// Stores the cubin this process linked (the lease is given back when
    /// dropped).
    pub fn store(self, arch: u32, cubin: &[u8]) -> bool {
        store_cubin(self.remote, &self.key, arch, cubin)
    }
}

/// Gives the lease back, stored or not (a link that failed frees it for
/// the processes waiting, which then link themselves).
impl Drop for Lease {
    fn drop(&mut self) {
        let r = self.remote;
        best_effort(
            r,
            r.store.release(
                &lease_key(&r.domain, &self.key),
                &self.token,
                r.deadline(&r.budget()),
            ),
        );
    }
}

/// The cubin of `key` and `arch` from the store — single flight across
/// processes and hosts: on a miss a writer takes the lease and links
/// (others that miss meanwhile wait for its entry, at most the lease's
/// time, then link themselves; a lease whose holder died expires). A
/// process that cannot write links without a lease, waiting only where a
/// writer holds one.
pub fn fetch(r: &'static Remote, key: &Digest, arch: u32) -> Fetched {
    let asked = Instant::now();
    let budget = r.budget();
    let first = match ask(r, &budget, key, arch) {
        Found::Cubin(c) => {
            HITS.fetch_add(1, Ordering::Relaxed);
            let ns = u64::try_from(asked.elapsed().as_nanos()).unwrap_or(u64::MAX);
            HIT_NANOS.fetch_add(ns, Ordering::Relaxed);
            tally(r, "remote hits");
            return Fetched::Cubin(c);
        }
        Found::Unavailable => return Fetched::Link(None),
        // A refused entry stays refused: a reader does not look again.
        missed @ (Found::Nothing | Found::Refused) => {
            MISSES.fetch_add(1, Ordering::Relaxed);
            tally(r, "remote misses");
            missed
        }
    };
    let token = format!("{}-{}", std::process::id(), r.now_ms());
    if r.signer.is_some() {
        match r.store.try_lease(
            &lease_key(&r.domain, key),
            &token,
            r.lease,
            r.deadline(&budget),
        ) {
            Ok(true) => return leased(r, key, arch, token),
            Ok(false) => {}
            Err(e) => {
                r.failed(e);
                return Fetched::Link(None);
            }
        }
    } else {
        // A reader waits only for a link under way.
        match lease_held(r, &lease_key(&r.domain, key), &budget) {
            Ok(true) => {}
            // No lease: no link under way — or one that ended between this
            // process's miss and its look at the lease (its entry stored,
            // the lease given back). Look once more before linking here.
            Ok(false) if matches!(first, Found::Refused) => {
                return Fetched::Link(None);
            }
            Ok(false) => {
                return match ask(r, &budget, key, arch) {
                    Found::Cubin(c) => {
                        HITS.fetch_add(1, Ordering::Relaxed);
                        tally(r, "remote hits");
                        Fetched::Cubin(c)
                    }
                    Found::Nothing | Found::Refused | Found::Unavailable => Fetched::Link(None),
                };
            }
            Err(e) => {
                r.failed(e);
                return Fetched::Link(None);
            }
        }
    }
    wait_for_the_holder(r, key, arch, token)
}

/// Waits, at most the lease's time, for the process that holds the lease
/// on `key` to store its entry — polling the store, each poll a look-up of
/// its own — and takes over the lease (as `token`, where this process
/// writes) if the holder gave it back without an entry or died; after the
/// lease's time, links here.
fn wait_for_the_holder(r: &'static Remote, key: &Digest, arch: u32, token: String) -> Fetched {
    let _span = crate::trace::span("lease wait: another process links", "remote");
    let deadline = Instant::now() + r.lease;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(POLL.min(left));
        // Each poll is a look-up of its own, with a whole look-up's bound:
        // the lease's end bounds how long the process waits, never one
        // call (a call given a deadline already past fails as the store's
        // fault, and opened the breaker on a healthy store).
        let poll = r.budget();
        match ask(r, &poll, key, arch) {
            Found::Cubin(c) => {
                HITS.fetch_add(1, Ordering::Relaxed);
                WAITED.fetch_add(1, Ordering::Relaxed);
                tally(r, "remote hits after waiting for another's link");
                return Fetched::Cubin(c);
            }
            Found::Unavailable => return Fetched::Link(None),
            Found::Nothing | Found::Refused => {}
        }
        // The holder gave the lease back without an entry (its link
        // failed), or died and the lease expired: take over.
        if r.signer.is_some()
            && r.store.try_lease(
                &lease_key(&r.domain, key),
                &token,
                r.lease,
                r.deadline(&poll),
            ) == Ok(true)
        {
            return leased(r, key, arch, token);
        }
    }
    // Waiting out another host's lease is not a store failure.
    tracing::info!(
        target: "ptxspec::remote",
        store = %r.store.describe(),
        waited_ms = r.lease.as_millis() as u64,
        "waited out another process's lease: linking here"
    );
    say_once(format!(
        "waited {} ms for another process's link of a cubin and linked it here",
        r.lease.as_millis()
    ));
    Fetched::Link(None)
}

/// What a process that has just taken the lease on `key` does: looks once
/// more, since the holder before it may have stored the entry and given
/// the lease back between this process's miss and its lease (then the
/// lease goes back, and the entry is used); else it links under the lease.
fn leased(r: &'static Remote, key: &Digest, arch: u32, token: String) -> Fetched {
    let lease = Lease {
        remote: r,
        key: *key,
        token,
    };
    let budget = r.budget();
    match ask(r, &budget, key, arch) {
        Found::Cubin(c) => {
            drop(lease);
            HITS.fetch_add(1, Ordering::Relaxed);
            WAITED.fetch_add(1, Ordering::Relaxed);
            tally(r, "remote hits after waiting for another's link");
            Fetched::Cubin(c)
        }
        Found::Nothing | Found::Refused | Found::Unavailable => Fetched::Link(Some(lease)),
    }
}

/// Stores `cubin` (linked for `arch`) under `key`, signed, where this
/// process may write; whether it was stored.
pub(super) fn store_cubin(r: &Remote, key: &Digest, arch: u32, cubin: &[u8]) -> bool {
    let put = put_sealed(
        r,
        &store_key(&r.domain, key),
        cubin.len() as u64 > entry::MAX_CUBIN,
        |signer| entry::seal(signer, key, arch, cubin),
    );
    if put {
        WRITES.fetch_add(1, Ordering::Relaxed);
    }
    put
}
