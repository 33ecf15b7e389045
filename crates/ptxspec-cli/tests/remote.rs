//! The remote cubin cache against a real `redis-server` (Debian's package;
//! `ci/test.sh` installs it), started on a free loopback port in a folder
//! of its own and stopped by each test: a writer's signed entries load in a
//! reader with a fresh disk cache, readers without a key never write,
//! forged entries are never loaded, and a store that is down or full fails
//! nothing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use common::*;

use common::redis_server::{self, RedisServer};

/// A `redis-server` of this test's (stopped when dropped), and what the
/// tests ask it directly.
struct Redis(RedisServer);

impl Redis {
    fn start(extra: &[&str]) -> Redis {
        Redis(RedisServer::start(&tempdir("redis"), extra).unwrap_or_else(|e| panic!("{e}")))
    }

    fn url(&self) -> String {
        self.0.url()
    }

    fn connection(&self) -> Option<redis::Connection> {
        let client = redis::Client::open(self.url()).ok()?;
        let mut c = client.get_connection().ok()?;
        redis::cmd("PING").query::<String>(&mut c).ok()?;
        Some(c)
    }

    /// The cubin entries in the store.
    fn keys(&self) -> Vec<String> {
        self.keys_like("ptxspec:cubin:*")
    }

    /// The store's keys that match `pattern` (Redis' `KEYS` pattern).
    fn keys_like(&self, pattern: &str) -> Vec<String> {
        let mut c = self.connection().unwrap();
        let mut k: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut c).unwrap();
        k.sort();
        k
    }

    fn get(&self, key: &str) -> Vec<u8> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut self.connection().unwrap())
            .unwrap()
    }

    fn set(&self, key: &str, value: &[u8]) {
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query::<()>(&mut self.connection().unwrap())
            .unwrap()
    }
}

/// An image with LTO-IR (one `int` constant), compiled once, and a key
/// pair: (the image's .prop, secret key file, trusted-keys file).
fn setup() -> &'static (PathBuf, PathBuf, PathBuf) {
    static SETUP: OnceLock<(PathBuf, PathBuf, PathBuf)> = OnceLock::new();
    SETUP.get_or_init(|| {
        let dir = tempdir("remote-setup");
        let (secret, public) = key_pair(&dir, "key");
        (one_constant_image(&dir, "r"), secret, public)
    })
}

/// Who runs `specialize`: a writer (signing key), a reader (trusted keys
/// only), or a process without trusted keys.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    Writer,
    Reader,
    Untrusting,
}

/// `ptxspec specialize --via lto` of `sc=value` for `arch` with the remote
/// cache at `url` and a fresh disk cache: (cubin, stderr).
fn specialize(url: &str, role: Role, value: i32, arch: &str) -> (Vec<u8>, String) {
    let o = specialize_cmd(url, role, value, arch).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{stderr}");
    let out = stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("ptxspec: ")?
                .split_once(": image ")
                .map(|(p, _)| PathBuf::from(p))
        })
        .unwrap_or_else(|| panic!("no output named in {stderr}"));
    (std::fs::read(&out).unwrap(), stderr)
}

/// The command [`specialize`] runs (its output in a fresh folder).
fn specialize_cmd(url: &str, role: Role, value: i32, arch: &str) -> Command {
    let (prop, secret, public) = setup();
    let dir = tempdir("remote-run");
    let out = dir.join("k.cubin");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptxspec"));
    cmd.stdout(Stdio::null());
    cmd.args(["specialize".as_ref(), prop.as_os_str()])
        .args([
            "--set",
            &format!("sc={value}"),
            "--via",
            "lto",
            "--arch",
            arch,
            "-o",
        ])
        .arg(&out)
        .env("PTXSPEC_REMOTE_CACHE", url)
        .env("PTXSPEC_CACHE_DIR", dir.join("disk"))
        // Generous: eight processes and their server share two cores in
        // CI, and a timed-out request makes a process link by itself.
        .env("PTXSPEC_REMOTE_TIMEOUT_MS", "2000")
        .env_remove("PTXSPEC_CACHE_SIGNING_KEY")
        .env_remove("PTXSPEC_CACHE_TRUSTED_KEYS")
        .env_remove("PTXSPEC_REMOTE_CA_FILE");
    if role != Role::Untrusting {
        cmd.env("PTXSPEC_CACHE_TRUSTED_KEYS", public);
    }
    if role == Role::Writer {
        cmd.env("PTXSPEC_CACHE_SIGNING_KEY", secret);
    }
    cmd
}

/// Eight processes cold-starting on one value set make one link: the
/// others wait for its entry (single flight across processes).
fn eight_cold_processes_make_one_link() {
    let redis = Redis::start(&[]);
    let url = redis.url();
    let children: Vec<_> = (0..8)
        .map(|_| {
            specialize_cmd(&url, Role::Writer, 6, "sm_90")
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let said: Vec<String> = children
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success());
            String::from_utf8_lossy(&o.stderr).into_owned()
        })
        .collect();
    let linked = said.iter().filter(|s| s.contains("cubin: linked")).count();
    let fetched = said
        .iter()
        .filter(|s| s.contains("cubin: remote cache"))
        .count();
    assert_eq!((linked, fetched), (1, 7), "{said:#?}");
}

