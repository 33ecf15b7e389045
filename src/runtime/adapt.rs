//! Adaptive arguments at launch time ([`crate::bundle::AdaptiveArguments`]):
//! a plan's [`Watch`] compares each launch's watched by-value arguments
//! with the variants linked so far and hands back the variant whose fixed
//! arguments are all byte-equal to the launch's — never another; it counts
//! argument sets that recur and links one on a background thread once it
//! has been launched for the policy's time; it stops watching an argument
//! that keeps changing. The variant keeps the kernel's parameter list, so
//! the launch passes the same layout to either code.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::Arg;
use super::cuda::{self, Bytes};
use super::memory::ArgKind;
use crate::bundle::{AdaptiveArguments, BuiltImage, SpecMode};
use crate::stats::NotAdapted;
use ptxspec_core::arguments::{FixedArguments, KernelParams, ParamKind};

/// The most argument sets counted at once (the oldest goes).
const CANDIDATES: usize = 8;
/// The largest aggregate argument watched, in bytes.
const MAX_AGGREGATE: u32 = 64;
use crate::error::Error;

/// A parameter the tracker compares: its index among the kernel's
/// parameters, its size, and the values it took so far (up to the policy's
/// bound).
struct Watched {
    param: usize,
    size: usize,
    seen: Vec<Vec<u8>>,
}

/// An argument set launched, not linked yet.
struct Candidate {
    /// The watched arguments' bytes, in `Tracker::watched` order.
    key: Vec<u8>,
    since: Instant,
    launches: u32,
}

/// The decisions of adaptation, apart from code and the driver: which
/// variant (by its fixed arguments) a launch's values match, which
/// argument sets recur long enough to be linked, which arguments keep
/// changing. A launch's values are given by kernel parameter index.
pub(in crate::runtime) struct Tracker {
    max_variants: usize,
    max_distinct: usize,
    after: std::time::Duration,
    watched: Vec<Watched>,
    candidates: Vec<Candidate>,
    /// Each variant's fixed arguments (parameter, bytes), by parameter.
    variants: Vec<Vec<(usize, Vec<u8>)>>,
    /// Every argument kept changing: only the variants made so far serve.
    stopped: bool,
    /// Reused for each launch's key (no allocation per launch).
    scratch: Vec<u8>,
}

impl Tracker {
    /// A tracker of parameters `watched` (index, size) under `policy`.
    pub(in crate::runtime) fn new(
        policy: &AdaptiveArguments,
        watched: &[(usize, usize)],
    ) -> Tracker {
        Tracker {
            max_variants: policy.max_variants,
            max_distinct: policy.max_distinct,
            after: policy.after(),
            watched: watched
                .iter()
                .map(|&(param, size)| Watched {
                    param,
                    size,
                    seen: Vec::new(),
                })
                .collect(),
            candidates: Vec::new(),
            variants: Vec::new(),
            stopped: false,
            scratch: Vec::new(),
        }
    }

    /// Takes `fixed` as a variant at once (a set the tier profile holds
    /// from an earlier process), where it fixes watched parameters only,
    /// each with a value of its size, and the bound allows another.
    pub(in crate::runtime) fn seed(&mut self, fixed: &[(usize, Vec<u8>)]) -> bool {
        let fits = !fixed.is_empty()
            && fixed.iter().all(|(param, bytes)| {
                self.watched
                    .iter()
                    .any(|w| w.param == *param && w.size == bytes.len())
            });
        if !fits
            || self.variants.len() >= self.max_variants
            || self.variants.iter().any(|v| v.as_slice() == fixed)
        {
            return false;
        }
        self.variants.push(fixed.to_vec());
        true
    }

