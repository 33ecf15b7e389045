//! What the remote tier did in this process: its counters, read by
//! [`stats`].

use std::sync::atomic::{AtomicU64, Ordering};

use super::entry;

/// What the remote tier did in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemoteStats {
    /// Entries loaded.
    pub hits: u64,
    /// Keys the store did not have.
    pub misses: u64,
    /// Entries refused (bad signature, another key's or architecture's
    /// cubin, damaged, oversized).
    pub refused: u64,
    /// Entries written.
    pub writes: u64,
    /// Calls that failed or were skipped while the store was paused.
    pub unavailable: u64,
    /// Links this process waited for another's (single flight) and got.
    pub waited: u64,
    /// Times the circuit breaker opened: a call failed and the store was
    /// then not asked for [`PAUSE`](super::PAUSE).
    pub breaker_trips: u64,
    /// Refused entries by reason, in the order of [`entry::Refusal::ALL`].
    pub refused_by: [(entry::Refusal, u64); entry::Refusal::ALL.len()],
    /// Commands the server's ACL refused (each said once, naming the
    /// command and the rule the user needs).
    pub acl_refusals: u64,
    /// Time spent in look-ups that the store answered at once (no wait for
    /// another's link), in nanoseconds: from asking to a checked cubin —
    /// the request, its reply, the signature check.
    pub hit_nanos: u64,
}

impl Default for RemoteStats {
    fn default() -> Self {
        RemoteStats {
            hits: 0,
            misses: 0,
            refused: 0,
            writes: 0,
            unavailable: 0,
            waited: 0,
            breaker_trips: 0,
            refused_by: entry::Refusal::ALL.map(|r| (r, 0)),
            acl_refusals: 0,
            hit_nanos: 0,
        }
    }
}

pub(super) static HITS: AtomicU64 = AtomicU64::new(0);
pub(super) static MISSES: AtomicU64 = AtomicU64::new(0);
pub(super) static REFUSED: AtomicU64 = AtomicU64::new(0);
pub(super) static WRITES: AtomicU64 = AtomicU64::new(0);
pub(super) static UNAVAILABLE: AtomicU64 = AtomicU64::new(0);
pub(super) static WAITED: AtomicU64 = AtomicU64::new(0);
pub(super) static BREAKER_TRIPS: AtomicU64 = AtomicU64::new(0);
pub(super) static ACL_REFUSALS: AtomicU64 = AtomicU64::new(0);
pub(super) static HIT_NANOS: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)] // only to repeat it
const ZERO: AtomicU64 = AtomicU64::new(0);
pub(super) static REFUSED_BY: [AtomicU64; entry::Refusal::ALL.len()] =
    [ZERO; entry::Refusal::ALL.len()];

/// The remote tier's counts so far, in this process.
pub fn stats() -> RemoteStats {
    RemoteStats {
        hits: HITS.load(Ordering::Relaxed),
        misses: MISSES.load(Ordering::Relaxed),
        refused: REFUSED.load(Ordering::Relaxed),
        writes: WRITES.load(Ordering::Relaxed),
        unavailable: UNAVAILABLE.load(Ordering::Relaxed),
        waited: WAITED.load(Ordering::Relaxed),
        breaker_trips: BREAKER_TRIPS.load(Ordering::Relaxed),
        refused_by: entry::Refusal::ALL
            .map(|r| (r, REFUSED_BY[r as usize].load(Ordering::Relaxed))),
        acl_refusals: ACL_REFUSALS.load(Ordering::Relaxed),
        hit_nanos: HIT_NANOS.load(Ordering::Relaxed),
    }
}
