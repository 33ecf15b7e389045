//! A graph trial's verdict kept for the next process: through the tier
//! profile (`PTXSPEC_TIER_PROFILE`) and through the fleet's store.

use super::*;

#[path = "../../support/redis_server.rs"]
mod redis_server;

/// The environment variable naming a child's part.
const PART: &str = "PTXSPEC_TEST_GRAPH_VERDICT";

/// Graphs that only replay: what a graph's trial kept is recorded in the
/// tier profile (a line under the digest of what was on trial), and the
/// same graph in the next process keeps it at once, timing no replay — for
/// both verdicts: a graph whose variants are the generic code's stays as
/// captured, a matmul graph keeps its variants. The same through the
/// fleet: a writer's verdicts are shared (signed) through a real
/// `redis-server`, and a reader with a disk cache of its own and no
/// profile times no replay either. The profile also names the variants
/// that only graphs ran, so a process that prepares its bundles
/// (`Queue::prepare`, which links the profile's variants) takes both
/// verdicts at the capture: its first replay runs the kept code. Every
/// replay's result is right.
pub(in super::super) fn a_graph_trial_verdict_warms_the_next_process(_q: &Arc<Queue>) {
    if let Some(part) = std::env::var_os(PART) {
        child_part(&part.to_string_lossy());
    }
    let dir = std::env::temp_dir().join(format!("ptxspec-graph-verdict-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("profile.txt");
    let run = |part: &str, env: &[(&str, std::ffi::OsString)]| -> u64 {
        let mut c = child::this_test_again("a_graph_trial_verdict_warms_the_next_process");
        c.env(PART, part)
            .env_remove("PTXSPEC_TIER_PROFILE")
            .env_remove("PTXSPEC_REMOTE_CACHE")
            .env_remove("PTXSPEC_CACHE_TRUSTED_KEYS")
            .env_remove("PTXSPEC_CACHE_SIGNING_KEY");
        for (k, v) in env {
            c.env(k, v);
        }
        let said = child::said(&c.output().unwrap(), "timed replays: ");
        said.trim_start_matches("timed replays: ")
            .parse()
            .unwrap_or_else(|_| panic!("the child said {said:?}"))
    };
    let with_profile = [
        ("PTXSPEC_CACHE_DIR", dir.join("disk").into_os_string()),
        ("PTXSPEC_TIER_PROFILE", profile.clone().into_os_string()),
    ];
    let first = run("first", &with_profile);
    assert!(first >= 60, "two trials timed {first} replays");
    let text = std::fs::read_to_string(&profile).unwrap();
    let verdicts: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("graph-trial "))
        .collect();
    assert_eq!(verdicts.len(), 2, "{text}");
    assert!(verdicts.iter().any(|l| l.ends_with(" kept=0")), "{text}");
    // The variants only graphs ran, named for the next process to link.
    assert!(
        text.lines()
            .any(|l| l.contains("twice_plus_one") && l.contains(" args=2:07000000")),
        "{text}"
    );
    assert!(
        verdicts
            .iter()
            .any(|l| l.ends_with(" kept=1") || l.ends_with(" kept=2")),
        "{text}"
    );
    assert_eq!(
        run("second", &with_profile),
        0,
        "the second process timed replays"
    );
    assert_eq!(
        run("prepared", &with_profile),
        0,
        "a process that prepared its bundles timed replays"
    );

    // The fleet: no profile, a disk cache each.
    assert!(
        redis_server::installed(),
        "this test needs a redis-server on PATH (ci/test.sh installs Debian's; the GPU machine carries one)"
    );
    let server = redis_server::RedisServer::start(&dir, &[]).unwrap_or_else(|e| panic!("{e}"));
    ptxspec::RemoteCache::generate_keys(dir.join("writer.key"), dir.join("trusted.pub")).unwrap();
    let fleet = |disk: &str, writer: bool| {
        let mut env = vec![
            ("PTXSPEC_CACHE_DIR", dir.join(disk).into_os_string()),
            ("PTXSPEC_REMOTE_CACHE", server.url().into()),
            // A loaded machine's store answers within a second, if not 20 ms.
            ("PTXSPEC_REMOTE_TIMEOUT_MS", "1000".into()),
            (
                "PTXSPEC_CACHE_TRUSTED_KEYS",
                dir.join("trusted.pub").into_os_string(),
            ),
        ];
        if writer {
            env.push((
                "PTXSPEC_CACHE_SIGNING_KEY",
                dir.join("writer.key").into_os_string(),
            ));
        }
        env
    };
    let writer = run("first", &fleet("fleet-writer", true));
    assert!(
        writer >= 60,
        "the writer's two trials timed {writer} replays"
    );
    assert_eq!(
        run("second", &fleet("fleet-reader", false)),
        0,
        "a reader of the fleet timed replays"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A child's part: both graphs replayed until decided; the replays timed
/// said. The first waits until its verdicts are in the profile (appended
/// in the background); the prepared one prepares its bundles before each
/// capture and asserts that the capture took the verdict.
fn child_part(part: &str) -> ! {
    let (first, prepared) = (part == "first", part == "prepared");
    let q = Queue::new(0).unwrap();
    let before = ptxspec::stats();
    let bound = std::time::Duration::from_secs(120);

    // Sixteen nodes whose variant fixes an argument the kernel never reads.
    let exe = twice_plus_one_adapting();
    if prepared {
        q.prepare(&exe, bound).unwrap();
    }
    let n = 1 << 20;
    let x = q.upload(&vec![0f32; n]).unwrap();
    let mut graph = twice_plus_one_graph(&q, &exe, &x, n);
    if prepared {
        assert_eq!(
            ptxspec::stats().variants_not_faster,
            before.variants_not_faster + 16,
            "the profile's verdict was not taken at the capture"
        );
    }
    let zeros = vec![0f32; n];
    let started = std::time::Instant::now();
    let mut replays = 0u32;
    // At least one replay, its result checked; until the trial decided,
    // whichever way (a variant kept is this test's failure, said below).
    while replays == 0 || decided_nodes(&before) < 16 {
        assert!(
            started.elapsed() < bound,
            "no verdict after {replays} replays ({})",
            verdicts_so_far(&before)
        );
        graph.launch().unwrap();
        replays += 1;
        let got = q.download(&x).unwrap();
        let want = (1u32 << 16) as f32 - 1.0;
        assert!(got.iter().all(|&v| v == want), "replay {replays}");
        q.write(&x, 0, &zeros).unwrap();
    }
    assert_eq!(
        ptxspec::stats().variants_not_faster,
        before.variants_not_faster + 16,
        "the graph whose variants are its generic code kept them ({})",
        verdicts_so_far(&before)
    );
    drop(graph);

    // Four matmuls whose variants fix their sizes.
    let before_matmuls = ptxspec::stats();
    let (_, adaptive) = baselines_generic_and_adaptive();
    if prepared {
        q.prepare(&adaptive, bound).unwrap();
    }
    let n = 512usize;
    let (a, b) = (pseudo_random(n * n, 13), pseudo_random(n * n, 14));
    let want = reference::matmul(&a, &b, n);
    let (da, db) = (q.upload(&a).unwrap(), q.upload(&b).unwrap());
    let dc: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; n * n]).unwrap();
    let mut graph = matmul_graph(&q, &adaptive, [&da, &db, &dc], n);
    if prepared {
        assert_eq!(
            ptxspec::stats().adapted_graph_nodes,
            before.adapted_graph_nodes + 4,
            "the profile's verdict was not taken at the capture"
        );
    }
    let started = std::time::Instant::now();
    let mut replays = 0u32;
    while replays == 0 || decided_nodes(&before_matmuls) < 4 {
        assert!(
            started.elapsed() < bound,
            "the graph kept no variant after {replays} replays ({})",
            verdicts_so_far(&before_matmuls)
        );
        graph.launch().unwrap();
        replays += 1;
        let err = max_rel_err(&q.download(&dc).unwrap(), &want);
        assert!(err < 1e-5, "replay {replays}: relative error {err}");
    }
    let after = ptxspec::stats();
    assert_eq!(
        after.adapted_graph_nodes,
        before.adapted_graph_nodes + 4,
        "the matmuls' graph kept the generic code ({})",
        verdicts_so_far(&before_matmuls)
    );
    assert_eq!(
        after.variants_not_faster,
        before.variants_not_faster + 16,
        "the matmul's variants were dropped"
    );
    assert_eq!(
        after.timed_launches, before.timed_launches,
        "no launch timed"
    );
    drop(graph);
    if first {
        // The verdicts are appended to the profile, and shared, in the
        // background: waited for.
        if let Some(profile) = std::env::var_os("PTXSPEC_TIER_PROFILE") {
            let started = std::time::Instant::now();
            while std::fs::read_to_string(&profile)
                .unwrap_or_default()
                .matches("graph-trial ")
                .count()
                < 2
            {
                assert!(started.elapsed() < bound, "no graph verdict in the profile");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        assert!(
            ptxspec_core::lto::flush(bound),
            "the background work did not end"
        );
    }
    println!(
        "timed replays: {}",
        after.timed_replays - before.timed_replays
    );
    std::process::exit(0);
}

/// The graph nodes whose trial decided since `before`, whichever way.
fn decided_nodes(before: &ptxspec::Stats) -> u64 {
    let now = ptxspec::stats();
    (now.variants_not_faster - before.variants_not_faster)
        + (now.adapted_graph_nodes - before.adapted_graph_nodes)
}

/// What a failing child says: the verdicts since `before` and the tier
/// profile's graph verdicts (the contender each trial kept).
fn verdicts_so_far(before: &ptxspec::Stats) -> String {
    let now = ptxspec::stats();
    let profile = std::env::var_os("PTXSPEC_TIER_PROFILE")
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    let lines: Vec<&str> = profile
        .lines()
        .filter(|l| l.starts_with("graph-trial "))
        .collect();
    format!(
        "nodes not faster +{}, nodes switched +{}, replays timed +{}; the profile's graph verdicts: {lines:?}",
        now.variants_not_faster - before.variants_not_faster,
        now.adapted_graph_nodes - before.adapted_graph_nodes,
        now.timed_replays - before.timed_replays
    )
}
