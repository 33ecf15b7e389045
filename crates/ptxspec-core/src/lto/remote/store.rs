//! Where remote entries live: a small trait, so that another store (an
//! object store: S3, GCS, Azure) can serve as Redis does, and its Redis
//! implementation over [`resp`](super::resp) connections.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::resp::{self, CallError, Connection, Limits, Reply};
#[cfg(feature = "tls")]
use super::tls;

/// The TLS configuration of a `rediss://` store's connections; none can
/// exist in a build without the `tls` feature.
#[cfg(feature = "tls")]
type TlsConfig = std::sync::Arc<rustls::ClientConfig>;
#[cfg(not(feature = "tls"))]
type TlsConfig = std::convert::Infallible;

/// The TLS configuration for `ca_file` (or the system's roots).
#[cfg(feature = "tls")]
fn tls_config(ca_file: Option<&Path>) -> Result<TlsConfig, String> {
    tls::client_config(ca_file)
}

#[cfg(not(feature = "tls"))]
fn tls_config(_: Option<&Path>) -> Result<TlsConfig, String> {
    Err(
        "rediss:// needs TLS, which this build of ptxspec leaves out: enable the `tls` feature \
         of the ptxspec crate (on by default)"
            .into(),
    )
}

/// What [`RemoteStore::get`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Got {
    /// No value under the key.
    Missing,
    /// The value.
    Value(Vec<u8>),
    /// A value larger than the call reads: its announced size.
    TooLarge(u64),
}

/// A key-value store shared by processes and machines. Every call ends by
/// the `deadline` it is given, whatever the server does; an error is never
/// fatal to the caller (the cubin is linked locally instead). Errors are
/// words for messages, and never hold a credential.
pub trait RemoteStore: Send + Sync {
    /// The value under `key`, if there is one of at most `max` bytes (a
    /// larger one is an error, found before it is read).
    fn get(&self, key: &str, max: u64, deadline: Instant) -> Result<Option<Vec<u8>>, String>;
    /// The value under `key`: none, its bytes, or — where it holds more
    /// than `max` bytes, found before they are read — its size alone (an
    /// entry no reader takes, not a failure of the store). A store that
    /// cannot tell a value too large from a failure says [`get`](Self::get)'s.
    fn fetch(&self, key: &str, max: u64, deadline: Instant) -> Result<Got, String> {
        Ok(match self.get(key, max, deadline)? {
            Some(v) => Got::Value(v),
            None => Got::Missing,
        })
    }
    /// Stores `value` under `key`.
    fn put(&self, key: &str, value: &[u8], deadline: Instant) -> Result<(), String>;
    /// Takes the lease `key` for `ttl` with `token` if no one holds it:
    /// whether it was taken. A lease whose holder died ends with its `ttl`.
    fn try_lease(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<bool, String>;
    /// Gives the lease `key` back if `token` still holds it.
    fn release(&self, key: &str, token: &str, deadline: Instant) -> Result<(), String>;
    /// Adds one to counter `name` of the fleet's counters `counters` (what
    /// every process of one trust domain saw: hits, links, refusals).
    fn count(&self, counters: &str, name: &str, deadline: Instant) -> Result<(), String>;
    /// The fleet's counters `counters`, by name.
    fn counts(&self, counters: &str, deadline: Instant) -> Result<Vec<(String, u64)>, String>;
    /// Where the store is, for messages (no credentials).
    fn describe(&self) -> String;
    /// Opens a connection ahead of the first call — the TCP and TLS
    /// handshakes, AUTH and SELECT — and keeps it for that call, so that a
    /// process's first look-up is one round trip; by `deadline`. Nothing
    /// where the store keeps no connections.
    fn connect_ahead(&self, deadline: Instant) -> Result<(), String> {
        let _ = deadline;
        Ok(())
    }
}

/// Where a Redis server is and how to log in, from its URL
/// (`redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]`, or `rediss://` for TLS).
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Whether the connection is TLS (`rediss://`).
    pub tls: bool,
    /// The host name or address.
    pub host: String,
    /// The port (6379 where the URL names none).
    pub port: u16,
    /// The database (0 where the URL names none).
    pub db: u32,
    /// The ACL user, if the URL names one.
    pub user: Option<String>,
    /// The password, if the URL holds one (never shown).
    password: Option<String>,
}

