//! The remote tier's settings: read from the environment or given by the
//! program ([`configure`]), checked — the store's URL, the trusted-keys and
//! signing-key files (their modes and folders, as ssh checks its files),
//! the bounds of calls and leases — and the tier opened from them.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use super::{
    DEFAULT_LEASE_MS, DEFAULT_TIMEOUT_MS, Endpoint, REMOTE, RedisStore, Remote, entry, redact,
    trust_domain,
};
use crate::settings::{Env, SettingError};

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
    pub(super) fn open(settings: Settings) -> Result<Option<Remote>, SettingError> {
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
}
