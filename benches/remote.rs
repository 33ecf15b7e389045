//! The remote cubin cache's hit, from a local `redis-server`: a 100 KB
//! cubin's entry fetched through `RedisStore` (a pooled connection) and
//! checked (its ed25519 signature, key, architecture), 10 000 times, with
//! its steps side by side — the plain `GET` of the same bytes (the request),
//! the check alone on bytes in memory (verify), and a connection made
//! (what `connect_ahead` takes off the first look-up's path). Prints p50,
//! p99 and the mean of each, in microseconds. The module load that follows
//! a hit is the GPU bench's (`gpu_bench --first-launch`).
//!
//! `cargo bench --bench remote` (needs `redis-server` on `PATH`; without it
//! the bench says so and measures nothing).

use std::time::{Duration, Instant};

#[path = "../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

use ptxspec_core::lto::remote::{RedisStore, RemoteStore, entry, generate_key_pair};

/// Rounds under `cargo bench`; `cargo test` runs the bench as a smoke
/// test (debug build, no `--bench` argument) with a few.
fn rounds() -> usize {
    if std::env::args().any(|a| a == "--bench") {
        10_000
    } else {
        20
    }
}

fn percentiles(mut us: Vec<f64>) -> String {
    us.sort_by(f64::total_cmp);
    let at = |p: f64| us[((us.len() as f64 * p) as usize).min(us.len() - 1)];
    let mean = us.iter().sum::<f64>() / us.len() as f64;
    format!(
        "p50 {:.1} us, p99 {:.1} us, mean {:.1} us",
        at(0.50),
        at(0.99),
        mean
    )
}

fn main() {
    let dir = std::env::temp_dir().join(format!("ptxspec-bench-redis-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let server = match RedisServer::start(&dir, &[]) {
        Ok(server) => server,
        Err(e) => {
            println!("remote: {e}: measured nothing");
            return;
        }
    };
    let store = RedisStore::open(&server.url()).expect("a Redis URL");
    let deadline = || Instant::now() + Duration::from_millis(200);
    let (secret, public) = generate_key_pair().expect("randomness");
    let secret = entry::secret_key(&secret).expect("a key");
    let trusted = entry::trusted_keys(&public).expect("a key");
    let mut cubin = b"\x7fELF".to_vec();
    cubin.resize(100 << 10, 0x5a);
    let key = ptxspec_core::digest::Digest::of(b"bench key");
    let sealed = entry::seal(&secret, &key, 90, &cubin);
    store
        .put("ptxspec:cubin:bench", &sealed, deadline())
        .expect("a write");
    let rounds = rounds();
    let (mut hit, mut get) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let t = Instant::now();
        let bytes = store
            .get("ptxspec:cubin:bench", entry::MAX_ENTRY, deadline())
            .expect("a read")
            .expect("the entry");
        let c = entry::open(&bytes, &key, 90, &trusted).expect("a trusted entry");
        hit.push(t.elapsed().as_secs_f64() * 1e6);
        assert_eq!(c.len(), cubin.len());
        let t = Instant::now();
        let bytes = store
            .get("ptxspec:cubin:bench", entry::MAX_ENTRY, deadline())
            .expect("a read");
        get.push(t.elapsed().as_secs_f64() * 1e6);
        assert!(bytes.is_some());
    }
    println!(
        "remote hit of a {} KB cubin, {rounds} rounds (fetch + check): {}",
        cubin.len() >> 10,
        percentiles(hit)
    );
    println!(
        "the plain GET of the same entry, side by side (request): {}",
        percentiles(get)
    );
    let in_memory = store
        .get("ptxspec:cubin:bench", entry::MAX_ENTRY, deadline())
        .expect("a read")
        .expect("the entry");
    let verify: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            let c = entry::open(&in_memory, &key, 90, &trusted).expect("a trusted entry");
            let us = t.elapsed().as_secs_f64() * 1e6;
            assert_eq!(c.len(), cubin.len());
            us
        })
        .collect();
    println!(
        "the check alone, bytes in memory (verify): {}",
        percentiles(verify)
    );
    let connect: Vec<f64> = (0..rounds.min(500))
        .map(|_| {
            let fresh = RedisStore::open(&server.url()).expect("a Redis URL");
            let t = Instant::now();
            fresh.connect_ahead(deadline()).expect("a connection");
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    println!(
        "a new connection, made ahead of the first look-up (connect): {}",
        percentiles(connect)
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
