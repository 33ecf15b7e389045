//! A variant's link, off the launch path, and what follows it: its
//! identity, its verdict shared with the profile and the fleet.

use super::*;
use ptxspec_core::lto::{TrialLease, VerdictTurn};

impl Watch {
    /// Starts linking a variant of the tracker's, `fixed`, each way of
    /// `routes`; timed before it runs where `timed`, recorded in the tier
    /// profile where `record`.
    pub(super) fn link(
        &mut self,
        fixed: Vec<(usize, Vec<u8>)>,
        routes: Vec<Route>,
        timed: bool,
        record: bool,
    ) {
        let verdict = Pending::default();
        let arguments = match FixedArguments::new(&self.params, fixed.clone())
            .and_then(|a| a.with_handler(self.handler))
        {
            Ok(a) => a,
            Err(e) => {
                failed(&self.kernel, &e.to_string());
                let _ = verdict.set(Err(e.to_string()));
                self.variants.push(Variant {
                    fixed,
                    state: VariantState::Generic,
                    timed,
                    record,
                    verdict,
                    identity: None,
                    lease: None,
                    candidate: None,
                });
                return;
            }
        };
        let cell = Arc::new(OnceLock::new());
        let job = LinkJob {
            built: Arc::clone(&self.built),
            arch: self.arch,
            ctx: Arc::clone(&self.ctx),
            kernel: self.kernel.clone(),
            arguments,
            routes,
            timed,
            record: (timed && record).then(|| fixed.clone()),
            verdict: Arc::clone(&verdict),
        };
        let out = Arc::clone(&cell);
        // Undecided while it links (and waits for the fleet's verdict),
        // whether or not a launch ever looks at the result.
        let undecided = Undecided::new();
        // NVIDIA's libraries start here, not on the link thread (see
        // `lto::warm_up`: once per process, and done by now where the
        // bundle's build did it); this thread's exit waits for the link's
        // calls (`toolkit::exit`).
        ptxspec_core::lto::warm_up();
        ptxspec_core::toolkit::exit::guard_this_thread();
        let spawned = std::thread::Builder::new()
            .name("ptxspec-adapt".into())
            .spawn(move || {
                // A launch that links now goes before this variant's link.
                ptxspec_core::toolkit::exit::this_thread_works_in_the_background();
                // The watch's variant and any graph node waiting hold the
                // cell too: with only this thread's, none waits any more.
                let wanted = || Arc::strong_count(&out) > 1;
                // Kept here so that the context is let go of below, not
                // inside the link (where exit could not wait for it).
                let ctx = Arc::clone(&job.ctx);
                let made = job.run(&wanted);
                // The code made, where this thread is its last owner, and
                // the context unload and go with exit waiting for them
                // (`toolkit::exit`).
                let _driver = ptxspec_core::toolkit::exit::background_driver_call();
                let _ = out.set(made);
                drop(out);
                drop(ctx);
                drop(undecided);
            });
        let candidate = Candidate(Arc::clone(&cell));
        self.variants.push(Variant {
            fixed,
            state: match spawned {
                Ok(_) => VariantState::Linking(cell),
                Err(e) => {
                    let _ = verdict.set(Err(e.to_string()));
                    VariantState::Generic
                }
            },
            timed,
            record,
            verdict,
            identity: None,
            lease: None,
            candidate: Some(candidate),
        });
    }
}

/// A variant's link, on its own thread: what it needs of the watch.
pub(super) struct LinkJob {
    pub(super) built: Arc<BuiltImage>,
    pub(super) arch: u32,
    /// The queue's context, where the variant's code is loaded.
    pub(super) ctx: Arc<cudarc::driver::CudaContext>,
    pub(super) kernel: String,
    pub(super) arguments: FixedArguments,
    pub(super) routes: Vec<Route>,
    pub(super) timed: bool,
    /// The argument set to record in the tier profile, without a verdict,
    /// once its variant is linked for a trial here: a variant that only
    /// graphs replay has no launch trial whose verdict would record it,
    /// and the next process would not link it before its graph's capture
    /// (where a graph's earlier verdict can be taken only once every node's
    /// variant is linked). `None` for a set the profile gave.
    pub(super) record: Option<Vec<(usize, Vec<u8>)>>,
    /// Where graph nodes wait: set here where the variant is kept without
    /// a trial here (untimed, or decided by the fleet).
    pub(super) verdict: Pending,
}

