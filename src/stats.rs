//! Counters a program reads without a `tracing` subscriber: what each cache
//! tier found, how many links ran and how long they took, what the remote
//! store refused and why, how often its breaker opened, and the tier-ups.
//! Every count is of this process since it started.

use std::sync::atomic::{AtomicU64, Ordering};

pub use ptxspec_core::compile::UnitCacheStats;
pub use ptxspec_core::lto::CubinStats;
pub use ptxspec_core::lto::remote::RemoteStats;
pub use ptxspec_core::lto::remote::entry::Refusal;

/// What ptxspec did in this process so far ([`stats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Cubins by the tier that held them, and links.
    pub cubins: CubinStats,
    /// The remote store: hits, misses, refusals by reason, breaker trips.
    pub remote: RemoteStats,
    /// Translation units compiled at run time, and their caches' hits.
    pub units: UnitCacheStats,
    /// Tiered kernels whose specialized code was linked (and then loaded
    /// in the background): see `Executable::wait_for_tier_up`.
    pub tier_ups: u64,
    /// Tier-ups whose link failed: the kernel stays emulated (the reason
    /// is in the bundle's build log and a `tracing` warning).
    pub tier_up_failures: u64,
    /// Variants of kernels adapted to recurring by-value arguments
    /// ([`AdaptiveArguments`](crate::bundle::AdaptiveArguments)) linked
    /// and loaded.
    pub adapted_variants: u64,
    /// Launches that ran such a variant (the others ran the generic code).
    pub adapted_launches: u64,
    /// CUDA graph nodes switched to such a variant after their capture.
    pub adapted_graph_nodes: u64,
}

pub(crate) static ADAPTED_VARIANTS: AtomicU64 = AtomicU64::new(0);
pub(crate) static ADAPTED_LAUNCHES: AtomicU64 = AtomicU64::new(0);
pub(crate) static ADAPTED_GRAPH_NODES: AtomicU64 = AtomicU64::new(0);
pub(crate) static TIER_UPS: AtomicU64 = AtomicU64::new(0);
pub(crate) static TIER_UP_FAILURES: AtomicU64 = AtomicU64::new(0);

/// What ptxspec did in this process so far. Cheap (a few atomic loads):
/// a program may export it as metrics on every scrape.
pub fn stats() -> Stats {
    Stats {
        cubins: ptxspec_core::lto::stats(),
        remote: ptxspec_core::lto::remote::stats(),
        units: ptxspec_core::compile::unit_cache_stats(),
        tier_ups: TIER_UPS.load(Ordering::Relaxed),
        tier_up_failures: TIER_UP_FAILURES.load(Ordering::Relaxed),
        adapted_variants: ADAPTED_VARIANTS.load(Ordering::Relaxed),
        adapted_launches: ADAPTED_LAUNCHES.load(Ordering::Relaxed),
        adapted_graph_nodes: ADAPTED_GRAPH_NODES.load(Ordering::Relaxed),
    }
}
