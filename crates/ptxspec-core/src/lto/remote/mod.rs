//! The remote tier of the cubin caches: cubins shared across processes and
//! machines through a store a fleet already has (Redis first), looked up
//! after memory and disk and before a link. Entries are signed by writers
//! and loaded only when signed by a key the reader trusts (see `entry`).
//!
//! Set up by the environment, read once per process:
//! - `PTXSPEC_REMOTE_CACHE=redis://HOST:PORT[/DB]`: the store;
//! - `PTXSPEC_CACHE_TRUSTED_KEYS=FILE`: public keys whose entries load (one
//!   a line); without any, the tier is off and the first use says why;
//! - `PTXSPEC_CACHE_SIGNING_KEY=FILE`: a secret key; only a process with
//!   one writes (readers without it never do);
//! - `PTXSPEC_REMOTE_TIMEOUT_MS` (default 20): the bound of every call;
//! - `PTXSPEC_REMOTE_LEASE_MS` (default 10 000): how long a process that
//!   links a cubin holds its lease, and others wait for it.
//!
//! A store that is down, slow or full never fails a build or a launch: a
//! call that fails costs at most the timeout, after which the store is not
//! asked again for [`PAUSE`] (a circuit breaker), and the cubin is linked
//! locally. Each kind of failure and refusal is said once per process.

pub mod entry;
mod store;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use ed25519_dalek::{SigningKey, VerifyingKey};
pub use entry::generate_key_pair;
pub use store::{RedisStore, RemoteStore};

/// How long a store that failed is not asked.
pub const PAUSE: Duration = Duration::from_secs(5);
/// How long a lease holds (`PTXSPEC_REMOTE_LEASE_MS`): a link takes well
/// under this; a holder that died frees it when it ends.
const DEFAULT_LEASE_MS: u64 = 10_000;
/// How often a process that waits for another's link asks for the entry.
const POLL: Duration = Duration::from_millis(5);
/// The default bound of one call.
const DEFAULT_TIMEOUT_MS: u64 = 20;

/// What the remote tier did in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Entries loaded.
    pub hits: u64,
    /// Keys the store did not have.
    pub misses: u64,
    /// Entries refused (bad signature, another key's or architecture's
    /// cubin, damaged, oversized).
    pub refused: u64,
    /// Entries written.
    pub writes: u64,
    /// Calls that failed or were skipped while the store was paused.
    pub unavailable: u64,
    /// Links this process waited for another's (single flight) and got.
    pub waited: u64,
}

static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);
static WRITES: AtomicU64 = AtomicU64::new(0);
static UNAVAILABLE: AtomicU64 = AtomicU64::new(0);
static WAITED: AtomicU64 = AtomicU64::new(0);

/// The remote tier's counts so far, in this process.
pub fn stats() -> RemoteStats {
    RemoteStats {
        hits: HITS.load(Ordering::Relaxed),
        misses: MISSES.load(Ordering::Relaxed),
        refused: REFUSED.load(Ordering::Relaxed),
        writes: WRITES.load(Ordering::Relaxed),
        unavailable: UNAVAILABLE.load(Ordering::Relaxed),
        waited: WAITED.load(Ordering::Relaxed),
    }
}

/// The configured store, its trust and (for writers) its signing key.
struct Remote {
    store: Box<dyn RemoteStore>,
    trusted: Vec<VerifyingKey>,
    signer: Option<SigningKey>,
    /// Milliseconds since `epoch` before which the store is not asked.
    paused_until: AtomicU64,
    epoch: Instant,
    lease: Duration,
}

/// Says `what` once per process (per distinct text).
fn say_once(what: String) {
    static SAID: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let said = SAID.get_or_init(Mutex::default);
    if said
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(what.clone())
    {
        eprintln!("ptxspec: remote cache: {what}");
    }
}

/// The remote tier as [`configure`] or the environment sets it up, once;
/// `None` when it is off (not configured, or configured so that nothing
/// could be trusted: then said once).
fn remote() -> Option<&'static Remote> {
    REMOTE
        .get_or_init(|| from_settings(Settings::from_env()))
        .as_ref()
}

/// The remote tier of this process, set up once.
static REMOTE: OnceLock<Option<Remote>> = OnceLock::new();

/// What sets the remote tier up: the store's URL, the trusted-keys file,
/// the signing key's file (writers), and the bounds of calls and leases.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// `redis://HOST:PORT[/DB]`; `None`: the tier is off.
    pub url: Option<String>,
    /// The file of trusted public keys.
    pub trusted_keys: Option<std::ffi::OsString>,
    /// The file of this process's secret key, if it writes.
    pub signing_key: Option<std::ffi::OsString>,
    /// The bound of one call in milliseconds, as text (default 20).
    pub timeout_ms: Option<String>,
    /// The lease's time in milliseconds, as text (default 10 000).
    pub lease_ms: Option<String>,
}

