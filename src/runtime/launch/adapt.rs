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

use super::super::Arg;
use super::super::memory::ArgKind;
use super::super::module::{self, Bytes};
use crate::arguments::{FixedArguments, KernelParams, ParamKind};
use crate::bundle::{AdaptiveArguments, BuiltImage, SpecMode};
use crate::error::Error;

/// A parameter the watch compares: its index among the kernel's
/// parameters, its index among the launch's arguments (the handler is not
/// one), its size, and the values it took so far (up to the policy's
/// bound).
struct Watched {
    param: usize,
    arg: usize,
    size: usize,
    seen: Vec<Vec<u8>>,
}

/// An argument set launched, not linked yet.
struct Candidate {
    /// The watched arguments' bytes, in `Watch::watched` order.
    key: Vec<u8>,
    since: Instant,
    launches: u32,
}

/// A variant: its fixed arguments and its code.
struct Variant {
    fixed: Vec<(usize, Vec<u8>)>,
    state: VariantState,
}

enum VariantState {
    /// Linking on a background thread: its cubin, or why not.
    Linking(Arc<OnceLock<Result<Vec<u8>, String>>>),
    Ready(module::Function),
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
    policy: Arc<AdaptiveArguments>,
    params: KernelParams,
    built: Arc<BuiltImage>,
    kernel: String,
    /// The kernel's handler parameter, which is no launch argument.
    handler: Option<usize>,
    arch: u32,
    route: Route,
    watched: Vec<Watched>,
    /// Every argument kept changing: only the variants made so far serve.
    stopped: bool,
    candidates: Vec<Candidate>,
    variants: Vec<Variant>,
    /// Reused for each launch's key (no allocation per launch).
    scratch: Vec<u8>,
}