    /// The launch's values of the watched parameters, as a variant's fixed
    /// arguments; `None` where one is not a value of its size.
    pub(in crate::runtime) fn watched_values<'v>(
        &self,
        value: impl Fn(usize) -> Option<&'v [u8]>,
    ) -> Option<Vec<(usize, Vec<u8>)>> {
        self.watched
            .iter()
            .map(|w| {
                let bytes = value(w.param).filter(|b| b.len() == w.size)?;
                Some((w.param, bytes.to_vec()))
            })
            .collect()
    }

    /// The variant whose fixed arguments all equal the launch's values.
    #[inline]
    pub(in crate::runtime) fn matching<'v>(
        &self,
        value: impl Fn(usize) -> Option<&'v [u8]>,
    ) -> Option<usize> {
        self.variants.iter().position(|fixed| {
            fixed
                .iter()
                .all(|(param, bytes)| value(*param) == Some(bytes.as_slice()))
        })
    }

    /// Counts a launch that matched no variant, at `now`; where its
    /// argument set has recurred for the policy's time, a new variant of
    /// those values (its fixed arguments), to link. An argument that took
    /// more than the policy's values is no longer watched; with none left,
    /// nothing more is counted.
    pub(in crate::runtime) fn count<'v>(
        &mut self,
        value: impl Fn(usize) -> Option<&'v [u8]>,
        now: Instant,
    ) -> Option<Vec<(usize, Vec<u8>)>> {
        if self.stopped || self.variants.len() >= self.max_variants {
            return None;
        }
        self.scratch.clear();
        let mut i = 0;
        while i < self.watched.len() {
            let w = &mut self.watched[i];
            let bytes = value(w.param).filter(|b| b.len() == w.size)?;
            if !w.seen.iter().any(|s| s == bytes) {
                if w.seen.len() >= self.max_distinct {
                    // It keeps changing: no longer watched; the sets
                    // counted with it no longer compare.
                    tracing::debug!(
                        target: "ptxspec::adapt",
                        param = w.param,
                        "argument keeps changing: no longer adapted to"
                    );
                    self.watched.remove(i);
                    self.candidates.clear();
                    if self.watched.is_empty() {
                        self.stopped = true;
                        return None;
                    }
                    self.scratch.clear();
                    i = 0;
                    continue;
                }
                w.seen.push(bytes.to_vec());
            }
            self.scratch.extend_from_slice(bytes);
            i += 1;
        }
        let at = match self.candidates.iter().position(|c| c.key == self.scratch) {
            Some(at) => at,
            None => {
                if self.candidates.len() >= CANDIDATES {
                    self.candidates.remove(0);
                }
                self.candidates.push(Candidate {
                    key: self.scratch.clone(),
                    since: now,
                    launches: 0,
                });
                self.candidates.len() - 1
            }
        };
        let c = &mut self.candidates[at];
        c.launches += 1;
        if c.launches < 2 || now.duration_since(c.since) < self.after {
            return None;
        }
        let key = self.candidates.remove(at).key;
        let mut fixed = Vec::new();
        let mut from = 0;
        for w in &self.watched {
            fixed.push((w.param, key[from..from + w.size].to_vec()));
            from += w.size;
        }
        self.variants.push(fixed.clone());
        Some(fixed)
    }
}

/// Where a variant's link thread leaves its function (or why not): what a
/// graph node waiting for its variant looks at.
pub(in crate::runtime) type Pending = Arc<OnceLock<Result<cuda::Function, String>>>;

/// What a graph node captured through an adapting plan runs.
pub(in crate::runtime) enum ForNode<'w> {
    /// The variant made for its arguments.
    Ready(&'w cuda::Function),
    /// The variant being linked for its arguments: the node switches to it
    /// once it is there.
    Pending(Pending),
    /// None (no variant can be made for its arguments).
    Generic,
}

/// What a variant's code is.
enum VariantState {
    /// Linking and loading on a background thread: its function, or why
    /// not. (Loaded there, not by a launch: a launch holds the queue's
    /// lock, and the driver's load takes longer than a launch may wait.)
    Linking(Arc<OnceLock<Result<cuda::Function, String>>>),
    Ready(cuda::Function),
    Failed,
}

