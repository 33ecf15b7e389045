//! Tiered specialization ([`SpecMode::Tiered`]):
//! launches run the emulated image at once while a background worker links
//! the specialized code for the same values; once it is ready, launches run
//! that.
//!
//! A [`TierUp`] belongs to one built image (one value set) and holds the
//! specialized image it tiers up to and, per (architecture, kernel), where
//! its link stands. A bounded pool of worker threads, shared by every
//! bundle, links what launches asked for, each (image, values, architecture,
//! kernel) once: the state machine is the de-duplication. Jobs hold the
//! `TierUp` weakly, so that work for a bundle nobody holds any more is
//! dropped unstarted. A failed link is logged and leaves the kernel
//! emulated: tiering never fails or blocks a launch.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::Duration;

use ptxspec_core::settings::{Env, SettingError};

use super::BuiltImage;
use crate::bundle::SpecMode;
use crate::error::Error;

/// Where one (architecture, kernel) link stands.
const IDLE: u8 = 0;
const QUEUED: u8 = 1;
const READY: u8 = 2;
const FAILED: u8 = 3;

/// A (architecture, kernel) link's state, shared with the plans of queues
/// that launch it: a launch reads one atomic to learn whether to switch.
#[derive(Debug, Default)]
pub(crate) struct LinkState(AtomicU8);

impl LinkState {
    pub(crate) fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire) == READY
    }

    /// Whether the link failed (its kernel stays emulated; the tier's log
    /// says why).
    pub(crate) fn has_failed(&self) -> bool {
        self.0.load(Ordering::Acquire) == FAILED
    }
}

/// The specialized tier of one built image, and its links.
#[derive(Debug)]
pub(crate) struct TierUp {
    /// The same image and values, built to be linked into cubins (LTO, or
    /// specialized PTX compiled by nvJitLink).
    specialized: Arc<BuiltImage>,
    links: Mutex<HashMap<(u32, String), Arc<LinkState>>>,
    /// Why links failed (the bundle's build log shows it).
    pub(crate) log: Mutex<String>,
    done: Condvar,
}

impl TierUp {
    /// The tier of a tiered image being built. Its links and the profile's
    /// prefetches come later, on threads of their own: NVIDIA's libraries
    /// start here, on the building thread (see `lto::warm_up`), so that no
    /// background thread is the first to run their code and no launch waits
    /// for their start.
    pub(crate) fn new(specialized: Arc<BuiltImage>) -> Self {
        ptxspec_core::lto::warm_up();
        profile::warm_once();
        TierUp {
            specialized,
            links: Mutex::default(),
            log: Mutex::default(),
            done: Condvar::new(),
        }
    }

