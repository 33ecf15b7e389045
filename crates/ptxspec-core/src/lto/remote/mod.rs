//! The remote tier of the cubin caches: cubins shared across processes and
//! machines through a store a fleet already has (Redis first), looked up
//! after memory and disk and before a link. Entries are signed by writers
//! and loaded only when signed by a key the reader trusts (see `entry`).
//!
//! Set up by the environment, read once per process:
//! - `PTXSPEC_REMOTE_CACHE=redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DB]`:
//!   the store (`rediss://`: over TLS, its certificate verified);
//! - `PTXSPEC_REMOTE_CA_FILE=FILE`: the PEM file of the CA certificates a
//!   `rediss://` store's certificate must chain to (default: the system's
//!   roots);
//! - `PTXSPEC_CACHE_TRUSTED_KEYS=FILE`: public keys whose entries load (one
//!   a line);
//! - `PTXSPEC_CACHE_SIGNING_KEY=FILE`: a secret key (a file only its owner
//!   can read); only a process with one writes (readers without it never
//!   do);
//! - `PTXSPEC_REMOTE_TIMEOUT_MS` (default 20): the bound of every call,
//!   from connecting to the last byte of its reply;
//! - `PTXSPEC_REMOTE_LEASE_MS` (default 10 000): how long a process that
//!   links a cubin, or times an adaptive variant, holds its lease, and
//!   others wait for it.
//!
//! A setting that is not valid (a URL that is none, a key file that is
//! missing, holds a weak key or can be read by others) is an error naming
//! the variable. A store that is down, slow or full never fails a build or
//! a launch: a call ends by its deadline, one look-up's calls together by
//! [`LOOKUP_CALLS`] times it (a wait for another process's link by the
//! lease's time), after a failure the store is not asked again for
//! [`PAUSE`] (a circuit breaker), and the cubin is linked locally. Each
//! kind of failure and refusal is said once per process.

pub mod entry;
mod keys;
mod one_verdict;
mod resp;
#[cfg(fuzzing)]
pub use resp::fuzz_reply;
mod counters;
mod settings;
mod single_flight;
mod store;
#[cfg(feature = "tls")]
mod tls;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use counters::{ACL_REFUSALS, BREAKER_TRIPS, HITS, REFUSED, REFUSED_BY, UNAVAILABLE};
pub use counters::{RemoteStats, stats};
use ed25519_dalek::{SigningKey, VerifyingKey};
pub use entry::{generate_key_pair, write_key_pair};
use keys::{counters_key, store_key, trust_domain, verdict_key};
pub use one_verdict::{TrialLease, TrialTurn, trial_turn};
pub use settings::{ConfigureError, Settings, configure, lease_from_env};
use single_flight::store_cubin;
pub use single_flight::{Fetched, Lease, fetch};
pub use store::{Endpoint, RedisStore, RemoteStore, redact};

use crate::digest::Digest;
use crate::settings::{Env, SettingError};

/// How long a store that failed is not asked.
pub const PAUSE: Duration = Duration::from_secs(5);
/// How many calls' time one look-up of a cubin may take in all (its get,
/// a lease), apart from a wait for another's link (the counters are sent
/// after it: `lto::background`).
pub const LOOKUP_CALLS: u32 = 4;
/// How long a lease holds (`PTXSPEC_REMOTE_LEASE_MS`): a link takes well
/// under this; a holder that died frees it when it ends.
const DEFAULT_LEASE_MS: u64 = 10_000;
/// How often a process that waits for another's link asks for the entry.
const POLL: Duration = Duration::from_millis(5);
/// The default bound of one call.
const DEFAULT_TIMEOUT_MS: u64 = 20;

/// A command the server's ACL refused, or any other failure of a call whose
/// failure does not pause the store (a count, a lease's release): an ACL
/// refusal is counted and said once (which command, which rule), the rest
/// is best effort.
fn best_effort(r: &Remote, result: Result<(), String>) {
    if let Err(e) = result
        && store::is_acl_refusal(&e)
    {
        ACL_REFUSALS.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(target: "ptxspec::remote", store = %r.store.describe(), error = %e, "command refused");
        say_once(e);
    }
}