/// How a variant is made.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    /// The image's LTO-IR with a wrapper ([`FixedArguments::wrapper_ir`]).
    Lto,
    /// The build's PTX with the loads made moves.
    Ptx,
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
    route: Route,
    tracker: Tracker,
    /// The code of each of the tracker's variants, in its order.
    variants: Vec<VariantState>,
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
        let aggregate = params
            .params()
            .iter()
            .any(|p| matches!(p, ParamKind::Aggregate { .. }));
        // LTO where the image has LTO-IR and NVVM inlines the kernel into
        // the wrapper (no aggregate parameter); else the build's PTX with
        // its values as immediates, whatever its mode.
        let route = match image.ltoir().is_some() && !aggregate {
            true => Route::Lto,
            false => Route::Ptx,
        };
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
                Some(*i) != handler
                    && kind
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
            route,
            variants: Vec::new(),
        });
        // What an earlier process adapted to (the tier profile): linked at
        // once, found in the caches where that process stored them.
        for fixed in crate::bundle::tier::profiled_argument_sets(built, arch, kernel) {
            if watch.tracker.seed(&fixed) {
                watch.link(fixed);
            }
        }
        Ok(watch)
    }

    /// The variant this launch runs, if one is ready whose fixed arguments
    /// all equal the launch's; otherwise `None` (the generic code), after
    /// counting the launch's argument set. The queue's context is current.
    #[inline]
    pub(in crate::runtime) fn choose(&mut self, args: &[Arg<'_>]) -> Option<&cuda::Function> {
        let value = launch_values(args, self.handler);
        if let Some(at) = self.tracker.matching(value) {
            return self.ready(at);
        }
        let was_stopped = self.tracker.stopped;
        if let Some(fixed) = self.tracker.count(value, Instant::now()) {
            self.link(fixed);
        }
        if self.tracker.stopped && !was_stopped {
            crate::stats::not_adapted(&self.kernel, NotAdapted::ArgumentsKeepChanging);
        }
        None
    }

    /// What a launch being captured runs: a graph node's arguments stay
    /// the same for the graph's life — the recurrence the watch waits for
    /// — so the variant of its arguments is used where made, else asked
    /// for now (within the bound) and the node switches to it when linked.
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
                self.link(fixed);
                self.variants.len() - 1
            }
        };
        if let Some(VariantState::Linking(cell)) = self.variants.get(at)
            && cell.get().is_none()
        {
            return ForNode::Pending(Arc::clone(cell));
        }
        match self.ready(at) {
            Some(f) => ForNode::Ready(f),
            None => ForNode::Generic,
        }
    }

    /// Variant `at`'s code, loaded once its link is done.
    fn ready(&mut self, at: usize) -> Option<&cuda::Function> {
        let variant = self.variants.get_mut(at)?;
        if let VariantState::Linking(cell) = variant {
            let done = cell.get()?;
            *variant = match done {
                Ok(f) => {
                    crate::stats::ADAPTED_VARIANTS.fetch_add(1, Ordering::Relaxed);
                    VariantState::Ready(f.clone())
                }
                Err(e) => {
                    failed(&self.kernel, e);
                    VariantState::Failed
                }
            };
        }
        match &self.variants[at] {
            VariantState::Ready(f) => {
                crate::stats::ADAPTED_LAUNCHES.fetch_add(1, Ordering::Relaxed);
                Some(f)
            }
            _ => None,
        }
    }

    /// Starts linking the tracker's new variant, `fixed`.
    fn link(&mut self, fixed: Vec<(usize, Vec<u8>)>) {
        let arguments = match FixedArguments::new(&self.params, fixed) {
            Ok(a) => a,
            Err(e) => {
                failed(&self.kernel, &e.to_string());
                self.variants.push(VariantState::Failed);
                return;
            }
        };
        let cell = Arc::new(OnceLock::new());
        let (built, arch, route, out, ctx) = (
            Arc::clone(&self.built),
            self.arch,
            self.route,
            Arc::clone(&cell),
            Arc::clone(&self.ctx),
        );
        // The process's exit waits for the toolkit's first use on the link
        // thread (see `toolkit::exit`), as for a tier's links.
        ptxspec_core::toolkit::exit::guard_this_thread();
        let spawned = std::thread::Builder::new()
            .name("ptxspec-adapt".into())
            .spawn(move || {
                // A launch that links now goes before this variant's link.
                ptxspec_core::toolkit::exit::this_thread_works_in_the_background();
                ptxspec_core::lto::warm_up();
                let started = Instant::now();
                let cubin = link_variant(&built, arch, route, &arguments);
                tracing::info!(
                    target: "ptxspec::adapt",
                    kernel = arguments.kernel(),
                    fixed = arguments.fixed().len(),
                    duration_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                    ok = cubin.is_ok(),
                    "variant linked"
                );
                // Loaded here, in the queue's context (bound on this thread,
                // also for a drop of the function here: this thread is its
                // last owner only where no launch took it).
                let function = cubin.and_then(|c| {
                    ctx.bind_to_thread().map_err(|e| e.to_string())?;
                    load(&c, arguments.kernel()).map_err(|e| e.to_string())
                });
                if function.is_ok() {
                    crate::bundle::tier::record_arguments(
                        &built,
                        arch,
                        arguments.kernel(),
                        arguments.fixed().to_vec(),
                    );
                }
                let _ = out.set(function);
            });
        self.variants.push(match spawned {
            Ok(_) => VariantState::Linking(cell),
            Err(_) => VariantState::Failed,
        });
    }
}

