//! Where remote entries live: a small trait, so that another store (an
//! object store through `object_store`: S3, GCS, Azure) can serve as Redis
//! does, and its Redis implementation.

use std::sync::Mutex;
use std::time::Duration;

/// A key-value store shared by processes and machines. Every call is
/// bounded in time by the store; an error is never fatal to the caller (the
/// cubin is linked locally instead).
pub trait RemoteStore: Send + Sync {
    /// The value under `key`, if there is one.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String>;
    /// Stores `value` under `key`.
    fn put(&self, key: &str, value: &[u8]) -> Result<(), String>;
    /// Takes the lease `key` for `ttl` with `token` if no one holds it:
    /// whether it was taken. A lease whose holder died ends with its `ttl`.
    fn try_lease(&self, key: &str, token: &str, ttl: Duration) -> Result<bool, String>;
    /// Gives the lease `key` back if `token` still holds it.
    fn release(&self, key: &str, token: &str) -> Result<(), String>;
    /// Adds one to the fleet's counter `name` (what every process with
    /// the store saw: hits, links, refusals).
    fn count(&self, name: &str) -> Result<(), String>;
    /// The fleet's counters, by name.
    fn counts(&self) -> Result<Vec<(String, u64)>, String>;
    /// Where the store is, for messages (no credentials).
    fn describe(&self) -> String;
}

/// The store's name of the fleet's counters.
const COUNTERS: &str = "ptxspec:stats:v1";

/// A Redis server (`redis://HOST:PORT[/DB]`), through a small pool of
/// connections, each call bounded by `timeout`.
pub struct RedisStore {
    client: redis::Client,
    pool: Mutex<Vec<redis::Connection>>,
    timeout: Duration,
    shown: String,
}

/// Connections kept for reuse; more may be open while calls run at once.
const POOL: usize = 8;

impl RedisStore {
    /// A store at `url`; no connection is made until the first call.
    pub fn open(url: &str, timeout: Duration) -> Result<RedisStore, String> {
        let client = redis::Client::open(url).map_err(|e| format!("{}: {e}", shown(url)))?;
        Ok(RedisStore {
            client,
            pool: Mutex::new(Vec::new()),
            timeout,
            shown: shown(url),
        })
    }

    /// Runs `call` on a pooled connection (or a new one); a connection that
    /// failed is dropped, not pooled again.
    fn with<T>(
        &self,
        call: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, String> {
        let pooled = self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut con = match pooled {
            Some(c) => c,
            None => {
                let c = self
                    .client
                    .get_connection_with_timeout(self.timeout)
                    .map_err(|e| format!("{}: {e}", self.shown))?;
                c.set_read_timeout(Some(self.timeout))
                    .map_err(|e| e.to_string())?;
                c.set_write_timeout(Some(self.timeout))
                    .map_err(|e| e.to_string())?;
                c
            }
        };
        let result = call(&mut con).map_err(|e| format!("{}: {e}", self.shown));
        if result.is_ok() {
            let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
            if pool.len() < POOL {
                pool.push(con);
            }
        }
        result
    }
}

impl RemoteStore for RedisStore {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        self.with(|c| redis::cmd("GET").arg(key).query(c))
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<(), String> {
        self.with(|c| redis::cmd("SET").arg(key).arg(value).query(c))
    }

    fn try_lease(&self, key: &str, token: &str, ttl: Duration) -> Result<bool, String> {
        let set: Option<String> = self.with(|c| {
            redis::cmd("SET")
                .arg(key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(ttl.as_millis().max(1) as u64)
                .query(c)
        })?;
        Ok(set.is_some())
    }

    fn release(&self, key: &str, token: &str) -> Result<(), String> {
        // Only the holder's own lease: one that expired and was taken over
        // is the new holder's.
        const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
        self.with(|c| {
            redis::cmd("EVAL")
                .arg(RELEASE)
                .arg(1)
                .arg(key)
                .arg(token)
                .query::<i64>(c)
        })
        .map(|_| ())
    }

    fn count(&self, name: &str) -> Result<(), String> {
        self.with(|c| {
            redis::cmd("HINCRBY")
                .arg(COUNTERS)
                .arg(name)
                .arg(1)
                .query::<i64>(c)
        })
        .map(|_| ())
    }

    fn counts(&self) -> Result<Vec<(String, u64)>, String> {
        let mut all: Vec<(String, u64)> =
            self.with(|c| redis::cmd("HGETALL").arg(COUNTERS).query(c))?;
        all.sort();
        Ok(all)
    }

    fn describe(&self) -> String {
        self.shown.clone()
    }
}

/// A store URL without its password (`redis://user:secret@host` →
/// `redis://user:…@host`).
fn shown(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:…{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(super::shown("redis://u:pw@h:1/0"), "redis://u:…@h:1/0");
        assert_eq!(super::shown("redis://h:1"), "redis://h:1");
    }
}
