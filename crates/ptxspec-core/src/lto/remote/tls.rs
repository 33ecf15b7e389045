//! TLS to the store (`rediss://`), as managed Redis services require:
//! rustls over the TCP connection of [`resp::connect_tcp`], the server's
//! certificate verified against the system's roots or the CA file of
//! `PTXSPEC_REMOTE_CA_FILE`, for the URL's host name (or address).
//!
//! Every call keeps its deadline through TLS: the socket under rustls
//! checks the deadline before each read and write and bounds the blocking
//! operation by what is left, so that neither the handshake nor a record a
//! server drips byte by byte can outlast it (rustls itself reads and writes
//! the socket as often as a record needs).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use super::resp::{CallError, Stream};

/// The client configuration of every TLS connection of a store: the
/// certificates of `ca_file` as the only roots, or the system's where none
/// is named. Errors say what is wrong in words for the setting's message.
pub(crate) fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let pem = crate::files::read_input(path).map_err(|e| e.to_string())?;
            let mut found = 0;
            for (n, cert) in CertificateDer::pem_slice_iter(&pem).enumerate() {
                let cert = cert.map_err(|e| {
                    format!("certificate {} is not PEM that can be read ({e})", n + 1)
                })?;
                roots
                    .add(cert)
                    .map_err(|e| format!("certificate {} is not a CA certificate ({e})", n + 1))?;
                found += 1;
            }
            if found == 0 {
                return Err("no certificate in it (a PEM file of BEGIN CERTIFICATE blocks)".into());
            }
        }
        None => {
            let system = rustls_native_certs::load_native_certs();
            let (added, _ignored) = roots.add_parsable_certificates(system.certs);
            if added == 0 {
                let why = system
                    .errors
                    .first()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default();
                return Err(format!(
                    "rediss:// verifies the server against the system's root certificates, and \
                     none could be read{why}: install the system's CA certificates or set \
                     PTXSPEC_REMOTE_CA_FILE"
                ));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS cannot be set up: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A TLS connection over `tcp` to `host`, its handshake done by
/// `deadline`. A server whose certificate does not verify is refused,
/// in words that name the host and what to set.
pub(crate) fn connect(
    tcp: TcpStream,
    host: &str,
    config: &Arc<ClientConfig>,
    deadline: Instant,
) -> Result<TlsStream, CallError> {
    let name = ServerName::try_from(host.to_string()).map_err(|e| {
        CallError::Protocol(format!(
            "TLS: {host:?} is not a name a certificate can have ({e})"
        ))
    })?;
    let mut conn = ClientConnection::new(config.clone(), name)
        .map_err(|e| CallError::Protocol(format!("TLS: {e}")))?;
    let mut socket = DeadlineSocket { tcp, deadline };
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut socket) {
            return Err(handshake_error(e, host));
        }
    }
    Ok(TlsStream(StreamOwned::new(conn, socket)))
}

/// Why a handshake failed, in words: rustls's own errors (a certificate
/// that does not verify, a protocol the server does not speak) say what
/// the server sent.
fn handshake_error(e: io::Error, host: &str) -> CallError {
    let tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match tls {
        Some(rustls::Error::InvalidCertificate(why)) => {
            let advice = match why {
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. } => {
                    "name the server in the URL as its certificate does"
                }
                _ => "name the CA that signed it in PTXSPEC_REMOTE_CA_FILE",
            };
            CallError::Protocol(format!(
                "TLS: the server's certificate does not verify for {host} ({why}); the store \
                 is not used: {advice}"
            ))
        }
        Some(other) => CallError::Protocol(format!("TLS handshake with {host} failed: {other}")),
        None if matches!(
            e.kind(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
        ) =>
        {
            CallError::TimedOut("the TLS handshake")
        }
        None => CallError::Io(io::Error::new(
            e.kind(),
            format!("TLS handshake with {host}: {e} (is it a TLS port?)"),
        )),
    }
}

/// The TCP socket under rustls: every read and write first checks the
/// deadline (`TimedOut` once it passed) and is bounded by what is left.
pub(crate) struct DeadlineSocket {
    tcp: TcpStream,
    deadline: Instant,
}

impl DeadlineSocket {
    /// What is left until the deadline, set on the socket as its timeout.
    fn arm(&mut self, read: bool) -> io::Result<()> {
        let left = self
            .deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "the call's deadline passed"))?;
        if read {
            self.tcp.set_read_timeout(Some(left))
        } else {
            self.tcp.set_write_timeout(Some(left))
        }
    }
}

impl Read for DeadlineSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm(true)?;
        self.tcp.read(buf)
    }
}

impl Write for DeadlineSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm(false)?;
        self.tcp.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

/// A TLS stream to the store, whose deadline each call moves.
pub(crate) struct TlsStream(StreamOwned<ClientConnection, DeadlineSocket>);

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl Stream for TlsStream {
    fn bound(&mut self, remaining: Duration) -> io::Result<()> {
        self.0.sock.deadline = Instant::now() + remaining;
        Ok(())
    }
}
