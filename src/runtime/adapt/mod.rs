//! Adaptive arguments at launch time ([`crate::bundle::AdaptiveArguments`]):
//! a plan's [`Watch`] compares each launch's watched by-value arguments
//! with the variants linked so far and hands back the variant whose fixed
//! arguments are all byte-equal to the launch's — never another; it counts
//! argument sets that recur and links one on a background thread once it
//! has been launched for the policy's time; it stops watching an argument
//! that keeps changing. The variant keeps the kernel's parameter list, so
//! the launch passes the same layout to either code.

use link::*;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::Arg;
use super::cuda::{self, Bytes};
use super::memory::ArgKind;
use crate::bundle::{AdaptiveArguments, BuiltImage, SpecMode};
use crate::error::Error;
use crate::stats::NotAdapted;
pub(in crate::runtime) use candidate::Candidate;
use ptxspec_core::arguments::{FixedArguments, KernelParams, ParamKind};
use ptxspec_core::digest::{Digest, KeyEncoder};
use ptxspec_core::tier_profile::Kept;
use tracker::Tracker;
pub(in crate::runtime) use trial::Timed;
pub(in crate::runtime) use trial::{Trial, Verdict};
use undecided::Undecided;

mod candidate;
mod link;
mod tracker;
mod trial;
mod undecided;

/// The largest aggregate argument watched, in bytes.
const MAX_AGGREGATE: u32 = 64;

/// Where a graph node waiting for a variant looks: set once the variant
/// is kept (its function) or not (why not).
pub(in crate::runtime) type Pending = Arc<OnceLock<Result<cuda::Function, String>>>;

/// What a graph node captured through an adapting plan runs.
pub(in crate::runtime) enum ForNode<'w> {
    /// The variant kept for its arguments.
    Ready(&'w cuda::Function),
    /// The variant being linked or timed for its arguments: the node
    /// switches to it once it is kept — or, where no launch outside the
    /// graph times it, once a trial of the graph's replays keeps it (its
    /// candidate code, where linked here).
    Pending(Pending, Option<Candidate>),
    /// None (no variant runs for its arguments).
    Generic,
}

/// What a launch runs, as its plan's watch chose it.
pub(in crate::runtime) enum Choice<'w> {
    /// The plan's generic code.
    Generic,
    /// A variant kept for the launch's arguments.
    Variant(&'w cuda::Function),
    /// A launch of a trial: its code (`None`: the generic code) between two
    /// events the launch records on its stream.
    Timed(Timed<'w>),
}

/// A variant's code, made one way.
#[derive(Clone)]
struct Made {
    route: Route,
    function: cuda::Function,
}

impl trial::Code for Made {
    fn function(&self) -> &cuda::Function {
        &self.function
    }
}

/// What a variant's link thread leaves.
struct Linked {
    /// Its code, one per route made (none where the fleet kept the
    /// generic code).
    made: Vec<Made>,
    /// What a trial of another process or host kept, where the fleet's
    /// store holds it: then nothing is timed here (the code made is that
    /// route's alone, or none).
    fleet: Option<Kept>,
    /// The variant's identity, under which a verdict is shared: where a
    /// trial may run (timed), the only case that asks or shares one.
    identity: Option<Digest>,
    /// This process's lease on timing the variant for the fleet, where it
    /// holds one: taken by the trial, which shares its verdict through it
    /// (given back at once where no trial follows).
    lease: std::sync::Mutex<Option<ptxspec_core::lto::TrialLease>>,
}

/// What a variant's code is.
enum VariantState {
    /// Linking and loading on a background thread: its code (one per
    /// route made), or why not. (Loaded there, not by a launch: a launch
    /// holds the queue's lock, and the driver's load takes longer than a
    /// launch may wait.)
    /// (Counted undecided by its link thread, which holds the token until
    /// the link is done: a variant whose arguments only graphs replay is
    /// never advanced past this state by a launch, and its graph decides
    /// for its nodes.)
    Linking(Arc<OnceLock<Result<Linked, String>>>),
    /// Timed against the generic code on its launches.
    Trial(Box<Trial<Made>>, Undecided),
    Ready(cuda::Function),
    /// Not faster than the generic code, or not made: its launches run
    /// the generic code.
    Generic,
}

/// A variant: its fixed arguments, its code, and where graph nodes wait.
struct Variant {
    fixed: Vec<(usize, Vec<u8>)>,
    state: VariantState,
    /// Timed before kept (the policy times, and no earlier trial decided).
    timed: bool,
    /// Recorded in the tier profile once linked for a trial, and again
    /// once kept or dropped (not where the profile gave the verdict).
    record: bool,
    verdict: Pending,
    /// Its identity, once linked: what its trial's verdict is shared
    /// under.
    identity: Option<Digest>,
    /// The fleet's lease on its trial, where this process times it for
    /// the fleet.
    lease: Option<ptxspec_core::lto::TrialLease>,
    /// Its link's result, where this process links it.
    candidate: Option<Candidate>,
}

/// How a variant is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// The image's LTO-IR with a wrapper ([`FixedArguments::wrapper_ir`]).
    Lto,
    /// The build's PTX with the loads made moves.
    Ptx,
}

