//! The remote cubin cache a fleet shares (docs/guide/sharing.md),
//! set up by a program rather than the environment.

use std::path::PathBuf;

use crate::error::Error;

/// The remote cache's set-up, as the environment variables give it
/// (`PTXSPEC_REMOTE_CACHE`, `PTXSPEC_CACHE_TRUSTED_KEYS`,
/// `PTXSPEC_CACHE_SIGNING_KEY`, `PTXSPEC_REMOTE_CA_FILE`):
/// `RemoteCache::new(url, trusted_keys)`, then `with_signing_key` for a
/// process that writes and `with_ca_file` for a store whose CA is private,
/// then [`install`](Self::install).
#[derive(Clone, Debug)]
#[must_use]
pub struct RemoteCache {
    url: String,
    trusted_keys: PathBuf,
    signing_key: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    timeout_ms: Option<u64>,
}

impl RemoteCache {
    /// The store at `url` (`redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DB]`;
    /// `rediss://` is TLS, the server's certificate verified against the
    /// system's roots unless [`with_ca_file`](Self::with_ca_file) names a
    /// CA), loading entries
    /// signed by a key of the file `trusted_keys` (public keys, one a line).
    pub fn new(url: impl Into<String>, trusted_keys: impl Into<PathBuf>) -> Self {
        RemoteCache {
            url: url.into(),
            trusted_keys: trusted_keys.into(),
            signing_key: None,
            ca_file: None,
            timeout_ms: None,
        }
    }

    /// This process writes entries, signed with the secret key in `file`.
    pub fn with_signing_key(mut self, file: impl Into<PathBuf>) -> Self {
        self.signing_key = Some(file.into());
        self
    }

    /// A `rediss://` store's certificate must chain to a CA certificate
    /// of the PEM file `file` (a private CA), in place of the system's
    /// roots. Naming one for a `redis://` store is [`Error::Setting`] at
    /// [`install`](Self::install).
    pub fn with_ca_file(mut self, file: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(file.into());
        self
    }

    /// The bound of one call to the store (default 20 ms).
    pub fn with_timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// Makes a new signing key pair (as `ptxspec cache keygen` does): the
    /// secret key into `secret` (mode 0600; for writers only), the public
    /// key into `public` (for every process's trusted-keys file). Each file
    /// is one line of 64 hexadecimal digits: the ed25519 secret seed, or the
    /// public key. Both must be new: where either path exists, nothing is
    /// written. Returns the public key's line.
    pub fn generate_keys(
        secret: impl AsRef<std::path::Path>,
        public: impl AsRef<std::path::Path>,
    ) -> Result<String, Error> {
        let (secret, public) = (secret.as_ref(), public.as_ref());
        ptxspec_core::lto::remote::write_key_pair(secret, public).map_err(|source| Error::File {
            what: format!(
                "writing the key pair {} and {}",
                secret.display(),
                public.display()
            ),
            source,
        })
    }

    /// Sets this process's remote cache up, in place of the environment's:
    /// before its first build (after it, `invalid_object`). A setting that
    /// is not valid — a URL that is none, a key file that is missing, holds
    /// a weak key or (the signing key) can be read by others — is
    /// [`Error::Setting`], as it would be from the environment; the lease's
    /// time is `PTXSPEC_REMOTE_LEASE_MS`'s. A store that is down, slow or
    /// full never fails a build.
    pub fn install(self) -> Result<(), Error> {
        use ptxspec_core::lto::remote::{ConfigureError, Settings, configure};
        let defaults = Settings::default();
        configure(Settings {
            url: Some(self.url),
            trusted_keys: Some(self.trusted_keys),
            signing_key: self.signing_key,
            ca_file: self.ca_file,
            timeout: self
                .timeout_ms
                .map_or(defaults.timeout, std::time::Duration::from_millis),
            lease: ptxspec_core::lto::remote::lease_from_env()?,
        })
        .map_err(|e| match e {
            ConfigureError::Setting(s) => Error::Setting(s),
            other => Error::invalid(crate::error::Misuse::RemoteCache, other.to_string()),
        })
    }
}