/// The configured store, its trust and (for writers) its signing key: one
/// process's remote tier.
pub struct Remote {
    store: Box<dyn RemoteStore>,
    trusted: Vec<VerifyingKey>,
    /// The trust domain: the SHA-256 of the trusted keys, sorted
    /// ([`trust_domain`]). Entries and leases are named within it, so that
    /// fleets that trust different keys and share a store keep their own
    /// entries (one's could only be refused by the other, and each link
    /// would overwrite the other's entry).
    domain: Digest,
    signer: Option<SigningKey>,
    /// Milliseconds since `epoch` before which the store is not asked.
    paused_until: AtomicU64,
    epoch: Instant,
    timeout: Duration,
    lease: Duration,
}

/// Says `what` once per process (per distinct text).
fn say_once(what: String) {
    crate::notice::once(format!("remote cache: {what}"));
}

/// The remote tier of this process, set up once: `Ok(None)` where no store
/// is named, an error where a setting is not valid.
pub(crate) fn tier() -> Result<Option<&'static Remote>, SettingError> {
    match REMOTE.get_or_init(|| Settings::read(&Env::process()).and_then(Remote::open)) {
        Ok(r) => Ok(r.as_ref()),
        Err(e) => Err(e.clone()),
    }
}

/// A remote tier made from `settings` instead of the environment, kept for
/// the rest of the process: one host of a fleet that a test or bench runs
/// many of in one process, each with its own connections
/// (`tests/fleet_load.rs`). Programs use the environment's tier. `Ok(None)`
/// where `settings` name no store.
#[doc(hidden)]
pub fn open_host(settings: Settings) -> Result<Option<&'static Remote>, SettingError> {
    Ok(Remote::open(settings)?.map(|r| &*Box::leak(Box::new(r))))
}

/// The remote tier of this process, set up once.
static REMOTE: OnceLock<Result<Option<Remote>, SettingError>> = OnceLock::new();

impl Remote {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Whether the store may be asked now (the breaker is closed).
    fn available(&self) -> bool {
        self.now_ms() >= self.paused_until.load(Ordering::Relaxed)
    }

    /// Pauses the store after a failure.
    fn failed(&self, what: String) {
        if store::is_acl_refusal(&what) {
            ACL_REFUSALS.fetch_add(1, Ordering::Relaxed);
        }
        UNAVAILABLE.fetch_add(1, Ordering::Relaxed);
        BREAKER_TRIPS.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            target: "ptxspec::remote",
            store = %self.store.describe(),
            error = %what,
            pause_s = PAUSE.as_secs(),
            "store failed: breaker open"
        );
        self.paused_until
            .store(self.now_ms() + PAUSE.as_millis() as u64, Ordering::Relaxed);
        say_once(format!(
            "{what}; not asked for {} s at a time after a failure",
            PAUSE.as_secs()
        ));
    }

    /// The budget of one look-up, starting now.
    fn budget(&self) -> Budget {
        Budget {
            end: Instant::now() + self.timeout * LOOKUP_CALLS,
        }
    }

    /// The deadline of one call within `budget`.
    fn deadline(&self, budget: &Budget) -> Instant {
        (Instant::now() + self.timeout).min(budget.end)
    }
}

/// Whether some process holds the lease `name` now — its holder's token
/// there (one too long to read is a lease all the same) — or why the store
/// could not say.
fn lease_held(r: &Remote, name: &str, budget: &Budget) -> Result<bool, String> {
    Ok(match r.store.fetch(name, 1024, r.deadline(budget))? {
        store::Got::Value(_) | store::Got::TooLarge(_) => true,
        store::Got::Missing => false,
    })
}

/// The time one look-up's calls may take in all.
pub(crate) struct Budget {
    end: Instant,
}

/// Counts `event` for the fleet — after the look-up, never on its path
/// (`lto::background`), and best effort: a count that fails is not worth
/// pausing the store for.
fn tally(r: &'static Remote, event: impl Into<String>) {
    let event = event.into();
    super::background::after(move || count(r, &event));
}

/// One count of `event` in the fleet's counters, on this thread, bounded by
/// one call's time; best effort.
fn count(r: &Remote, event: &str) {
    let deadline = Instant::now() + r.timeout;
    best_effort(r, r.store.count(&counters_key(&r.domain), event, deadline));
}

/// Counts a cubin found on disk or linked, where the remote tier is on: the
/// fleet's counters then show every tier.
pub(crate) fn note(r: Option<&'static Remote>, event: &str) {
    if let Some(r) = r.filter(|r| r.available()) {
        tally(r, event);
    }
}