/// A lease whose holder died (taken here, never given back) delays a
/// writer at most until it expires; then it links, and stores.
fn a_dead_holders_lease_is_taken_over() {
    let redis = Redis::start(&[]);
    let url = redis.url();
    // The key of sc=8 for sm_90: what a writer stores, then removed again.
    specialize(&url, Role::Writer, 8, "sm_90");
    let entry = redis
        .keys()
        .into_iter()
        .find(|k| k.starts_with("ptxspec:cubin:"))
        .unwrap();
    let lease = entry.replace("ptxspec:cubin:", "ptxspec:lease:");
    let mut c = redis.connection().unwrap();
    redis::cmd("DEL").arg(&entry).query::<()>(&mut c).unwrap();
    redis::cmd("SET")
        .arg(&lease)
        .arg("dead-holder")
        .arg("PX")
        .arg(1500)
        .query::<()>(&mut c)
        .unwrap();
    let started = std::time::Instant::now();
    let (_, said) = specialize(&url, Role::Writer, 8, "sm_90");
    let waited = started.elapsed();
    assert!(said.contains("cubin: linked"), "{said}");
    assert!(waited.as_millis() >= 1400, "{waited:?}");
    assert!(redis.keys().contains(&entry));
}

fn a_writers_signed_entries_load_in_readers_that_never_write() {
    let redis = Redis::start(&[]);
    let url = redis.url();
    let (linked, said) = specialize(&url, Role::Writer, 3, "sm_90");
    assert!(
        said.contains(
            "cubin: linked by nvJitLink, stored in the disk cache and uploaded to the remote cache"
        ),
        "a writer says it uploaded: {said}"
    );
    assert_eq!(redis.keys().len(), 1);
    let (loaded, said) = specialize(&url, Role::Reader, 3, "sm_90");
    assert!(said.contains("cubin: remote cache"), "{said}");
    assert_eq!(loaded, linked);
    // A reader links what the store does not have, and writes nothing.
    let (_, said) = specialize(&url, Role::Reader, 4, "sm_90");
    assert!(said.contains("cubin: linked"), "{said}");
    assert!(
        !said.contains("uploaded"),
        "a reader uploads nothing: {said}"
    );
    assert_eq!(redis.keys().len(), 1);
    // A store without trusted keys is a setting that cannot work: an
    // error naming the variable, nothing written.
    let o = specialize_cmd(&url, Role::Untrusting, 3, "sm_90")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1) && said.contains("PTXSPEC_CACHE_TRUSTED_KEYS"),
        "{said}"
    );
    assert_eq!(redis.keys().len(), 1);
}

