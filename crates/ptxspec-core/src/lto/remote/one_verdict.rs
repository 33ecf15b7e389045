//! One verdict per fleet: the trial of an adaptive variant is held under a
//! lease as a link is (`single_flight`), so that one process times it and
//! the others wait for its signed verdict and take it — every rank of a job
//! then runs the same code, where each timing for itself could keep
//! different code on a noisy machine.
//!
//! The waiters run the generic code meanwhile (they wait on the variant's
//! link thread, never on a launch). A holder that gives its lease back
//! without a verdict, or dies, frees it for one waiter to take over. A
//! trial that outlives the lease (`PTXSPEC_REMOTE_LEASE_MS`) is timed by a
//! waiter too, and the fleet may then hold two verdicts in turn: the
//! guide says to set the lease above a trial's time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::keys::trial_lease_key;
use super::{Remote, best_effort, lease_held, store_verdict, verdict};
use crate::digest::Digest;

/// How soon a process waiting for another's trial first asks again for its
/// verdict; each wait after doubles, up to [`POLL_MOST`]: a trial takes
/// tens to hundreds of launches, and a fleet of processes each waiting for
/// dozens of variants must not flood the store it waits on.
const POLL: Duration = Duration::from_millis(25);
/// The longest wait between two looks.
const POLL_MOST: Duration = Duration::from_millis(250);
/// How long, at least, a process that cannot write waits once no process
/// holds the lease, for a waiting writer to take it over, before it times
/// for itself (a quarter of the lease where that is longer): four of a
/// writer's longest waits between polls, so that a loaded writer that has
/// backed off is not outrun.
const NO_HOLDER: Duration = Duration::from_millis(4 * POLL_MOST.as_millis() as u64);

/// Whose turn a variant's trial is.
pub enum TrialTurn {
    /// The fleet's verdict, signed by a writer this process trusts (found
    /// at once, or after waiting for another process's trial).
    Decided(Vec<u8>),
    /// Time it here. With `Some`, this process holds the fleet's lease on
    /// the trial and shares its verdict with [`TrialLease::share`]; with
    /// `None` it times for itself (it cannot write, no one else times it,
    /// the store is down, or another's trial outlived its lease).
    TimeHere(Option<TrialLease>),
}

/// This process's lease on timing one variant for the fleet: given back
/// when dropped (on the background thread: the drop may happen on a
/// launch's path), with or without a verdict.
pub struct TrialLease {
    remote: &'static Remote,
    key: Digest,
    arch: u32,
    token: String,
}

impl TrialLease {
    /// Stores this process's verdict `word` for the fleet (signed), then
    /// gives the lease back; whether it was stored.
    pub fn share(self, word: &[u8]) -> bool {
        store_verdict(self.remote, &self.key, self.arch, word)
    }
}

impl Drop for TrialLease {
    fn drop(&mut self) {
        let r = self.remote;
        let (name, token) = (trial_lease_key(&r.domain, &self.key), self.token.clone());
        crate::lto::in_background(move || {
            best_effort(r, r.store.release(&name, &token, r.deadline(&r.budget())));
        });
    }
}