    /// Notes in the tier's log (the bundle's build log shows it) that
    /// `what` stays emulated, and why.
    pub(crate) fn stays_emulated(&self, what: &str, why: &dyn std::fmt::Display) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_str(&format!("tiered: {what} stays emulated: {why}\n"));
    }

    /// The image launches switch to once its link for theirs is ready.
    pub(crate) fn specialized(&self) -> &Arc<BuiltImage> {
        &self.specialized
    }

    /// The state of the link for `kernel` on `sm_<arch>` (idle until
    /// someone [`ask`](Self::ask)s for it).
    pub(crate) fn link_state(&self, arch: u32, kernel: &str) -> Arc<LinkState> {
        let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(links.entry((arch, kernel.to_string())).or_default())
    }

    /// Whether the link `state` stands for is ready — or need not be made:
    /// where this process holds the cubin already (linked for the same
    /// image and values before), the state becomes ready at once, without
    /// a worker. For a new plan: its launches run the specialized tier
    /// once its code is loaded (at once where the queue has it).
    pub(crate) fn ready_or_cached(&self, state: &LinkState, arch: u32, kernel: &str) -> bool {
        if state.is_ready() {
            return true;
        }
        if !self.specialized.cubin_is_cached(arch, kernel) {
            return false;
        }
        // From idle only: nobody waits on a link nobody asked for, and a
        // queued one finishes by itself (its link is a memory hit).
        let _ = state
            .0
            .compare_exchange(IDLE, READY, Ordering::AcqRel, Ordering::Acquire);
        state.is_ready()
    }

    /// Asks a worker for the link `state` stands for, unless someone did.
    pub(crate) fn ask(self: &Arc<Self>, state: &Arc<LinkState>, arch: u32, kernel: &str) {
        if state
            .0
            .compare_exchange(IDLE, QUEUED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // NVIDIA's libraries started on a program's thread before
            // the worker runs their code: in `TierUp::new`, which made
            // this tier (see `lto::warm_up`). This thread's exit waits for
            // the worker's calls (`toolkit::exit`).
            ptxspec_core::toolkit::exit::guard_this_thread();
            Pool::global().push(Job {
                tier: Arc::downgrade(self),
                arch,
                kernel: kernel.to_string(),
                state: Arc::clone(state),
            });
        }
    }

    /// The state of the link for `kernel` on `sm_<arch>`, asking a worker
    /// for it when nobody has.
    pub(crate) fn request(self: &Arc<Self>, arch: u32, kernel: &str) -> Arc<LinkState> {
        let state = self.link_state(arch, kernel);
        self.ask(&state, arch, kernel);
        state
    }

    /// Waits until the link for `kernel` on `sm_<arch>` is done (asking for
    /// it if nobody has): the mode launches then use, or the link's error.
    pub(crate) fn wait(
        self: &Arc<Self>,
        arch: u32,
        kernel: &str,
        timeout: Duration,
    ) -> Result<SpecMode, Error> {
        let state = self.request(arch, kernel);
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let (log, timed_out) = self
            .done
            .wait_timeout_while(log, timeout, |_| {
                matches!(state.0.load(Ordering::Acquire), IDLE | QUEUED)
            })
            .unwrap_or_else(|p| p.into_inner());
        match state.0.load(Ordering::Acquire) {
            READY => Ok(self.specialized.mode()),
            FAILED => Err(Error::Build {
                what: format!(
                    "tiered specialization of image {} for kernel {kernel} on sm_{arch}",
                    self.specialized.image_data().id()
                ),
                log: log.clone(),
            }),
            _ if timed_out.timed_out() => Err(Error::Internal(
                "tiered specialization: the link did not finish in time",
            )),
            _ => Err(Error::Internal("tiered specialization: a link lost")),
        }
    }

    fn finish(&self, state: &LinkState, result: Result<(), Error>, arch: u32, kernel: &str) {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let code = match result {
            Ok(()) => {
                crate::stats::TIER_UPS.fetch_add(1, Ordering::Relaxed);
                ptxspec_core::trace::instant(
                    "tier-up: linked",
                    "tier",
                    &[
                        ("kernel", ptxspec_core::trace::Arg::Text(kernel)),
                        ("arch", ptxspec_core::trace::Arg::Number(arch.into())),
                    ],
                );
                tracing::info!(
                    target: "ptxspec::tier",
                    image = %self.specialized.image_data().id(),
                    kernel,
                    arch,
                    outcome = "linked",
                    "tier-up"
                );
                profile::record(&self.specialized, arch, kernel);
                READY
            }
            Err(e) => {
                crate::stats::TIER_UP_FAILURES.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    target: "ptxspec::tier",
                    image = %self.specialized.image_data().id(),
                    kernel,
                    arch,
                    outcome = "failed",
                    error = %e,
                    "tier-up failed: the kernel stays emulated"
                );
                log.push_str(&format!(
                    "tiered: {} stays emulated for kernel {kernel} on sm_{arch}: {e}\n",
                    self.specialized.image_data().id()
                ));
                FAILED
            }
        };
        state.0.store(code, Ordering::Release);
        self.done.notify_all();
    }
}

/// The tiers' settings, read once: a setting that is not valid is an error
/// of the first tiered build (and of every one after it).
#[derive(Debug)]
pub(crate) struct TierSettings {
    /// `PTXSPEC_TIER_AFTER_MS`.
    pub(crate) after: Duration,
    /// `PTXSPEC_TIER_WORKERS`.
    workers: usize,
    /// `PTXSPEC_TIER_PROFILE`.
    profile: Option<std::path::PathBuf>,
}