/// `ptxspec -v`: every tier asked for the cubin and what it held, the
/// link with its duration and whether it was uploaded, a refused entry with
/// its reason; `RUST_LOG` chooses instead where set, and a filter that is
/// not one is an error naming the variable.
fn verbose_says_every_tier_the_link_and_refusals() {
    let redis = Redis::start(&[]);
    let url = redis.url();
    let run = |role: Role, value: i32, verbosity: Option<&str>, rust_log: Option<&str>| {
        let c = specialize_cmd(&url, role, value, "sm_90");
        let args: Vec<std::ffi::OsString> = c.get_args().map(|a| a.to_owned()).collect();
        let mut v = Command::new(env!("CARGO_BIN_EXE_ptxspec"));
        v.stdout(Stdio::null());
        v.args(verbosity).args(&args);
        for (k, val) in c.get_envs() {
            match val {
                Some(val) => v.env(k, val),
                None => v.env_remove(k),
            };
        }
        match rust_log {
            Some(filter) => v.env("RUST_LOG", filter),
            None => v.env_remove("RUST_LOG"),
        };
        let o = v.output().unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (ok, said) = run(Role::Writer, 5, Some("-v"), None);
    assert!(ok, "{said}");
    for tier in ["memory", "disk", "remote"] {
        assert!(
            said.contains(&format!("tier=\"{tier}\" outcome=\"miss\"")),
            "-v names the {tier} tier it asked: {said}"
        );
    }
    assert!(
        said.contains("ptxspec::link")
            && said.contains("duration_us=")
            && said.contains("uploaded=true"),
        "-v gives the link's duration and the upload: {said}"
    );
    let (ok, said) = run(Role::Reader, 5, Some("-v"), None);
    assert!(ok, "{said}");
    assert!(said.contains("tier=\"remote\" outcome=\"hit\""), "{said}");
    assert!(
        !said.contains("ptxspec::link"),
        "a remote hit links nothing: {said}"
    );
    // A damaged entry: refused with its reason, then linked here.
    let key = redis.keys()[0].clone();
    let mut entry = redis.get(&key);
    let last = entry.len() - 1;
    entry[last] ^= 1;
    redis.set(&key, &entry);
    let (ok, said) = run(Role::Reader, 5, Some("-v"), None);
    assert!(ok, "{said}");
    assert!(
        said.contains("entry refused") && said.contains("not signed by a trusted key"),
        "-v says the refusal and why: {said}"
    );
    // Without -v: the refusal is said once, as before.
    let (ok, said) = run(Role::Reader, 5, None, None);
    assert!(ok, "{said}");
    assert!(!said.contains("tier="), "{said}");
    assert!(
        said.contains("ptxspec: remote cache: refused an entry"),
        "{said}"
    );
    // RUST_LOG chooses the targets.
    let (ok, said) = run(Role::Reader, 6, None, Some("ptxspec::link=info"));
    assert!(ok, "{said}");
    assert!(
        said.contains("ptxspec::link") && !said.contains("tier="),
        "{said}"
    );
    let (ok, said) = run(Role::Reader, 6, None, Some("ptxspec=[[["));
    assert!(!ok && said.contains("RUST_LOG"), "{said}");
}

/// The commands, and the keys, an ACL user of ptxspec's needs (README,
/// "Sharing across machines"): `EVAL` runs a script that calls `GET` and
/// `DEL` (giving a lease back).
const ACL_RULES: [&str; 8] = [
    "~ptxspec:*",
    "+get",
    "+set",
    "+del",
    "+eval",
    "+hincrby",
    "+hgetall",
    "+select",
];

/// A managed store's ACL user: a writer and a reader as `redis://user:pw@`
/// with exactly the documented commands on `ptxspec:*` keys share an entry;
/// a user short of one (no `SET`: cannot upload) or with a wrong password
/// fails nothing — the cubin is linked here, the failure named once.
fn an_acl_user_with_only_what_ptxspec_needs() {
    let mut args = vec![
        "--user",
        "ptxspec",
        "on",
        ">s3cret",
        "resetchannels",
        "-@all",
    ];
    args.extend(ACL_RULES);
    // A second user without SET (one directive per --user).
    let narrow: Vec<&str> = ACL_RULES.iter().copied().filter(|r| *r != "+set").collect();
    let mut all: Vec<&str> = args.clone();
    all.extend([
        "--user",
        "narrow",
        "on",
        ">n4rrow",
        "resetchannels",
        "-@all",
    ]);
    all.extend(narrow.iter().copied());
    let redis = Redis::start(&all);
    let at = redis.url();
    let with_user = |user: &str| at.replacen("redis://", &format!("redis://{user}@"), 1);
    let acl = with_user("ptxspec:s3cret");
    let (linked, said) = specialize(&acl, Role::Writer, 21, "sm_90");
    assert!(said.contains("uploaded to the remote cache"), "{said}");
    assert_eq!(redis.keys().len(), 1, "{said}");
    let (loaded, said) = specialize(&acl, Role::Reader, 21, "sm_90");
    assert!(said.contains("cubin: remote cache"), "{said}");
    assert_eq!(loaded, linked);
    // No SET: linked here, nothing stored, the refusal named; the build goes on.
    let (_, said) = specialize(&with_user("narrow:n4rrow"), Role::Writer, 22, "sm_90");
    assert!(
        said.contains("cubin: linked") && !said.contains("uploaded"),
        "{said}"
    );
    assert!(
        said.contains("NOPERM") || said.contains("no permissions"),
        "{said}"
    );
    assert_eq!(redis.keys().len(), 1);
    // A wrong password: named (without the password), linked here.
    let (_, said) = specialize(&with_user("ptxspec:wrong"), Role::Reader, 21, "sm_90");
    assert!(said.contains("cubin: linked"), "{said}");
    assert!(
        !said.contains("wrong"),
        "the password is never shown: {said}"
    );
}

/// ACL users each short of one command ptxspec uses: every refusal is
/// named once (the command and the rule the user needs), and a writer that
/// may not run `EVAL` still gives its lease back (by `GET` and `DEL`, or by
/// `PEXPIRE`), or says that it cannot — it stayed ~19 s, unsaid. (Issue: a
/// user without `EVAL` or `DEL` got no message even with `-vv`; without
/// `HINCRBY` counting stopped silently.)
fn acl_users_short_of_a_command_are_told_once() {
    // Every command a lease uses, refused alone or with others: EVAL;
    // EVAL and DEL; DEL alone (EVAL allowed, its script's DEL refused: the
    // lease stayed 20 s, unsaid — round 5, 12); DEL and PEXPIRE with EVAL
    // allowed, and everything (no lease can be given back: said).
    let users: [(&str, &[&str]); 6] = [
        ("noeval", &["+eval"]),
        ("noevaldel", &["+eval", "+del"]),
        ("nodel", &["+del"]),
        ("nodelexpire", &["+del"]),
        ("norelease", &["+eval", "+del"]),
        ("nocount", &["+hincrby"]),
    ];
    let mut all: Vec<String> = Vec::new();
    for (user, without) in users {
        all.extend(
            ["--user", user, "on", ">pw", "resetchannels", "-@all"]
                .iter()
                .map(|s| s.to_string()),
        );
        all.extend(
            ACL_RULES
                .iter()
                .filter(|r| !without.contains(r))
                .map(|s| s.to_string()),
        );
        if user != "norelease" && user != "nodelexpire" {
            all.push("+pexpire".into());
        }
    }
    let args: Vec<&str> = all.iter().map(String::as_str).collect();
    let redis = Redis::start(&args);
    let at = redis.url();
    for (n, (user, without)) in users.iter().enumerate() {
        let url = at.replacen("redis://", &format!("redis://{user}:pw@"), 1);
        let (_, said) = specialize(&url, Role::Writer, 60 + n as i32, "sm_90");
        assert!(
            said.contains("uploaded to the remote cache"),
            "{user}: {said}"
        );
        let refused = without[0].trim_start_matches('+').to_ascii_uppercase();
        let named = match *user {
            "norelease" | "nodelexpire" => "can give no lease back".to_string(),
            _ => format!("{refused} refused by the server's ACL"),
        };
        assert_eq!(said.matches(&named).count(), 1, "{user}: {said}");
        assert!(
            said.contains(&format!("needs {}", without[0])),
            "{user}: {said}"
        );
        let leases = redis.keys_like("ptxspec:lease:*");
        if *user == "norelease" || *user == "nodelexpire" {
            assert!(said.contains("can give no lease back"), "{user}: {said}");
            assert_eq!(leases.len(), 1, "{user}");
            redis::cmd("DEL")
                .arg(&leases[0])
                .query::<i64>(&mut redis.connection().unwrap())
                .unwrap();
        } else {
            // Given back (deleted, or expiring in a millisecond).
            let gone = (0..200).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                redis.keys_like("ptxspec:lease:*").is_empty()
            });
            assert!(gone, "{user}: a lease left behind: {leases:?}");
        }
    }
}