/// The most argument sets counted at once (the oldest goes).
const CANDIDATES: usize = 8;

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
    ) -> Option<Box<Watch>> {
        let image = built.image();
        let values_in_code = !image.has_constants()
            || matches!(built.mode(), SpecMode::Native | SpecMode::Lto)
                && built.tier_mode().is_none();
        if !values_in_code {
            return None;
        }
        let signature = image.kernels().iter().find(|k| k.name == kernel)?;
        let handler = signature.handler.map(|h| h.index);
        let params = KernelParams::from_ptx(image.ptx(), kernel).ok()?;
        let aggregate = params
            .params()
            .iter()
            .any(|p| matches!(p, ParamKind::Aggregate { .. }));
        let route = match (image.ltoir().is_some() && !aggregate, built.ptx().is_some()) {
            (true, _) => Route::Lto,
            (false, true) => Route::Ptx,
            (false, false) => return None,
        };
        let watched: Vec<Watched> = params
            .params()
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                Some(*i) != handler
                    && matches!(p, ParamKind::Int { .. } | ParamKind::Float { .. })
                    && policy.params.as_ref().is_none_or(|only| only.contains(i))
            })
            .map(|(i, p)| Watched {
                param: i,
                arg: arg_index(i, handler),
                size: p.size() as usize,
                seen: Vec::new(),
            })
            .collect();
        if watched.is_empty() || policy.max_variants == 0 {
            return None;
        }
        Some(Box::new(Watch {
            policy: Arc::clone(policy),
            params,
            built: Arc::clone(built),
            kernel: kernel.to_string(),
            handler,
            arch,
            route,
            watched,
            stopped: false,
            candidates: Vec::new(),
            variants: Vec::new(),
            scratch: Vec::new(),
        }))
    }

    /// The variant this launch runs, if one is ready whose fixed arguments
    /// all equal the launch's; otherwise `None` (the generic code), after
    /// counting the launch's argument set. The queue's context is current.
    #[inline]
    pub(in crate::runtime) fn choose(&mut self, args: &[Arg<'_>]) -> Option<&module::Function> {
        let value = |i: usize| match args.get(i).map(|a| &a.0) {
            Some(ArgKind::Value(v)) => Some(v.as_slice()),
            _ => None,
        };
        let handler = self.handler;
        let found = self.variants.iter().position(|v| {
            v.fixed
                .iter()
                .all(|(param, bytes)| value(arg_index(*param, handler)) == Some(bytes.as_slice()))
        });
        match found {
            Some(at) => self.ready(at),
            None => {
                self.count(args);
                None
            }
        }
    }

    /// Variant `at`'s code, loaded once its link is done.
    fn ready(&mut self, at: usize) -> Option<&module::Function> {
        let variant = &mut self.variants[at];
        if let VariantState::Linking(cell) = &variant.state {
            let done = cell.get()?;
            variant.state = match done {
                Ok(cubin) => match load(cubin, &self.kernel) {
                    Ok(f) => {
                        crate::stats::ADAPTED_VARIANTS.fetch_add(1, Ordering::Relaxed);
                        VariantState::Ready(f)
                    }
                    Err(e) => {
                        failed(&self.kernel, &e.to_string());
                        VariantState::Failed
                    }
                },
                Err(e) => {
                    failed(&self.kernel, e);
                    VariantState::Failed
                }
            };
        }
        match &self.variants[at].state {
            VariantState::Ready(f) => {
                crate::stats::ADAPTED_LAUNCHES.fetch_add(1, Ordering::Relaxed);
                Some(f)
            }
            _ => None,
        }
    }

    /// Counts the launch's argument set; links it once it has been
    /// launched for the policy's time; stops watching an argument that
    /// took too many values.
    fn count(&mut self, args: &[Arg<'_>]) {
        if self.stopped || self.variants.len() >= self.policy.max_variants {
            return;
        }
        self.scratch.clear();
        let mut i = 0;
        while i < self.watched.len() {
            let w = &mut self.watched[i];
            let Some(ArgKind::Value(v)) = args.get(w.arg).map(|a| &a.0) else {
                return;
            };
            let bytes = v.as_slice();
            if bytes.len() != w.size {
                return;
            }
            if !w.seen.iter().any(|s| s == bytes) {
                if w.seen.len() >= self.policy.max_distinct {
                    // It keeps changing: no longer watched; the sets
                    // counted with it no longer compare.
                    tracing::debug!(
                        target: "ptxspec::adapt",
                        kernel = %self.kernel,
                        param = w.param,
                        "argument keeps changing: no longer adapted to"
                    );
                    self.watched.remove(i);
                    self.candidates.clear();
                    if self.watched.is_empty() {
                        self.stopped = true;
                        return;
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
        let now = Instant::now();
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
        if c.launches >= 2 && now.duration_since(c.since) >= self.policy.after() {
            let key = self.candidates.remove(at).key;
            self.link(key);
        }
    }

    /// Starts linking the variant of `key` (the watched arguments' bytes).
    fn link(&mut self, key: Vec<u8>) {
        let mut fixed = Vec::new();
        let mut at = 0;
        for w in &self.watched {
            fixed.push((w.param, key[at..at + w.size].to_vec()));
            at += w.size;
        }
        let arguments = match FixedArguments::new(&self.params, fixed.clone()) {
            Ok(a) => a,
            Err(e) => {
                failed(&self.kernel, &e.to_string());
                return;
            }
        };
        let cell = Arc::new(OnceLock::new());
        let (built, arch, route, out) = (
            Arc::clone(&self.built),
            self.arch,
            self.route,
            Arc::clone(&cell),
        );
        // The process's exit waits for the toolkit's first use on the link
        // thread (see `toolkit::exit`), as for a tier's links.
        crate::toolkit::exit::guard_this_thread();
        let spawned = std::thread::Builder::new()
            .name("ptxspec-adapt".into())
            .spawn(move || {
                crate::lto::warm_up();
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
                let _ = out.set(cubin);
            });
        self.variants.push(Variant {
            fixed,
            state: match spawned {
                Ok(_) => VariantState::Linking(cell),
                Err(_) => VariantState::Failed,
            },
        });
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
            let ptx = built.ptx().ok_or("the build has no PTX")?;
            let fixed = arguments.in_ptx(ptx).map_err(|e| e.to_string())?;
            crate::lto::cubin_of_ptx(
                &fixed,
                &format!("{}.ptx", built.image().id()),
                arch,
                &Default::default(),
            )
            .map_err(Error::from)
        }
    };
    cubin.map(|c| c.bytes.to_vec()).map_err(|e| e.to_string())
}

/// The variant's kernel from its cubin, loaded in the current context.
fn load(cubin: &[u8], kernel: &str) -> Result<module::Function, Error> {
    let (module, _) = module::load(kernel, Bytes::Cubin(cubin), false, false)?;
    Arc::new(module).function(kernel)
}

fn failed(kernel: &str, why: &str) {
    tracing::warn!(target: "ptxspec::adapt", kernel, error = why, "variant not made: the generic code runs");
    ptxspec_core::notice::once(format!(
        "adaptive arguments: a variant of kernel {kernel} was not made ({why}); its launches run the generic code"
    ));
}