impl LinkJob {
    /// Asks the fleet for a verdict (where a trial would run), links and
    /// loads the routes that are left, and keeps the variant where no
    /// trial follows. `wanted`: whether the watch (or a graph node) still
    /// waits for this variant — a wait for the fleet's verdict ends, and
    /// nothing is linked, once none does.
    pub(super) fn run(self, wanted: &dyn Fn() -> bool) -> Result<Linked, String> {
        // The identity hashes the image's code: made only where a verdict
        // may be asked or shared.
        let pinned = ptxspec_core::choices::pinned();
        let identity = (self.timed || pinned.is_some()).then(|| {
            variant_identity(
                &self.built,
                self.arch,
                &device_model(&self.ctx),
                &self.arguments,
            )
        });
        // A process pinned to a table of choices times nothing: the table's
        // choice, or the generic code where it holds none. Otherwise one
        // verdict per fleet: where another process or host timed this
        // variant (or times it now: waited for here, the launches running
        // the generic code meanwhile), its verdict stands — that route
        // alone, or nothing, untimed; else this process times it, for the
        // fleet where it holds the lease.
        let mut lease = None;
        let fleet = match (&pinned, identity) {
            (Some(table), Some(id)) => Some(table.get(&id, self.arch).unwrap_or(Kept::Generic)),
            (None, Some(id)) => {
                let turn = ptxspec_core::lto::verdict_turn(&id, self.arch, wanted);
                let said = match &turn {
                    VerdictTurn::Decided(_) => "the fleet's verdict",
                    VerdictTurn::TimeHere(Some(_)) => "timed here for the fleet",
                    VerdictTurn::TimeHere(None) => "timed here",
                };
                ptxspec_core::trace::instant(
                    &format!("adaptive arguments: {said}"),
                    "adapt",
                    &[
                        ("kernel", ptxspec_core::trace::Arg::Text(&self.kernel)),
                        ("variant", ptxspec_core::trace::Arg::Text(&id.hex())),
                    ],
                );
                match turn {
                    VerdictTurn::Decided(kept) => Some(kept),
                    VerdictTurn::TimeHere(held) => {
                        lease = held;
                        None
                    }
                }
            }
            (_, None) => None,
        };
        if !wanted() {
            ptxspec_core::trace::instant(
                "adaptive arguments: variant no longer wanted",
                "adapt",
                &[("kernel", ptxspec_core::trace::Arg::Text(&self.kernel))],
            );
            let _ = self.verdict.set(Err(NO_LONGER_WANTED.into()));
            return Err(NO_LONGER_WANTED.into());
        }
        if fleet.is_some() {
            tracing::info!(
                target: "ptxspec::adapt",
                kernel = self.arguments.kernel(),
                kept = ?fleet,
                "variant decided by the fleet's verdict: not timed here"
            );
        }
        let routes: Vec<Route> = match fleet {
            None => self.routes.clone(),
            Some(Kept::Generic) => Vec::new(),
            Some(Kept::Lto) if self.routes.contains(&Route::Lto) => vec![Route::Lto],
            Some(_) => vec![Route::Ptx],
        };
        let mut made = Vec::new();
        let mut errors = Vec::new();
        for route in routes {
            match self.made(route) {
                Ok(function) => made.push(Made { route, function }),
                Err(e) => errors.push(format!("{route:?}: {e}")),
            }
        }
        let done = match made.first() {
            None if fleet == Some(Kept::Generic) => {
                not_faster(&self.kernel, &self.verdict);
                Ok(())
            }
            None => Err(errors.join("; ")),
            Some(first) => {
                if !self.timed || fleet.is_some() {
                    crate::stats::ADAPTED_VARIANTS.fetch_add(1, Ordering::Relaxed);
                    let _ = self.verdict.set(Ok(first.function.clone()));
                }
                Ok(())
            }
        };
        if let Err(e) = &done {
            let _ = self.verdict.set(Err(e.clone()));
        }
        // Linked for a trial here (timed, not decided by the fleet).
        if let (Ok(()), true, None, Some(fixed)) = (&done, self.timed, fleet, &self.record)
            && !made.is_empty()
        {
            crate::bundle::built::tier::record_arguments(
                &self.built,
                self.arch,
                &self.kernel,
                fixed.clone(),
                None,
            );
        }
        done.map(|()| Linked {
            made,
            fleet,
            identity,
            lease: std::sync::Mutex::new(lease),
        })
    }