/// The tiers' settings of the process's environment.
pub(crate) fn settings() -> Result<&'static TierSettings, SettingError> {
    static SETTINGS: OnceLock<Result<TierSettings, SettingError>> = OnceLock::new();
    SETTINGS
        .get_or_init(|| {
            let env = Env::process();
            Ok(TierSettings {
                after: ptxspec_core::settings::tier_after(&env)?,
                workers: ptxspec_core::settings::tier_workers(&env)?,
                profile: ptxspec_core::settings::tier_profile(&env)?,
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The value sets a process tiered up, kept for the next
/// (`PTXSPEC_TIER_PROFILE=FILE`): each link that finishes appends a line
/// `IMAGE sm_ARCH KERNEL VALUES` (the buffer contents in hexadecimal) that
/// the file does not hold yet, and a process that names the file fetches
/// those cubins in the background when it first builds a tiered bundle —
/// from its disk cache or the remote store, linking nothing — so that their
/// first launches start at the specialized tier.
///
/// The file is bounded: at most
/// [`ptxspec_core::tier_profile::MAX_LINES`] lines of at most
/// [`ptxspec_core::tier_profile::MAX_BYTES`] bytes in all (its format is
/// that module's). A full profile takes no more lines,
/// and one over its bound is not read; each is said once.
/// Records a variant of adaptive arguments, and what its trial kept, in
/// the tier profile, where one is named (best effort).
pub(crate) fn record_arguments(
    built: &BuiltImage,
    arch: u32,
    kernel: &str,
    arguments: Vec<(usize, Vec<u8>)>,
    kept: Option<ptxspec_core::tier_profile::Kept>,
) {
    profile::record_arguments(built, arch, kernel, arguments, kept);
}

/// The argument sets the tier profile holds for `kernel` of `built` on
/// `sm_<arch>`, with what a trial kept (none where no profile is named).
pub(crate) fn profiled_argument_sets(
    built: &BuiltImage,
    arch: u32,
    kernel: &str,
) -> Vec<(
    profile::ArgumentSet,
    Option<ptxspec_core::tier_profile::Kept>,
)> {
    profile::argument_sets(built, arch, kernel)
}

/// What a trial of a graph's replays kept under `key` in an earlier
/// process (or this one), where the tier profile holds it: the contender.
pub(crate) fn profiled_graph_verdict(key: &ptxspec_core::digest::Digest) -> Option<usize> {
    profile::graph_verdict(key)
}

/// Records what a trial of a graph's replays kept under `key` in the tier
/// profile, where one is named (best effort).
pub(crate) fn record_graph_verdict(key: ptxspec_core::digest::Digest, kept: usize) {
    profile::record_graph_verdict(key, kept);
}

mod profile;

/// One link to make.
struct Job {
    tier: Weak<TierUp>,
    arch: u32,
    kernel: String,
    state: Arc<LinkState>,
}

/// The worker threads and their queue.
struct Pool {
    queue: &'static JobQueue,
}

/// The jobs the workers take, first asked first.
#[derive(Default)]
struct JobQueue {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

/// How long a kernel keeps being launched from a tiered image before its
/// link is asked for (`PTXSPEC_TIER_AFTER_MS`, 0 to 60 000; default 5): a
/// value set done sooner than that would not outlive its link, and linking
/// it would only take a core from the launches. (A tiered bundle is built
/// only where the settings read: the default here is never taken.)
pub(crate) fn tier_after() -> Duration {
    settings().map_or(Duration::from_millis(5), |s| s.after)
}

/// How many links run at once (`PTXSPEC_TIER_WORKERS`, 1 to 16; default
/// 2). Links in this process share nvJitLink one call at a time (its
/// documentation promises nothing about threads: `toolkit::exit`), so there
/// more workers mostly wait; with a toolkit worker
/// ([`BuildOptions::with_toolkit_worker`](crate::BuildOptions::with_toolkit_worker))
/// each link is a process of its own and the workers use that many cores.
fn workers() -> usize {
    settings().map_or(2, |s| s.workers)
}

impl Pool {
    fn global() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(|| {
            let queue: &'static JobQueue = Box::leak(Box::default());
            // A pool that cannot start a thread links nothing: jobs stay
            // queued and launches stay emulated.
            for i in 0..workers() {
                let _ = std::thread::Builder::new()
                    .name(format!("ptxspec-tier-{i}"))
                    .spawn(move || {
                        ptxspec_core::toolkit::exit::this_thread_works_in_the_background();
                        queue.work()
                    });
            }
            Pool { queue }
        })
    }

    fn push(&self, job: Job) {
        if self.queue.push(job) {
            self.queue.ready.notify_one();
        }
    }
}

/// The most links waiting for a worker: far more than workers finish in a
/// program's life at once, far below what would exhaust memory.
const QUEUE_LIMIT: usize = 4096;

impl JobQueue {
    /// Queues `job`, within [`QUEUE_LIMIT`]: when full, the work of bundles
    /// that are gone goes first; if it is still full the job is not queued
    /// and its link goes back to idle (a later launch asks again; launches
    /// stay emulated meanwhile). Whether it was queued.
    fn push(&self, job: Job) -> bool {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if jobs.len() >= QUEUE_LIMIT {
            jobs.retain(|j| j.tier.strong_count() > 0);
        }
        if jobs.len() >= QUEUE_LIMIT {
            job.state.0.store(IDLE, Ordering::Release);
            return false;
        }
        jobs.push_back(job);
        true
    }

    /// A worker's life: links as they are asked for (the toolkit warmed up
    /// by the thread that asked: see `lto::warm_up`).
    fn work(&self) {
        loop {
            let job = {
                let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if let Some(j) = jobs.pop_front() {
                        break j;
                    }
                    jobs = self.ready.wait(jobs).unwrap_or_else(|p| p.into_inner());
                }
            };
            run(job);
        }
    }
}

/// Makes one job's link; `false` when its bundle is gone (nobody can
/// launch what it would link), which leaves the work undone. A link that
/// panics fails like one that errs (the kernel stays emulated, the log says
/// why), and the worker lives on.
fn run(job: Job) -> bool {
    let Some(tier) = job.tier.upgrade() else {
        return false;
    };
    let link = || {
        tier.specialized
            .cubin_for_kernel(job.arch, &job.kernel)
            .map(drop)
    };
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(link)).unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(Error::Build {
                what: format!("the link panicked: {what}"),
                log: String::new(),
            })
        });
    tier.finish(&job.state, result, job.arch, &job.kernel);
    true
}

