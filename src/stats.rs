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
    /// ([`AdaptiveArguments`](crate::bundle::AdaptiveArguments)) kept:
    /// linked, loaded, and timed faster than the generic code (or kept
    /// without timing, where the policy says so).
    pub adapted_variants: u64,
    /// Variants linked and then dropped: not faster than the generic code
    /// beyond the noise when timed on their launches (or an earlier
    /// process's trial found so, in the tier profile; or, counted by node,
    /// a trial of a graph's replays kept the graph as captured).
    pub variants_not_faster: u64,
    /// Variants of adaptive arguments not yet decided now: linking,
    /// waiting for the fleet's verdict (another process times them), or on
    /// trial (a launch trial goes on with its launches: a variant whose
    /// arguments are then only replayed in graphs stays on trial, and the
    /// graphs decide for their nodes — `GraphNode::awaits_variant`). A
    /// program that wants its code settled before it measures waits for
    /// none (one that only replays graphs, for its nodes).
    pub variants_undecided: u64,
    /// Launches timed by the trials of variants (each ran the generic code
    /// or a variant between two CUDA events): what the guard cost.
    pub timed_launches: u64,
    /// Launches that ran such a variant (the others ran the generic code).
    pub adapted_launches: u64,
    /// CUDA graph nodes switched to such a variant after their capture (by
    /// its launches' trial, or by a trial of the graph's replays).
    pub adapted_graph_nodes: u64,
    /// Replays of graphs timed by the trials of their waiting nodes on
    /// their variants against the graph as captured (a graph that only
    /// replays decides so): what that guard cost.
    pub timed_replays: u64,
    /// Kernels (per queue) whose launches an adapting bundle does not adapt,
    /// by reason, in the order of [`NotAdapted::ALL`]; each is also said
    /// once per kernel and reason to `tracing` (target `ptxspec::adapt`).
    pub not_adapted: [(NotAdapted, u64); NotAdapted::ALL.len()],
    /// Times code and memory that queued or captured work might still use
    /// were kept until the process ends, because nothing could say when
    /// that work had run (an event that could not be waited for): leaked
    /// rather than freed under a kernel, each also a `tracing` warning
    /// (target `ptxspec::runtime`).
    pub kept_until_exit: u64,
    /// Launch plans made by queues: each a kernel's code found (loaded
    /// where no module held it) and its launches' layout made — once per
    /// kernel, bundle and queue while a queue's launches go round no more
    /// kernels than it keeps plans for (64); past that, again for those
    /// launched least recently.
    pub launch_plans_made: u64,
    /// Modules loaded into contexts (a kernel's code, a variant's, a
    /// tier's): each a driver call that waits for the GPU's queued work.
    pub modules_loaded: u64,
    /// The choices that changed which code runs (each adapted variant's
    /// verdict: LTO, PTX or the generic code) that this process made or
    /// took, and the SHA-256 of their table ([`crate::choices::made`]):
    /// two runs, or the ranks of one job, that ran the same code have the
    /// same digest.
    pub choices: u64,
    /// See [`choices`](Self::choices).
    pub choices_digest: [u8; 32],
}

/// Why the launches of a kernel are not adapted to their arguments though
/// its bundle asks for it ([`AdaptiveArguments`](crate::bundle::AdaptiveArguments)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotAdapted {
    /// The launch runs other code than the build's own: chosen by a
    /// selector, or a tier's code.
    OtherCode,
    /// The image has specialization constants whose values travel with
    /// each launch (an emulated or tiered build): build it `Native` or
    /// `Lto` for its arguments to be adapted to.
    ValuesTravelWithLaunches,
    /// The kernel's parameters could not be read from its PTX.
    ParametersUnknown,
    /// No parameter may be fixed: each is a pointer, the handler, an
    /// aggregate over 64 bytes, or left out by the policy's `params`.
    NothingToFix,
    /// The policy allows no variant (`max_variants` is 0).
    NoVariantsAllowed,
    /// Every watched argument took more distinct values than the policy's
    /// `max_distinct`: only the variants made before run.
    ArgumentsKeepChanging,
    /// A variant of its recurring arguments was not faster than the
    /// generic code (timed on their launches, or by an earlier process):
    /// those launches run the generic code. Counted once per variant.
    NotFaster,
}

impl NotAdapted {
    /// Every reason, in the order of [`Stats::not_adapted`].
    pub const ALL: [NotAdapted; 7] = [
        NotAdapted::OtherCode,
        NotAdapted::ValuesTravelWithLaunches,
        NotAdapted::ParametersUnknown,
        NotAdapted::NothingToFix,
        NotAdapted::NoVariantsAllowed,
        NotAdapted::ArgumentsKeepChanging,
        NotAdapted::NotFaster,
    ];

