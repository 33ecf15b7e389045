//! Adaptive arguments: which by-value kernel arguments a bundle's launches
//! specialize to when they keep recurring ([`AdaptiveArguments`]). The
//! runtime's side — watching launches, linking variants in the background,
//! choosing one — is `runtime::adapt`.

use std::time::Duration;

/// How a bundle adapts its kernels to by-value arguments that keep
/// recurring (opt-in: [`KernelBundle::with_adaptive_arguments`]).
///
/// Each launch's watched arguments are compared with the variants linked
/// so far: where every fixed argument of a variant is byte-equal to the
/// launch's, the variant runs (the kernel with those values as literals,
/// linked through LTO and through PTX — through PTX alone for a kernel with
/// an aggregate parameter other than an empty tag and its `kernel_handler`,
/// which NVVM does not inline into the wrapper that fixes them); any
/// other launch runs the generic
/// code. Once a kernel has been launched for [`after`](Self::after),
/// each argument set launched at least twice is linked on a background
/// thread, in the order the sets were first launched (so that which sets
/// become variants depends on the program's launches, not on their speed:
/// the ranks of a job adapt the same sets), at most
/// [`max_variants`](Self::max_variants) per kernel; an argument that takes more than
/// [`max_distinct`](Self::max_distinct) values is no longer watched (it
/// keeps changing: specializing to it would only link). Results may
/// differ in the last bits between the generic and the adapted code, as
/// between tiers.
///
/// **A variant is kept only where it runs faster** (unless
/// [`with_timing(false)`](Self::with_timing)): specializing can lose — NVVM
/// may unroll a loop whose count it now knows, or spend registers — so
/// once linked, the variant (through LTO and through PTX, where both can
/// be made) and the generic code take turns on the launches of its
/// arguments, each timed with a pair of CUDA events; the judge compares
/// their mean times at 15, 30, 60 and 120 launches each and keeps the
/// fastest variant where it is faster beyond the noise (a variant clearly
/// slower than the fastest leaves the turns from the second look on), and
/// otherwise the generic code stays for those arguments ([`Stats::variants_not_faster`](crate::Stats),
/// [`NotAdapted::NotFaster`](crate::stats::NotAdapted)). Only those
/// launches pay for the guard (two event records each); the verdict is
/// recorded in the tier profile, so that the next process does not time
/// the set again. Pointers and the kernel's handler are never watched;
/// aggregates of at most 64 bytes are (fixed the PTX way). Bundles built in [`SpecMode::Emulated`](crate::SpecMode) or
/// [`SpecMode::Tiered`](crate::SpecMode), whose constants travel with each
/// launch, do not adapt. A CUDA graph's node runs the variant of its
/// arguments, asking for it at the capture where none is made yet and
/// switching to it at a replay once it is kept: a node's launches cannot
/// be timed apart from the graph's, so a node takes a verdict given by
/// launches outside graphs (or by the profile); a graph that only replays
/// times its replays in turns once its nodes' variants are linked — the
/// nodes on their variants against the graph as captured — and keeps the
/// faster ([`Stats::timed_replays`](crate::Stats)). With timing off, a node
/// switches once the variant is linked, as tiered nodes do.
///
/// [`KernelBundle::with_adaptive_arguments`]: crate::KernelBundle::with_adaptive_arguments
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdaptiveArguments {
    pub(crate) params: Option<Vec<usize>>,
    pub(crate) max_variants: usize,
    pub(crate) max_distinct: usize,
    pub(crate) after: Option<Duration>,
    pub(crate) timed: bool,
}

impl Default for AdaptiveArguments {
    fn default() -> Self {
        AdaptiveArguments::all()
    }
}

impl AdaptiveArguments {
    /// Watch every by-value parameter of each kernel that can be fixed:
    /// scalars, and aggregates of at most 64 bytes.
    pub fn all() -> Self {
        AdaptiveArguments {
            params: None,
            max_variants: 4,
            max_distinct: 8,
            after: None,
            timed: true,
        }
    }

    /// Watch only these parameters (indices counting a kernel's
    /// parameters from 0, as PTX numbers `KERNEL_param_N` and `ptxspec
    /// specialize --arg` does); pointers, the handler and larger
    /// aggregates among them are left out.
    pub fn only(params: &[usize]) -> Self {
        AdaptiveArguments {
            params: Some(params.to_vec()),
            ..AdaptiveArguments::all()
        }
    }

    /// At most `n` variants per kernel and queue (default 4).
    pub fn with_max_variants(mut self, n: usize) -> Self {
        self.max_variants = n;
        self
    }

    /// Stop watching an argument once it took more than `n` values
    /// (default 8).
    pub fn with_max_distinct(mut self, n: usize) -> Self {
        self.max_distinct = n;
        self
    }

    /// Link recurring argument sets once the kernel has been launched for
    /// `after` (default: the tiered mode's `PTXSPEC_TIER_AFTER_MS`).
    pub fn with_after(mut self, after: Duration) -> Self {
        self.after = Some(after);
        self
    }

    /// Whether a variant is timed against the generic code before it is
    /// kept (default `true`). With `false`, every variant linked runs —
    /// through LTO where the kernel allows it — however fast it is: for a
    /// program that measured its kernels itself, or a test of results.
    pub fn with_timing(mut self, timed: bool) -> Self {
        self.timed = timed;
        self
    }

    /// Whether variants are timed before they are kept.
    pub fn timing(&self) -> bool {
        self.timed
    }

    /// The most variants per kernel.
    pub fn max_variants(&self) -> usize {
        self.max_variants
    }

    /// The most values an argument takes and stays watched.
    pub fn max_distinct(&self) -> usize {
        self.max_distinct
    }

    /// How long an argument set is launched before it is linked.
    pub fn after(&self) -> Duration {
        self.after.unwrap_or_else(super::built::tier::tier_after)
    }
}
