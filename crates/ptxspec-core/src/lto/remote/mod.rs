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
//!   links a cubin holds its lease, and others wait for it.
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
mod resp;
#[cfg(fuzzing)]
pub use resp::fuzz_reply;
mod store;
#[cfg(feature = "tls")]
mod tls;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ed25519_dalek::{SigningKey, VerifyingKey};
pub use entry::{generate_key_pair, write_key_pair};
pub use store::{Endpoint, RedisStore, RemoteStore, redact};

use crate::digest::Digest;
use crate::settings::{Env, SettingError};

/// How long a store that failed is not asked.
pub const PAUSE: Duration = Duration::from_secs(5);
/// How many calls' time one look-up of a cubin may take in all (its get,
/// a lease, the counters), apart from a wait for another's link.
pub const LOOKUP_CALLS: u32 = 4;
/// How long a lease holds (`PTXSPEC_REMOTE_LEASE_MS`): a link takes well
/// under this; a holder that died frees it when it ends.
const DEFAULT_LEASE_MS: u64 = 10_000;
/// How often a process that waits for another's link asks for the entry.
const POLL: Duration = Duration::from_millis(5);
/// The default bound of one call.
const DEFAULT_TIMEOUT_MS: u64 = 20;

/// What the remote tier did in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Times the circuit breaker opened: a call failed and the store was
    /// then not asked for [`PAUSE`].
    pub breaker_trips: u64,
    /// Refused entries by reason, in the order of [`entry::Refusal::ALL`].
    pub refused_by: [(entry::Refusal, u64); entry::Refusal::ALL.len()],
    /// Commands the server's ACL refused (each said once, naming the
    /// command and the rule the user needs).
    pub acl_refusals: u64,
}

impl Default for RemoteStats {
    fn default() -> Self {
        RemoteStats {
            hits: 0,
            misses: 0,
            refused: 0,
            writes: 0,
            unavailable: 0,
            waited: 0,
            breaker_trips: 0,
            refused_by: entry::Refusal::ALL.map(|r| (r, 0)),
            acl_refusals: 0,
        }
    }
}

static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);
static WRITES: AtomicU64 = AtomicU64::new(0);
static UNAVAILABLE: AtomicU64 = AtomicU64::new(0);
static WAITED: AtomicU64 = AtomicU64::new(0);
static BREAKER_TRIPS: AtomicU64 = AtomicU64::new(0);
static ACL_REFUSALS: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)] // only to repeat it
const ZERO: AtomicU64 = AtomicU64::new(0);
static REFUSED_BY: [AtomicU64; entry::Refusal::ALL.len()] = [ZERO; entry::Refusal::ALL.len()];

/// The remote tier's counts so far, in this process.
pub fn stats() -> RemoteStats {
    RemoteStats {
        hits: HITS.load(Ordering::Relaxed),
        misses: MISSES.load(Ordering::Relaxed),
        refused: REFUSED.load(Ordering::Relaxed),
        writes: WRITES.load(Ordering::Relaxed),
        unavailable: UNAVAILABLE.load(Ordering::Relaxed),
        waited: WAITED.load(Ordering::Relaxed),
        breaker_trips: BREAKER_TRIPS.load(Ordering::Relaxed),
        refused_by: entry::Refusal::ALL
            .map(|r| (r, REFUSED_BY[r as usize].load(Ordering::Relaxed))),
        acl_refusals: ACL_REFUSALS.load(Ordering::Relaxed),
    }
}

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

/// The configured store, its trust and (for writers) its signing key.
pub(crate) struct Remote {
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

/// The remote tier of this process, set up once.
static REMOTE: OnceLock<Result<Option<Remote>, SettingError>> = OnceLock::new();

/// What sets the remote tier up: the store's URL, the trusted-keys file,
/// the signing key's file (writers), and the bounds of calls and leases.
/// Its `Debug` shows the URL redacted ([`redact`]).
#[derive(Clone)]
pub struct Settings {
    /// The store's URL; `None`: the tier is off.
    pub url: Option<String>,
    /// The file of trusted public keys.
    pub trusted_keys: Option<PathBuf>,
    /// The file of this process's secret key, if it writes.
    pub signing_key: Option<PathBuf>,
    /// The PEM file of the CA certificates a `rediss://` store's
    /// certificate is verified against; `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// The bound of one call (default 20 ms).
    pub timeout: Duration,
    /// The lease's time (default 10 s).
    pub lease: Duration,
}

/// The URL redacted: no password or query shows.
impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("url", &self.url.as_deref().map(redact))
            .field("trusted_keys", &self.trusted_keys)
            .field("signing_key", &self.signing_key)
            .field("ca_file", &self.ca_file)
            .field("timeout", &self.timeout)
            .field("lease", &self.lease)
            .finish()
    }
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            url: None,
            trusted_keys: None,
            signing_key: None,
            ca_file: None,
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
            lease: Duration::from_millis(DEFAULT_LEASE_MS),
        }
    }
}