/// Without the password.
impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("tls", &self.tls)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("db", &self.db)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .finish()
    }
}

impl Endpoint {
    /// The endpoint of `url`, or what is wrong with it (in words that
    /// never repeat the password).
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("not a URL ({e})"))?;
        let tls = match parsed.scheme() {
            "redis" => false,
            "rediss" => true,
            other => {
                return Err(format!(
                    "the scheme {other:?} is not one ptxspec speaks: \
                     redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DB]"
                ));
            }
        };
        let host = match parsed.host() {
            Some(url::Host::Domain(d)) if !d.is_empty() => d.to_string(),
            Some(url::Host::Ipv4(a)) => a.to_string(),
            Some(url::Host::Ipv6(a)) => a.to_string(),
            _ => return Err("no host".into()),
        };
        let db = match parsed.path().trim_start_matches('/') {
            "" => 0,
            p => p
                .parse::<u32>()
                // Not quoted: where a password holds an unencoded `/`, the
                // "path" is part of it.
                .map_err(|_| {
                    "the database (the path after the host) is not a number; a password \
                     holding `/`, `?`, `#` or `@` must be percent-encoded"
                        .to_string()
                })?,
        };
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(
                "query parameters and fragments are not read: put a password before the host \
                 (redis://:PASSWORD@HOST)"
                    .into(),
            );
        }
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| "a user or password that is not UTF-8 once decoded".to_string())
        };
        let user = match parsed.username() {
            "" => None,
            u => Some(decode(u)?),
        };
        let password = parsed.password().map(decode).transpose()?;
        Ok(Endpoint {
            tls,
            host,
            port: parsed.port().unwrap_or(6379),
            db,
            user,
            password,
        })
    }
}

/// `url` as it may be shown: any password, and any query (which may hold
/// one), replaced by `…`. Works on text that is not a valid URL, too: the
/// part between `://` and the last `@` of the authority is credentials.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[scheme_end..];
    // Credentials run to the last `@`, whatever they hold: a password with
    // an unencoded `/`, `?` or `#` is still one (the URL is not valid, and
    // its error must not show it).
    let (authority, tail) = match rest.rfind('@') {
        Some(at) => {
            let creds = &rest[..at];
            let shown = match creds.split_once(':') {
                Some((user, _)) if !user.contains(['/', '?', '#']) => format!("{user}:…"),
                _ => "…".to_string(),
            };
            let after = &rest[at..];
            let end = after.find(['/', '?', '#']).unwrap_or(after.len());
            (format!("{shown}{}", &after[..end]), &after[end..])
        }
        None => {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            (rest[..end].to_string(), &rest[end..])
        }
    };
    let tail = match tail.find(['?', '#']) {
        Some(q) => format!("{}?…", &tail[..q]),
        None => tail.to_string(),
    };
    format!("{}{authority}{tail}", &url[..scheme_end])
}

/// The words of a command the server's ACL refused (`NOPERM`): the command,
/// and the rule the user needs, on the keys ptxspec uses.
fn acl_refusal(store: &str, command: &str, why: &str) -> String {
    format!(
        "{store}: {command} {ACL_REFUSED} ({why}): the user needs +{} on ~ptxspec:* (docs/guide/sharing.md)",
        command.to_ascii_lowercase()
    )
}

/// The phrase every ACL refusal's words hold ([`is_acl_refusal`]).
const ACL_REFUSED: &str = "refused by the server's ACL";

/// What Redis says where the ACL refuses a command a script runs.
const SCRIPT_REFUSED: &str = "can't run this command or subcommand";

/// The end of the words of a refusal inside a script (its commands, run
/// one by one, are named instead).
const SCRIPT_MARK: &str = "; its commands are tried one by one";