impl Settings {
    /// The settings the environment gives (the module's documentation
    /// lists the variables); where `PTXSPEC_REMOTE_CACHE` names no store,
    /// none (the others are not read).
    pub fn from_env() -> Settings {
        let url = std::env::var("PTXSPEC_REMOTE_CACHE")
            .ok()
            .filter(|u| !u.is_empty());
        // Without a store the rest says nothing (and is not read: this is
        // on the path of a new process's first disk-cache hit).
        if url.is_none() {
            return Settings::default();
        }
        Settings {
            url,
            trusted_keys: std::env::var_os("PTXSPEC_CACHE_TRUSTED_KEYS"),
            signing_key: std::env::var_os("PTXSPEC_CACHE_SIGNING_KEY"),
            timeout_ms: std::env::var("PTXSPEC_REMOTE_TIMEOUT_MS").ok(),
            lease_ms: std::env::var("PTXSPEC_REMOTE_LEASE_MS").ok(),
        }
    }
}

/// Sets the remote tier up from `settings` instead of the environment,
/// for programs that configure it themselves: only before its first use
/// (the first LTO link or cache lookup of the process); after it, an error.
pub fn configure(settings: Settings) -> Result<(), String> {
    let mut taken = false;
    REMOTE.get_or_init(|| {
        taken = true;
        from_settings(settings)
    });
    if taken {
        Ok(())
    } else {
        Err("the remote cache was set up already: configure it before the first build".into())
    }
}

/// A setting in milliseconds: `value` (of `variable`) from 1 to `max`, or
/// `default` where it is not set.
fn milliseconds(
    variable: &str,
    value: Option<String>,
    default: u64,
    max: u64,
) -> Result<u64, String> {
    let Some(v) = value else {
        return Ok(default);
    };
    match v.trim().parse::<u64>() {
        Ok(ms) if (1..=max).contains(&ms) => Ok(ms),
        _ => Err(format!(
            "{variable}={v:?} is not a number of milliseconds from 1 to {max}"
        )),
    }
}

fn from_settings(settings: Settings) -> Option<Remote> {
    let url = settings.url?;
    let off = |why: String| {
        say_once(format!("off: {why}"));
        None
    };
    let timeout = match milliseconds(
        "PTXSPEC_REMOTE_TIMEOUT_MS",
        settings.timeout_ms,
        DEFAULT_TIMEOUT_MS,
        60_000,
    ) {
        Ok(ms) => ms,
        Err(why) => return off(why),
    };
    let Some(trusted_file) = settings.trusted_keys else {
        return off(
            "PTXSPEC_CACHE_TRUSTED_KEYS names no file of trusted public keys: no entry could be loaded".into(),
        );
    };
    let trusted = match crate::files::read_input(std::path::Path::new(&trusted_file)) {
        Ok(bytes) => match entry::trusted_keys(&String::from_utf8_lossy(&bytes)) {
            Ok(keys) if keys.is_empty() => {
                return off(format!(
                    "{}: no trusted public key in it",
                    trusted_file.to_string_lossy()
                ));
            }
            Ok(keys) => keys,
            Err(e) => return off(format!("{}: {e}", trusted_file.to_string_lossy())),
        },
        Err(e) => return off(format!("{}: {e}", trusted_file.to_string_lossy())),
    };
    let signer = match settings.signing_key {
        None => None,
        Some(f) => match crate::files::read_input(std::path::Path::new(&f)) {
            Ok(bytes) => match entry::secret_key(&String::from_utf8_lossy(&bytes)) {
                Some(k) => Some(k),
                None => {
                    say_once(format!(
                        "{}: not a secret key (64 hexadecimal digits): this process only reads",
                        f.to_string_lossy()
                    ));
                    None
                }
            },
            Err(e) => {
                say_once(format!(
                    "{}: {e}: this process only reads",
                    f.to_string_lossy()
                ));
                None
            }
        },
    };
    let lease = match milliseconds(
        "PTXSPEC_REMOTE_LEASE_MS",
        settings.lease_ms,
        DEFAULT_LEASE_MS,
        600_000,
    ) {
        Ok(ms) => ms,
        Err(why) => return off(why),
    };
    let store = match RedisStore::open(&url, Duration::from_millis(timeout)) {
        Ok(s) => s,
        Err(e) => return off(e),
    };
    Some(Remote {
        store: Box::new(store),
        trusted,
        signer,
        paused_until: AtomicU64::new(0),
        epoch: Instant::now(),
        lease: Duration::from_millis(lease),
    })
}

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
        UNAVAILABLE.fetch_add(1, Ordering::Relaxed);
        self.paused_until
            .store(self.now_ms() + PAUSE.as_millis() as u64, Ordering::Relaxed);
        say_once(format!(
            "{what}; not asked for {} s at a time after a failure",
            PAUSE.as_secs()
        ));
    }
}