/// What a tiered image tiers up to: its LTO build where it has LTO-IR,
/// else its PTX specialized with the values, which nvJitLink compiles —
/// either way a cubin that a launch only loads.
pub(crate) fn specialized_tier(
    image: &Arc<crate::image::ImageData>,
    blob: &[u8],
    debug: bool,
    toolkit: &ptxspec_core::toolkit::worker::Toolkit,
) -> Result<Arc<BuiltImage>, Error> {
    let (mode, from) = match image.ltoir() {
        Some(_) => (SpecMode::Lto, super::LinkFrom::LtoIr),
        None => (
            SpecMode::Native,
            super::LinkFrom::Ptx(super::specialized(image, blob)?),
        ),
    };
    Ok(Arc::new(BuiltImage {
        image: Arc::clone(image),
        code: super::Code::Lto(super::LtoCode::new(from)),
        blob: Arc::new(blob.to_vec()),
        delivery: crate::image::delivery(image.placement(), crate::image::CodeForm::Specialized),
        mode,
        fallback: None,
        debug,
        toolkit: toolkit.clone(),
        tier: None,
        kernel_params: std::sync::OnceLock::new(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The matmul image built tiered (its defaults), and its tier.
    fn tiered_matmul() -> (Arc<BuiltImage>, Arc<TierUp>) {
        let image = crate::bundle::tests::images().remove(1);
        let built = super::super::build_image(
            &image,
            &Default::default(),
            SpecMode::Tiered,
            false,
            &ptxspec_core::toolkit::worker::Toolkit::InProcess,
        )
        .unwrap();
        let tier = built.tier.clone().unwrap();
        (built, tier)
    }

    /// Work queued for a bundle that is dropped before a worker takes it is
    /// dropped unstarted: its link stays queued, nothing is linked.
    #[test]
    fn dropping_the_bundle_cancels_queued_work() {
        let (built, tier) = tiered_matmul();
        let state = Arc::new(LinkState(AtomicU8::new(QUEUED)));
        let job = Job {
            tier: Arc::downgrade(&tier),
            arch: 90,
            kernel: "matmul".into(),
            state: Arc::clone(&state),
        };
        drop((built, tier));
        assert!(!run(job));
        assert_eq!(state.0.load(Ordering::Acquire), QUEUED);
    }

    /// A full queue drops the work of bundles that are gone first; a job
    /// that still finds no room is not queued, and its link is idle again
    /// (asked again by a later launch) rather than queued forever.
    #[test]
    fn a_full_queue_is_bounded() {
        let (_built, tier) = tiered_matmul();
        let job = |tier: &Arc<TierUp>| Job {
            tier: Arc::downgrade(tier),
            arch: 90,
            kernel: "matmul".into(),
            state: Arc::new(LinkState(AtomicU8::new(QUEUED))),
        };
        let queue = JobQueue::default();
        let gone = {
            let other = Arc::new(TierUp::new(Arc::clone(tier.specialized())));
            for _ in 0..QUEUE_LIMIT / 2 {
                assert!(queue.push(job(&other)));
            }
            Arc::downgrade(&other)
        };
        assert_eq!(gone.strong_count(), 0);
        for _ in 0..QUEUE_LIMIT / 2 {
            assert!(queue.push(job(&tier)));
        }
        // Full: the gone bundle's half goes, the new job is queued.
        assert!(queue.push(job(&tier)));
        assert_eq!(queue.jobs.lock().unwrap().len(), QUEUE_LIMIT / 2 + 1);
        while queue.jobs.lock().unwrap().len() < QUEUE_LIMIT {
            assert!(queue.push(job(&tier)));
        }
        let refused = job(&tier);
        let state = Arc::clone(&refused.state);
        assert!(!queue.push(refused));
        assert_eq!(state.0.load(Ordering::Acquire), IDLE);
    }

    #[test]
    fn a_link_state_switches_once() {
        let s = LinkState::default();
        assert!(!s.is_ready());
        assert!(
            s.0.compare_exchange(IDLE, QUEUED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        );
        // A second request finds it queued: no second job.
        assert!(
            s.0.compare_exchange(IDLE, QUEUED, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        );
        s.0.store(READY, Ordering::Release);
        assert!(s.is_ready());
    }
}