/// Whether a store error is a command the server's ACL refused.
pub fn is_acl_refusal(error: &str) -> bool {
    error.contains(ACL_REFUSED)
}

/// A Redis server, through a small pool of connections.
pub struct RedisStore {
    endpoint: Endpoint,
    /// The TLS configuration of a `rediss://` store's connections.
    tls: Option<TlsConfig>,
    pool: Mutex<Vec<Connection>>,
    shown: String,
}

/// Connections kept for reuse; more may be open while calls run at once.
const POOL: usize = 8;

impl RedisStore {
    /// A store at `url`; no connection is made until the first call. A
    /// `rediss://` store's certificate is verified against the system's
    /// root certificates.
    pub fn open(url: &str) -> Result<RedisStore, String> {
        RedisStore::open_with_ca(url, None)
    }

    /// A store at `url` whose `rediss://` certificate is verified against
    /// the CA certificates of the PEM file `ca_file` alone (a private CA),
    /// or the system's where it is `None`. Errors name the file's problem
    /// without the URL's password; a CA file for a `redis://` store (no
    /// TLS, nothing to verify) is one.
    pub fn open_with_ca(url: &str, ca_file: Option<&Path>) -> Result<RedisStore, String> {
        let endpoint = Endpoint::parse(url).map_err(|e| format!("{}: {e}", redact(url)))?;
        let tls = match (endpoint.tls, ca_file) {
            (false, None) => None,
            (false, Some(_)) => {
                return Err(format!(
                    "a CA file is named for {}, which is not TLS: use rediss://",
                    redact(url)
                ));
            }
            (true, ca) => Some(tls_config(ca)?),
        };
        Ok(RedisStore {
            endpoint,
            tls,
            pool: Mutex::new(Vec::new()),
            shown: redact(url),
        })
    }

    /// A new connection, logged in and on its database, by `deadline`.
    fn connect(&self, deadline: Instant) -> Result<Connection, CallError> {
        let e = &self.endpoint;
        let tcp = resp::connect_tcp(&e.host, e.port, deadline)?;
        let mut con = match &self.tls {
            None => Connection::new(Box::new(tcp)),
            #[cfg(feature = "tls")]
            Some(config) => {
                Connection::new(Box::new(tls::connect(tcp, &e.host, config, deadline)?))
            }
            #[cfg(not(feature = "tls"))]
            Some(never) => match *never {},
        };
        if let Some(password) = &e.password {
            let reply = match &e.user {
                Some(user) => con.call(
                    &[b"AUTH", user.as_bytes(), password.as_bytes()],
                    deadline,
                    Limits::SMALL,
                ),
                None => con.call(&[b"AUTH", password.as_bytes()], deadline, Limits::SMALL),
            }?;
            if let Reply::Error(why) = reply {
                return Err(CallError::Protocol(format!("logging in: {why}")));
            }
        }
        if e.db != 0 {
            let db = e.db.to_string();
            if let Reply::Error(why) =
                con.call(&[b"SELECT", db.as_bytes()], deadline, Limits::SMALL)?
            {
                return Err(CallError::Protocol(format!("database {db}: {why}")));
            }
        }
        Ok(con)
    }

    /// Runs one command on a pooled connection (or a new one) by
    /// `deadline`; a connection whose call failed is dropped, not pooled
    /// again. A reply that is the server's error is an error too.
    fn call(&self, args: &[&[u8]], deadline: Instant, limits: Limits) -> Result<Reply, String> {
        self.call_sized(args, deadline, limits)?.map_err(|bytes| {
            self.explain(CallError::TooLarge {
                bytes,
                limit: limits.bulk,
            })
        })
    }