/// Counts `event` for the fleet (best effort: a count that fails is not
/// worth pausing the store for).
fn tally(r: &Remote, event: &str) {
    let _ = r.store.count(event);
}

/// Counts a cubin found on disk or linked, where the remote tier is on: the
/// fleet's counters then show every tier.
pub(crate) fn note(event: &str) {
    if let Some(r) = remote().filter(|r| r.available()) {
        tally(r, event);
    }
}

/// The fleet's counters in the store (`ptxspec cache stats`): what every
/// process with the remote tier saw, by event.
pub fn fleet_counts() -> Result<(String, Vec<(String, u64)>), String> {
    let r = remote().ok_or(
        "the remote tier is off: set PTXSPEC_REMOTE_CACHE and PTXSPEC_CACHE_TRUSTED_KEYS (README, \"Sharing across machines\")",
    )?;
    Ok((r.store.describe(), r.store.counts()?))
}

/// Whether this process writes to the remote store (it is set up, and has
/// a signing key).
pub fn writes() -> bool {
    remote().is_some_and(|r| r.signer.is_some())
}

/// The store's name of the entry of `key`.
fn store_key(key: u128) -> String {
    format!("ptxspec:cubin:v1:{key:032x}")
}

/// What asking the store for a cubin found.
enum Found {
    Cubin(Vec<u8>),
    /// No entry, or one that was refused.
    Nothing,
    /// The store is off, down or paused.
    Unavailable,
}

/// Asks the store for the entry of `key` and `arch`, and checks it.
fn ask(r: &Remote, key: u128, arch: u32) -> Found {
    if !r.available() {
        UNAVAILABLE.fetch_add(1, Ordering::Relaxed);
        return Found::Unavailable;
    }
    match r.store.get(&store_key(key)) {
        Err(e) => {
            r.failed(e);
            Found::Unavailable
        }
        Ok(None) => Found::Nothing,
        Ok(Some(bytes)) => match entry::open(&bytes, key, arch, &r.trusted) {
            Ok(cubin) => Found::Cubin(cubin),
            Err(why) => {
                REFUSED.fetch_add(1, Ordering::Relaxed);
                tally(r, &format!("refused: {}", why.words()));
                say_once(format!(
                    "refused an entry of {}: {} (the cubin is linked here instead)",
                    r.store.describe(),
                    why.words()
                ));
                Found::Nothing
            }
        },
    }
}

/// The store's trusted cubin of `key` and `arch`, asked once: no lease, no
/// wait (a prefetch).
pub(crate) fn peek(key: u128, arch: u32) -> Option<Vec<u8>> {
    let r = remote()?;
    match ask(r, key, arch) {
        Found::Cubin(c) => {
            HITS.fetch_add(1, Ordering::Relaxed);
            tally(r, "remote hits (prefetched)");
            Some(c)
        }
        Found::Nothing | Found::Unavailable => None,
    }
}

/// What to do about a cubin the local caches lack.
pub(crate) enum Fetched {
    /// The store's trusted cubin (perhaps after waiting for another
    /// process's link).
    Cubin(Vec<u8>),
    /// Link it here; with `Some`, this process holds the lease and stores
    /// the cubin (then gives the lease back) with [`Lease::store`].
    Link(Option<Lease>),
}

/// This process's lease on linking one cubin for the fleet.
pub(crate) struct Lease {
    key: u128,
    token: String,
}

impl Lease {
    /// Stores the cubin this process linked (the lease is given back when
    /// dropped).
    pub(crate) fn store(self, arch: u32, cubin: &[u8]) -> bool {
        store(self.key, arch, cubin)
    }
}

/// Gives the lease back, stored or not (a link that failed frees it for
/// the processes waiting, which then link themselves).
impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(r) = remote() {
            let _ = r.store.release(&lease_key(self.key), &self.token);
        }
    }
}

/// The store's name of the lease on linking `key`.
fn lease_key(key: u128) -> String {
    format!("ptxspec:lease:v1:{key:032x}")
}

