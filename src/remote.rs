//! The remote cubin cache a fleet shares (README, "Sharing across
//! machines"), set up by a program rather than the environment.

use std::path::PathBuf;

use crate::error::Error;

/// The remote cache's set-up, as the environment variables give it
/// (`PTXSPEC_REMOTE_CACHE`, `PTXSPEC_CACHE_TRUSTED_KEYS`,
/// `PTXSPEC_CACHE_SIGNING_KEY`): `RemoteCache::new(url, trusted_keys)`,
/// then `with_signing_key` for a process that writes, then [`install`](Self::install).
#[derive(Clone, Debug)]
#[must_use]
pub struct RemoteCache {
    url: String,
    trusted_keys: PathBuf,
    signing_key: Option<PathBuf>,
    timeout_ms: Option<u64>,
}

impl RemoteCache {
    /// The store at `url` (`redis://HOST:PORT[/DB]`), loading entries
    /// signed by a key of the file `trusted_keys` (public keys, one a line).
    pub fn new(url: impl Into<String>, trusted_keys: impl Into<PathBuf>) -> Self {
        RemoteCache {
            url: url.into(),
            trusted_keys: trusted_keys.into(),
            signing_key: None,
            timeout_ms: None,
        }
    }

    /// This process writes entries, signed with the secret key in `file`.
    pub fn with_signing_key(mut self, file: impl Into<PathBuf>) -> Self {
        self.signing_key = Some(file.into());
        self
    }

    /// The bound of one call to the store (default 20 ms).
    pub fn with_timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// Sets this process's remote cache up, in place of the environment's:
    /// before its first build (after it, `invalid_object`). Problems with
    /// the store or the keys never fail a build: they turn the tier off (or
    /// read-only) and are said once, as with the environment.
    pub fn install(self) -> Result<(), Error> {
        ptxspec_core::lto::remote::configure(ptxspec_core::lto::remote::Settings {
            url: Some(self.url),
            trusted_keys: Some(self.trusted_keys.into_os_string()),
            signing_key: self.signing_key.map(PathBuf::into_os_string),
            timeout_ms: self.timeout_ms.map(|t| t.to_string()),
            lease_ms: std::env::var("PTXSPEC_REMOTE_LEASE_MS").ok(),
        })
        .map_err(Error::InvalidObject)
    }
}
