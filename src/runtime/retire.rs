//! What a queue lets go of — modules evicted from its cache, launch plans
//! and the functions they held — is dropped only once the kernels launched
//! from it have run (a module unloaded under a running kernel is undefined
//! behaviour), and never by waiting in the thread that let it go, nor under
//! the queue's lock: an event is recorded on the queue's stream when the
//! things are let go, and one background thread waits for it, then drops
//! them.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaEvent, CudaStream};

/// Things to drop once an event completed.
struct Batch {
    ctx: Arc<CudaContext>,
    event: CudaEvent,
    items: Vec<Box<dyn Send>>,
}

/// Drops `items` once the work submitted to `stream` so far has run. Where
/// no event can be recorded or no thread made, the stream is waited for
/// here instead. While `stream` captures, nothing is recorded there (an
/// event recorded in a capture marks a point of that graph, not of the
/// stream's work): `items` come back (`Err`), for the caller to keep and
/// hand over at its next call outside the capture.
pub(super) fn after_stream(
    stream: &CudaStream,
    items: Vec<Box<dyn Send>>,
) -> Result<(), Vec<Box<dyn Send>>> {
    if items.is_empty() {
        return Ok(());
    }
    if super::cuda::is_capturing(stream).unwrap_or(true) {
        return Err(items);
    }
    let ctx = Arc::clone(stream.context());
    let event = match stream.record_event(None) {
        Ok(event) => event,
        Err(_) => {
            // A stream in error: wait for it (what it can still run) and
            // drop here — only where that wait says it ran.
            match stream.synchronize() {
                Ok(()) => drop(items),
                Err(e) => match wait_error(e.0) {
                    Some(Waited::Faulted) => drop(items),
                    _ => keep_for_process(items, "the stream could not be waited for"),
                },
            }
            return Ok(());
        }
    };
    if let Err(failed) = sender()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(Batch { ctx, event, items })
    {
        let batch = failed.0;
        match wait_for(&batch.event) {
            Waited::Done | Waited::Faulted => {
                let _ = batch.ctx.bind_to_thread();
                drop(batch);
            }
            Waited::Unknown => keep_for_process(batch.items, "no retiring thread could be started"),
        }
    }
    Ok(())
}

/// Drops `items` once `event` has completed, on the retiring thread (which
/// waits again while a capture keeps the driver from waiting, see
/// [`wait_for`]): for an owner whose own wait failed, which must not drop
/// what queued work may still use.
pub(super) fn after_event(ctx: Arc<CudaContext>, event: CudaEvent, items: Vec<Box<dyn Send>>) {
    if let Err(failed) = sender()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(Batch { ctx, event, items })
    {
        // No thread: the items are kept for the process's life rather than
        // dropped under work that may use them.
        keep_for_process(failed.0.items, "no retiring thread could be started");
    }
}

/// Keeps `items` — code and memory that queued or captured work may still
/// use, where nothing could tell when it has run — for the process's life,
/// and says so (a `tracing` warning and `Stats::kept_until_exit`): memory
/// leaked, never freed under a kernel.
pub(super) fn keep_for_process(items: Vec<Box<dyn Send>>, why: &str) {
    if items.is_empty() {
        return;
    }
    crate::stats::KEPT_UNTIL_EXIT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::warn!(
        target: "ptxspec::runtime",
        why,
        "code and memory that queued work may still use are kept until the process ends"
    );
    std::mem::forget(items);
}

/// What a wait for an event came to.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Waited {
    /// The work before the event has run.
    Done,
    /// The context faulted: it runs nothing more, so nothing it held is
    /// still in use.
    Faulted,
    /// Nothing says whether the work before the event has run: the event
    /// was recorded into a capture (a program's, on a stream it shares), or
    /// the driver answered something else.
    Unknown,
}

/// Waits for `event`. While a capture in global mode (of any thread) keeps
/// the driver from waiting, it tries again. Fails closed: only a completed
/// wait, or a context that faulted (sticky errors: it runs nothing more),
/// lets what the event protects go.
fn wait_for(event: &CudaEvent) -> Waited {
    // Polled, each look a driver call that exit waits for
    // (`toolkit::exit`), not one wait that would hold exit until the GPU
    // reached the event.
    let mut pause = std::time::Duration::from_micros(50);
    loop {
        let looked = {
            let _driver = ptxspec_core::toolkit::exit::background_driver_poll();
            event.try_is_complete()
        };
        match looked {
            Ok(true) => return Waited::Done,
            Ok(false) => {}
            Err(e) => {
                if let Some(w) = wait_error(e.0) {
                    return w;
                }
            }
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(2));
    }
}

