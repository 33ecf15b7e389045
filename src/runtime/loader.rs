//! Loads a tier's linked code off the launch path: one thread for the
//! process, started when first needed, fed by a channel; each job binds its
//! context, loads the module (a driver call that takes longer than a
//! launch may wait) and fills the job's slot, which the queue's plan or the graph node that
//! waits for it looks at on its next launch. No launch waits for a load.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::CudaContext;

use super::{CodeRef, LoadedModule};
use crate::bundle::BuiltImage;

/// Where a job leaves the loaded module, or why it failed.
pub(super) type Slot = Arc<Mutex<Option<Result<LoadedModule, String>>>>;

/// Where one load stands for its waiter.
pub(super) enum Load {
    /// On the loader thread still (or just handed to it).
    Pending,
    Loaded(LoadedModule),
    Failed(String),
}

/// The load of `code` (of `running`, in `ctx`) for the waiter whose slot
/// is `pending`: handed to the loader thread the first time, then looked
/// at; once it is done, `pending` is empty again.
pub(super) fn poll(
    pending: &mut Option<Slot>,
    ctx: &Arc<CudaContext>,
    code: CodeRef,
    running: &Arc<BuiltImage>,
) -> Load {
    let Some(slot) = pending else {
        let slot = Slot::default();
        submit(Job {
            ctx: Arc::clone(ctx),
            code,
            running: Arc::clone(running),
            slot: Arc::clone(&slot),
        });
        *pending = Some(slot);
        return Load::Pending;
    };
    let done = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    match done {
        None => Load::Pending,
        Some(result) => {
            *pending = None;
            match result {
                Ok(module) => Load::Loaded(module),
                Err(e) => Load::Failed(e),
            }
        }
    }
}

/// One load: `code` of `running`, in `ctx`, into `slot`.
struct Job {
    ctx: Arc<CudaContext>,
    code: CodeRef,
    running: Arc<BuiltImage>,
    slot: Slot,
}

/// Hands `job` to the loader thread (its slot says when it is done).
fn submit(job: Job) {
    static JOBS: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    let jobs = JOBS.get_or_init(|| {
        let (send, receive) = channel::<Job>();
        // Where no thread can be made, the receiver goes with the failed
        // spawn: every send then fails and its kernel stays emulated.
        let _ = std::thread::Builder::new()
            .name("ptxspec-tier-loader".into())
            .spawn(move || {
                for job in receive {
                    // Paced before exit's guard is taken: exit never waits
                    // for the pace.
                    let _one = super::cuda::one_background_load();
                    // Exit waits for the load (`toolkit::exit`), and for
                    // the job's parts' drop (declared after the guard, they
                    // go before it), which may let go of the context.
                    let _driver = ptxspec_core::toolkit::exit::background_driver_call();
                    let Job {
                        ctx,
                        code,
                        running,
                        slot,
                    } = job;
                    let result = ctx
                        .bind_to_thread()
                        .map_err(|e| e.to_string())
                        .and_then(|()| code.load(&running, None).map_err(|e| e.to_string()));
                    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
                }
            });
        Mutex::new(send)
    });
    if let Err(failed) = jobs.lock().unwrap_or_else(|p| p.into_inner()).send(job) {
        let job = failed.0;
        *job.slot.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Err("no thread to load the tier's code".into()));
    }
}
