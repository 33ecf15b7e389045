//! A `redis-server` of a test's or bench's own (Debian's package;
//! `ci/test.sh` installs it): started on a free loopback port with its
//! files in a folder the caller names, nothing saved, and stopped when
//! dropped — also when a test fails. One helper for the root package's
//! tests and benches and the CLI's tests (included by `#[path]`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`, killed when dropped.
pub struct RedisServer {
    child: Child,
    port: u16,
}

/// Whether a `redis-server` can be run here (on `PATH`): the tests that
/// need one are reported ignored where none is, never failed or passed.
#[allow(dead_code)] // not every includer asks
pub fn installed() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A loopback port no one listens on now (for a server's `--port` or
/// `--tls-port`).
#[allow(dead_code)] // not every includer asks
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

impl RedisServer {
    /// Starts one with its files in `dir` and the further options `extra`
    /// (`--maxmemory 1mb`, say), and waits until it answers `PING`. Why
    /// not, where it cannot be started or does not answer within 10 s.
    pub fn start(dir: &Path, extra: &[&str]) -> Result<RedisServer, String> {
        RedisServer::start_on(dir, free_port()?, extra)
    }

    /// [`start`](Self::start) on `port` (a server started again where one
    /// was stopped: its clients' URL stays).
    pub fn start_on(dir: &Path, port: u16, extra: &[&str]) -> Result<RedisServer, String> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "no redis-server could be started ({e}): install Debian's package redis-server \
                     (ci/test.sh does)"
                )
            })?;
        let server = RedisServer { child, port };
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if server.answers_ping() {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        Err(format!(
            "redis-server did not answer on port {port} within 10 s"
        ))
    }

    /// Its port on 127.0.0.1.
    #[allow(dead_code)] // not every includer asks
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL clients open.
    #[allow(dead_code)] // not every includer asks
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Whether it answers `PING` now (Redis's inline command form).
    fn answers_ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