impl Settings {
    /// The settings `env` gives (the module's documentation lists the
    /// variables); where `PTXSPEC_REMOTE_CACHE` names no store, none (the
    /// others are not read: this is on the path of a new process's first
    /// disk-cache hit).
    pub fn read(env: &Env) -> Result<Settings, SettingError> {
        let Some(url) = env.text("PTXSPEC_REMOTE_CACHE")? else {
            return Ok(Settings::default());
        };
        Endpoint::parse(&url).map_err(|why| SettingError {
            variable: "PTXSPEC_REMOTE_CACHE",
            value: redact(&url),
            what: why,
        })?;
        let trusted_keys = env.existing_file("PTXSPEC_CACHE_TRUSTED_KEYS")?;
        if trusted_keys.is_none() {
            return Err(SettingError::new(
                "PTXSPEC_CACHE_TRUSTED_KEYS",
                "".as_ref(),
                "unset, while PTXSPEC_REMOTE_CACHE names a store: without trusted keys no entry \
                 could be loaded (docs/guide/sharing.md)",
            ));
        }
        Ok(Settings {
            url: Some(url),
            trusted_keys,
            signing_key: env.existing_file("PTXSPEC_CACHE_SIGNING_KEY")?,
            ca_file: env.existing_file("PTXSPEC_REMOTE_CA_FILE")?,
            timeout: Duration::from_millis(env.number(
                "PTXSPEC_REMOTE_TIMEOUT_MS",
                TIMEOUT_MS,
                DEFAULT_TIMEOUT_MS,
                "milliseconds",
            )?),
            lease: lease(env)?,
        })
    }
}

/// The bounds of `PTXSPEC_REMOTE_TIMEOUT_MS`.
const TIMEOUT_MS: std::ops::RangeInclusive<u64> = 1..=60_000;
/// The bounds of `PTXSPEC_REMOTE_LEASE_MS`.
const LEASE_MS: std::ops::RangeInclusive<u64> = 1..=600_000;

fn lease(env: &Env) -> Result<Duration, SettingError> {
    env.number(
        "PTXSPEC_REMOTE_LEASE_MS",
        LEASE_MS,
        DEFAULT_LEASE_MS,
        "milliseconds",
    )
    .map(Duration::from_millis)
}

/// `PTXSPEC_REMOTE_LEASE_MS` of the process's environment (default 10 s),
/// for programs that set the rest of the tier up themselves.
pub fn lease_from_env() -> Result<Duration, SettingError> {
    lease(&Env::process())
}

/// Sets the remote tier up from `settings` instead of the environment,
/// for programs that configure it themselves: only before its first use
/// (the first LTO link or cache lookup of the process). A setting that is
/// not valid is an error, as it would be from the environment.
pub fn configure(settings: Settings) -> Result<(), ConfigureError> {
    let remote = Remote::open(settings).map_err(ConfigureError::Setting)?;
    let mut slot = Some(remote);
    REMOTE.get_or_init(|| Ok(slot.take().flatten()));
    match slot {
        None => Ok(()),
        Some(_) => Err(ConfigureError::AlreadySetUp),
    }
}

/// Why [`configure`] did not set the remote tier up.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigureError {
    /// A setting is not valid.
    #[error(transparent)]
    Setting(SettingError),
    /// The tier was set up already (from the environment, by the process's
    /// first build).
    #[error("the remote cache was set up already: configure it before the first build")]
    AlreadySetUp,
}

/// The text of the key file that `variable` names, read as an input (a
/// regular file, bounded).
fn key_file(variable: &'static str, path: &Path) -> Result<String, SettingError> {
    crate::files::read_input(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| SettingError::new(variable, path.as_os_str(), e.to_string()))
}

/// A secret key's file must be its owner's alone, as ssh requires of
/// private keys: a key others can read is no longer a secret.
fn check_secret_mode(path: &Path) -> Result<(), SettingError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).map_err(|e| {
            SettingError::new("PTXSPEC_CACHE_SIGNING_KEY", path.as_os_str(), e.to_string())
        })?;
        let mode = meta.mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(SettingError::new(
                "PTXSPEC_CACHE_SIGNING_KEY",
                path.as_os_str(),
                format!(
                    "mode {mode:04o}: a secret key must be readable by its owner alone \
                     (chmod 600 {})",
                    path.display()
                ),
            ));
        }
    }
    Ok(())
}

