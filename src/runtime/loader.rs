//! Loads a tier's linked code off the launch path: one thread for the
//! process, started when first needed, fed by a channel; each job binds its
//! context, loads the module (0.2 ms for a small cubin on the H100 machine)
//! and fills the job's slot, which the queue's plan or the graph node that
//! waits for it looks at on its next launch. No launch waits for a load.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::CudaContext;

use super::{CodeRef, LoadedModule};
use crate::bundle::BuiltImage;

/// Where a job leaves the loaded module, or why it failed.
pub(super) type Slot = Arc<Mutex<Option<Result<LoadedModule, String>>>>;

/// One load: `code` of `running`, in `ctx`, into `slot`.
pub(super) struct Job {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) code: CodeRef,
    pub(super) running: Arc<BuiltImage>,
    pub(super) slot: Slot,
}

/// Hands `job` to the loader thread (its slot says when it is done).
pub(super) fn submit(job: Job) {
    static JOBS: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    let jobs = JOBS.get_or_init(|| {
        let (send, receive) = channel::<Job>();
        // Where no thread can be made, the receiver goes with the failed
        // spawn: every send then fails and its kernel stays emulated.
        let _ = std::thread::Builder::new()
            .name("ptxspec-tier-loader".into())
            .spawn(move || {
                for job in receive {
                    let result = job
                        .ctx
                        .bind_to_thread()
                        .map_err(|e| e.to_string())
                        .and_then(|()| {
                            job.code.load(&job.running, None).map_err(|e| e.to_string())
                        });
                    *job.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
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
