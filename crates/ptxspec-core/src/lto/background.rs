//! Work that follows a cubin look-up and that the caller does not wait for:
//! the disk copy of a cubin the remote store gave, and the fleet's counters
//! in the store. A remote hit is one request to the store and its checks;
//! the disk write (a folder check, a file, a rename, a trim of the folder)
//! and the counter's round trip come after, on one thread of their own, in
//! the order they were asked for.
//!
//! A process that ends right after a look-up may end before that work is
//! done: the disk copy is then made by the next process that misses, and
//! the count is lost (counters are best effort). A program that wants them
//! — the CLI does, before it exits — calls [`flush`].

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send>;

/// The queue of the thread that does the work (`None`: it could not start,
/// and jobs run where they are asked for).
fn queue() -> Option<&'static Mutex<Sender<Job>>> {
    static QUEUE: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = channel::<Job>();
            std::thread::Builder::new()
                .name("ptxspec-cache-after".into())
                .spawn(move || work(rx))
                .ok()
                .map(|_| Mutex::new(tx))
        })
        .as_ref()
}

fn work(rx: Receiver<Job>) {
    for job in rx {
        // A job that panics (a bug) must not end the thread: later jobs
        // would queue forever.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

/// Runs `job` after the work asked for before it, on the background
/// thread (here and now where that thread could not start). The runtime
/// also records there what a launch learned (the tier profile's lines),
/// which no launch waits for.
pub fn after(job: impl FnOnce() + Send + 'static) {
    let job: Job = Box::new(job);
    let job = match queue() {
        Some(q) => match q.lock().unwrap_or_else(|p| p.into_inner()).send(job) {
            Ok(()) => return,
            Err(returned) => returned.0,
        },
        None => job,
    };
    job();
}

/// Waits until the work asked for so far is done, `within` at most:
/// whether it is.
pub fn flush(within: Duration) -> bool {
    let (tx, rx) = channel();
    after(move || {
        let _ = tx.send(());
    });
    rx.recv_timeout(within).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Jobs run in the order asked for, off the asking thread, and a flush
    /// returns once every earlier job is done — a job that panics included.
    #[test]
    fn jobs_run_in_order_off_the_caller_and_flush_waits_for_them() {
        let caller = std::thread::current().id();
        let seen = Arc::new(Mutex::new(Vec::new()));
        after(|| panic!("a job that panics"));
        for i in 0..100 {
            let seen = Arc::clone(&seen);
            after(move || {
                seen.lock()
                    .unwrap()
                    .push((i, std::thread::current().id() != caller));
            });
        }
        let ran = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&ran);
        after(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        assert!(flush(Duration::from_secs(60)));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(
            *seen.lock().unwrap(),
            (0..100).map(|i| (i, true)).collect::<Vec<_>>()
        );
    }
}
