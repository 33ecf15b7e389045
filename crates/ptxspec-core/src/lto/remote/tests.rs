//! The remote tier's unit tests (no server: a store of the test's own where one is needed).

use super::keys::lease_key;
use super::*;
use std::path::PathBuf;

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
    fn try_lease(&self, _: &str, _: &str, _: Duration, deadline: Instant) -> Result<bool, String> {
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

/// A store in which another host's link ends at a chosen call: before it
/// the entry is missing and the lease held; from it on, the entry is there
/// and the lease given back.
struct LinkEndsAt {
    entry: Vec<u8>,
    /// The number of the call (from 1) at which the link has ended.
    ends_at: u64,
    calls: AtomicU64,
}

impl RemoteStore for &'static LinkEndsAt {
    fn get(&self, key: &str, _: u64, _: Instant) -> Result<Option<Vec<u8>>, String> {
        let ended = self.calls.fetch_add(1, Ordering::SeqCst) + 1 >= self.ends_at;
        Ok(match (key.contains(":lease:"), ended) {
            (true, false) => Some(b"holder".to_vec()),
            (false, true) => Some(self.entry.clone()),
            _ => None,
        })
    }
    fn put(&self, _: &str, _: &[u8], _: Instant) -> Result<(), String> {
        Ok(())
    }
    fn try_lease(&self, _: &str, _: &str, _: Duration, _: Instant) -> Result<bool, String> {
        Ok(false)
    }
    fn release(&self, _: &str, _: &str, _: Instant) -> Result<(), String> {
        Ok(())
    }
    fn count(&self, _: &str, _: &str, _: Instant) -> Result<(), String> {
        Ok(())
    }
    fn counts(&self, _: &str, _: Instant) -> Result<Vec<(String, u64)>, String> {
        Ok(Vec::new())
    }
    fn describe(&self) -> String {
        "a store where another host's link ends".into()
    }
}

/// A reader whose miss came just before another host stored the entry and
/// gave its lease back — the entry missing at its first look, the lease
/// gone at its second — takes the entry, never links it again (seen with
/// 256 readers on 16 cores: a shared value set linked two and three
/// times). Whenever the link ends, from the first call on, the reader gets
/// the cubin.
#[test]
fn a_link_that_ends_between_a_readers_looks_is_not_linked_again() {
    let (secret, public) = generate_key_pair().unwrap();
    let trusted = entry::trusted_keys(&public).unwrap();
    let key = Digest::of(b"a cubin another host links");
    let mut cubin = b"\x7fELF".to_vec();
    cubin.resize(256, 7);
    let entry = entry::seal(&entry::secret_key(&secret).unwrap(), &key, 90, &cubin);
    for ends_at in 1..=4 {
        let store: &'static LinkEndsAt = Box::leak(Box::new(LinkEndsAt {
            entry: entry.clone(),
            ends_at,
            calls: AtomicU64::new(0),
        }));
        let r: &'static Remote = Box::leak(Box::new(Remote {
            store: Box::new(store),
            domain: trust_domain(&trusted),
            trusted: trusted.clone(),
            signer: None,
            paused_until: AtomicU64::new(0),
            epoch: Instant::now(),
            timeout: Duration::from_secs(5),
            lease: Duration::from_secs(5),
        }));
        match fetch(r, &key, 90) {
            Fetched::Cubin(c) => assert_eq!(c, cubin, "the link ended at call {ends_at}"),
            Fetched::Link(_) => {
                panic!("the link ended at call {ends_at}, and the reader linked again")
            }
        }
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