/// Counts `event` for the fleet now, on this thread (best effort): for
/// events whose path is long anyway — a link — and whose count must not
/// wait behind what follows them.
pub(crate) fn note_now(r: Option<&'static Remote>, event: &str) {
    if let Some(r) = r.filter(|r| r.available()) {
        count(r, event);
    }
}

/// Connects to the store now, on the background thread (`lto::background`),
/// so that the first look-up finds a connection made (best effort: one that
/// fails is made again by that look-up).
pub(crate) fn connect_ahead(r: &'static Remote) {
    if r.available() {
        super::background::after(move || {
            let _ = r
                .store
                .connect_ahead(Instant::now() + r.timeout * LOOKUP_CALLS);
        });
    }
}

/// Makes sure the store holds `cubin` (of `key`, linked for `arch`), as
/// `ptxspec cache warm` does for a cubin it found in this machine's caches:
/// already there (a trusted entry), uploaded now, or why it could not be.
pub(crate) fn ensure_stored(
    r: &'static Remote,
    key: &Digest,
    arch: u32,
    cubin: &[u8],
) -> super::Published {
    use super::Published;
    if r.signer.is_none() {
        return Published::NotUploaded(
            "this process does not write (PTXSPEC_CACHE_SIGNING_KEY is unset)".into(),
        );
    }
    if !r.available() {
        return Published::NotUploaded(format!(
            "{} failed a moment ago and is not asked for a while",
            r.store.describe()
        ));
    }
    match ask(r, &r.budget(), key, arch) {
        Found::Cubin(_) => Published::AlreadyThere,
        Found::Unavailable => {
            Published::NotUploaded(format!("{} did not answer", r.store.describe()))
        }
        Found::Nothing | Found::Refused => match store_cubin(r, key, arch, cubin) {
            true => Published::Uploaded,
            false => {
                Published::NotUploaded(format!("{} refused or did not take it", r.store.describe()))
            }
        },
    }
}

/// The fleet's counters in the store (`ptxspec cache stats`): the store's
/// name and what every process of this process's trust domain (the keys it
/// trusts) saw with the remote tier, by event.
pub fn fleet_counts() -> Result<(String, Vec<(String, u64)>), String> {
    let r = tier().map_err(|e| e.to_string())?.ok_or(
        "the remote tier is off: set PTXSPEC_REMOTE_CACHE and PTXSPEC_CACHE_TRUSTED_KEYS (docs/guide/sharing.md)",
    )?;
    let counts = r
        .store
        .counts(&counters_key(&r.domain), r.deadline(&r.budget()))?;
    Ok((r.store.describe(), counts))
}

/// Whether this process writes to the remote store (it is set up, and has
/// a signing key).
pub fn writes() -> Result<bool, SettingError> {
    Ok(tier()?.is_some_and(|r| r.signer.is_some()))
}

/// What a trial of adaptive arguments kept for the variant of identity
/// `key` on `sm_<arch>`, where a writer this process trusts stored it: one
/// request, no lease, no wait. `None` where the store is off or down,
/// holds none, or holds one that is refused (counted and said as a refused
/// cubin is).
pub fn verdict(r: &'static Remote, key: &Digest, arch: u32) -> Option<Vec<u8>> {
    if !r.available() {
        return None;
    }
    let asked = Asked {
        name: verdict_key(&r.domain, key),
        max: entry::MAX_VERDICT_ENTRY,
        open: entry::open_verdict,
        instead: "the variant is timed here instead",
    };
    match asked.ask(r, &r.budget(), key, arch) {
        Found::Cubin(word) => Some(word),
        Found::Nothing | Found::Refused | Found::Unavailable => None,
    }
}

/// Stores the verdict `word` of the variant of identity `key` on
/// `sm_<arch>`, signed, where this process may write; whether it was
/// stored.
pub fn store_verdict(r: &'static Remote, key: &Digest, arch: u32, word: &[u8]) -> bool {
    put_sealed(
        r,
        &verdict_key(&r.domain, key),
        word.len() as u64 > entry::MAX_VERDICT,
        |signer| entry::seal_verdict(signer, key, arch, word),
    )
}