/// A CA and a server certificate it signed for `names`, made here:
/// (CA's PEM, certificate's PEM, server key's PEM).
fn certificates(names: &[&str]) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "ptxspec test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let cert = CertificateParams::new(names)
        .unwrap()
        .signed_by(&key, &ca_cert, &ca_key)
        .unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

/// `rediss://`: a real `redis-server` serving TLS with a certificate of a
/// CA made here. With that CA named, entries are shared as over TCP; a
/// server whose certificate does not verify — another CA, the system's
/// roots, a name the certificate lacks — is refused by name, and the
/// build goes on without the tier.
fn a_tls_store_with_a_private_ca() {
    let dir = tempdir("tls");
    let (ca, cert, key) = certificates(&["localhost"]);
    let (other_ca, _, _) = certificates(&["localhost"]);
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let (ca, other_ca) = (write("ca.pem", &ca), write("other-ca.pem", &other_ca));
    let (cert, key) = (write("server.pem", &cert), write("server.key", &key));
    let tls_port = redis_server::free_port().unwrap().to_string();
    let redis = Redis::start(&[
        "--tls-port",
        tls_port.as_str(),
        "--tls-cert-file",
        cert.to_str().unwrap(),
        "--tls-key-file",
        key.to_str().unwrap(),
        "--tls-ca-cert-file",
        ca.to_str().unwrap(),
        "--tls-auth-clients",
        "no",
    ]);
    let run = |url: &str, role: Role, value: i32, ca_file: Option<&PathBuf>| {
        let mut cmd = specialize_cmd(url, role, value, "sm_90");
        if let Some(f) = ca_file {
            cmd.env("PTXSPEC_REMOTE_CA_FILE", f);
        }
        let o = cmd.output().unwrap();
        let said = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{said}");
        said
    };
    let url = format!("rediss://localhost:{tls_port}/");
    let said = run(&url, Role::Writer, 31, Some(&ca));
    assert!(said.contains("uploaded to the remote cache"), "{said}");
    assert_eq!(redis.keys().len(), 1, "{said}");
    let said = run(&url, Role::Reader, 31, Some(&ca));
    assert!(said.contains("cubin: remote cache"), "{said}");
    // Certificates that do not verify: refused by name, linked here,
    // nothing stored.
    let not_verified = "certificate does not verify for";
    for (url, ca_file, why, advice) in [
        (
            url.clone(),
            Some(&other_ca),
            not_verified,
            "PTXSPEC_REMOTE_CA_FILE",
        ),
        (url.clone(), None, not_verified, "PTXSPEC_REMOTE_CA_FILE"),
        (
            format!("rediss://127.0.0.1:{tls_port}/"),
            Some(&ca),
            "does not verify for 127.0.0.1",
            "name the server in the URL as its certificate does",
        ),
    ] {
        let said = run(&url, Role::Writer, 32, ca_file);
        assert!(said.contains("cubin: linked"), "{said}");
        assert!(!said.contains("uploaded"), "{said}");
        assert!(said.contains(why), "{ca_file:?} {url}: {said}");
        assert!(said.contains(advice), "{said}");
    }
    assert_eq!(redis.keys().len(), 1);
    // TLS spoken to the plain port: a failed handshake, named; the build
    // goes on.
    let plain = redis.url().replacen("redis://", "rediss://", 1);
    let said = run(&plain, Role::Reader, 31, Some(&ca));
    assert!(said.contains("cubin: linked"), "{said}");
    assert!(said.contains("TLS"), "{said}");
    // Plain RESP spoken to the TLS port (issue: a bare "Connection reset by
    // peer"): the error says the port may want rediss://, as reader and as
    // writer.
    for role in [Role::Reader, Role::Writer] {
        let said = run(&format!("redis://localhost:{tls_port}/"), role, 33, None);
        assert!(said.contains("cubin: linked"), "{said}");
        assert!(said.contains("name the store rediss://"), "{said}");
    }
}