    /// The variant's code made `route`'s way: linked, and loaded in the
    /// queue's context (bound on this thread, also for a drop of the
    /// function here: this thread is its last owner only where no launch
    /// took it).
    pub(super) fn made(&self, route: Route) -> Result<cuda::Function, String> {
        let started = Instant::now();
        let cubin = link_variant(&self.built, self.arch, route, &self.arguments);
        tracing::info!(
            target: "ptxspec::adapt",
            kernel = self.arguments.kernel(),
            fixed = self.arguments.fixed().len(),
            route = ?route,
            duration_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            ok = cubin.is_ok(),
            "variant linked"
        );
        let cubin = cubin?;
        // Paced before exit's guard is taken: exit never waits for the
        // pace.
        let _one = cuda::one_background_load();
        // Exit waits for the load (`toolkit::exit`); the link above took
        // the toolkit's locks, which exit takes before this one.
        let _driver = ptxspec_core::toolkit::exit::background_driver_call();
        self.ctx.bind_to_thread().map_err(|e| e.to_string())?;
        load(&cubin, self.arguments.kernel()).map_err(|e| e.to_string())
    }
}

/// Why a variant is not made: the code that would run it was dropped while
/// it waited.
const NO_LONGER_WANTED: &str = "no longer wanted: its launches' code was dropped";

/// Why a graph node does not switch to a variant that lost its trial.
pub(super) const NOT_FASTER: &str = "not faster than the generic code";

/// A variant of `kernel` kept (linked by `route`): counted, its function
/// given to the graph nodes waiting.
pub(super) fn keep(
    kernel: &str,
    route: &str,
    verdict: &Pending,
    function: cuda::Function,
) -> VariantState {
    crate::stats::ADAPTED_VARIANTS.fetch_add(1, Ordering::Relaxed);
    ptxspec_core::trace::instant(
        "adaptive arguments: variant kept",
        "adapt",
        &[
            ("kernel", ptxspec_core::trace::Arg::Text(kernel)),
            ("route", ptxspec_core::trace::Arg::Text(route)),
        ],
    );
    let _ = verdict.set(Ok(function.clone()));
    VariantState::Ready(function)
}

/// A variant found no faster than the generic code (here, or by the
/// fleet): counted, said, and the graph nodes waiting told.
pub(super) fn not_faster(kernel: &str, verdict: &Pending) {
    crate::stats::VARIANTS_NOT_FASTER.fetch_add(1, Ordering::Relaxed);
    ptxspec_core::trace::instant(
        "adaptive arguments: variant not faster",
        "adapt",
        &[("kernel", ptxspec_core::trace::Arg::Text(kernel))],
    );
    crate::stats::not_adapted(kernel, NotAdapted::NotFaster);
    let _ = verdict.set(Err(NOT_FASTER.into()));
}

/// A trial's end on the trace: each contender's mean time (the generic
/// code first, then each route's variant), before the verdict's instant.
pub(super) fn trial_on_the_trace(kernel: &str, variants: &[Made], means: &[f32]) {
    if !ptxspec_core::trace::on() {
        return;
    }
    let contenders: Vec<String> = std::iter::once("generic".to_string())
        .chain(variants.iter().map(|m| format!("{:?}", m.route)))
        .zip(means)
        .map(|(who, ms)| format!("{who} {ms:.4} ms"))
        .collect();
    ptxspec_core::trace::instant(
        "adaptive arguments: trial over",
        "adapt",
        &[
            ("kernel", ptxspec_core::trace::Arg::Text(kernel)),
            (
                "contenders",
                ptxspec_core::trace::Arg::Text(&contenders.join(", ")),
            ),
        ],
    );
}

/// Shares a trial's verdict with the fleet, where a store is set —
/// through the fleet's lease on the trial where this process holds it
/// (then given back) — after the launch, on the background thread: a
/// request is no work for a launch.
pub(super) fn share(
    identity: Option<Digest>,
    lease: Option<TrialLease>,
    arch: u32,
    kernel: &str,
    kept: Kept,
) {
    if let Some(identity) = identity {
        ptxspec_core::choices::record(&identity, arch, kernel, kept);
        ptxspec_core::lto::in_background(move || match lease {
            Some(lease) => {
                lease.share(kept);
            }
            None => {
                ptxspec_core::lto::share_verdict(&identity, arch, kept);
            }
        });
    }
}

/// The device's model (`NVIDIA H200`): a verdict is the device's, not its
/// architecture's — an H100 and an H200 are both `sm_90` and may time a
/// variant differently. Empty where the driver does not say.
fn device_model(ctx: &cudarc::driver::CudaContext) -> String {
    ctx.name().unwrap_or_default()
}