impl Route {
    fn kept(self) -> Kept {
        match self {
            Route::Lto => Kept::Lto,
            Route::Ptx => Kept::Ptx,
        }
    }
}

/// The adaptive state of one launch plan.
pub(in crate::runtime) struct Watch {
    params: KernelParams,
    built: Arc<BuiltImage>,
    kernel: String,
    /// The queue's context, where the link thread loads each variant.
    ctx: Arc<cudarc::driver::CudaContext>,
    /// The kernel's handler parameter, which is no launch argument.
    handler: Option<usize>,
    arch: u32,
    /// The ways a variant is made: LTO where the image has LTO-IR and NVVM
    /// inlines the kernel into the wrapper (no aggregate parameter but an
    /// empty tag), and PTX; with timing off, the first only.
    routes: Vec<Route>,
    timed: bool,
    tracker: Tracker,
    /// The tracker's variants, in its order.
    variants: Vec<Variant>,
    /// Variants that lost their trial: kept loaded while the plan lives,
    /// since timed launches of them may still be in flight.
    lost: Vec<cuda::Function>,
}

impl Watch {
    /// The watch of `kernel` of `built` for `sm_<arch>`, where the policy
    /// and the build allow one: values that do not travel with launches
    /// (a native or LTO build, or an image without constants), a kernel
    /// whose PTX declares its parameters, and at least one scalar
    /// parameter to watch.
    pub(in crate::runtime) fn new(
        policy: &Arc<AdaptiveArguments>,
        built: &Arc<BuiltImage>,
        kernel: &str,
        arch: u32,
        ctx: &Arc<cudarc::driver::CudaContext>,
    ) -> Result<Box<Watch>, NotAdapted> {
        let image = built.image_data();
        let values_in_code = !image.has_constants()
            || matches!(built.mode(), SpecMode::Native | SpecMode::Lto)
                && built.tier_mode().is_none();
        if !values_in_code {
            return Err(NotAdapted::ValuesTravelWithLaunches);
        }
        let signature = image
            .kernels()
            .iter()
            .find(|k| k.name == kernel)
            .ok_or(NotAdapted::ParametersUnknown)?;
        let handler = signature.handler.map(|h| h.index);
        let params = built
            .kernel_params(kernel)
            .ok_or(NotAdapted::ParametersUnknown)?
            .clone();
        // Every parameter passes through LTO's wrapper (no aggregate but
        // an empty tag and the kernel's handler), or the variant is PTX's
        // alone.
        let through_lto = params
            .params()
            .iter()
            .enumerate()
            .all(|(i, p)| p.passes_through_lto() || Some(i) == handler);
        let mut routes = match image.ltoir().is_some() && through_lto {
            true => vec![Route::Lto, Route::Ptx],
            false => vec![Route::Ptx],
        };
        if !policy.timed {
            routes.truncate(1);
        }
        let watched: Vec<(usize, usize)> = params
            .params()
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                // Scalars, and small aggregates (compared byte by byte on
                // each launch; fixed the PTX way, where the route is PTX).
                let kind = match p {
                    ParamKind::Int { .. } | ParamKind::Float { .. } => true,
                    ParamKind::Aggregate { size, .. } => *size <= MAX_AGGREGATE,
                    // Pointers, and kinds this version does not know.
                    _ => false,
                };
                // Never one the kernel may use as an address: a safe
                // launch gives it device memory, and no address is baked
                // into code.
                Some(*i) != handler
                    && kind
                    && !params.may_hold_address(*i)
                    && policy.params.as_ref().is_none_or(|only| only.contains(i))
            })
            .map(|(i, p)| (i, p.size() as usize))
            .collect();
        if policy.max_variants == 0 {
            return Err(NotAdapted::NoVariantsAllowed);
        }
        if watched.is_empty() {
            return Err(NotAdapted::NothingToFix);
        }
        let mut watch = Box::new(Watch {
            tracker: Tracker::new(policy, &watched),
            params,
            built: Arc::clone(built),
            kernel: kernel.to_string(),
            ctx: Arc::clone(ctx),
            handler,
            arch,
            routes,
            timed: policy.timed,
            variants: Vec::new(),
            lost: Vec::new(),
        });
        // What an earlier process adapted to (the tier profile): linked at
        // once, found in the caches where that process stored them; where
        // its trial kept a route, that route alone and untimed; where it
        // kept the generic code, nothing.
        // A process pinned to a table of choices takes none from the
        // profile: the table decides (LinkJob::run).
        let pinned = ptxspec_core::choices::pinned().is_some();
        for (fixed, kept) in crate::bundle::built::tier::profiled_argument_sets(built, arch, kernel)
        {
            if !watch.tracker.seed(&fixed) {
                continue;
            }
            let kept = if pinned { None } else { kept };
            match kept {
                Some(Kept::Generic) => {
                    let verdict = Pending::default();
                    let _ = verdict.set(Err(NOT_FASTER.into()));
                    watch.variants.push(Variant {
                        fixed,
                        state: VariantState::Generic,
                        timed: false,
                        record: false,
                        verdict,
                        identity: None,
                        lease: None,
                        candidate: None,
                    });
                }
                Some(kept) => {
                    let route = match kept {
                        Kept::Lto if watch.routes.contains(&Route::Lto) => Route::Lto,
                        _ => Route::Ptx,
                    };
                    watch.link(fixed, vec![route], false, false);
                }
                None => {
                    let routes = watch.routes.clone();
                    watch.link(fixed, routes, watch.timed, true);
                }
            }
        }
        Ok(watch)
    }

    /// What this launch runs: the variant kept for its arguments, or a
    /// turn of its trial; otherwise the generic code, after counting the
    /// launch's argument set. The queue's context is current.
    #[inline]
    pub(in crate::runtime) fn choose(&mut self, args: &[Arg<'_>]) -> Choice<'_> {
        let value = launch_values(args, self.handler);
        if let Some(at) = self.tracker.matching(value) {
            return self.run(at);
        }
        let was_stopped = self.tracker.stopped();
        if let Some(fixed) = self.tracker.count(value, Instant::now()) {
            let routes = self.routes.clone();
            self.link(fixed, routes, self.timed, true);
        }
        if self.tracker.stopped() && !was_stopped {
            crate::stats::not_adapted(&self.kernel, NotAdapted::ArgumentsKeepChanging);
        }
        Choice::Generic
    }

    /// The links of this watch's variants still under way (each a
    /// [`Candidate`], which says when its link is done): what a queue's
    /// `prepare` waits for.
    pub(in crate::runtime) fn links_under_way(&self) -> Vec<Candidate> {
        self.variants
            .iter()
            .filter_map(|v| match &v.state {
                VariantState::Linking(cell) => Some(Candidate(Arc::clone(cell))),
                _ => None,
            })
            .collect()
    }

    /// What a launch being captured runs: a graph node's arguments stay
    /// the same for the graph's life — the recurrence the watch waits for
    /// — so the variant of its arguments is used where kept, else asked
    /// for now (within the bound) and the node switches to it when kept.
    pub(in crate::runtime) fn for_node(&mut self, args: &[Arg<'_>]) -> ForNode<'_> {
        let value = launch_values(args, self.handler);
        let at = match self.tracker.matching(value) {
            Some(at) => at,
            None => {
                let Some(fixed) = self.tracker.watched_values(value) else {
                    return ForNode::Generic;
                };
                if !self.tracker.seed(&fixed) {
                    return ForNode::Generic;
                }
                let routes = self.routes.clone();
                self.link(fixed, routes, self.timed, true);
                self.variants.len() - 1
            }
        };
        self.advance(at);
        let Some(v) = self.variants.get(at) else {
            return ForNode::Generic;
        };
        match &v.state {
            VariantState::Ready(f) => {
                crate::stats::ADAPTED_LAUNCHES.fetch_add(1, Ordering::Relaxed);
                ForNode::Ready(f)
            }
            VariantState::Linking(..) | VariantState::Trial(..) => {
                ForNode::Pending(Arc::clone(&v.verdict), v.candidate.clone())
            }
            VariantState::Generic => ForNode::Generic,
        }
    }

    /// Variant `at`'s code for this launch: the variant kept, a turn of
    /// its trial, or the generic code.
    fn run(&mut self, at: usize) -> Choice<'_> {
        self.advance(at);
        match self.variants.get_mut(at).map(|v| &mut v.state) {
            Some(VariantState::Ready(f)) => {
                crate::stats::ADAPTED_LAUNCHES.fetch_add(1, Ordering::Relaxed);
                Choice::Variant(f)
            }
            Some(VariantState::Trial(t, _)) => match t.next() {
                Some(timed) => {
                    crate::stats::TIMED_LAUNCHES.fetch_add(1, Ordering::Relaxed);
                    Choice::Timed(timed)
                }
                None => Choice::Generic,
            },
            _ => Choice::Generic,
        }
    }

    /// Moves variant `at` on where it can: a link done to its trial (or,
    /// untimed, to its code), a trial with its samples to its verdict.
    fn advance(&mut self, at: usize) {
        let Watch {
            variants,
            kernel,
            ctx,
            lost,
            built,
            arch,
            ..
        } = self;
        let Some(v) = variants.get_mut(at) else {
            return;
        };
        if let VariantState::Linking(cell) = &v.state {
            let Some(done) = cell.get() else { return };
            v.state = match done {
                Err(e) => {
                    failed(kernel, e);
                    let _ = v.verdict.set(Err(e.clone()));
                    VariantState::Generic
                }
                Ok(linked) => {
                    v.identity = linked.identity;
                    // Where no trial follows, the lease goes back now (on
                    // the background thread): the fleet's waiters then
                    // time for themselves.
                    let lease = linked.lease.lock().ok().and_then(|mut l| l.take());
                    match (linked.fleet, linked.made.first()) {
                        // Decided by the fleet or a pinned table (counted,
                        // and given to the graph nodes waiting, by the link
                        // thread): a choice of this process's from now on.
                        (Some(kept), first) => {
                            if let Some(id) = &linked.identity {
                                ptxspec_core::choices::record(id, *arch, kernel, kept);
                            }
                            record(built, *arch, kernel, &v.fixed, Some(kept));
                            match first {
                                Some(m) => VariantState::Ready(m.function.clone()),
                                None => VariantState::Generic,
                            }
                        }
                        (None, None) => VariantState::Generic,
                        // Kept untimed by the link thread.
                        (None, Some(first)) if !v.timed => {
                            if v.record {
                                record(built, *arch, kernel, &v.fixed, None);
                            }
                            VariantState::Ready(first.function.clone())
                        }
                        (None, Some(_)) => match Trial::new(ctx, linked.made.to_vec()) {
                            Ok(t) => {
                                v.lease = lease;
                                VariantState::Trial(Box::new(t), Undecided::new())
                            }
                            Err(e) => {
                                let why = format!("its trial's events were not made ({e})");
                                failed(kernel, &why);
                                let _ = v.verdict.set(Err(why));
                                VariantState::Generic
                            }
                        },
                    }
                }
            };
        }
        let VariantState::Trial(t, _) = &mut v.state else {
            return;
        };
        let verdict = match t.harvest() {
            Ok(None) => return,
            Ok(Some(verdict)) => Ok(verdict),
            Err(e) => Err(e),
        };
        let VariantState::Trial(t, _) = std::mem::replace(&mut v.state, VariantState::Generic)
        else {
            return;
        };
        let means = t.means();
        let mut made = t.into_variants();
        trial_on_the_trace(kernel, &made, &means);
        let kept = match verdict {
            Ok(Verdict::Variant(i)) => made.swap_remove(i),
            Ok(Verdict::Generic) => {
                tracing::info!(
                    target: "ptxspec::adapt",
                    kernel = kernel.as_str(),
                    generic_ms = means[0],
                    variants_ms = ?&means[1..],
                    "variant dropped: no faster than the generic code"
                );
                not_faster(kernel, &v.verdict);
                record(built, *arch, kernel, &v.fixed, Some(Kept::Generic));
                share(v.identity, v.lease.take(), *arch, kernel, Kept::Generic);
                lost.extend(made.into_iter().map(|m| m.function));
                return;
            }
            Err(e) => {
                let why = format!("its trial's events failed ({e})");
                failed(kernel, &why);
                let _ = v.verdict.set(Err(why));
                lost.extend(made.into_iter().map(|m| m.function));
                return;
            }
        };
        tracing::info!(
            target: "ptxspec::adapt",
            kernel = kernel.as_str(),
            route = ?kept.route,
            generic_ms = means[0],
            variants_ms = ?&means[1..],
            "variant kept: faster than the generic code"
        );
        record(built, *arch, kernel, &v.fixed, Some(kept.route.kept()));
        share(v.identity, v.lease.take(), *arch, kernel, kept.route.kept());
        lost.extend(made.into_iter().map(|m| m.function));
        let route = format!("{:?}", kept.route);
        v.state = keep(kernel, &route, &v.verdict, kept.function);
    }
}
