//! A Redis connection for the few commands the remote tier sends, with the
//! two bounds a general client does not give: every call — connect,
//! request, the whole reply — ends by a deadline, however slowly a server
//! drips its bytes; and a reply's sizes are checked as they are announced,
//! before anything is read into memory, so that no reply larger than its
//! limit is ever held.
//!
//! Commands are RESP arrays of bulk strings; replies are read as RESP2
//! (simple strings, errors, integers, bulk strings, arrays), the protocol a
//! server speaks to a client that did not ask for another.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// A reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+OK`.
    Simple(String),
    /// `-ERR ...`: the server refused the command.
    Error(String),
    /// `:7`.
    Integer(i64),
    /// `$n` and n bytes; `None` for the null reply (`$-1`).
    Bulk(Option<Vec<u8>>),
    /// `*n` and n replies; `None` for the null array.
    Array(Option<Vec<Reply>>),
}

/// How large a reply may be.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// The longest bulk string.
    pub bulk: u64,
    /// The most elements of an array (nested arrays count each of theirs).
    pub elements: u64,
}

impl Limits {
    /// Replies of a few short strings (status, counters' names).
    pub const SMALL: Limits = Limits {
        bulk: 64 << 10,
        elements: 4096,
    };
}

/// Why a call failed.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The deadline passed before the call was over.
    TimedOut(&'static str),
    /// The connection failed.
    Io(io::Error),
    /// The server sent what is not RESP, or more than the limits allow.
    Protocol(String),
    /// A value larger than the call reads, announced (its bytes unread:
    /// the connection is not used again).
    TooLarge {
        /// Its announced length.
        bytes: u64,
        /// The call's limit.
        limit: u64,
    },
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::TimedOut(stage) => write!(f, "no answer in time ({stage})"),
            CallError::Io(e) => write!(f, "{e}"),
            CallError::Protocol(what) => write!(f, "{what}"),
            CallError::TooLarge { bytes, limit } => {
                write!(
                    f,
                    "a reply of {bytes} bytes, more than the {limit} this call reads"
                )
            }
        }
    }
}

/// A byte stream to a server: a TCP connection (TLS streams are one too).
pub(crate) trait Stream: Read + Write + Send {
    /// Bounds the next blocking read or write of the socket underneath
    /// (`None`: the deadline passed).
    fn bound(&mut self, remaining: Duration) -> io::Result<()>;
}

impl Stream for TcpStream {
    fn bound(&mut self, remaining: Duration) -> io::Result<()> {
        // A zero duration would mean "no timeout" to the socket.
        let t = remaining.max(Duration::from_micros(1));
        self.set_read_timeout(Some(t))?;
        self.set_write_timeout(Some(t))
    }
}

/// A TCP connection to `host:port` made by `deadline`: each address the
/// name resolves to is tried with what time is left. (The name's
/// resolution itself is the system's: a host name that resolves slowly is
/// the resolver's to bound; IP addresses resolve at once.)
pub(crate) fn connect_tcp(
    host: &str,
    port: u16,
    deadline: Instant,
) -> Result<TcpStream, CallError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(CallError::Io)?
        .collect();
    let mut last = None;
    for addr in addrs {
        let Some(left) = remaining(deadline) else {
            return Err(CallError::TimedOut("connecting"));
        };
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                last = Some(CallError::TimedOut("connecting"))
            }
            Err(e) => last = Some(CallError::Io(e)),
        }
    }
    Err(last.unwrap_or_else(|| {
        CallError::Io(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{host} resolves to no address"),
        ))
    }))
}

