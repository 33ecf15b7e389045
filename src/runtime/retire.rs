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
            // drop here.
            let _ = stream.synchronize();
            drop(items);
            return Ok(());
        }
    };
    if let Err(failed) = sender()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(Batch { ctx, event, items })
    {
        let batch = failed.0;
        let _ = batch.event.synchronize();
        let _ = batch.ctx.bind_to_thread();
        drop(batch);
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
        std::mem::forget(failed.0);
    }
}

/// Waits for `event`. While a capture in global mode (of any thread) keeps
/// the driver from waiting, it tries again; any other failure (a faulted
/// context, which runs nothing more) ends the wait.
fn wait_for(event: &CudaEvent) {
    use cudarc::driver::sys::CUresult;
    loop {
        match event.synchronize() {
            Ok(()) => return,
            Err(e)
                if [
                    CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                    CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                    CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                    CUresult::CUDA_ERROR_NOT_PERMITTED,
                ]
                .contains(&e.0) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(_) => return,
        }
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
                    // A failed wait (a faulted context) leaves nothing to
                    // run the items' kernels: they can go.
                    wait_for(&batch.event);
                    // Modules unload in their context.
                    let _ = batch.ctx.bind_to_thread();
                    drop(batch.items);
                }
            });
        Mutex::new(send)
    })
}
