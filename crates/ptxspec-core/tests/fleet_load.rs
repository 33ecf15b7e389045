//! A fleet under load against one real `redis-server` (issue 54): 256 reader
//! hosts and 8 writer hosts — threads of this process, each host with a
//! remote tier and connections of its own (`remote::open_host`) — ask for
//! value sets at once. Some value sets are shared (every host asks for
//! them; writers link them under the fleet's lease), some are not (one
//! reader asks for it, and links it itself). Every host checks each cubin
//! it is given against the one its value set links to.
//!
//! - `a_fleet_under_load_links_each_value_set_once`: exactly one link per
//!   value set across the fleet, no wrong entry, no call that failed; the
//!   look-ups' p50 and p99 printed.
//! - `a_fleet_rides_out_its_store_restarted_mid_run`: the store stopped and
//!   started again (empty) while the readers ask — once half of their
//!   look-ups are done, not after a sleep: no wrong entry, every host gets
//!   every cubin (from the store or a link of its own), the breaker opens
//!   and closes.
//!
//! Readers start once every shared value set is being linked by a writer
//! (its lease taken) or stored: a reader that asks before any writer has
//! taken the lease links the value set itself — the store cannot know that
//! a link is coming. Reported ignored where no `redis-server` is on PATH
//! (failed under `PTXSPEC_REQUIRE_TOOLS=1`, as CI runs it).
//!
//! - `a_fleet_with_its_store_5_ms_away_links_each_value_set_once`: the
//!   first test's fleet with every reply of the store 5 ms late (a delaying
//!   proxy in front of it: `tc netem` is not on every kernel this runs on).
//! - `verdicts_are_shared_with_the_hosts_that_trust_their_writer` (issue
//!   55.1): what one host's trial of adaptive arguments kept, every host
//!   that trusts its writer reads; a host of another trust domain does not,
//!   and a verdict signed by a key no host trusts is refused.
//! - `one_host_times_a_variant_and_the_fleet_takes_its_verdict` (issue
//!   68.3): hosts that ask at once for a variant's trial — one times it
//!   under the fleet's lease, every other host waits and takes its verdict;
//!   a holder that gives the lease back without a verdict, or dies, is
//!   taken over by one waiter; a reader waits at most the lease's time; a
//!   wait for a variant no longer wanted ends.

#[path = "../../../tests/support/redis_server.rs"]
mod redis_server;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use ptxspec_core::digest::Digest;
use ptxspec_core::lto::remote::{self, Fetched, Remote, Settings, entry};
use redis_server::RedisServer;

const READERS: usize = 256;
const WRITERS: usize = 8;
/// Value sets every host asks for.
const SHARED: usize = 16;
/// Value sets one reader each asks for.
const SOLO: usize = 32;
const ARCH: u32 = 90;
/// What a link costs here (a real one takes tens of milliseconds).
const LINK: Duration = Duration::from_millis(30);

/// The key of value set `n`.
fn key(n: usize) -> Digest {
    Digest::of(format!("fleet value set {n}").as_bytes())
}

/// The cubin value set `key` links to: 8 KB, an ELF file's magic (the
/// store's entries must hold one) and then bytes that differ with the key.
fn cubin(key: &Digest) -> Vec<u8> {
    let seed = Digest::of(key.to_string().as_bytes()).to_string();
    let mut bytes = b"\x7fELF".to_vec();
    bytes.extend(seed.as_bytes().iter().cycle().take((8 << 10) - 4));
    bytes
}

/// Key files in `dir`: (trusted keys, a writer's secret key).
fn keys(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let (secret, public) = remote::generate_key_pair().expect("randomness");
    let trusted = dir.join("trusted.keys");
    let signing = dir.join("writer.key");
    std::fs::write(&trusted, public).unwrap();
    std::fs::write(&signing, secret).unwrap();
    std::fs::set_permissions(&signing, std::fs::Permissions::from_mode(0o600)).unwrap();
    (trusted, signing)
}

