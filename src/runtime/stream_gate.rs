//! One lock per stream for every check-then-act on its capture state: a
//! queue's capture beginning and ending, a graph's replay and the event it
//! records after it, a wait joined into the stream. CUDA captures streams,
//! not queues, so a graph replayed from one thread while another thread
//! begins a capture of the same stream would otherwise have its replay or
//! its last-use event recorded into that capture, after its check said the
//! stream was not capturing — and its drop would then free what queued
//! replays still use.
//!
//! Taken before the queue's state lock, never while holding it; held only
//! across driver calls that return at once (no link, JIT or synchronize) —
//! and a download's copy, which waits for the stream. Queue launches need
//! it not: they check and submit under the queue's state lock, which
//! `begin_capture` takes too.

use std::sync::{Arc, Mutex, MutexGuard};

/// The lock a queue and the graphs made on its stream share.
#[derive(Clone, Default)]
pub(crate) struct StreamGate(Arc<Mutex<()>>);

impl StreamGate {
    /// Held while the caller checks the stream's capture state and submits
    /// what depends on it. A panic under it poisons nothing that matters:
    /// the lock guards no data.
    pub(crate) fn enter(&self) -> MutexGuard<'_, ()> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