impl Remote {
    /// The tier `settings` describe, its key files read and checked.
    fn open(settings: Settings) -> Result<Option<Remote>, SettingError> {
        let Some(url) = settings.url else {
            return Ok(None);
        };
        let in_range =
            |variable: &'static str, d: Duration, range: std::ops::RangeInclusive<u64>| {
                let ms = d.as_millis();
                if (*range.start() as u128..=*range.end() as u128).contains(&ms) {
                    Ok(())
                } else {
                    Err(SettingError::new(
                        variable,
                        format!("{ms}").as_ref(),
                        format!(
                            "not a whole number of milliseconds from {} to {}",
                            range.start(),
                            range.end()
                        ),
                    ))
                }
            };
        in_range("PTXSPEC_REMOTE_TIMEOUT_MS", settings.timeout, TIMEOUT_MS)?;
        in_range("PTXSPEC_REMOTE_LEASE_MS", settings.lease, LEASE_MS)?;
        let bad_url = |why: String| SettingError {
            variable: "PTXSPEC_REMOTE_CACHE",
            value: redact(&url),
            what: why,
        };
        let endpoint = Endpoint::parse(&url).map_err(bad_url)?;
        if endpoint.tls && !cfg!(feature = "tls") {
            return Err(bad_url(
                "rediss:// needs TLS, which this build of ptxspec leaves out: enable the `tls` \
                 feature of the ptxspec crate (on by default)"
                    .into(),
            ));
        }
        let ca_file = settings.ca_file.as_deref();
        if let (Some(ca), false) = (ca_file, endpoint.tls) {
            return Err(SettingError::new(
                "PTXSPEC_REMOTE_CA_FILE",
                ca.as_os_str(),
                "names a CA while PTXSPEC_REMOTE_CACHE is redis://, which is not TLS: use \
                 rediss://, or unset it",
            ));
        }
        let store = RedisStore::open_with_ca(&url, ca_file).map_err(|why| match ca_file {
            Some(ca) => SettingError::new("PTXSPEC_REMOTE_CA_FILE", ca.as_os_str(), why),
            None => bad_url(why),
        })?;
        let trusted_file = settings.trusted_keys.ok_or_else(|| {
            SettingError::new(
                "PTXSPEC_CACHE_TRUSTED_KEYS",
                "".as_ref(),
                "unset, while a remote store is named: without trusted keys no entry could be loaded",
            )
        })?;
        // The list decides what code runs: refused where another user could
        // add a key to it (ssh's rule for authorized_keys).
        crate::files::check_protected_file(&trusted_file).map_err(|e| {
            SettingError::new(
                "PTXSPEC_CACHE_TRUSTED_KEYS",
                trusted_file.as_os_str(),
                e.to_string(),
            )
        })?;
        let text = key_file("PTXSPEC_CACHE_TRUSTED_KEYS", &trusted_file)?;
        let trusted = entry::trusted_keys(&text).map_err(|why| {
            SettingError::new("PTXSPEC_CACHE_TRUSTED_KEYS", trusted_file.as_os_str(), why)
        })?;
        if trusted.is_empty() {
            return Err(SettingError::new(
                "PTXSPEC_CACHE_TRUSTED_KEYS",
                trusted_file.as_os_str(),
                "no trusted public key in it",
            ));
        }
        let signer = match settings.signing_key {
            None => None,
            Some(f) => {
                check_secret_mode(&f)?;
                crate::files::check_protected_file(&f).map_err(|e| {
                    SettingError::new("PTXSPEC_CACHE_SIGNING_KEY", f.as_os_str(), e.to_string())
                })?;
                let text = key_file("PTXSPEC_CACHE_SIGNING_KEY", &f)?;
                Some(entry::secret_key(&text).map_err(|why| {
                    SettingError::new("PTXSPEC_CACHE_SIGNING_KEY", f.as_os_str(), why)
                })?)
            }
        };
        Ok(Some(Remote {
            store: Box::new(store),
            domain: trust_domain(&trusted),
            trusted,
            signer,
            paused_until: AtomicU64::new(0),
            epoch: Instant::now(),
            timeout: settings.timeout,
            lease: settings.lease,
        }))
    }

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

/// The time one look-up's calls may take in all.
pub(crate) struct Budget {
    end: Instant,
}

/// Counts `event` for the fleet (best effort: a count that fails is not
/// worth pausing the store for).
fn tally(r: &Remote, budget: &Budget, event: &str) {
    best_effort(
        r,
        r.store
            .count(&counters_key(&r.domain), event, r.deadline(budget)),
    );
}