fn forged_entries_are_never_loaded() {
    let redis = Redis::start(&[]);
    let url = redis.url();
    // Genuine entries of a writer: sc=3 and sc=4 for sm_90, sc=3 for sm_80.
    specialize(&url, Role::Writer, 3, "sm_90");
    let k3 = redis.keys()[0].clone();
    specialize(&url, Role::Writer, 4, "sm_90");
    let k4 = redis.keys().into_iter().find(|k| *k != k3).unwrap();
    specialize(&url, Role::Writer, 3, "sm_80");
    let k3_80 = redis
        .keys()
        .into_iter()
        .find(|k| *k != k3 && *k != k4)
        .unwrap();
    let genuine = redis.get(&k3);
    let mut bad_signature = genuine.clone();
    let last = bad_signature.len() - 1;
    bad_signature[last] ^= 1;
    let mut oversized = genuine.clone();
    oversized[28..36].copy_from_slice(&(1u64 << 40).to_le_bytes());
    // Each forgery under a key a reader will ask for; 10 000 more besides.
    let forgeries: [(&str, &str, Vec<u8>, i32, &str); 5] = [
        ("bad signature", &k3, bad_signature, 3, "sm_90"),
        ("another key's cubin", &k4, genuine.clone(), 4, "sm_90"),
        (
            "truncated",
            &k3,
            genuine[..genuine.len() / 2].to_vec(),
            3,
            "sm_90",
        ),
        ("oversized", &k3, oversized, 3, "sm_90"),
        (
            "another architecture's cubin",
            &k3_80,
            genuine.clone(),
            3,
            "sm_80",
        ),
    ];
    let mut c = redis.connection().unwrap();
    for i in 0..10_000u32 {
        let mut junk = genuine.clone();
        junk[40 + (i as usize % 64)] ^= (i % 255 + 1) as u8;
        redis::cmd("SET")
            .arg(format!("ptxspec:cubin:v1:{i:032x}"))
            .arg(junk)
            .query::<()>(&mut c)
            .unwrap();
    }
    for (what, key, value, sc, arch) in forgeries {
        redis.set(key, &value);
        let (_, said) = specialize(&url, Role::Reader, sc, arch);
        assert!(said.contains("cubin: linked"), "{what}: {said}");
        assert!(said.contains("refused an entry"), "{what}: {said}");
    }
}

fn a_store_that_is_down_or_full_fails_nothing() {
    // Nothing listens: linked locally, within the bound, said once.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = std::time::Instant::now();
    let (_, said) = specialize(
        &format!("redis://127.0.0.1:{port}/"),
        Role::Writer,
        3,
        "sm_90",
    );
    assert!(
        said.contains("cubin: linked") && said.contains("not asked for"),
        "{said}"
    );
    assert!(started.elapsed().as_secs() < 30);
    // Killed mid-run: the next process links, nothing fails.
    let redis = Redis::start(&[]);
    let url = redis.url();
    drop(redis);
    let (_, said) = specialize(&url, Role::Reader, 3, "sm_90");
    assert!(said.contains("cubin: linked"), "{said}");
    // Full (maxmemory, no eviction): the write is refused, the cubin linked.
    let full = Redis::start(&["--maxmemory", "1mb", "--maxmemory-policy", "noeviction"]);
    let mut c = full.connection().unwrap();
    let block = vec![0u8; 64 << 10];
    for i in 0.. {
        if redis::cmd("SET")
            .arg(format!("fill{i}"))
            .arg(&block)
            .query::<()>(&mut c)
            .is_err()
        {
            break;
        }
        assert!(i < 1000, "maxmemory did not take");
    }
    let (_, said) = specialize(&full.url(), Role::Writer, 5, "sm_90");
    assert!(
        said.contains("cubin: linked") && said.contains("not asked for"),
        "{said}"
    );
    assert!(full.keys().is_empty());
}

/// A store on loopback that misbehaves as `behave` says with every
/// connection it accepts (until dropped): what only a fake server can show.
struct FakeStore {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl FakeStore {
    fn start(behave: fn(std::net::TcpStream, &std::sync::atomic::AtomicBool)) -> FakeStore {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stopped = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        stream.set_nonblocking(false).unwrap();
                        let stopped = std::sync::Arc::clone(&stopped);
                        std::thread::spawn(move || behave(stream, &stopped));
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
                }
            }
        });
        FakeStore { port, stop }
    }

    fn url(&self, password: bool) -> String {
        match password {
            true => format!("redis://:secret@127.0.0.1:{}/", self.port),
            false => format!("redis://127.0.0.1:{}/", self.port),
        }
    }
}