/// One host's remote tier: its own connections, and deadlines a loaded
/// machine meets — 264 threads on 2 busy cores wait their turn for seconds,
/// and a call past its deadline opens the host's breaker (the healthy store
/// would look down, and the host would link by itself).
fn host(url: &str, trusted: &Path, signing: Option<&Path>) -> &'static Remote {
    host_with_lease(url, trusted, signing, Duration::from_secs(120))
}

/// [`host`] holding leases for `lease`.
fn host_with_lease(
    url: &str,
    trusted: &Path,
    signing: Option<&Path>,
    lease: Duration,
) -> &'static Remote {
    remote::open_host(Settings {
        url: Some(url.into()),
        trusted_keys: Some(trusted.into()),
        signing_key: signing.map(Path::to_path_buf),
        ca_file: None,
        timeout: Duration::from_secs(30),
        lease,
    })
    .expect("valid settings")
    .expect("a store")
}

/// What the fleet saw.
#[derive(Default)]
struct Seen {
    /// Links per value set, over every host.
    links: Mutex<BTreeMap<usize, usize>>,
    /// Cubins that were not their value set's.
    wrong: AtomicUsize,
    /// Look-ups answered from the store, in microseconds (a wait for a
    /// link under way included).
    lookups_us: Mutex<Vec<f64>>,
    /// The readers' second round, every value set stored: hits alone.
    hits_us: Mutex<Vec<f64>>,
    /// Look-ups done in the first round (of every kind).
    done: AtomicUsize,
    /// Second-round look-ups that did not find their value set.
    second_round_misses: AtomicUsize,
}

impl Seen {
    fn link(&self, n: usize) -> Vec<u8> {
        *self.links.lock().unwrap().entry(n).or_default() += 1;
        std::thread::sleep(LINK);
        cubin(&key(n))
    }

    /// Host `r` looks value set `n` up: the look-up's µs where the store
    /// gave a cubin (checked against the value set's), or what to link
    /// under where it did not.
    fn look_up(&self, r: &'static Remote, n: usize) -> Result<f64, Option<remote::Lease>> {
        let k = key(n);
        let started = Instant::now();
        match remote::fetch(r, &k, ARCH) {
            Fetched::Cubin(bytes) => {
                let us = started.elapsed().as_secs_f64() * 1e6;
                if bytes != cubin(&k) {
                    self.wrong.fetch_add(1, Ordering::SeqCst);
                }
                Ok(us)
            }
            Fetched::Link(lease) => Err(lease),
        }
    }

    /// Host `r` asks for value set `n`, and links it where the store has
    /// not got it.
    fn ask(&self, r: &'static Remote, n: usize) {
        match self.look_up(r, n) {
            Ok(us) => self.lookups_us.lock().unwrap().push(us),
            Err(lease) => {
                let bytes = self.link(n);
                if let Some(lease) = lease {
                    lease.store(ARCH, &bytes);
                }
            }
        }
        self.done.fetch_add(1, Ordering::SeqCst);
    }
}

/// Whether every shared value set has a lease taken or an entry stored in
/// the store at `host:port`.
fn all_shared_under_way(host: &str, port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect((host, port)) else {
        return false;
    };
    use std::io::{Read, Write};
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    // KEYS is fine on a test's own small store.
    if s.write_all(b"KEYS ptxspec:*\r\n").is_err() {
        return false;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
        }
        // A complete array reply ends with its last key's line; count
        // what arrived once it parses.
        let text = String::from_utf8_lossy(&reply);
        let Some(first) = text.lines().next() else {
            continue;
        };
        let Some(count) = first
            .strip_prefix('*')
            .and_then(|c| c.parse::<usize>().ok())
        else {
            return false;
        };
        let lines: Vec<&str> = text.lines().collect();
        if lines.len() > 2 * count {
            return (0..SHARED).all(|n| {
                let k = key(n).to_string();
                lines.iter().any(|l| l.ends_with(&k))
            });
        }
    }
    false
}