/// A launch's by-value bytes by kernel parameter index (`None` for a
/// parameter whose argument is not a value, or missing).
#[inline]
fn launch_values<'a>(
    args: &'a [Arg<'_>],
    handler: Option<usize>,
) -> impl Fn(usize) -> Option<&'a [u8]> + Copy {
    move |param| match args.get(arg_index(param, handler)).map(|a| &a.0) {
        Some(ArgKind::Value(v)) => Some(v.as_slice()),
        _ => None,
    }
}

/// The launch argument of kernel parameter `param`: the handler is no
/// launch argument.
#[inline]
fn arg_index(param: usize, handler: Option<usize>) -> usize {
    match handler {
        Some(h) if param > h => param - 1,
        _ => param,
    }
}

/// The cubin of `arguments` for `sm_<arch>` the way `route` says.
fn link_variant(
    built: &BuiltImage,
    arch: u32,
    route: Route,
    arguments: &FixedArguments,
) -> Result<Vec<u8>, String> {
    let cubin = match route {
        Route::Lto => built.cubin_with_arguments(arch, arguments),
        Route::Ptx => {
            let ptx = match built.ptx() {
                Some(p) => p.to_string(),
                None => crate::bundle::built::specialized(built.image_data(), built.blob())
                    .map_err(|e| e.to_string())?
                    .to_string(),
            };
            let fixed = arguments.in_ptx(&ptx).map_err(|e| e.to_string())?;
            ptxspec_core::lto::cubin_of_ptx(
                &fixed,
                &format!("{}.ptx", built.image_data().id()),
                arch,
                &Default::default(),
            )
            .map_err(Error::from)
        }
    };
    cubin.map(|c| c.bytes.to_vec()).map_err(|e| e.to_string())
}

/// The variant's kernel from its cubin, loaded in the current context.
fn load(cubin: &[u8], kernel: &str) -> Result<cuda::Function, Error> {
    let (module, _) = cuda::load(kernel, Bytes::Cubin(cubin), false, false)?;
    Arc::new(module).function(kernel)
}