    /// The reason in words, as `tracing` says it.
    pub fn words(self) -> &'static str {
        match self {
            NotAdapted::OtherCode => {
                "the launch runs other code than the build's (a selector's or a tier's)"
            }
            NotAdapted::ValuesTravelWithLaunches => {
                "its image's constants travel with each launch (an emulated or tiered build): build it Native or Lto"
            }
            NotAdapted::ParametersUnknown => "its parameters could not be read from its PTX",
            NotAdapted::NothingToFix => {
                "no parameter may be fixed (pointers, the handler, aggregates over 64 bytes, or left out by params)"
            }
            NotAdapted::NoVariantsAllowed => "the policy allows no variant (max_variants is 0)",
            NotAdapted::ArgumentsKeepChanging => {
                "every watched argument took more values than max_distinct"
            }
            NotAdapted::NotFaster => {
                "a variant of its recurring arguments ran no faster than the generic code (timed on their launches)"
            }
        }
    }
}

#[allow(clippy::declare_interior_mutable_const)] // only to repeat it
const ZERO: AtomicU64 = AtomicU64::new(0);
pub(crate) static NOT_ADAPTED: [AtomicU64; NotAdapted::ALL.len()] = [ZERO; NotAdapted::ALL.len()];

/// Counts and says (once per kernel and reason) that `kernel`'s launches
/// are not adapted.
pub(crate) fn not_adapted(kernel: &str, why: NotAdapted) {
    NOT_ADAPTED[why as usize].fetch_add(1, Ordering::Relaxed);
    static SAID: std::sync::Mutex<Vec<(String, NotAdapted)>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
    // Bounded: a program with more kernels than this stops naming them.
    if said.len() < 1024 && !said.iter().any(|(k, w)| k == kernel && *w == why) {
        said.push((kernel.to_string(), why));
        tracing::info!(
            target: "ptxspec::adapt",
            kernel,
            reason = why.words(),
            "launches not adapted to their arguments"
        );
    }
}

pub(crate) static ADAPTED_VARIANTS: AtomicU64 = AtomicU64::new(0);
pub(crate) static ADAPTED_LAUNCHES: AtomicU64 = AtomicU64::new(0);
pub(crate) static VARIANTS_NOT_FASTER: AtomicU64 = AtomicU64::new(0);
pub(crate) static TIMED_LAUNCHES: AtomicU64 = AtomicU64::new(0);
pub(crate) static ADAPTED_GRAPH_NODES: AtomicU64 = AtomicU64::new(0);
pub(crate) static TIMED_REPLAYS: AtomicU64 = AtomicU64::new(0);
pub(crate) static TIER_UPS: AtomicU64 = AtomicU64::new(0);
pub(crate) static TIER_UP_FAILURES: AtomicU64 = AtomicU64::new(0);
pub(crate) static KEPT_UNTIL_EXIT: AtomicU64 = AtomicU64::new(0);
pub(crate) static LAUNCH_PLANS_MADE: AtomicU64 = AtomicU64::new(0);
pub(crate) static MODULES_LOADED: AtomicU64 = AtomicU64::new(0);
pub(crate) static VARIANTS_UNDECIDED: AtomicU64 = AtomicU64::new(0);

/// What ptxspec did in this process so far. Cheap (atomic loads, and the
/// choices' count and digest, kept as each choice is made, under one
/// lock): a program may export it as metrics on every scrape.
pub fn stats() -> Stats {
    let (choices, choices_digest) = ptxspec_core::choices::made_count_and_digest();
    Stats {
        cubins: ptxspec_core::lto::stats(),
        remote: ptxspec_core::lto::remote::stats(),
        units: ptxspec_core::compile::unit_cache_stats(),
        tier_ups: TIER_UPS.load(Ordering::Relaxed),
        tier_up_failures: TIER_UP_FAILURES.load(Ordering::Relaxed),
        adapted_variants: ADAPTED_VARIANTS.load(Ordering::Relaxed),
        adapted_launches: ADAPTED_LAUNCHES.load(Ordering::Relaxed),
        variants_not_faster: VARIANTS_NOT_FASTER.load(Ordering::Relaxed),
        variants_undecided: VARIANTS_UNDECIDED.load(Ordering::Relaxed),
        timed_launches: TIMED_LAUNCHES.load(Ordering::Relaxed),
        adapted_graph_nodes: ADAPTED_GRAPH_NODES.load(Ordering::Relaxed),
        timed_replays: TIMED_REPLAYS.load(Ordering::Relaxed),
        not_adapted: NotAdapted::ALL.map(|r| (r, NOT_ADAPTED[r as usize].load(Ordering::Relaxed))),
        kept_until_exit: KEPT_UNTIL_EXIT.load(Ordering::Relaxed),
        launch_plans_made: LAUNCH_PLANS_MADE.load(Ordering::Relaxed),
        modules_loaded: MODULES_LOADED.load(Ordering::Relaxed),
        choices: choices as u64,
        choices_digest: choices_digest.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each reason counts in its own slot, which `stats()` names by it.
    #[test]
    fn every_reason_counts_where_stats_names_it() {
        for (i, why) in NotAdapted::ALL.into_iter().enumerate() {
            assert_eq!(why as usize, i, "{why:?}");
            let before = stats().not_adapted[i];
            not_adapted("a kernel", why);
            let after = stats().not_adapted[i];
            assert_eq!((after.0, after.1 - before.1), (why, 1));
        }
    }
}