    /// [`call`](Self::call), a reply over the limit told apart: `Ok(Err(size))`
    /// (the connection, its bytes unread, is dropped).
    fn call_sized(
        &self,
        args: &[&[u8]],
        deadline: Instant,
        limits: Limits,
    ) -> Result<Result<Reply, u64>, String> {
        let pooled = self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut con = match pooled {
            Some(c) => c,
            None => self.connect(deadline).map_err(|e| self.explain(e))?,
        };
        let reply = match con.call(args, deadline, limits) {
            Err(CallError::TooLarge { bytes, .. }) => return Ok(Err(bytes)),
            other => other.map_err(|e| self.explain(e))?,
        };
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() < POOL {
            pool.push(con);
        }
        drop(pool);
        match reply {
            Reply::Error(why) if why.starts_with("NOPERM") => {
                let command = String::from_utf8_lossy(args.first().copied().unwrap_or_default())
                    .to_ascii_uppercase();
                Err(acl_refusal(&self.shown, &command, &why))
            }
            // A command a script runs, refused by the ACL (Redis 7 says so
            // as `ERR`, not `NOPERM`): a refusal all the same — the caller
            // runs the script's commands one by one, which names the one
            // refused.
            Reply::Error(why) if why.contains(SCRIPT_REFUSED) => Err(format!(
                "{}: a command of a script {ACL_REFUSED} ({why}){SCRIPT_MARK}",
                self.shown
            )),
            Reply::Error(why) => Err(format!("{}: {why}", self.shown)),
            r => Ok(Ok(r)),
        }
    }

    /// A failed call in words: the store, what failed, and — where a
    /// plain `redis://` connection was cut or answered with what is not
    /// RESP, as a TLS port does to a client that does not speak TLS — that
    /// the port may want `rediss://`.
    fn explain(&self, e: CallError) -> String {
        let tls_port = self.tls.is_none()
            && match &e {
                CallError::Io(io) => matches!(
                    io.kind(),
                    std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::UnexpectedEof
                        | std::io::ErrorKind::BrokenPipe
                        | std::io::ErrorKind::ConnectionAborted
                ),
                CallError::Protocol(what) => {
                    what.contains("unknown type")
                        || what.contains("closed")
                        || what.contains("empty reply")
                }
                CallError::TooLarge { .. } => false,
                CallError::TimedOut(_) => false,
            };
        match tls_port {
            true => format!(
                "{}: {e} (if that port speaks TLS, name the store rediss://)",
                self.shown
            ),
            false => format!("{}: {e}", self.shown),
        }
    }

    fn unexpected(&self, what: &str, reply: &Reply) -> String {
        format!("{}: {what}: an unexpected reply {reply:?}", self.shown)
    }
}

impl RemoteStore for RedisStore {
    fn get(&self, key: &str, max: u64, deadline: Instant) -> Result<Option<Vec<u8>>, String> {
        match self.fetch(key, max, deadline)? {
            Got::Value(v) => Ok(Some(v)),
            Got::Missing => Ok(None),
            Got::TooLarge(bytes) => Err(self.explain(CallError::TooLarge { bytes, limit: max })),
        }
    }

    fn fetch(&self, key: &str, max: u64, deadline: Instant) -> Result<Got, String> {
        let limits = Limits {
            bulk: max,
            elements: 0,
        };
        match self.call_sized(&[b"GET", key.as_bytes()], deadline, limits)? {
            Ok(Reply::Bulk(Some(v))) => Ok(Got::Value(v)),
            Ok(Reply::Bulk(None)) => Ok(Got::Missing),
            Ok(r) => Err(self.unexpected("GET", &r)),
            Err(bytes) => Ok(Got::TooLarge(bytes)),
        }
    }

    fn put(&self, key: &str, value: &[u8], deadline: Instant) -> Result<(), String> {
        self.call(&[b"SET", key.as_bytes(), value], deadline, Limits::SMALL)
            .map(drop)
    }