/// Puts the entry `seal` makes with this process's signing key under
/// `name`, where this process may write, the store is available and the
/// payload is not `oversized`; whether it was put (a failed call opens the
/// breaker).
fn put_sealed(
    r: &Remote,
    name: &str,
    oversized: bool,
    seal: impl FnOnce(&SigningKey) -> Vec<u8>,
) -> bool {
    let Some(signer) = &r.signer else {
        return false;
    };
    if !r.available() || oversized {
        return false;
    }
    let budget = r.budget();
    match r.store.put(name, &seal(signer), r.deadline(&budget)) {
        Ok(()) => true,
        Err(e) => {
            r.failed(e);
            false
        }
    }
}

/// Counts and says an entry refused (`instead`: what this process does
/// without it).
fn refused(r: &'static Remote, why: entry::Refusal, arch: u32, instead: &str) {
    REFUSED.fetch_add(1, Ordering::Relaxed);
    REFUSED_BY[why as usize].fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        target: "ptxspec::remote",
        store = %r.store.describe(),
        reason = why.words(),
        arch,
        "entry refused"
    );
    tally(r, format!("refused: {}", why.words()));
    say_once(format!(
        "refused an entry of {}: {} ({instead})",
        r.store.describe(),
        why.words()
    ));
}

/// What asking the store for a cubin found.
enum Found {
    Cubin(Vec<u8>),
    /// No entry.
    Nothing,
    /// An entry that was refused (counted and said where it was found).
    Refused,
    /// The store is off, down or paused.
    Unavailable,
}

/// Asks the store for the entry of `key` and `arch`, and checks it.
fn ask(r: &'static Remote, budget: &Budget, key: &Digest, arch: u32) -> Found {
    if !r.available() {
        UNAVAILABLE.fetch_add(1, Ordering::Relaxed);
        return Found::Unavailable;
    }
    let asked = Asked {
        name: store_key(&r.domain, key),
        max: entry::MAX_ENTRY,
        open: entry::open,
        instead: "the cubin is linked here instead",
    };
    asked.ask(r, budget, key, arch)
}

/// A signed entry to ask the store for: its name, the largest reply read,
/// how it is opened, and what this process does where it is refused.
struct Asked {
    name: String,
    max: u64,
    open: Opener,
    instead: &'static str,
}

/// How an entry of one kind is opened (`entry::open`, `entry::open_verdict`):
/// its payload where a trusted key signed it for the key and architecture
/// asked, else why not.
type Opener = fn(&[u8], &Digest, u32, &[VerifyingKey]) -> Result<Vec<u8>, entry::Refusal>;

impl Asked {
    /// One request for the entry of `key` and `arch`, checked (a refusal
    /// counted and said; a failed call opens the breaker). The caller has
    /// seen the store available.
    fn ask(&self, r: &'static Remote, budget: &Budget, key: &Digest, arch: u32) -> Found {
        match r.store.fetch(&self.name, self.max, r.deadline(budget)) {
            Err(e) => {
                r.failed(e);
                Found::Unavailable
            }
            Ok(store::Got::Missing) => Found::Nothing,
            // An entry larger than any of its kind: refused as a forged one
            // is (counted, said once), never a failure of the store — which
            // would open the breaker, a way for anyone who can write the
            // store to turn every reader's fleet tier off.
            Ok(store::Got::TooLarge(_)) => {
                refused(r, entry::Refusal::Oversized, arch, self.instead);
                Found::Refused
            }
            Ok(store::Got::Value(bytes)) => match (self.open)(&bytes, key, arch, &r.trusted) {
                Ok(payload) => Found::Cubin(payload),
                Err(why) => {
                    refused(r, why, arch, self.instead);
                    Found::Refused
                }
            },
        }
    }
}

/// The store's trusted cubin of `key` and `arch`, asked once: no lease, no
/// wait (a prefetch).
pub(crate) fn peek(r: &'static Remote, key: &Digest, arch: u32) -> Option<Vec<u8>> {
    let budget = r.budget();
    match ask(r, &budget, key, arch) {
        Found::Cubin(c) => {
            HITS.fetch_add(1, Ordering::Relaxed);
            tally(r, "remote hits (prefetched)");
            Some(c)
        }
        Found::Nothing | Found::Refused | Found::Unavailable => None,
    }
}

#[cfg(test)]
mod tests;