/// A variant's identity: its image's code (PTX and LTO-IR), values,
/// architecture, device model, kernel and fixed arguments — what a verdict
/// is about, the same in every process that would make this variant on
/// such a device.
pub(super) fn variant_identity(
    built: &BuiltImage,
    arch: u32,
    device: &str,
    arguments: &FixedArguments,
) -> Digest {
    let image = built.image_data();
    let fixed: Vec<Vec<u8>> = arguments
        .fixed()
        .iter()
        .map(|(i, bytes)| [&(*i as u64).to_le_bytes()[..], bytes].concat())
        .collect();
    let mut key = KeyEncoder::new("ptxspec adaptive variant v2");
    key.digest_field(&Digest::of(image.ptx().as_bytes()))
        .optional(image.ltoir().map(|l| &l.identity.as_bytes()[..]))
        .bytes(built.blob())
        .u64(u64::from(arch))
        .str(device)
        .str(arguments.kernel())
        .list(fixed.iter().map(Vec::as_slice));
    Digest::of(key.encoded())
}

/// Records a variant and what was kept in the tier profile, after the
/// launch (a file's append is no work for a launch).
pub(super) fn record(
    built: &Arc<BuiltImage>,
    arch: u32,
    kernel: &str,
    fixed: &[(usize, Vec<u8>)],
    kept: Option<Kept>,
) {
    let (built, kernel, fixed) = (Arc::clone(built), kernel.to_string(), fixed.to_vec());
    ptxspec_core::lto::in_background(move || {
        crate::bundle::built::tier::record_arguments(&built, arch, &kernel, fixed, kept);
    });
}

/// A launch's by-value bytes by kernel parameter index (`None` for a
/// parameter whose argument is not a value, or missing).
#[inline]
pub(super) fn launch_values<'a>(
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
pub(super) fn arg_index(param: usize, handler: Option<usize>) -> usize {
    match handler {
        Some(h) if param > h => param - 1,
        _ => param,
    }
}

/// The cubin of `arguments` for `sm_<arch>` the way `route` says.
pub(super) fn link_variant(
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
                &built.toolkit,
            )
            .map_err(Error::from)
        }
    };
    cubin.map(|c| c.bytes.to_vec()).map_err(|e| e.to_string())
}

/// The variant's kernel from its cubin, loaded in the current context.
pub(super) fn load(cubin: &[u8], kernel: &str) -> Result<cuda::Function, Error> {
    let (module, _) = cuda::load(kernel, Bytes::Cubin(cubin), false, false)?;
    Arc::new(module).function(kernel)
}

pub(super) fn failed(kernel: &str, why: &str) {
    tracing::warn!(target: "ptxspec::adapt", kernel, error = why, "variant not made: the generic code runs");
    ptxspec_core::notice::once(format!(
        "adaptive arguments: a variant of kernel {kernel} was not made ({why}); its launches run the generic code"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A variant links where its image's build said its toolkit calls run:
    /// with a toolkit worker named, the PTX route's link goes through the
    /// worker too (it took this process's libraries before, whatever the
    /// build said). A worker that cannot start fails the link, naming
    /// itself.
    #[test]
    fn a_variant_links_where_its_image_was_built_to_link() {
        let image = crate::bundle::tests::images().remove(1);
        let worker = std::path::PathBuf::from("/nonexistent/ptxspec-worker-for-a-test");
        let built = crate::bundle::built::build_image(
            &image,
            &Default::default(),
            crate::SpecMode::Native,
            false,
            &ptxspec_core::toolkit::worker::Toolkit::Worker(worker.clone()),
        )
        .unwrap();
        let params = built.kernel_params("matmul").expect("matmul's parameters");
        // A size no earlier link fixed: no cache holds its cubin.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let size = 1 + ((nanos ^ std::process::id()) & 0x3fff_ffff) as i32;
        let arguments = FixedArguments::new(params, vec![(3, size.to_le_bytes().to_vec())])
            .and_then(|a| a.with_handler(Some(4)))
            .unwrap();
        // (The LTO route's link request carries the image's toolkit; these
        // images have no LTO-IR.)
        let e = link_variant(&built, 90, Route::Ptx, &arguments).unwrap_err();
        assert!(
            e.contains("ptxspec-worker-for-a-test"),
            "not linked through the worker: {e}"
        );
    }
}