    fn try_lease(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<bool, String> {
        let ms = (ttl.as_millis().max(1) as u64).to_string();
        match self.call(
            &[
                b"SET",
                key.as_bytes(),
                token.as_bytes(),
                b"NX",
                b"PX",
                ms.as_bytes(),
            ],
            deadline,
            Limits::SMALL,
        )? {
            Reply::Simple(_) => Ok(true),
            Reply::Bulk(None) | Reply::Array(None) => Ok(false),
            r => Err(self.unexpected("SET NX", &r)),
        }
    }

    fn release(&self, key: &str, token: &str, deadline: Instant) -> Result<(), String> {
        // Only the holder's own lease: one that expired and was taken over
        // is the new holder's.
        const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
        let eval = self.call(
            &[
                b"EVAL",
                RELEASE.as_bytes(),
                b"1",
                key.as_bytes(),
                token.as_bytes(),
            ],
            deadline,
            Limits::SMALL,
        );
        let refused = match eval {
            Ok(_) => return Ok(()),
            Err(e) if is_acl_refusal(&e) => e,
            Err(e) => return Err(e),
        };
        // An ACL user without EVAL: the same in two steps (the lease is
        // still this process's where GET says so; it was taken moments ago
        // and holds for the lease's time), by DEL or else by letting it
        // expire at once — never left for its whole time.
        match self.get(key, 1024, deadline)? {
            Some(holder) if holder == token.as_bytes() => {}
            _ => return Err(refused),
        }
        let deleted = self.call(&[b"DEL", key.as_bytes()], deadline, Limits::SMALL);
        // EVAL itself refused: that is what is said. EVAL allowed but a
        // command of its script refused: the command, found just now.
        let in_script = refused.ends_with(SCRIPT_MARK);
        match deleted {
            Ok(_) => Err(refused),
            Err(e) if is_acl_refusal(&e) => {
                match self.call(&[b"PEXPIRE", key.as_bytes(), b"1"], deadline, Limits::SMALL) {
                    Ok(_) if in_script => Err(e),
                    Ok(_) => Err(refused),
                    Err(_) => Err(format!(
                        "{}: {} and PEXPIRE {ACL_REFUSED}: the user can give no lease back (it needs \
                         {}, on ~ptxspec:*): a lease stays until it expires (PTXSPEC_REMOTE_LEASE_MS)",
                        self.shown,
                        match in_script {
                            true => "DEL (in EVAL's script and alone)",
                            false => "EVAL, DEL",
                        },
                        match in_script {
                            true => "+del, or +pexpire",
                            false => "+eval, or +del or +pexpire",
                        }
                    )),
                }
            }
            Err(e) => Err(e),
        }
    }

    fn count(&self, counters: &str, name: &str, deadline: Instant) -> Result<(), String> {
        self.call(
            &[b"HINCRBY", counters.as_bytes(), name.as_bytes(), b"1"],
            deadline,
            Limits::SMALL,
        )
        .map(drop)
    }

    fn counts(&self, counters: &str, deadline: Instant) -> Result<Vec<(String, u64)>, String> {
        let reply = self.call(&[b"HGETALL", counters.as_bytes()], deadline, Limits::SMALL)?;
        let Reply::Array(Some(items)) = reply else {
            return match reply {
                Reply::Array(None) => Ok(Vec::new()),
                r => Err(self.unexpected("HGETALL", &r)),
            };
        };
        let mut all = Vec::with_capacity(items.len() / 2);
        for pair in items.chunks(2) {
            let [Reply::Bulk(Some(name)), Reply::Bulk(Some(n))] = pair else {
                return Err(format!("{}: HGETALL: an odd counter", self.shown));
            };
            let n = std::str::from_utf8(n)
                .ok()
                .and_then(|t| t.parse::<u64>().ok())
                .ok_or_else(|| format!("{}: HGETALL: a counter that is no number", self.shown))?;
            all.push((String::from_utf8_lossy(name).into_owned(), n));
        }
        all.sort();
        Ok(all)
    }

    fn connect_ahead(&self, deadline: Instant) -> Result<(), String> {
        if !self
            .pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
        {
            return Ok(());
        }
        let con = self.connect(deadline).map_err(|e| self.explain(e))?;
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() < POOL {
            pool.push(con);
        }
        Ok(())
    }

    fn describe(&self) -> String {
        self.shown.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A password holding any of the characters that end a URL's
    /// authority (`/`, `?`, `#`, `@`, `:`), unencoded, in any position,
    /// with or without a user: no part of it of three characters or more
    /// shows in the redacted URL, in the error parsing it gives, or in
    /// `Settings`' Debug — a generated family.
    #[test]
    fn no_part_of_a_password_shows_whatever_it_holds() {
        let pieces = ["Sekr3tA", "PW0rdB", "Xq9zzC"];
        let specials = ['/', '?', '#', '@', ':', '%'];
        let mut n = 0;
        for &a in &specials {
            for &b in &specials {
                for user in ["", "alice"] {
                    for (host, tail) in [("host:1", ""), ("h", "/0"), ("10.0.0.1:6380", "/3")] {
                        let password = format!("{}{a}{}{b}{}", pieces[0], pieces[1], pieces[2]);
                        let url = format!("redis://{user}:{password}@{host}{tail}");
                        let shown = redact(&url);
                        let error = Endpoint::parse(&url).err().unwrap_or_default();
                        let settings = format!(
                            "{:?}",
                            super::super::Settings {
                                url: Some(url.clone()),
                                ..Default::default()
                            }
                        );
                        for text in [&shown, &error, &settings] {
                            for piece in pieces {
                                for w in 0..piece.len() - 2 {
                                    let part = &piece[w..w + 3];
                                    assert!(!text.contains(part), "{url} shows {part:?}: {text}");
                                }
                            }
                        }
                        n += 1;
                    }
                }
            }
        }
        assert_eq!(n, 216);
    }

    /// Passwords never show, in every place a URL can carry one, and
    /// whether or not the URL is valid.
    #[test]
    fn passwords_are_not_shown() {
        for (url, shown) in [
            ("redis://u:pw@h:1/0", "redis://u:…@h:1/0"),
            ("redis://:pw@h:1", "redis://:…@h:1"),
            ("redis://h:1", "redis://h:1"),
            ("redis://h:1/0?password=pw", "redis://h:1/0?…"),
            ("redis://h?pass=pw#x", "redis://h?…"),
            ("redis://u:p@w@h/2", "redis://u:…@h/2"),
            ("nonsense://:pw@", "nonsense://:…@"),
            ("redis://:Sekr3tA/PW0rdB@host:1", "redis://:…@host:1"),
            ("redis://u:a#b?c/d@host:1/0", "redis://u:…@host:1/0"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
            assert!(!redact(url).contains("pw"), "{url}");
        }
        for url in [
            "redis://u:secretpw@h:1/x",
            "redis://:secretpw@h:1?password=secretpw",
            "ftp://:secretpw@h",
        ] {
            let e = RedisStore::open(url).err().unwrap();
            assert!(!e.contains("secretpw"), "{e}");
        }
        let e = Endpoint::parse("redis://u:secretpw@h:1/2").unwrap();
        assert!(!format!("{e:?}").contains("secretpw"));
    }

    #[test]
    fn urls_read_as_they_say() {
        let e = Endpoint::parse("redis://alice:p%40ss@cache.local:6380/3").unwrap();
        assert_eq!(
            (
                e.host.as_str(),
                e.port,
                e.db,
                e.user.as_deref(),
                e.password.as_deref()
            ),
            ("cache.local", 6380, 3, Some("alice"), Some("p@ss"))
        );
        assert!(!e.tls);
        let e = Endpoint::parse("redis://[::1]").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.db), ("::1", 6379, 0));
        let e = Endpoint::parse("rediss://u:pw@cache.example.com:6380/2").unwrap();
        assert_eq!(
            (e.tls, e.host.as_str(), e.port, e.db, e.user.as_deref()),
            (true, "cache.example.com", 6380, 2, Some("u"))
        );
        let e = Endpoint::parse("redis://:pw@127.0.0.1/").unwrap();
        assert_eq!((e.user, e.password.as_deref()), (None, Some("pw")));
        for bad in [
            "ftp://h",
            "redis://",
            "rediss://",
            "redistls://h",
            "redis://h:99999",
            "redis://h/x",
            "h:6379",
            "redis://h?db=1",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