/// Whose turn the trial of the variant of identity `key` on `sm_<arch>` is:
/// the fleet's verdict where a trusted writer stored one; else this
/// process's, under the fleet's lease where it writes and takes it; else —
/// another process times it — the verdict that process stores, waited for
/// at most twice the lease's time (taking the lease over where its holder
/// gives it back without a verdict or dies). A process that cannot write waits
/// only where a writer holds the lease. Called on a variant's link thread;
/// a wait ends early once `wanted` says no one needs the verdict any more
/// (the process dropped the code that would run the variant).
pub fn trial_turn(
    r: &'static Remote,
    key: &Digest,
    arch: u32,
    wanted: &dyn Fn() -> bool,
) -> TrialTurn {
    if let Some(word) = verdict(r, key, arch) {
        return TrialTurn::Decided(word);
    }
    if !r.available() {
        return TrialTurn::TimeHere(None);
    }
    // Unique within the process too: two queues of one process may ask for
    // the same variant, and a lease is given back only by its own token.
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let token = format!(
        "{}-{}-{}",
        std::process::id(),
        r.now_ms(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    );
    let name = trial_lease_key(&r.domain, key);
    if r.signer.is_some() {
        match r
            .store
            .try_lease(&name, &token, r.lease, r.deadline(&r.budget()))
        {
            Ok(true) => return leased(r, key, arch, token),
            Ok(false) => {}
            Err(e) => {
                r.failed(e);
                return TrialTurn::TimeHere(None);
            }
        }
    } else {
        match lease_held(r, &name, &r.budget()) {
            Ok(true) => {}
            // No one times it: a verdict stored between the look above and
            // this one is taken; else this process times for itself.
            Ok(false) => {
                return match verdict(r, key, arch) {
                    Some(word) => TrialTurn::Decided(word),
                    None => TrialTurn::TimeHere(None),
                };
            }
            Err(e) => {
                r.failed(e);
                return TrialTurn::TimeHere(None);
            }
        }
    }
    wait_for_the_holder(r, key, arch, token, wanted)
}

/// Waits for the holder's verdict, polling, while some process holds the
/// lease — at most twice the lease's time: a holder's lease, and one more
/// where a waiter took it over from a holder that died. Where no one holds
/// it any more (its holder gave it back without a verdict, or died), a
/// process that writes takes it over and one that does not times for
/// itself.
fn wait_for_the_holder(
    r: &'static Remote,
    key: &Digest,
    arch: u32,
    token: String,
    wanted: &dyn Fn() -> bool,
) -> TrialTurn {
    let mut span = crate::trace::span("verdict wait: another process times", "remote");
    let started = Instant::now();
    let deadline = started + 2 * r.lease;
    let name = trial_lease_key(&r.domain, key);
    let mut no_holder_since: Option<Instant> = None;
    let mut poll = POLL;
    let mut unwanted = false;
    let turn = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break TrialTurn::TimeHere(None);
        }
        if !wanted() {
            unwanted = true;
            break TrialTurn::TimeHere(None);
        }
        std::thread::sleep(poll.min(left));
        poll = (poll * 2).min(POLL_MOST);
        // A store that failed a call is not asked for a while (the
        // breaker): the wait goes on, within its bound, rather than timing
        // here — a slow moment of the store must not split the fleet.
        if !r.available() {
            continue;
        }
        if let Some(word) = verdict(r, key, arch) {
            break TrialTurn::Decided(word);
        }
        if !r.available() {
            continue;
        }
        let budget = r.budget();
        if r.signer.is_some() {
            if r.store
                .try_lease(&name, &token, r.lease, r.deadline(&budget))
                == Ok(true)
            {
                break leased(r, key, arch, token);
            }
        } else {
            match lease_held(r, &name, &budget) {
                Ok(false) => {
                    let since = *no_holder_since.get_or_insert_with(Instant::now);
                    // No one has held it for a while (a writer waiting
                    // takes a lease over within a poll): a verdict stored
                    // meanwhile is taken, else this process times for
                    // itself.
                    if since.elapsed() >= NO_HOLDER.max(r.lease / 4) {
                        break match verdict(r, key, arch) {
                            Some(word) => TrialTurn::Decided(word),
                            None => TrialTurn::TimeHere(None),
                        };
                    }
                }
                _ => no_holder_since = None,
            }
        }
    };
    let outcome = match &turn {
        TrialTurn::Decided(_) => "the holder's verdict",
        TrialTurn::TimeHere(Some(_)) => "took the lease over",
        TrialTurn::TimeHere(None) if unwanted => "no longer wanted",
        TrialTurn::TimeHere(None) => "no holder or no verdict in time: timed here",
    };
    span.arg("outcome", outcome);
    if matches!(turn, TrialTurn::TimeHere(None)) && !unwanted {
        tracing::info!(
            target: "ptxspec::remote",
            store = %r.store.describe(),
            waited_ms = started.elapsed().as_millis() as u64,
            "waited out another process's trial: timing here"
        );
    }
    turn
}

/// What a process that has just taken the lease does: looks once more (the
/// holder before it may have stored its verdict and given the lease back
/// between this process's look and its lease), else times under it.
fn leased(r: &'static Remote, key: &Digest, arch: u32, token: String) -> TrialTurn {
    let lease = TrialLease {
        remote: r,
        key: *key,
        arch,
        token,
    };
    match verdict(r, key, arch) {
        Some(word) => TrialTurn::Decided(word),
        None => TrialTurn::TimeHere(Some(lease)),
    }
}