impl Drop for FakeStore {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Reads what the client sent (its first command).
fn read_some(s: &mut std::net::TcpStream) {
    use std::io::Read;
    let mut b = [0u8; 4096];
    let _ = s.read(&mut b);
}

/// Writes `bytes` one a millisecond, until stopped or the client leaves.
fn drip(
    s: &mut std::net::TcpStream,
    bytes: impl Iterator<Item = u8>,
    stop: &std::sync::atomic::AtomicBool,
) {
    use std::io::Write;
    for b in bytes {
        if stop.load(std::sync::atomic::Ordering::Relaxed) || s.write_all(&[b]).is_err() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// A store that drips, or says nothing, costs each process a bounded time
/// (issue: a per-read socket timeout let a store that sends a byte a
/// millisecond hold `specialize` past 10 s): a bulk reply dripped without
/// end, a status line that never ends (the reply to `GET`, or to `AUTH` at
/// the connection's set-up where the URL holds a password), and silence.
/// With `PTXSPEC_REMOTE_TIMEOUT_MS=200` each run may take at most 3 s more
/// than the same run without a store, and links its cubin.
fn a_slow_store_costs_a_bounded_time() {
    type Behave = fn(std::net::TcpStream, &std::sync::atomic::AtomicBool);
    let dripping_bulk: Behave = |mut s, stop| {
        read_some(&mut s);
        drip(
            &mut s,
            b"$100000\r\n"
                .iter()
                .copied()
                .chain(std::iter::repeat(b'x')),
            stop,
        );
    };
    let endless_status: Behave = |mut s, stop| {
        read_some(&mut s);
        drip(
            &mut s,
            b"+OK".iter().copied().chain(std::iter::repeat(b'K')),
            stop,
        );
    };
    let silent: Behave = |mut s, stop| {
        read_some(&mut s);
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    let timed = |url: Option<&str>, value: i32| {
        let mut c = specialize_cmd(
            url.unwrap_or("redis://unused"),
            Role::Reader,
            value,
            "sm_90",
        );
        c.env("PTXSPEC_REMOTE_TIMEOUT_MS", "200");
        if url.is_none() {
            c.env_remove("PTXSPEC_REMOTE_CACHE");
        }
        let started = std::time::Instant::now();
        let o = c.output().unwrap();
        let took = started.elapsed();
        let said = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            o.status.success() && said.contains("cubin: linked"),
            "{said}"
        );
        (took, said)
    };
    let (baseline, _) = timed(None, 100);
    for (value, (what, behave, password)) in (101..).zip([
        ("a dripping bulk reply", dripping_bulk, false),
        ("an endless status line", endless_status, false),
        ("an endless reply to AUTH (set-up)", endless_status, true),
        ("silence", silent, false),
        ("silence after AUTH (set-up)", silent, true),
    ]) {
        let store = FakeStore::start(behave);
        let (took, said) = timed(Some(&store.url(password)), value);
        assert!(
            took < baseline + std::time::Duration::from_secs(3),
            "{what}: {took:?} against {baseline:?} without a store: {said}"
        );
        assert!(said.contains("no answer in time"), "{what}: {said}");
        assert!(
            !said.contains("secret"),
            "{what}: the password shown: {said}"
        );
    }
}

/// A reply larger than any entry is refused by its announced length and
/// never read: `specialize` stays within a 1 GiB address space (it runs in
/// one without a store) while a store answers `GET` with a 600 MiB value
/// (issue: the reply was read whole, twice its size, before its size was
/// checked, and the process aborted).
fn a_reply_larger_than_an_entry_is_never_read() {
    let huge: fn(std::net::TcpStream, &std::sync::atomic::AtomicBool) = |mut s, stop| {
        use std::io::Write;
        read_some(&mut s);
        let size = 600u64 << 20;
        if s.write_all(format!("${size}\r\n").as_bytes()).is_err() {
            return;
        }
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..600 {
            if stop.load(std::sync::atomic::Ordering::Relaxed) || s.write_all(&chunk).is_err() {
                return;
            }
        }
    };
    let store = FakeStore::start(huge);
    let limited = |url: Option<&str>, value: i32| {
        let cmd = specialize_cmd(
            url.unwrap_or("redis://unused"),
            Role::Reader,
            value,
            "sm_90",
        );
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg("ulimit -v 1048576 && exec \"$0\" \"$@\"")
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        if url.is_none() {
            sh.env_remove("PTXSPEC_REMOTE_CACHE");
        }
        let o = sh.output().unwrap();
        (o.status, String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (status, said) = limited(None, 200);
    assert!(
        status.success() && said.contains("cubin: linked"),
        "without a store, within 1 GiB: {said}"
    );
    let (status, said) = limited(Some(&store.url(false)), 201);
    assert!(status.success() && said.contains("cubin: linked"), "{said}");
    // Refused, said, and read no further — not a failure of the store.
    assert!(said.contains("larger than any entry of its kind"), "{said}");
}

/// `ptxspec cache warm FILE` links a list of value sets ahead of time and
/// uploads them (a reader then finds each in the store); `cache stats`
/// prints what the fleet counted — the fleet of its trust domain: processes
/// that trust other keys count apart in the same store.
fn warm_uploads_a_list_and_stats_count_the_fleet() {
    let redis = Redis::start(&[]);
    let url = redis.url();
    let (prop, secret, public) = setup();
    let dir = tempdir("remote-warm");
    let list = dir.join("sets.txt");
    std::fs::write(
        &list,
        format!(
            "# value sets of the serving mix\n{p} sm_90 sc=11\n\n{p} sm_90 kernel=k sc=12\n{p} sm_80 sc=11\n",
            p = prop.display()
        ),
    )
    .unwrap();
    // Another fleet's keys: another trust domain.
    let (other_secret, other_public) = key_pair(&dir, "other");
    let in_domain = |args: &[&str], public: &Path, secret: Option<&Path>, disk: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ptxspec"));
        c.args(args)
            .env("PTXSPEC_REMOTE_CACHE", &url)
            .env("PTXSPEC_CACHE_TRUSTED_KEYS", public)
            .env("PTXSPEC_CACHE_DIR", dir.join(disk))
            // A loaded machine may exceed the default deadline on loopback.
            .env("PTXSPEC_REMOTE_TIMEOUT_MS", "5000")
            .env_remove("PTXSPEC_CACHE_SIGNING_KEY");
        if let Some(secret) = secret {
            c.env("PTXSPEC_CACHE_SIGNING_KEY", secret);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let cli_with = |args: &[&str], write: bool| {
        in_domain(args, public, write.then_some(secret.as_path()), "disk")
    };
    let (_, said) = cli_with(&["cache", "warm", list.to_str().unwrap()], true);
    assert!(said.contains("3 of 3"), "{said}");
    assert_eq!(
        redis
            .keys()
            .iter()
            .filter(|k| k.starts_with("ptxspec:cubin:"))
            .count(),
        3
    );
    let (_, said) = specialize(&url, Role::Reader, 11, "sm_80");
    assert!(said.contains("cubin: remote cache"), "{said}");
    let (stats, _) = cli_with(&["cache", "stats"], false);
    assert!(
        stats.contains("links: 3") && stats.contains("remote hits: 1"),
        "{stats}"
    );
    // The other domain counted nothing; what it does it counts apart.
    let (stats, _) = in_domain(&["cache", "stats"], &other_public, None, "other-disk");
    assert!(stats.contains("nothing counted yet"), "{stats}");
    let one = dir.join("one.txt");
    std::fs::write(&one, format!("{} sm_90 sc=11\n", prop.display())).unwrap();
    let (_, said) = in_domain(
        &["cache", "warm", one.to_str().unwrap()],
        &other_public,
        Some(&other_secret),
        "other-disk",
    );
    assert!(said.contains("1 of 1"), "{said}");
    let (stats, _) = in_domain(&["cache", "stats"], &other_public, None, "other-disk");
    assert!(
        stats.contains("links: 1") && !stats.contains("remote hits"),
        "{stats}"
    );
    let (stats, _) = cli_with(&["cache", "stats"], false);
    assert!(
        stats.contains("links: 3") && stats.contains("remote hits: 1"),
        "{stats}"
    );
    let counters = redis.keys_like("ptxspec:stats:*");
    assert_eq!(counters.len(), 2, "{counters:?}");
    // Counter names come from the store: one that holds a terminal escape
    // and a line break is printed escaped, not as itself (no escape reaches
    // the terminal, no fake line appears) — in whichever domain's counters.
    for key in &counters {
        redis::cmd("HINCRBY")
            .arg(key)
            .arg("evil\x1b[2J\nremote hits: 999")
            .arg(1)
            .query::<i64>(&mut redis.connection().unwrap())
            .unwrap();
    }
    let (stats, _) = cli_with(&["cache", "stats"], false);
    assert!(!stats.contains('\x1b'), "{stats:?}");
    assert!(
        !stats
            .lines()
            .any(|l| l.trim_start().starts_with("remote hits: 999")),
        "{stats}"
    );
    assert!(
        stats.contains("evil\\u{1b}[2J\\nremote hits: 999: 1"),
        "{stats}"
    );
    // A list line that is not one: an error naming the line.
    std::fs::write(&list, "only-one-word\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_ptxspec"))
        .args(["cache", "warm", list.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("sets.txt:1:"));
}

/// `cache warm` makes sure the store holds each value set, whichever tier
/// the cubin comes from (issue: with the cubins in the disk cache already —
/// an earlier warm without the signing key, or with the store down — it
/// said `cubin: disk cache`, exited 0 and uploaded nothing): each line says
/// whether it was uploaded, already there, or not, and a writer that got
/// none into the store fails.
fn warm_uploads_what_the_store_lacks_from_any_tier() {
    let redis = Redis::start(&[]);
    let (prop, secret, public) = setup();
    let dir = tempdir("remote-warm-tiers");
    let list = dir.join("sets.txt");
    std::fs::write(
        &list,
        format!(
            "{p} sm_90 sc=21
{p} sm_80 sc=22
",
            p = prop.display()
        ),
    )
    .unwrap();
    let warm = |url: &str, writer: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ptxspec"));
        c.args(["cache", "warm", list.to_str().unwrap()])
            .env("PTXSPEC_REMOTE_CACHE", url)
            .env("PTXSPEC_CACHE_TRUSTED_KEYS", public)
            .env("PTXSPEC_CACHE_DIR", dir.join("disk"))
            .env("PTXSPEC_REMOTE_TIMEOUT_MS", "5000")
            .env_remove("PTXSPEC_CACHE_SIGNING_KEY");
        if writer {
            c.env("PTXSPEC_CACHE_SIGNING_KEY", secret);
        }
        let o = c.output().unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // Without the signing key: the disk cache only.
    let (ok, said) = warm(&redis.url(), false);
    assert!(ok && said.contains("disk cache only"), "{said}");
    assert_eq!(redis.keys().len(), 0);
    // With it: both cubins come from the disk cache, and are uploaded.
    let (ok, said) = warm(&redis.url(), true);
    assert!(ok, "{said}");
    assert!(said.contains("cubin: disk cache"), "{said}");
    assert_eq!(said.matches("uploaded to the store").count(), 2, "{said}");
    assert_eq!(redis.keys().len(), 2);
    // Again: already there.
    let (ok, said) = warm(&redis.url(), true);
    assert!(
        ok && said.matches("already in the store").count() == 2,
        "{said}"
    );
    // A store that is not there: each line says so, and the warm fails.
    let (ok, said) = warm("redis://127.0.0.1:1", true);
    assert!(!ok && said.matches("not uploaded").count() == 2, "{said}");
    assert!(said.contains("none of the 2 value sets"), "{said}");
    // A reader finds them.
    let (_, said) = specialize(&redis.url(), Role::Reader, 22, "sm_80");
    assert!(said.contains("cubin: remote cache"), "{said}");
}

/// The server killed while processes use it (once one holds its lease:
/// after their lookups, during their links): each finishes — its cubin
/// linked, its upload failing — and says so; nothing fails.
fn a_server_killed_mid_run_fails_nothing() {
    let redis = Redis::start(&[]);
    let url = redis.url();
    let children: Vec<_> = (0..4)
        .map(|v| {
            specialize_cmd(&url, Role::Writer, 20 + v, "sm_90")
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Killed once a process holds its lease (it missed, and links now),
    // not after a sleep: the store's keys say when.
    let started = std::time::Instant::now();
    while redis.keys_like("ptxspec:lease:*").is_empty() {
        assert!(
            redis.keys_like("ptxspec:cubin:*").is_empty(),
            "a process stored its cubin before any lease was seen"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "no process took a lease in 120 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    drop(redis);
    let mut mid_link = 0;
    for c in children {
        let o = c.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{said}");
        assert!(said.contains("cubin: "), "{said}");
        if said.contains("cubin: linked") && !said.contains("uploaded") {
            mid_link += 1;
        }
    }
    // The window the test is named for: at least the lease holder was
    // linking when the server died, and could not upload.
    assert!(
        mid_link >= 1,
        "no process was mid-link when the server died"
    );
}

/// A kernel with a by-value loop bound: `scale(float *x, int n, int
/// reps)`.
const BY_VALUE_KERNEL: &str = r#"extern "C" __global__ void scale(float *x, int n, int reps) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  for (int r = 0; r < reps; ++r) v = v * 1.5f + 1.0f;
  x[i] = v;
}
"#;

/// Links of fixed kernel arguments (`specialize --arg`) are keyed by the
/// values: a second host's process with the same arguments loads the
/// first's signed entry, other values are linked (and stored) anew.
fn fixed_arguments_are_shared_by_their_values() {
    let redis = Redis::start(&[]);
    let url = redis.url();
    let (_, secret, public) = setup();
    let prop = compiled_image(&tempdir("remote-args"), "scale", BY_VALUE_KERNEL);
    let run = |reps: &str| {
        let fresh = tempdir("remote-args-run");
        let o = Command::new(env!("CARGO_BIN_EXE_ptxspec"))
            .arg("specialize")
            .arg(&prop)
            .args(["--kernel", "scale", "--arg", &format!("2={reps}")])
            .args(["--via", "lto", "--arch", "sm_90", "-o"])
            .arg(fresh.join("scale.cubin"))
            .env("PTXSPEC_REMOTE_CACHE", &url)
            .env("PTXSPEC_CACHE_DIR", fresh.join("disk"))
            .env("PTXSPEC_REMOTE_TIMEOUT_MS", "2000")
            .env("PTXSPEC_CACHE_TRUSTED_KEYS", public)
            .env("PTXSPEC_CACHE_SIGNING_KEY", secret)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{said}");
        (std::fs::read(fresh.join("scale.cubin")).unwrap(), said)
    };
    let (linked, said) = run("8");
    assert!(
        said.contains("cubin: linked") && said.contains("uploaded"),
        "{said}"
    );
    let (loaded, said) = run("8");
    assert!(
        said.contains("cubin: remote cache"),
        "the same arguments: {said}"
    );
    assert_eq!(loaded, linked);
    let (_, said) = run("9");
    assert!(said.contains("cubin: linked"), "other arguments: {said}");
    assert_eq!(redis.keys().len(), 2);
}

fn main() -> std::process::ExitCode {
    // (name, test, what it needs: a real redis-server, or a fake one)
    let tests: Vec<(&str, fn(), harness::Needs)> = vec![
        (
            "eight_cold_processes_make_one_link",
            eight_cold_processes_make_one_link as fn(),
            harness::NVIDIA_AND_REDIS,
        ),
        (
            "a_dead_holders_lease_is_taken_over",
            a_dead_holders_lease_is_taken_over as fn(),
            harness::NVIDIA_AND_REDIS,
        ),
        (
            "a_writers_signed_entries_load_in_readers_that_never_write",
            a_writers_signed_entries_load_in_readers_that_never_write as fn(),
            harness::NVIDIA_AND_REDIS,
        ),
        (
            "verbose_says_every_tier_the_link_and_refusals",
            verbose_says_every_tier_the_link_and_refusals as fn(),
            harness::NVIDIA_AND_REDIS,
        ),
        (
            "an_acl_user_with_only_what_ptxspec_needs",
            an_acl_user_with_only_what_ptxspec_needs as fn(),
            harness::NVIDIA_AND_REDIS,
        ),
        (
            "a_tls_store_with_a_private_ca",
            a_tls_store_with_a_private_ca as fn(),
            harness::NVIDIA_AND_REDIS,
        ),
        (
            "forged_entries_are_never_loaded",
            forged_entries_are_never_loaded as fn(),
            harness::NVIDIA_AND_REDIS,
        ),
        (
            "a_store_that_is_down_or_full_fails_nothing",
            a_store_that_is_down_or_full_fails_nothing as fn(),
            harness::NVIDIA_AND_REDIS,
        ),
        (
            "a_slow_store_costs_a_bounded_time",
            a_slow_store_costs_a_bounded_time as fn(),
            harness::NVIDIA,
        ),
        (
            "a_reply_larger_than_an_entry_is_never_read",
            a_reply_larger_than_an_entry_is_never_read as fn(),
            harness::NVIDIA,
        ),
        (
            "warm_uploads_a_list_and_stats_count_the_fleet",
            warm_uploads_a_list_and_stats_count_the_fleet as fn(),
            harness::NVIDIA_AND_REDIS,
        ),
        (
            "fixed_arguments_are_shared_by_their_values",
            fixed_arguments_are_shared_by_their_values as fn(),
            harness::NVIDIA_AND_REDIS,
        ),
        (
            "warm_uploads_what_the_store_lacks_from_any_tier",
            warm_uploads_what_the_store_lacks_from_any_tier as fn(),
            harness::NVIDIA_AND_REDIS,
        ),
        (
            "acl_users_short_of_a_command_are_told_once",
            acl_users_short_of_a_command_are_told_once as fn(),
            harness::NVIDIA_AND_REDIS,
        ),
        (
            "a_server_killed_mid_run_fails_nothing",
            a_server_killed_mid_run_fails_nothing as fn(),
            harness::NVIDIA_AND_REDIS,
        ),
    ];
    harness::run("remote", tests)
}