fn p(us: &mut [f64], q: f64) -> f64 {
    us.sort_by(f64::total_cmp);
    us[((us.len() as f64 * q) as usize).min(us.len() - 1)]
}

/// Every look-up of the fleet's first round: two writers' per shared value
/// set, each reader's of every shared one, and one per lone value set.
const ASKS: usize = 2 * SHARED + READERS * SHARED + SOLO;

/// The readers' second round: each asks for every shared value set again,
/// all at once, once all are stored.
fn second_round(seen: &Seen, r: &'static Remote, i: usize) {
    for j in 0..SHARED {
        match seen.look_up(r, (i + j) % SHARED) {
            Ok(us) => seen.hits_us.lock().unwrap().push(us),
            Err(_) => {
                seen.second_round_misses.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// Runs the fleet against the store at `host:port`; `mid_run` is called on
/// its own thread once half the look-ups are done.
fn run_fleet(host_ip: &str, port: u16, dir: &Path, mid_run: impl FnOnce() + Send) -> Seen {
    let (trusted, signing) = keys(dir);
    let url = format!("redis://{host_ip}:{port}/");
    let seen = Seen::default();
    let readers: Vec<&'static Remote> = (0..READERS).map(|_| host(&url, &trusted, None)).collect();
    let writers: Vec<&'static Remote> = (0..WRITERS)
        .map(|_| host(&url, &trusted, Some(&signing)))
        .collect();
    let start = Barrier::new(WRITERS + 1);
    let first_round_over = Barrier::new(READERS);
    std::thread::scope(|scope| {
        for (w, &r) in writers.iter().enumerate() {
            let (seen, start) = (&seen, &start);
            scope.spawn(move || {
                start.wait();
                // Two writers per shared value set: one links, one waits.
                for n in (0..SHARED).filter(|n| n % WRITERS == w || (n + 1) % WRITERS == w) {
                    seen.ask(r, n);
                }
            });
        }
        start.wait();
        let wait_from = Instant::now();
        while !all_shared_under_way(host_ip, port) {
            assert!(
                wait_from.elapsed() < Duration::from_secs(120),
                "the writers took no lease in 120 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let seen_ref = &seen;
        scope.spawn(move || {
            while seen_ref.done.load(Ordering::SeqCst) < ASKS / 2 {
                std::thread::sleep(Duration::from_millis(1));
            }
            mid_run();
        });
        for (i, &r) in readers.iter().enumerate() {
            let (seen, first_round_over) = (&seen, &first_round_over);
            scope.spawn(move || {
                if i < SOLO {
                    seen.ask(r, SHARED + i);
                }
                // Each reader in its own order: the store sees every value
                // set asked for at once.
                for j in 0..SHARED {
                    seen.ask(r, (i + j) % SHARED);
                }
                first_round_over.wait();
                second_round(seen, r, i);
            });
        }
    });
    seen
}

fn a_fleet_under_load_links_each_value_set_once() {
    let dir = tempdir("fleet-load");
    let server = RedisServer::start(&dir, &[]).expect("a redis-server");
    let before = remote::stats();
    let seen = run_fleet("127.0.0.1", server.port(), &dir, || {});
    check_and_report(&seen, before, "");
    let _ = std::fs::remove_dir_all(&dir);
}

fn verdicts_are_shared_with_the_hosts_that_trust_their_writer() {
    let dir = tempdir("fleet-verdicts");
    let server = RedisServer::start(&dir, &[]).expect("a redis-server");
    let (trusted, signing) = keys(&dir);
    let url = server.url();
    let writer = host(&url, &trusted, Some(&signing));
    let readers: Vec<&'static Remote> = (0..4).map(|_| host(&url, &trusted, None)).collect();
    let variants: Vec<Digest> = (0..3)
        .map(|n| Digest::of(format!("adaptive variant {n}").as_bytes()))
        .collect();
    for (v, word) in variants.iter().zip(["lto", "ptx", "generic"]) {
        assert_eq!(remote::verdict(readers[0], v, ARCH), None, "none yet");
        assert!(remote::store_verdict(writer, v, ARCH, word.as_bytes()));
    }
    for r in &readers {
        for (v, word) in variants.iter().zip(["lto", "ptx", "generic"]) {
            assert_eq!(
                remote::verdict(r, v, ARCH).as_deref(),
                Some(word.as_bytes())
            );
            assert_eq!(remote::verdict(r, v, 80), None, "another architecture's");
        }
    }
    assert!(
        !remote::store_verdict(readers[0], &variants[0], ARCH, b"generic"),
        "a host without a signing key stores nothing"
    );
    assert_eq!(
        remote::verdict(readers[1], &variants[0], ARCH).as_deref(),
        Some(&b"lto"[..])
    );
    // Another trust domain: its own names, nothing of the first's.
    let other_dir = dir.join("other");
    std::fs::create_dir_all(&other_dir).unwrap();
    let (other_trusted, other_signing) = keys(&other_dir);
    let stranger = host(&url, &other_trusted, Some(&other_signing));
    assert_eq!(remote::verdict(stranger, &variants[0], ARCH), None);
    // A verdict signed by a key the readers do not trust, written where
    // they look: refused. (The stranger writes under its own domain's
    // names; the forgery is put under the first domain's by hand.)
    assert!(remote::store_verdict(
        stranger,
        &variants[1],
        ARCH,
        b"generic"
    ));
    let pattern = format!("ptxspec:verdict:v1:*:{}", variants[1]);
    let listed = redis_cli(server.port(), &["KEYS", &pattern]);
    let names: Vec<&str> = listed.lines().collect();
    assert_eq!(names.len(), 2, "one name per trust domain: {names:?}");
    // Ours is the one the readers read ("ptx", by the trusted writer).
    let ours_first = {
        let dump = |name: &str| redis_cli(server.port(), &["GET", name]);
        dump(names[0]).contains("ptx")
    };
    let (ours, theirs) = match ours_first {
        true => (names[0], names[1]),
        false => (names[1], names[0]),
    };
    let refused_before = remote::stats().refused;
    redis_cli(server.port(), &["COPY", theirs, ours, "REPLACE"]);
    for r in &readers {
        assert_eq!(
            remote::verdict(r, &variants[1], ARCH),
            None,
            "a forged verdict"
        );
    }
    assert!(remote::stats().refused >= refused_before + readers.len() as u64);
    // Round 5, 7: a value over a verdict's bound under its name (133
    // bytes), and one too short to be an entry, written by anyone who can
    // write the store, without a key: refusals, counted by reason — never a
    // failure of the store, which would trip each reader's breaker and turn
    // its fleet tier off. The next look-up is answered at once.
    let before = remote::stats();
    for (value, why) in [
        (vec![b'v'; 133], entry::Refusal::Oversized),
        (vec![b'v'; 5], entry::Refusal::Malformed),
    ] {
        redis_cli_bytes(server.port(), ours, &value);
        for r in &readers {
            assert_eq!(remote::verdict(r, &variants[1], ARCH), None, "{why:?}");
            assert_eq!(
                remote::verdict(r, &variants[0], ARCH).as_deref(),
                Some(&b"lto"[..]),
                "{why:?}: the store answers at once after a refusal"
            );
        }
    }
    let after = remote::stats();
    assert_eq!(
        after.breaker_trips, before.breaker_trips,
        "a refusal tripped the breaker"
    );
    assert_eq!(after.unavailable, before.unavailable);
    let by = |s: &remote::RemoteStats, why: entry::Refusal| s.refused_by[why as usize].1;
    for why in [entry::Refusal::Oversized, entry::Refusal::Malformed] {
        assert_eq!(
            by(&after, why),
            by(&before, why) + readers.len() as u64,
            "{why:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// What one host's call of `trial_turn` came to, once its own trial (where
/// it held the lease) shared `word`.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone)]
enum Took {
    /// It timed the variant under the lease, and shared its verdict.
    Timed,
    /// The fleet's verdict.
    Verdict(String),
    /// It timed for itself, without the lease.
    Alone,
}

/// `host`'s turn on `variant`; where it takes the lease, a trial of `trial`
/// that keeps `word`.
fn take_turn(host: &'static Remote, variant: &Digest, trial: Duration, word: &str) -> Took {
    match remote::trial_turn(host, variant, ARCH, &|| true) {
        remote::TrialTurn::Decided(w) => Took::Verdict(String::from_utf8_lossy(&w).into_owned()),
        remote::TrialTurn::TimeHere(Some(lease)) => {
            std::thread::sleep(trial);
            assert!(lease.share(word.as_bytes()), "the holder's verdict stored");
            Took::Timed
        }
        remote::TrialTurn::TimeHere(None) => Took::Alone,
    }
}

/// How many of `took` are `what`.
fn count(took: &[Took], what: &Took) -> usize {
    took.iter().filter(|t| *t == what).count()
}

fn one_host_times_a_variant_and_the_fleet_takes_its_verdict() {
    let dir = tempdir("fleet-one-verdict");
    let server = RedisServer::start(&dir, &[]).expect("a redis-server");
    let (trusted, signing) = keys(&dir);
    let url = server.url();
    let writers: Vec<&'static Remote> = (0..WRITERS)
        .map(|_| host(&url, &trusted, Some(&signing)))
        .collect();
    let readers: Vec<&'static Remote> = (0..4).map(|_| host(&url, &trusted, None)).collect();
    let variant = |n: usize| Digest::of(format!("one verdict per fleet {n}").as_bytes());
    let trial = Duration::from_millis(300);

    // Writers that ask at once: one times, the others take its verdict.
    let v = variant(0);
    let start = Barrier::new(writers.len());
    let took: Vec<Took> = std::thread::scope(|s| {
        let joins: Vec<_> = writers
            .iter()
            .map(|w| {
                let (start, v) = (&start, &v);
                s.spawn(move || {
                    start.wait();
                    take_turn(w, v, trial, "ptx")
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    });
    assert_eq!(count(&took, &Took::Timed), 1, "{took:?}");
    assert_eq!(
        count(&took, &Took::Verdict("ptx".into())),
        writers.len() - 1,
        "{took:?}"
    );
    for r in &readers {
        assert_eq!(
            take_turn(r, &v, trial, "lto"),
            Took::Verdict("ptx".into()),
            "a reader after the trial"
        );
    }

    // A holder that gives the lease back without a verdict (its trial
    // failed): one waiting writer takes it over, the rest — a reader too —
    // take that one's verdict.
    let v = variant(1);
    let remote::TrialTurn::TimeHere(Some(lease)) =
        remote::trial_turn(writers[0], &v, ARCH, &|| true)
    else {
        panic!("the first to ask holds the lease");
    };
    let waiters: Vec<&'static Remote> =
        writers[1..5].iter().chain(&readers[..1]).copied().collect();
    let took: Vec<Took> = std::thread::scope(|s| {
        let joins: Vec<_> = waiters
            .iter()
            .map(|w| {
                let v = &v;
                s.spawn(move || take_turn(w, v, trial, "generic"))
            })
            .collect();
        std::thread::sleep(trial);
        drop(lease);
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    });
    assert_eq!(count(&took, &Took::Timed), 1, "{took:?}");
    assert_eq!(
        count(&took, &Took::Verdict("generic".into())),
        waiters.len() - 1,
        "{took:?}"
    );

    // A waiter whose variant is no longer wanted (its process dropped the
    // code that would run it) stops waiting at once, long before the lease
    // (120 s) ends.
    let v = variant(4);
    let remote::TrialTurn::TimeHere(Some(held)) =
        remote::trial_turn(writers[0], &v, ARCH, &|| true)
    else {
        panic!("the first to ask holds the lease");
    };
    let asked = Instant::now();
    let wanted = || asked.elapsed() < Duration::from_millis(200);
    assert!(matches!(
        remote::trial_turn(writers[1], &v, ARCH, &wanted),
        remote::TrialTurn::TimeHere(None)
    ));
    assert!(
        asked.elapsed() < Duration::from_secs(60),
        "an unwanted wait lasted {:?}",
        asked.elapsed()
    );
    drop(held);

    // A holder that dies (its lease never given back): a waiting writer
    // takes over once the lease ends; a reader alone waits out the lease and
    // times for itself.
    let lease_time = Duration::from_secs(3);
    let short = |signing: Option<&Path>| host_with_lease(&url, &trusted, signing, lease_time);
    let (dying, taker, reader) = (short(Some(&signing)), short(Some(&signing)), short(None));
    let v = variant(2);
    let remote::TrialTurn::TimeHere(Some(lease)) = remote::trial_turn(dying, &v, ARCH, &|| true)
    else {
        panic!("the first to ask holds the lease");
    };
    std::mem::forget(lease);
    let started = Instant::now();
    let took = std::thread::scope(|s| {
        let reader = s.spawn(|| take_turn(reader, &v, trial, "ptx"));
        let taker = take_turn(taker, &v, trial, "lto");
        [taker, reader.join().unwrap()]
    });
    assert_eq!(took, [Took::Timed, Took::Verdict("lto".into())]);
    assert!(
        started.elapsed() >= lease_time - Duration::from_millis(500),
        "taken over before the lease ended: {:?}",
        started.elapsed()
    );
    let v = variant(3);
    let remote::TrialTurn::TimeHere(Some(lease)) = remote::trial_turn(dying, &v, ARCH, &|| true)
    else {
        panic!("the first to ask holds the lease");
    };
    std::mem::forget(lease);
    let started = Instant::now();
    assert_eq!(take_turn(reader, &v, trial, "ptx"), Took::Alone);
    let waited = started.elapsed();
    assert!(
        waited >= lease_time - Duration::from_millis(500) && waited < lease_time * 20,
        "a reader waited {waited:?} for a lease of {lease_time:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `SET name value` with the value's raw bytes, through redis-cli's `-x`
/// (the value read from standard input).
fn redis_cli_bytes(port: u16, name: &str, value: &[u8]) {
    use std::io::Write;
    let mut child = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "-x", "SET", name])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-cli");
    child.stdin.take().unwrap().write_all(value).unwrap();
    assert!(child.wait().unwrap().success());
}

/// `redis-cli`'s reply to `args` on the local server at `port`.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The base test's checks and figures for a fleet that ran (`where_`: how
/// far the store was, in the figures' rows).
fn check_and_report(seen: &Seen, before: remote::RemoteStats, where_: &str) {
    let after = remote::stats();
    let links = seen.links.lock().unwrap();
    let wrong: Vec<(usize, usize)> = (0..SHARED + SOLO)
        .map(|n| (n, links.get(&n).copied().unwrap_or(0)))
        .filter(|&(_, l)| l != 1)
        .collect();
    assert!(
        wrong.is_empty(),
        "value sets not linked exactly once (set, links): {wrong:?}; the remote tier's counts before \
         {before:?}, after {after:?}"
    );
    assert_eq!(seen.wrong.load(Ordering::SeqCst), 0, "wrong entries loaded");
    assert_eq!(after.unavailable, before.unavailable, "calls failed");
    assert_eq!(after.refused, before.refused, "entries refused");
    assert_eq!(seen.done.load(Ordering::SeqCst), ASKS);
    // Every reader's look-up of a shared value set, and the writer of each
    // that did not link it, got it from the store.
    let mut us = std::mem::take(&mut *seen.lookups_us.lock().unwrap());
    assert_eq!(us.len(), READERS * SHARED + SHARED);
    assert_eq!(
        seen.second_round_misses.load(Ordering::SeqCst),
        0,
        "second-round misses; the remote tier's counts now {:?}",
        remote::stats()
    );
    let mut hits = std::mem::take(&mut *seen.hits_us.lock().unwrap());
    assert_eq!(hits.len(), READERS * SHARED);
    let (p50, p99, h50, h99) = (
        p(&mut us, 0.50),
        p(&mut us, 0.99),
        p(&mut hits, 0.50),
        p(&mut hits, 0.99),
    );
    results(&[
        (
            format!(
                "first round{where_}: every host at once, a wait for a link under way included"
            ),
            us.len(),
            p50,
            p99,
        ),
        (
            format!("second round{where_}: every reader at once, every value set stored"),
            hits.len(),
            h50,
            h99,
        ),
    ]);
    println!(
        "fleet of {READERS} readers and {WRITERS} writers, {SHARED} shared and {SOLO} lone value sets: \
         first round, {} look-ups answered by the store (a wait for a link under way included): p50 {:.0} µs, \
         p99 {:.0} µs; second round, {} hits with every reader asking at once: p50 {:.0} µs, p99 {:.0} µs",
        us.len(),
        p50,
        p99,
        hits.len(),
        h50,
        h99
    );
}

fn a_fleet_rides_out_its_store_restarted_mid_run() {
    let dir = tempdir("fleet-restart");
    let first = RedisServer::start(&dir, &[]).expect("a redis-server");
    let port = first.port();
    let server = Mutex::new(Some(first));
    let before = remote::stats();
    let restarted = AtomicBool::new(false);
    let seen = run_fleet("127.0.0.1", port, &dir, || {
        // Stopped, and started again on the same port, empty.
        let mut slot = server.lock().unwrap();
        drop(slot.take());
        *slot = Some(RedisServer::start_on(&dir, port, &[]).expect("a redis-server again"));
        restarted.store(true, Ordering::SeqCst);
    });
    assert!(
        restarted.load(Ordering::SeqCst),
        "the store was not restarted mid-run"
    );
    let after = remote::stats();
    let links = seen.links.lock().unwrap();
    let missing: Vec<usize> = (0..SHARED + SOLO)
        .filter(|n| !links.contains_key(n))
        .collect();
    assert!(missing.is_empty(), "value sets nobody linked: {missing:?}");
    assert_eq!(seen.wrong.load(Ordering::SeqCst), 0, "wrong entries loaded");
    // Every host got every cubin it asked for: from the store, or a link.
    assert_eq!(seen.done.load(Ordering::SeqCst), ASKS);
    assert!(
        after.breaker_trips > before.breaker_trips,
        "no host noticed the store go away"
    );
    println!(
        "store restarted mid-run: {} links in all for {} value sets, {} breaker trips",
        links.values().sum::<usize>(),
        SHARED + SOLO,
        after.breaker_trips - before.breaker_trips
    );
    drop(links);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The store 5 ms away: a proxy on loopback in front of a real
/// `redis-server` that hands each of the store's replies on 5 ms after it
/// came (requests pass at once). The kernel's own delay (`tc netem`) is not
/// on every machine this runs on; a proxy is. A thread per direction and
/// connection: each waits out the delay of one chunk before the next, which
/// is what a request-reply protocol without pipelining sees of a distant
/// store.
struct DistantStore {
    port: u16,
    stop: std::sync::Arc<AtomicBool>,
}

const DISTANCE: Duration = Duration::from_millis(5);

impl DistantStore {
    fn start(store_port: u16) -> DistantStore {
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stopping = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", store_port)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                std::thread::spawn(move || forward(client, server, Duration::ZERO));
                std::thread::spawn(move || forward(s2, c2, DISTANCE));
            }
        });
        DistantStore { port, stop }
    }
}

/// Copies what `from` sends to `to`, each chunk `delay` after it came.
fn forward(mut from: std::net::TcpStream, mut to: std::net::TcpStream, delay: Duration) {
    use std::io::{Read, Write};
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        std::thread::sleep(delay);
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

impl Drop for DistantStore {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then ends.
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn a_fleet_with_its_store_5_ms_away_links_each_value_set_once() {
    let dir = tempdir("fleet-distant");
    let server = RedisServer::start(&dir, &[]).expect("a redis-server");
    let distant = DistantStore::start(server.port());
    let before = remote::stats();
    let seen = run_fleet("127.0.0.1", distant.port, &dir, || {});
    check_and_report(&seen, before, ", the store 5 ms away");
    drop(distant);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Where `PTXSPEC_FLEET_RESULTS` names a file, the rows (what, look-ups,
/// p50 µs, p99 µs) appended to it as the JSON lines `benches/report.py`
/// makes BENCHMARKS.md's table and plot from (the file's first line, its
/// `meta`, is the caller's).
fn results(rows: &[(String, usize, f64, f64)]) {
    let Some(path) = std::env::var_os("PTXSPEC_FLEET_RESULTS") else {
        return;
    };
    let measure = format!(
        "fleet under load: {READERS} readers and {WRITERS} writers at once, one redis-server (look-up µs)"
    );
    let mut text = String::new();
    for (row, n, p50, p99) in rows {
        text.push_str(&format!(
            "{{\"measure\": \"{measure}\", \"row\": \"{row}\", \"p50 µs\": {p50:.1}, \"p99 µs\": {p99:.1}, \"look-ups\": {n}}}\n"
        ));
    }
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .expect("the results file");
    f.write_all(text.as_bytes()).expect("the results file");
}

fn tempdir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ptxspec-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn main() -> std::process::ExitCode {
    let mut args = libtest_mimic::Arguments::from_args();
    // One at a time: each reads the process's remote counters, and each is
    // a fleet that wants the machine to itself.
    args.test_threads = Some(1);
    let installed = redis_server::installed();
    if !installed {
        if std::env::var_os("PTXSPEC_REQUIRE_TOOLS").is_some_and(|v| v == "1") {
            eprintln!("fleet_load: PTXSPEC_REQUIRE_TOOLS=1, and no redis-server is on PATH");
            return std::process::ExitCode::FAILURE;
        }
        eprintln!(
            "fleet_load: no redis-server on PATH (Debian's package redis-server; ci/test.sh installs it): \
             the tests are ignored"
        );
    }
    let tests: [(&str, fn(), bool); 5] = [
        (
            "verdicts_are_shared_with_the_hosts_that_trust_their_writer",
            verdicts_are_shared_with_the_hosts_that_trust_their_writer,
            !installed,
        ),
        (
            "one_host_times_a_variant_and_the_fleet_takes_its_verdict",
            one_host_times_a_variant_and_the_fleet_takes_its_verdict,
            !installed,
        ),
        (
            "a_fleet_under_load_links_each_value_set_once",
            a_fleet_under_load_links_each_value_set_once,
            !installed,
        ),
        (
            "a_fleet_rides_out_its_store_restarted_mid_run",
            a_fleet_rides_out_its_store_restarted_mid_run,
            !installed,
        ),
        (
            "a_fleet_with_its_store_5_ms_away_links_each_value_set_once",
            a_fleet_with_its_store_5_ms_away_links_each_value_set_once,
            !installed,
        ),
    ];
    let trials = tests
        .into_iter()
        .map(|(name, test, ignored)| {
            libtest_mimic::Trial::test(name, move || {
                test();
                Ok(())
            })
            .with_ignored_flag(ignored)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}