/// Time left until `deadline`; `None` once it passed.
fn remaining(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

/// A connection: the stream and what was read of it but not yet parsed.
pub(crate) struct Connection {
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
    at: usize,
}

/// Bytes read from the socket at a time.
const CHUNK: usize = 16 << 10;

impl Connection {
    pub(crate) fn new(stream: Box<dyn Stream>) -> Connection {
        Connection {
            stream,
            buf: Vec::new(),
            at: 0,
        }
    }

    /// Sends the command `args` and reads its reply, all by `deadline`,
    /// the reply within `limits`. A connection whose call failed is in no
    /// known state: its owner drops it.
    pub(crate) fn call(
        &mut self,
        args: &[&[u8]],
        deadline: Instant,
        limits: Limits,
    ) -> Result<Reply, CallError> {
        self.send(args, deadline)?;
        let mut elements = 0;
        self.reply(deadline, limits, &mut elements, 0)
    }

    /// Writes a command as an array of bulk strings.
    fn send(&mut self, args: &[&[u8]], deadline: Instant) -> Result<(), CallError> {
        let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        let mut written = 0;
        while written < out.len() {
            let left = remaining(deadline).ok_or(CallError::TimedOut("sending"))?;
            self.stream.bound(left).map_err(CallError::Io)?;
            match self.stream.write(&out[written..]) {
                Ok(0) => {
                    return Err(CallError::Io(io::ErrorKind::WriteZero.into()));
                }
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if timed_out(&e) => return Err(CallError::TimedOut("sending")),
                Err(e) => return Err(CallError::Io(e)),
            }
        }
        // A TLS stream may hold the last record until flushed (a TCP
        // stream holds nothing).
        if remaining(deadline).is_none() {
            return Err(CallError::TimedOut("sending"));
        }
        match self.stream.flush() {
            Ok(()) => Ok(()),
            Err(e) if timed_out(&e) => Err(CallError::TimedOut("sending")),
            Err(e) => Err(CallError::Io(e)),
        }
    }

    /// Reads more bytes into the buffer (at most `want`, at least one).
    fn fill(&mut self, want: usize, deadline: Instant) -> Result<(), CallError> {
        if self.at > 0 && self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        }
        let start = self.buf.len();
        let want = want.clamp(1, CHUNK);
        self.buf.resize(start + want, 0);
        loop {
            let Some(left) = remaining(deadline) else {
                self.buf.truncate(start);
                return Err(CallError::TimedOut("reading the reply"));
            };
            if let Err(e) = self.stream.bound(left) {
                self.buf.truncate(start);
                return Err(CallError::Io(e));
            }
            match self.stream.read(&mut self.buf[start..]) {
                Ok(0) => {
                    self.buf.truncate(start);
                    return Err(CallError::Io(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the server closed the connection",
                    )));
                }
                Ok(n) => {
                    self.buf.truncate(start + n);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buf.truncate(start);
                    return Err(if timed_out(&e) {
                        CallError::TimedOut("reading the reply")
                    } else {
                        CallError::Io(e)
                    });
                }
            }
        }
    }

    /// One line of the reply, without its CRLF: at most 64 KiB (a status,
    /// an error, a length) — a server that sends a longer one is not
    /// speaking RESP.
    fn line(&mut self, deadline: Instant) -> Result<Vec<u8>, CallError> {
        const LONGEST: usize = 64 << 10;
        loop {
            if let Some(end) = memchr::memmem::find(&self.buf[self.at..], b"\r\n") {
                let line = self.buf[self.at..self.at + end].to_vec();
                self.at += end + 2;
                return Ok(line);
            }
            if self.buf.len() - self.at > LONGEST {
                return Err(CallError::Protocol(
                    "a reply line longer than RESP's".into(),
                ));
            }
            self.fill(CHUNK, deadline)?;
        }
    }

    /// Exactly `n` bytes of the reply (`n` within the limits already).
    fn exact(&mut self, n: usize, deadline: Instant) -> Result<Vec<u8>, CallError> {
        let mut out = Vec::with_capacity(n);
        loop {
            let have = (self.buf.len() - self.at).min(n - out.len());
            out.extend_from_slice(&self.buf[self.at..self.at + have]);
            self.at += have;
            if out.len() == n {
                return Ok(out);
            }
            self.fill(n - out.len(), deadline)?;
        }
    }

    fn reply(
        &mut self,
        deadline: Instant,
        limits: Limits,
        elements: &mut u64,
        depth: u32,
    ) -> Result<Reply, CallError> {
        let line = self.line(deadline)?;
        let Some((&kind, rest)) = line.split_first() else {
            return Err(CallError::Protocol("an empty reply line".into()));
        };
        let text = || String::from_utf8_lossy(rest).into_owned();
        let number = || -> Result<i64, CallError> {
            std::str::from_utf8(rest)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
                .ok_or_else(|| CallError::Protocol(format!("not a number: {:?}", text())))
        };
        match kind {
            b'+' => Ok(Reply::Simple(text())),
            b'-' => Ok(Reply::Error(text())),
            b':' => Ok(Reply::Integer(number()?)),
            b'$' => {
                let n = number()?;
                if n < 0 {
                    return Ok(Reply::Bulk(None));
                }
                if n as u64 > limits.bulk {
                    return Err(CallError::TooLarge {
                        bytes: n as u64,
                        limit: limits.bulk,
                    });
                }
                let body = self.exact(n as usize, deadline)?;
                if self.exact(2, deadline)? != b"\r\n" {
                    return Err(CallError::Protocol(
                        "a bulk string not ended by CRLF".into(),
                    ));
                }
                Ok(Reply::Bulk(Some(body)))
            }
            b'*' => {
                let n = number()?;
                if n < 0 {
                    return Ok(Reply::Array(None));
                }
                *elements += n as u64;
                if *elements > limits.elements || depth >= 4 {
                    return Err(CallError::Protocol(format!(
                        "a reply of more than {} elements, or nested deeper than 4",
                        limits.elements
                    )));
                }
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(self.reply(deadline, limits, elements, depth + 1)?);
                }
                Ok(Reply::Array(Some(items)))
            }
            other => Err(CallError::Protocol(format!(
                "a reply of unknown type {:?}",
                other as char
            ))),
        }
    }
}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// The fuzz targets' way in (`fuzz/fuzz_targets/resp_reply.rs`): `bytes`
/// as a server's whole reply to one call, read within a bulk string of
/// `bulk` bytes and `elements` array elements. What must hold: no panic,
/// and a reply read is within those limits (asserted here).
#[cfg(fuzzing)]
pub fn fuzz_reply(bytes: &[u8], bulk: u64, elements: u64) -> Result<(), String> {
    /// The reply's bytes, as a stream that never blocks.
    struct Canned(std::io::Cursor<Vec<u8>>);
    impl Read for Canned {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.0.read(buf)
        }
    }
    impl Write for Canned {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    impl Stream for Canned {
        fn bound(&mut self, _: Duration) -> io::Result<()> {
            Ok(())
        }
    }
    /// Bulk strings and elements of `reply`, counted as the reader does.
    fn within(reply: &Reply, limits: Limits, elements: &mut u64) -> bool {
        match reply {
            Reply::Bulk(Some(b)) => b.len() as u64 <= limits.bulk,
            Reply::Array(Some(items)) => {
                *elements += items.len() as u64;
                *elements <= limits.elements && items.iter().all(|r| within(r, limits, elements))
            }
            _ => true,
        }
    }
    let limits = Limits { bulk, elements };
    let mut con = Connection::new(Box::new(Canned(std::io::Cursor::new(bytes.to_vec()))));
    let reply = con
        .call(
            &[b"GET", b"key"],
            Instant::now() + Duration::from_secs(10),
            limits,
        )
        .map_err(|e| e.to_string())?;
    assert!(
        within(&reply, limits, &mut 0),
        "a reply past its limits: {reply:?}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server on loopback that answers one connection with `reply`, a
    /// byte every `gap` (after reading the command).
    fn server(reply: Vec<u8>, gap: Duration) -> (u16, std::thread::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 1024];
            let _ = s.read(&mut b);
            if gap.is_zero() {
                let _ = s.write_all(&reply);
            } else {
                for byte in reply {
                    if s.write_all(&[byte]).is_err() {
                        return;
                    }
                    std::thread::sleep(gap);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        });
        (port, h)
    }

    fn ask(port: u16, within: Duration, limits: Limits) -> Result<Reply, CallError> {
        let deadline = Instant::now() + within;
        let s = connect_tcp("127.0.0.1", port, deadline)?;
        Connection::new(Box::new(s)).call(&[b"GET", b"k"], deadline, limits)
    }

    #[test]
    fn replies_of_every_kind_read() {
        let cases: [(&[u8], Reply); 6] = [
            (b"+OK\r\n", Reply::Simple("OK".into())),
            (b"-ERR no\r\n", Reply::Error("ERR no".into())),
            (b":-7\r\n", Reply::Integer(-7)),
            (b"$3\r\na\r\n\r\n", Reply::Bulk(Some(b"a\r\n".to_vec()))),
            (b"$-1\r\n", Reply::Bulk(None)),
            (
                b"*2\r\n$1\r\nx\r\n:1\r\n",
                Reply::Array(Some(vec![
                    Reply::Bulk(Some(b"x".to_vec())),
                    Reply::Integer(1),
                ])),
            ),
        ];
        for (bytes, want) in cases {
            let (port, h) = server(bytes.to_vec(), Duration::ZERO);
            let got = ask(port, Duration::from_secs(10), Limits::SMALL).unwrap();
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(bytes));
            h.join().unwrap();
        }
    }

    /// A reply larger than the call's limit is refused by its announced
    /// length, before its bytes are read (the server here announces 1 GB
    /// and sends none of it: the call ends at once, not at the deadline).
    #[test]
    fn an_announced_size_over_the_limit_is_refused_unread() {
        for header in [&b"$1000000000\r\n"[..], b"*1000000\r\n", b"*2\r\n*5000\r\n"] {
            let (port, h) = server(header.to_vec(), Duration::ZERO);
            let started = Instant::now();
            let e = ask(port, Duration::from_secs(30), Limits::SMALL).unwrap_err();
            assert!(
                matches!(e, CallError::Protocol(_) | CallError::TooLarge { .. }),
                "{e}"
            );
            assert!(started.elapsed() < Duration::from_secs(10));
            h.join().unwrap();
        }
    }

    /// A server that drips its reply a byte every 2 ms never holds a call
    /// past its deadline, though no single read waits long.
    #[test]
    fn a_dripping_reply_ends_at_the_deadline() {
        let mut reply = b"$2000\r\n".to_vec();
        reply.extend(std::iter::repeat_n(b'x', 2000));
        reply.extend_from_slice(b"\r\n");
        let (port, _h) = server(reply, Duration::from_millis(2));
        let started = Instant::now();
        let e = ask(port, Duration::from_millis(300), Limits::SMALL).unwrap_err();
        let took = started.elapsed();
        assert!(matches!(e, CallError::TimedOut(_)), "{e}");
        // The bound, with room for a loaded machine's scheduling.
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
    }

    #[test]
    fn what_is_not_resp_is_refused() {
        for bytes in [&b"?what\r\n"[..], b":12x\r\n", b"$2\r\nabXY", b"\r\n"] {
            let (port, h) = server(bytes.to_vec(), Duration::ZERO);
            let e = ask(port, Duration::from_secs(10), Limits::SMALL).unwrap_err();
            assert!(matches!(e, CallError::Protocol(_)), "{bytes:?}: {e}");
            h.join().unwrap();
        }
    }
}