fn failed(kernel: &str, why: &str) {
    tracing::warn!(target: "ptxspec::adapt", kernel, error = why, "variant not made: the generic code runs");
    ptxspec_core::notice::once(format!(
        "adaptive arguments: a variant of kernel {kernel} was not made ({why}); its launches run the generic code"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn policy(after_ms: u64) -> AdaptiveArguments {
        AdaptiveArguments::all().with_after(Duration::from_millis(after_ms))
    }

    /// Values by parameter from a list of (parameter, value) pairs.
    fn values(pairs: &[(usize, u32)]) -> Vec<(usize, [u8; 4])> {
        pairs.iter().map(|&(p, v)| (p, v.to_le_bytes())).collect()
    }

    fn lookup<'v>(v: &'v [(usize, [u8; 4])]) -> impl Fn(usize) -> Option<&'v [u8]> + Copy {
        move |param| v.iter().find(|(p, _)| *p == param).map(|(_, b)| &b[..])
    }

    #[test]
    fn a_set_that_recurs_is_linked_once_after_its_time() {
        let mut t = Tracker::new(&policy(5), &[(3, 4), (4, 4)]);
        let v = values(&[(3, 16), (4, 1)]);
        let t0 = Instant::now();
        assert_eq!(t.count(lookup(&v), t0), None, "once is no recurrence");
        assert_eq!(
            t.count(lookup(&v), t0 + Duration::from_millis(1)),
            None,
            "not yet launched for its time"
        );
        let fixed = t.count(lookup(&v), t0 + Duration::from_millis(6)).unwrap();
        assert_eq!(
            fixed,
            vec![
                (3, 16u32.to_le_bytes().to_vec()),
                (4, 1u32.to_le_bytes().to_vec())
            ]
        );
        assert_eq!(t.matching(lookup(&v)), Some(0));
        let other = values(&[(3, 16), (4, 2)]);
        assert_eq!(t.matching(lookup(&other)), None, "one value differs");
    }

    /// A generated family of launches (three parameters, small domains,
    /// time advancing): a variant matched always has every fixed argument
    /// equal to the launch's, and no more variants are made than the
    /// bound.
    #[test]
    fn a_variant_never_serves_other_values() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for max_variants in [1, 2, 4] {
            let p = policy(2).with_max_variants(max_variants);
            let mut t = Tracker::new(&p, &[(0, 4), (2, 4), (5, 4)]);
            let t0 = Instant::now();
            let mut made = 0;
            for launch in 0..5_000u64 {
                let v = values(&[(0, next(3) as u32), (2, next(2) as u32 * 7), (5, 11)]);
                let now = t0 + Duration::from_millis(launch);
                match t.matching(lookup(&v)) {
                    Some(i) => {
                        for (param, bytes) in &t.variants[i] {
                            assert_eq!(lookup(&v)(*param), Some(bytes.as_slice()));
                        }
                    }
                    None => made += usize::from(t.count(lookup(&v), now).is_some()),
                }
            }
            assert_eq!(made, max_variants, "variants made, bound {max_variants}");
        }
    }

    /// An argument that takes more values than the bound stops being
    /// watched; the others still adapt; with every argument dropped, no
    /// launch is counted any more.
    #[test]
    fn an_argument_that_keeps_changing_is_no_longer_watched() {
        let p = policy(0).with_max_distinct(4);
        let mut t = Tracker::new(&p, &[(0, 4), (1, 4)]);
        let t0 = Instant::now();
        let mut fixed = None;
        for i in 0..12u32 {
            let v = values(&[(0, i), (1, 9)]);
            if let Some(f) = t.count(lookup(&v), t0) {
                fixed = Some(f);
                break;
            }
        }
        assert_eq!(
            fixed,
            Some(vec![(1, 9u32.to_le_bytes().to_vec())]),
            "the changing argument left out"
        );
        let mut t = Tracker::new(&p, &[(0, 4)]);
        for i in 0..100u32 {
            assert_eq!(t.count(lookup(&values(&[(0, i)])), t0), None);
        }
        assert!(t.stopped);
        // Recurring now: nothing is counted any more.
        for _ in 0..10 {
            assert_eq!(t.count(lookup(&values(&[(0, 1)])), t0), None);
        }
    }

    /// A set from the tier profile is a variant at once where it fixes
    /// watched parameters with values of their sizes, within the bound,
    /// once; launches then match it without being counted.
    #[test]
    fn sets_of_an_earlier_process_are_variants_at_once() {
        let p = policy(3_600_000).with_max_variants(2);
        let mut t = Tracker::new(&p, &[(3, 4), (4, 4)]);
        let set =
            |a: u32, b: u32| vec![(3, a.to_le_bytes().to_vec()), (4, b.to_le_bytes().to_vec())];
        assert!(!t.seed(&[(5, vec![0; 4])]), "not a watched parameter");
        assert!(!t.seed(&[(3, vec![0; 2])]), "not its size");
        assert!(!t.seed(&[]), "nothing fixed");
        assert!(t.seed(&set(16, 1)));
        assert!(!t.seed(&set(16, 1)), "once");
        assert!(t.seed(&set(32, 1)));
        assert!(!t.seed(&set(64, 1)), "the bound");
        let v = values(&[(3, 32), (4, 1)]);
        assert_eq!(t.matching(lookup(&v)), Some(1));
    }

    /// A watched argument that is not a value of its size (a buffer where a
    /// value was, another size) is not counted.
    #[test]
    fn launches_without_the_watched_values_are_not_counted() {
        let mut t = Tracker::new(&policy(0), &[(0, 4)]);
        let t0 = Instant::now();
        let short = [(0usize, [1u8, 0])];
        let short_lookup =
            |param: usize| short.iter().find(|(p, _)| *p == param).map(|(_, b)| &b[..]);
        for _ in 0..5 {
            assert_eq!(t.count(short_lookup, t0), None);
            assert_eq!(t.count(|_| None, t0), None);
        }
        assert!(t.candidates.is_empty());
    }
}