/// Counts a cubin found on disk or linked, where the remote tier is on: the
/// fleet's counters then show every tier.
pub(crate) fn note(r: Option<&Remote>, event: &str) {
    if let Some(r) = r.filter(|r| r.available()) {
        tally(r, &r.budget(), event);
    }
}

/// Makes sure the store holds `cubin` (of `key`, linked for `arch`), as
/// `ptxspec cache warm` does for a cubin it found in this machine's caches:
/// already there (a trusted entry), uploaded now, or why it could not be.
pub(crate) fn ensure_stored(r: &Remote, key: &Digest, arch: u32, cubin: &[u8]) -> super::Published {
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
        Found::Nothing => match store(r, key, arch, cubin) {
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

/// The trust domain of `trusted`: the SHA-256 of the keys in ascending
/// order, each once — the same for every process given the same keys, in
/// any order or repeated.
fn trust_domain(trusted: &[VerifyingKey]) -> Digest {
    let mut keys: Vec<&[u8; 32]> = trusted.iter().map(VerifyingKey::as_bytes).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut encoder = crate::digest::KeyEncoder::new("ptxspec remote trust domain");
    encoder.list(keys.into_iter().map(|k| &k[..]));
    Digest::of(encoder.encoded())
}

/// The store's name of the entry of `key` in trust domain `domain`.
fn store_key(domain: &Digest, key: &Digest) -> String {
    format!("ptxspec:cubin:v3:{domain}:{key}")
}

/// The store's name of the counters of trust domain `domain`: fleets that
/// share a store and trust other keys count apart, as they link apart.
fn counters_key(domain: &Digest) -> String {
    format!("ptxspec:stats:v2:{domain}")
}

/// The store's name of the lease on linking `key` in trust domain
/// `domain`.
fn lease_key(domain: &Digest, key: &Digest) -> String {
    format!("ptxspec:lease:v3:{domain}:{key}")
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
fn ask(r: &Remote, budget: &Budget, key: &Digest, arch: u32) -> Found {
    if !r.available() {
        UNAVAILABLE.fetch_add(1, Ordering::Relaxed);
        return Found::Unavailable;
    }
    match r.store.get(
        &store_key(&r.domain, key),
        entry::MAX_ENTRY,
        r.deadline(budget),
    ) {
        Err(e) => {
            r.failed(e);
            Found::Unavailable
        }
        Ok(None) => Found::Nothing,
        Ok(Some(bytes)) => match entry::open(&bytes, key, arch, &r.trusted) {
            Ok(cubin) => Found::Cubin(cubin),
            Err(why) => {
                REFUSED.fetch_add(1, Ordering::Relaxed);
                REFUSED_BY[why as usize].fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    target: "ptxspec::remote",
                    store = %r.store.describe(),
                    reason = why.words(),
                    arch,
                    "entry refused"
                );
                tally(r, budget, &format!("refused: {}", why.words()));
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
pub(crate) fn peek(r: &Remote, key: &Digest, arch: u32) -> Option<Vec<u8>> {
    let budget = r.budget();
    match ask(r, &budget, key, arch) {
        Found::Cubin(c) => {
            HITS.fetch_add(1, Ordering::Relaxed);
            tally(r, &budget, "remote hits (prefetched)");
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
    remote: &'static Remote,
    key: Digest,
    token: String,
}

impl Lease {
    /// Stores the cubin this process linked (the lease is given back when
    /// dropped).
    pub(crate) fn store(self, arch: u32, cubin: &[u8]) -> bool {
        store(self.remote, &self.key, arch, cubin)
    }
}

/// Gives the lease back, stored or not (a link that failed frees it for
/// the processes waiting, which then link themselves).
impl Drop for Lease {
    fn drop(&mut self) {
        let r = self.remote;
        best_effort(
            r,
            r.store.release(
                &lease_key(&r.domain, &self.key),
                &self.token,
                r.deadline(&r.budget()),
            ),
        );
    }
}

/// The cubin of `key` and `arch` from the store — single flight across
/// processes and hosts: on a miss a writer takes the lease and links
/// (others that miss meanwhile wait for its entry, at most the lease's
/// time, then link themselves; a lease whose holder died expires). A
/// process that cannot write links without a lease, waiting only where a
/// writer holds one.
pub(crate) fn fetch(r: &'static Remote, key: &Digest, arch: u32) -> Fetched {
    let budget = r.budget();
    match ask(r, &budget, key, arch) {
        Found::Cubin(c) => {
            HITS.fetch_add(1, Ordering::Relaxed);
            tally(r, &budget, "remote hits");
            return Fetched::Cubin(c);
        }
        Found::Unavailable => return Fetched::Link(None),
        Found::Nothing => {
            MISSES.fetch_add(1, Ordering::Relaxed);
            tally(r, &budget, "remote misses");
        }
    }
    let token = format!("{}-{}", std::process::id(), r.now_ms());
    if r.signer.is_some() {
        match r.store.try_lease(
            &lease_key(&r.domain, key),
            &token,
            r.lease,
            r.deadline(&budget),
        ) {
            Ok(true) => return leased(r, key, arch, token),
            Ok(false) => {}
            Err(e) => {
                r.failed(e);
                return Fetched::Link(None);
            }
        }
    } else {
        // A reader waits only for a link under way.
        match r
            .store
            .get(&lease_key(&r.domain, key), 1024, r.deadline(&budget))
        {
            Ok(Some(_)) => {}
            Ok(None) => return Fetched::Link(None),
            Err(e) => {
                r.failed(e);
                return Fetched::Link(None);
            }
        }
    }
    let deadline = Instant::now() + r.lease;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(POLL.min(left));
        // Each poll is a look-up of its own, with a whole look-up's bound:
        // the lease's end bounds how long the process waits, never one
        // call (a call given a deadline already past fails as the store's
        // fault, and opened the breaker on a healthy store).
        let poll = r.budget();
        match ask(r, &poll, key, arch) {
            Found::Cubin(c) => {
                HITS.fetch_add(1, Ordering::Relaxed);
                WAITED.fetch_add(1, Ordering::Relaxed);
                tally(r, &poll, "remote hits after waiting for another's link");
                return Fetched::Cubin(c);
            }
            Found::Unavailable => return Fetched::Link(None),
            Found::Nothing => {}
        }
        // The holder gave the lease back without an entry (its link
        // failed), or died and the lease expired: take over.
        if r.signer.is_some()
            && r.store.try_lease(
                &lease_key(&r.domain, key),
                &token,
                r.lease,
                r.deadline(&poll),
            ) == Ok(true)
        {
            return leased(r, key, arch, token);
        }
    }
    // Waiting out another host's lease is not a store failure.
    tracing::info!(
        target: "ptxspec::remote",
        store = %r.store.describe(),
        waited_ms = r.lease.as_millis() as u64,
        "waited out another process's lease: linking here"
    );
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
fn leased(r: &'static Remote, key: &Digest, arch: u32, token: String) -> Fetched {
    let lease = Lease {
        remote: r,
        key: *key,
        token,
    };
    let budget = r.budget();
    match ask(r, &budget, key, arch) {
        Found::Cubin(c) => {
            drop(lease);
            HITS.fetch_add(1, Ordering::Relaxed);
            WAITED.fetch_add(1, Ordering::Relaxed);
            tally(r, &budget, "remote hits after waiting for another's link");
            Fetched::Cubin(c)
        }
        Found::Nothing | Found::Unavailable => Fetched::Link(Some(lease)),
    }
}

/// Stores `cubin` (linked for `arch`) under `key`, signed, where this
/// process may write; whether it was stored.
fn store(r: &Remote, key: &Digest, arch: u32, cubin: &[u8]) -> bool {
    let Some(signer) = &r.signer else {
        return false;
    };
    if !r.available() || cubin.len() as u64 > entry::MAX_CUBIN {
        return false;
    }
    let budget = r.budget();
    match r.store.put(
        &store_key(&r.domain, key),
        &entry::seal(signer, key, arch, cubin),
        r.deadline(&budget),
    ) {
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

    /// A trust domain is the set of keys: the same whatever their order or
    /// repetition, another for any other set (a key more, a key less, a
    /// key replaced), and entries, leases and counters of two domains never
    /// share a name.
    #[test]
    fn a_trust_domain_is_its_set_of_keys() {
        let key = |seed: u8| SigningKey::from_bytes(&[seed; 32]).verifying_key();
        let (a, b, c) = (key(1), key(2), key(3));
        let domain = trust_domain(&[a, b]);
        for same in [vec![b, a], vec![a, b, a], vec![b, b, a, a]] {
            assert_eq!(trust_domain(&same), domain);
        }
        let others = [vec![a], vec![b], vec![a, b, c], vec![a, c], vec![c]];
        for (i, other) in others.iter().enumerate() {
            let d = trust_domain(other);
            assert_ne!(d, domain, "{i}");
            for (j, another) in others.iter().enumerate().skip(i + 1) {
                assert_ne!(d, trust_domain(another), "{i} {j}");
            }
            let cubin = Digest::of(b"one cubin");
            assert_ne!(store_key(&d, &cubin), store_key(&domain, &cubin));
            assert_ne!(lease_key(&d, &cubin), lease_key(&domain, &cubin));
            assert_ne!(counters_key(&d), counters_key(&domain));
        }
    }

    fn settings_of(pairs: &[(&str, String)]) -> Result<Settings, SettingError> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let lookup = move |name: &str| pairs.iter().find(|(n, _)| n == name).map(|(_, v)| v.into());
        Settings::read(&Env::from_fn(&lookup))
    }

    fn temp(name: &str, text: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = std::env::temp_dir().join(format!("ptxspec-remote-{name}-{}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn without_a_store_nothing_else_is_read() {
        let s = settings_of(&[("PTXSPEC_REMOTE_TIMEOUT_MS", "nonsense".into())]).unwrap();
        assert!(s.url.is_none());
        assert!(Remote::open(s).unwrap().is_none());
    }

    /// A secret key others can read is refused (naming the file and its
    /// mode), for every mode with a group or other bit; 0600 and 0400
    /// serve.
    #[test]
    fn secret_keys_must_be_private() {
        let (secret, public) = generate_key_pair().unwrap();
        let trusted = temp("trusted", &public, 0o644);
        let signing_with = |key: &std::path::Path| Settings {
            url: Some("redis://127.0.0.1:1".into()),
            trusted_keys: Some(trusted.clone()),
            signing_key: Some(key.to_path_buf()),
            ..Settings::default()
        };
        for mode in [0o644, 0o640, 0o604, 0o660, 0o606, 0o610, 0o601, 0o666] {
            let key = temp(&format!("secret-{mode:o}"), &secret, mode);
            let e = Remote::open(signing_with(&key)).err().unwrap();
            assert_eq!(e.variable, "PTXSPEC_CACHE_SIGNING_KEY");
            assert!(
                e.what.contains(&format!("mode {mode:04o}")) && e.value == key.to_string_lossy(),
                "{e}"
            );
            let _ = std::fs::remove_file(&key);
        }
        for mode in [0o600, 0o400] {
            let key = temp(&format!("secret-{mode:o}"), &secret, mode);
            assert!(
                Remote::open(signing_with(&key))
                    .unwrap()
                    .unwrap()
                    .signer
                    .is_some()
            );
            let _ = std::fs::remove_file(&key);
        }
        let _ = std::fs::remove_file(&trusted);
    }

    /// A store that answers every call at once, holds one lease forever
    /// and has no entry — and fails a call whose deadline has already
    /// passed, as a real store's connection does.
    struct HeldLease {
        past_deadlines: AtomicU64,
        calls: AtomicU64,
    }

    impl HeldLease {
        fn call(&self, deadline: Instant) -> Result<(), String> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            if deadline <= Instant::now() {
                self.past_deadlines.fetch_add(1, Ordering::Relaxed);
                return Err("no answer in time (sending)".into());
            }
            Ok(())
        }
    }

    /// A `RemoteStore` over a [`HeldLease`] the test keeps.
    struct StoreRef(&'static HeldLease);

    impl RemoteStore for StoreRef {
        fn get(&self, key: &str, _: u64, deadline: Instant) -> Result<Option<Vec<u8>>, String> {
            self.0.call(deadline)?;
            Ok(key.contains(":lease:").then(|| b"holder".to_vec()))
        }
        fn put(&self, _: &str, _: &[u8], deadline: Instant) -> Result<(), String> {
            self.0.call(deadline)
        }
        fn try_lease(
            &self,
            _: &str,
            _: &str,
            _: Duration,
            deadline: Instant,
        ) -> Result<bool, String> {
            self.0.call(deadline).map(|()| false)
        }
        fn release(&self, _: &str, _: &str, deadline: Instant) -> Result<(), String> {
            self.0.call(deadline)
        }
        fn count(&self, _: &str, _: &str, _: Instant) -> Result<(), String> {
            Ok(())
        }
        fn counts(&self, _: &str, _: Instant) -> Result<Vec<(String, u64)>, String> {
            Ok(Vec::new())
        }
        fn describe(&self) -> String {
            "a store whose lease is held".into()
        }
    }

    /// A process that waits out another's lease — as a reader and as a
    /// writer, for leases short and long against the call bound — links
    /// here without giving any call a deadline already past, and leaves the
    /// breaker closed: waiting is not a store failure (issue: the last
    /// poll's deadline was the lease's end, past by then, and opened the
    /// breaker on a healthy store).
    #[test]
    fn waiting_out_a_lease_never_trips_the_breaker() {
        let (secret, public) = generate_key_pair().unwrap();
        let trusted = entry::trusted_keys(&public).unwrap();
        for (lease_ms, timeout_ms, writer) in [
            (20, 2000, false),
            (20, 2000, true),
            (60, 20, false),
            (60, 20, true),
            (7, 5, true),
        ] {
            let store: &'static HeldLease = Box::leak(Box::new(HeldLease {
                past_deadlines: AtomicU64::new(0),
                calls: AtomicU64::new(0),
            }));
            let r: &'static Remote = Box::leak(Box::new(Remote {
                store: Box::new(StoreRef(store)),
                domain: trust_domain(&trusted),
                trusted: trusted.clone(),
                signer: writer.then(|| entry::secret_key(&secret).unwrap()),
                paused_until: AtomicU64::new(0),
                epoch: Instant::now(),
                timeout: Duration::from_millis(timeout_ms),
                lease: Duration::from_millis(lease_ms),
            }));
            let started = Instant::now();
            let fetched = fetch(r, &Digest::of(b"a cubin held by another"), 90);
            let took = started.elapsed();
            assert!(
                matches!(fetched, Fetched::Link(None)),
                "lease {lease_ms} ms"
            );
            assert_eq!(
                store.past_deadlines.load(Ordering::Relaxed),
                0,
                "lease {lease_ms} ms, timeout {timeout_ms} ms, writer {writer}: a call past its deadline"
            );
            assert!(r.available(), "lease {lease_ms} ms: the breaker opened");
            assert!(took >= Duration::from_millis(lease_ms), "{took:?}");
            assert!(store.calls.load(Ordering::Relaxed) >= 2);
        }
    }

    /// A trusted-keys file that another user could append a key to is
    /// refused, naming the variable, the path at fault and its mode — for
    /// every mode with a group or other write bit, a folder above it that
    /// others may write (not sticky), a file or folder of another user — as
    /// ssh refuses such an `authorized_keys`. A file of this user's that
    /// only it writes serves, in a sticky shared folder too.
    #[test]
    fn a_trust_list_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let (_, public) = generate_key_pair().unwrap();
        let open = |file: &std::path::Path| {
            Remote::open(Settings {
                url: Some("redis://127.0.0.1:1".into()),
                trusted_keys: Some(file.to_path_buf()),
                ..Settings::default()
            })
        };
        let dir = std::env::temp_dir().join(format!("ptxspec-trust-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let file = dir.join("trusted");
        std::fs::write(&file, &public).unwrap();
        for mode in [0o666, 0o662, 0o646, 0o620, 0o602, 0o664, 0o622] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = open(&file).err().expect("a trust list others may write");
            assert_eq!(e.variable, "PTXSPEC_CACHE_TRUSTED_KEYS", "{e}");
            assert!(e.what.contains(&format!("mode {mode:04o}")), "{e}");
        }
        for mode in [0o644, 0o600, 0o444, 0o640] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(open(&file).unwrap().is_some(), "mode {mode:04o} serves");
        }
        // Its folder, writable by others: refused unless sticky.
        for (mode, refused) in [(0o777, true), (0o775, true), (0o757, true), (0o1777, false)] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let r = open(&file);
            assert_eq!(r.is_err(), refused, "folder mode {mode:04o}: {:?}", r.err());
            if let Err(e) = r {
                assert!(e.what.contains(&format!("mode {mode:04o}")), "{e}");
                assert!(e.what.contains("replace the file"), "{e}");
            }
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        // A file of another user (where this process may give it one).
        if std::os::unix::fs::chown(&file, Some(4242), None).is_ok() {
            let e = open(&file).err().expect("another user's trust list");
            assert!(e.what.contains("belongs to user 4242"), "{e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Weak or malformed trusted keys are errors naming the file and line;
    /// an empty file too.
    #[test]
    fn trusted_key_files_are_checked() {
        let (_, public) = generate_key_pair().unwrap();
        for (text, says) in [
            (format!("{public}\n{}\n", "0".repeat(64)), "line 2"),
            (format!("01{}\n", "0".repeat(62)), "line 1"),
            ("not a key\n".to_string(), "line 1"),
            ("# only a comment\n".to_string(), "no trusted public key"),
        ] {
            let file = temp("trusted-bad", &text, 0o644);
            let s = Settings {
                url: Some("redis://127.0.0.1:1".into()),
                trusted_keys: Some(file.clone()),
                ..Settings::default()
            };
            let e = Remote::open(s).err().unwrap();
            assert_eq!(e.variable, "PTXSPEC_CACHE_TRUSTED_KEYS", "{e}");
            assert!(e.to_string().contains(says), "{e}");
            assert_eq!(e.value, file.to_string_lossy());
            let _ = std::fs::remove_file(&file);
        }
    }

    /// A CA file that holds no CA certificate, or is named for a store
    /// that is not TLS, is an error naming `PTXSPEC_REMOTE_CA_FILE` and
    /// the file, whatever is wrong with it.
    /// Without the `tls` feature a `rediss://` store is an error naming
    /// the setting and the feature (CI runs this with `remote` alone).
    #[test]
    #[cfg(not(feature = "tls"))]
    fn rediss_without_tls_is_an_error_naming_the_feature() {
        let (_, public) = generate_key_pair().unwrap();
        let trusted = temp("notls-trusted", &format!("{public}\n"), 0o644);
        let s = Settings {
            url: Some("rediss://127.0.0.1:1".into()),
            trusted_keys: Some(trusted.clone()),
            ..Settings::default()
        };
        let e = Remote::open(s).err().unwrap();
        assert_eq!(e.variable, "PTXSPEC_REMOTE_CACHE", "{e}");
        assert!(e.to_string().contains("`tls` feature"), "{e}");
        let _ = std::fs::remove_file(&trusted);
    }

    #[test]
    #[cfg(feature = "tls")]
    fn ca_files_are_checked() {
        let (_, public) = generate_key_pair().unwrap();
        let trusted = temp("ca-trusted", &format!("{public}\n"), 0o644);
        let body = "MIIBszCCAVmgAwIBAgIU".repeat(4);
        for (url, text, says) in [
            (
                "rediss://127.0.0.1:1",
                "not a certificate\n".to_string(),
                "no certificate",
            ),
            ("rediss://127.0.0.1:1", String::new(), "no certificate"),
            (
                "rediss://127.0.0.1:1",
                format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n"),
                "certificate 1",
            ),
            (
                "rediss://127.0.0.1:1",
                "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".to_string(),
                "certificate 1",
            ),
            (
                "redis://127.0.0.1:1",
                "anything\n".to_string(),
                "not TLS: use rediss://",
            ),
        ] {
            let file = temp("ca-bad", &text, 0o644);
            let s = Settings {
                url: Some(url.into()),
                trusted_keys: Some(trusted.clone()),
                ca_file: Some(file.clone()),
                ..Settings::default()
            };
            let e = Remote::open(s).err().unwrap();
            assert_eq!(e.variable, "PTXSPEC_REMOTE_CA_FILE", "{e}");
            assert!(e.to_string().contains(says), "{text:?}: {e}");
            assert_eq!(e.value, file.to_string_lossy());
            let _ = std::fs::remove_file(&file);
        }
        let _ = std::fs::remove_file(&trusted);
    }

    /// A `rediss://` server that never finishes its handshake — silent, or
    /// dripping bytes that never make a record — costs one call's
    /// deadline, not more: the deadline holds under TLS.
    #[test]
    #[cfg(feature = "tls")]
    fn a_tls_handshake_ends_by_the_deadline() {
        use std::io::{Read, Write};
        // Any CA: the handshake never gets to verifying it.
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca_cert = rcgen::CertificateParams::new(Vec::<String>::new())
            .unwrap()
            .self_signed(&ca_key)
            .unwrap();
        let ca = temp("ca-any", &ca_cert.pem(), 0o644);
        for drip in [false, true] {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let server = std::thread::spawn(move || {
                let (mut s, _) = listener.accept().unwrap();
                let mut hello = [0u8; 512];
                let _ = s.read(&mut hello);
                // A TLS record header that announces more than ever comes.
                for byte in [0x16u8, 0x03, 0x03, 0x40, 0x00]
                    .iter()
                    .cycle()
                    .take(if drip { 100 } else { 0 })
                {
                    if s.write_all(&[*byte]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                std::thread::sleep(Duration::from_millis(1500));
            });
            let store =
                RedisStore::open_with_ca(&format!("rediss://127.0.0.1:{port}"), Some(&ca)).unwrap();
            let started = Instant::now();
            let e = store
                .get("k", 64, started + Duration::from_millis(300))
                .unwrap_err();
            let took = started.elapsed();
            assert!(e.contains("no answer in time"), "drip {drip}: {e}");
            assert!(took < Duration::from_millis(1200), "drip {drip}: {took:?}");
            server.join().unwrap();
        }
        let _ = std::fs::remove_file(&ca);
    }

    #[test]
    fn a_password_in_the_url_is_never_in_an_error() {
        for url in [
            "redis://:hunter2@127.0.0.1:1/x",
            "redis://u:hunter2@127.0.0.1:99999",
            "redis://127.0.0.1:1?password=hunter2",
            "rediss+bad://:hunter2@h",
        ] {
            let e = settings_of(&[("PTXSPEC_REMOTE_CACHE", url.into())]).unwrap_err();
            assert_eq!(e.variable, "PTXSPEC_REMOTE_CACHE");
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
    }
}