/// The cubin of `key` and `arch` from the store — single flight across
/// processes and hosts: on a miss a writer takes the lease and links
/// (others that miss meanwhile wait for its entry, at most the lease's
/// time, then link themselves; a lease whose holder died expires). A
/// process that cannot write links without a lease, waiting only where a
/// writer holds one.
pub(crate) fn fetch(key: u128, arch: u32) -> Fetched {
    let Some(r) = remote() else {
        return Fetched::Link(None);
    };
    match ask(r, key, arch) {
        Found::Cubin(c) => {
            HITS.fetch_add(1, Ordering::Relaxed);
            tally(r, "remote hits");
            return Fetched::Cubin(c);
        }
        Found::Unavailable => return Fetched::Link(None),
        Found::Nothing => {
            MISSES.fetch_add(1, Ordering::Relaxed);
            tally(r, "remote misses");
        }
    }
    let token = format!("{}-{}", std::process::id(), r.now_ms());
    if r.signer.is_some() {
        match r.store.try_lease(&lease_key(key), &token, r.lease) {
            Ok(true) => return leased(r, key, arch, token),
            Ok(false) => {}
            Err(e) => {
                r.failed(e);
                return Fetched::Link(None);
            }
        }
    } else {
        // A reader waits only for a link under way.
        match r.store.get(&lease_key(key)) {
            Ok(Some(_)) => {}
            Ok(None) => return Fetched::Link(None),
            Err(e) => {
                r.failed(e);
                return Fetched::Link(None);
            }
        }
    }
    let deadline = Instant::now() + r.lease;
    while Instant::now() < deadline {
        std::thread::sleep(POLL);
        match ask(r, key, arch) {
            Found::Cubin(c) => {
                HITS.fetch_add(1, Ordering::Relaxed);
                WAITED.fetch_add(1, Ordering::Relaxed);
                tally(r, "remote hits after waiting for another's link");
                return Fetched::Cubin(c);
            }
            Found::Unavailable => return Fetched::Link(None),
            Found::Nothing => {}
        }
        // The holder gave the lease back without an entry (its link
        // failed), or died and the lease expired: take over.
        if r.signer.is_some() && r.store.try_lease(&lease_key(key), &token, r.lease) == Ok(true) {
            return leased(r, key, arch, token);
        }
    }
    say_once(format!(
        "waited {} ms for another process's link of a cubin and linked it here",
        r.lease.as_millis()
    ));
    Fetched::Link(None)
}

/// What a process that has just taken the lease on `key` does: looks once
/// more, since the holder before it may have stored the entry and given
/// the lease back between this process's miss and its lease (then the
/// lease goes back, and the entry is used); else it links under the lease.
fn leased(r: &Remote, key: u128, arch: u32, token: String) -> Fetched {
    let lease = Lease { key, token };
    match ask(r, key, arch) {
        Found::Cubin(c) => {
            drop(lease);
            HITS.fetch_add(1, Ordering::Relaxed);
            WAITED.fetch_add(1, Ordering::Relaxed);
            tally(r, "remote hits after waiting for another's link");
            Fetched::Cubin(c)
        }
        Found::Nothing | Found::Unavailable => Fetched::Link(Some(lease)),
    }
}

/// Stores `cubin` (linked for `arch`) under `key`, signed, where this
/// process may write; whether it was stored.
fn store(key: u128, arch: u32, cubin: &[u8]) -> bool {
    let Some(r) = remote() else { return false };
    let Some(signer) = &r.signer else {
        return false;
    };
    if !r.available() || cubin.len() as u64 > entry::MAX_CUBIN {
        return false;
    }
    match r
        .store
        .put(&store_key(key), &entry::seal(signer, key, arch, cubin))
    {
        Ok(()) => {
            WRITES.fetch_add(1, Ordering::Relaxed);
            true
        }
        Err(e) => {
            r.failed(e);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millisecond_settings_are_checked_and_name_the_variable() {
        let ms = |v: Option<&str>| milliseconds("X_MS", v.map(str::to_string), 20, 60_000);
        assert_eq!(ms(None), Ok(20));
        assert_eq!(ms(Some(" 1500 ")), Ok(1500));
        assert_eq!(ms(Some("60000")), Ok(60_000));
        for bad in ["0", "60001", "-5", "fast", ""] {
            let e = ms(Some(bad)).unwrap_err();
            assert!(
                e.starts_with(&format!("X_MS={bad:?}")) && e.ends_with("from 1 to 60000"),
                "{e}"
            );
        }
    }
}