/// What a failed event wait means: `None` to try again (a capture in global
/// mode forbids waiting now), else the end of the wait.
fn wait_error(code: cudarc::driver::sys::CUresult) -> Option<Waited> {
    use cudarc::driver::sys::CUresult as R;
    match code {
        R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        | R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
        | R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        | R::CUDA_ERROR_NOT_PERMITTED => None,
        // The sticky errors: the context is lost, with every kernel in it.
        R::CUDA_ERROR_ILLEGAL_ADDRESS
        | R::CUDA_ERROR_LAUNCH_TIMEOUT
        | R::CUDA_ERROR_HARDWARE_STACK_ERROR
        | R::CUDA_ERROR_ILLEGAL_INSTRUCTION
        | R::CUDA_ERROR_MISALIGNED_ADDRESS
        | R::CUDA_ERROR_INVALID_ADDRESS_SPACE
        | R::CUDA_ERROR_INVALID_PC
        | R::CUDA_ERROR_LAUNCH_FAILED
        | R::CUDA_ERROR_ECC_UNCORRECTABLE
        | R::CUDA_ERROR_CONTEXT_IS_DESTROYED
        | R::CUDA_ERROR_DEINITIALIZED => Some(Waited::Faulted),
        // CUDA_ERROR_CAPTURED_EVENT among them: the event marks a point of
        // some graph, which may run later.
        _ => Some(Waited::Unknown),
    }
}

/// The background thread's queue of batches, started when first needed.
fn sender() -> &'static Mutex<Sender<Batch>> {
    static SEND: OnceLock<Mutex<Sender<Batch>>> = OnceLock::new();
    SEND.get_or_init(|| {
        let (send, receive) = channel::<Batch>();
        // Where no thread can be made the receiver goes with the failed
        // spawn: every send then fails, and `after_stream` waits itself.
        let _ = std::thread::Builder::new()
            .name("ptxspec-retire".into())
            .spawn(move || {
                for batch in receive {
                    let waited = wait_for(&batch.event);
                    // Exit waits for the unloads and the batch's drop (its
                    // event, its context: `toolkit::exit`).
                    let _driver = ptxspec_core::toolkit::exit::background_driver_call();
                    match waited {
                        // A faulted context runs the items' kernels no
                        // more: they can go.
                        Waited::Done | Waited::Faulted => {
                            // Modules unload in their context.
                            let _ = batch.ctx.bind_to_thread();
                            drop(batch.items);
                        }
                        Waited::Unknown => keep_for_process(
                            batch.items,
                            "the event after their last use could not be waited for",
                        ),
                    }
                    drop(batch.event);
                    drop(batch.ctx);
                }
            });
        Mutex::new(send)
    })
}

#[cfg(test)]
mod tests {
    use super::{Waited, wait_error};
    use cudarc::driver::sys::CUresult as R;

    /// Fail closed: a wait's error lets things go only where the context
    /// faulted; a capture in the way is waited out; anything else — a
    /// captured event above all — keeps them.
    #[test]
    fn only_a_faulted_context_ends_a_failed_wait_with_a_drop() {
        assert_eq!(
            wait_error(R::CUDA_ERROR_ILLEGAL_ADDRESS),
            Some(Waited::Faulted)
        );
        assert_eq!(
            wait_error(R::CUDA_ERROR_LAUNCH_FAILED),
            Some(Waited::Faulted)
        );
        assert_eq!(wait_error(R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), None);
        assert_eq!(wait_error(R::CUDA_ERROR_NOT_PERMITTED), None);
        for unknown in [
            R::CUDA_ERROR_CAPTURED_EVENT,
            R::CUDA_ERROR_INVALID_HANDLE,
            R::CUDA_ERROR_INVALID_VALUE,
            R::CUDA_ERROR_UNKNOWN,
        ] {
            assert_eq!(wait_error(unknown), Some(Waited::Unknown), "{unknown:?}");
        }
    }
}
