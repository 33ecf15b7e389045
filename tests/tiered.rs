//! SpecMode::Tiered on the CPU: building returns an emulated image with its
//! specialized tier prepared, and the tier is linked in the background for
//! an architecture (nvJitLink needs no GPU). Launches and the switch are in
//! the GPU tests.

use std::time::Duration;

use ptxspec::image::Image;
use ptxspec::{Executable, KernelBundle, KernelId, SpecId, SpecMode, build, get_kernel_bundle_for};

#[path = "support/atexit_counter.rs"]
mod atexit_counter;
#[path = "support/child.rs"]
mod child;

use child::{said, this_test_again};

ptxspec_kernels::register_example_kernels!();

const BLOCK: SpecId<i32> = SpecId::new("block_size_id");
const WAIT: Duration = Duration::from_secs(300);

/// The registered matmul built in tiered mode, with block size `block`
/// (its default where `None`).
fn tiered_matmul(block: Option<i32>) -> KernelBundle<Executable> {
    let mut input = get_kernel_bundle_for(&[KernelId::new("matmul")])
        .unwrap()
        .with_mode(SpecMode::Tiered);
    if let Some(b) = block {
        input.set_specialization_constant(&BLOCK, b).unwrap();
    }
    build(&input).unwrap()
}

/// The tests, each with whether it needs the example images' LTO-IR (all
/// need nvJitLink). Where what a test needs is missing, it is reported as
/// ignored, with the reason, rather than passing without running.
const TESTS: &[(&str, fn(), bool)] = &[
    (
        "an_image_with_ltoir_tiers_up_to_lto",
        an_image_with_ltoir_tiers_up_to_lto,
        true,
    ),
    (
        "an_image_without_ltoir_tiers_up_to_native",
        an_image_without_ltoir_tiers_up_to_native,
        false,
    ),
    (
        "a_failed_tier_up_is_logged_and_stays_emulated",
        a_failed_tier_up_is_logged_and_stays_emulated,
        false,
    ),
    (
        "exit_while_a_tier_up_links_is_clean",
        exit_while_a_tier_up_links_is_clean,
        false,
    ),
    (
        "a_tiered_build_starts_the_toolkit_on_the_building_thread",
        a_tiered_build_starts_the_toolkit_on_the_building_thread,
        false,
    ),
    (
        "a_tiered_image_of_values_linked_before_finds_its_cubin",
        a_tiered_image_of_values_linked_before_finds_its_cubin,
        true,
    ),
    (
        "a_profile_warms_the_next_process",
        a_profile_warms_the_next_process,
        true,
    ),
    (
        "asking_for_a_cubin_never_waits_for_its_link",
        asking_for_a_cubin_never_waits_for_its_link,
        true,
    ),
];

/// What a launch of another queue asks a tiered image when it plans —
/// whether the specialized cubin is there — is answered at once while a
/// worker links that cubin (it once waited for the whole link: a second
/// queue's first launch took 16–29 ms on the H100). Probed until the link
/// is done; at least one probe must fall inside the link.
fn asking_for_a_cubin_never_waits_for_its_link() {
    let matmul = KernelId::new("matmul");
    // A value set no cache holds: the worker links it.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let exe = std::sync::Arc::new(tiered_matmul(Some(1000 + (nanos % 1_000_000) as i32)));
    let built = std::sync::Arc::clone(exe.built_image(&matmul).unwrap());
    assert!(!built.cubin_is_cached(90, "matmul"));
    let waiter = {
        let exe = std::sync::Arc::clone(&exe);
        std::thread::spawn(move || exe.wait_for_tier_up(&KernelId::new("matmul"), 90, WAIT))
    };
    let (mut during_link, mut slowest) = (0, Duration::ZERO);
    let probing = std::time::Instant::now();
    loop {
        let asked = std::time::Instant::now();
        let cached = built.cubin_is_cached(90, "matmul");
        slowest = slowest.max(asked.elapsed());
        if cached {
            break;
        }
        during_link += 1;
        if waiter.is_finished() {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(waiter.join().unwrap().unwrap(), SpecMode::Lto);
    assert!(built.cubin_is_cached(90, "matmul"));
    let link = probing.elapsed();
    assert!(during_link > 0, "no probe fell inside the link");
    // A probe that waited for the link would take about as long as the
    // link; one that did not takes microseconds, or a few milliseconds
    // where a loaded machine preempts it. A fixed bound in milliseconds
    // would test the machine's load, not the lookup.
    assert!(
        slowest * 4 < link,
        "a probe took {slowest:?} of the link's {link:?} ({during_link} probes during it)"
    );
}

/// `PTXSPEC_TIER_PROFILE`: a process that tiers a value set up records it;
/// the next process naming the profile fetches its cubin (here from the
/// shared disk cache; the remote store is asked the same way) in the
/// background at its first tiered build, so that the value set's tiered
/// image starts at the specialized tier — without a link or a request.
/// Without the profile, a fresh process holds nothing.
fn a_profile_warms_the_next_process() {
    let matmul = KernelId::new("matmul");
    if let Some(part) = std::env::var_os("PTXSPEC_TEST_PROFILE") {
        let exe = tiered_matmul(Some(13));
        if part == "first" {
            exe.wait_for_tier_up(&matmul, 90, WAIT).unwrap();
            println!("cached: linked");
        } else {
            let built = exe.built_image(&matmul).unwrap();
            // Where the parent expects the cubin (from the disk cache, on a
            // background thread), it is waited for as long as a loaded
            // machine takes, the loop ending as soon as it is there; where
            // it expects none, two seconds of looking find none.
            let bound = match std::env::var_os("PTXSPEC_TEST_EXPECT_CACHED") {
                Some(_) => Duration::from_secs(120),
                None => Duration::from_secs(2),
            };
            let started = std::time::Instant::now();
            while !built.cubin_is_cached(90, "matmul") && started.elapsed() < bound {
                std::thread::sleep(Duration::from_millis(5));
            }
            println!("cached: {}", built.cubin_is_cached(90, "matmul"));
        }
        std::process::exit(0);
    }
    let dir = std::env::temp_dir().join(format!("ptxspec-profile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let run_with = |part: &str, profile: Option<&std::path::Path>| {
        let mut c = this_test_again("a_profile_warms_the_next_process");
        c.env("PTXSPEC_TEST_PROFILE", part)
            .env("PTXSPEC_CACHE_DIR", dir.join("disk"))
            .env_remove("PTXSPEC_REMOTE_CACHE")
            .env_remove("PTXSPEC_TEST_EXPECT_CACHED");
        if part == "second_cached" {
            c.env("PTXSPEC_TEST_PROFILE", "second")
                .env("PTXSPEC_TEST_EXPECT_CACHED", "1");
        }
        match profile {
            Some(p) => c.env("PTXSPEC_TIER_PROFILE", p),
            None => c.env_remove("PTXSPEC_TIER_PROFILE"),
        };
        let out = c.output().unwrap();
        (
            said(&out, "cached: "),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let profile = dir.join("profile.txt");
    let run = |part: &str, with: bool| run_with(part, with.then_some(profile.as_path())).0;
    assert_eq!(run("first", true), "cached: linked");
    let text = std::fs::read_to_string(&profile).unwrap();
    assert!(text.starts_with("matmul sm_90 matmul 0d000000"), "{text}");
    assert_eq!(run("second", false), "cached: false");
    assert_eq!(run("second_cached", true), "cached: true");
    // Four more processes tier the same value set up (from the disk
    // cache): the profile keeps one line of it.
    for _ in 0..4 {
        assert_eq!(run("first", true), "cached: linked");
    }
    assert_eq!(std::fs::read_to_string(&profile).unwrap(), text);
    // A full profile takes no new line and says so; one over its bound is
    // not read (no warm start) and says so.
    let full = dir.join("full.txt");
    let other: String = (0..4096)
        .map(|i| format!("other sm_90 k {i:08x}\n"))
        .collect();
    std::fs::write(&full, &other).unwrap();
    let (_, said_full) = run_with("first", Some(&full));
    assert_eq!(std::fs::read_to_string(&full).unwrap(), other);
    assert!(
        said_full.contains("holds 4096 value sets, its bound"),
        "{said_full}"
    );
    let over = dir.join("over.txt");
    std::fs::write(&over, format!("{other}{text}")).unwrap();
    let (cached, said_over) = run_with("second", Some(&over));
    assert_eq!(cached, "cached: false");
    assert!(
        said_over.contains("is not used: more than 4096 value sets, its bound"),
        "{said_over}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The variables that make a test do its child process's part (see
/// [`run_as_child`]).
const CHILD_PARTS: [&str; 3] = [
    "PTXSPEC_TEST_EXIT_WHILE_LINKING",
    "PTXSPEC_TEST_TIERED_BUILD_REGISTERS",
    "PTXSPEC_TEST_PROFILE",
];

fn main() -> std::process::ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    // A child process must not load the toolkit to ask (one test checks
    // what a child has loaded); its parent asked already.
    let child = CHILD_PARTS.iter().any(|v| std::env::var_os(v).is_some());
    let nvjitlink = match child {
        true => Ok(()),
        false => ptxspec_core::toolkit::require(ptxspec_core::toolkit::Lib::NvJitLink),
    };
    let ltoir = get_kernel_bundle_for(&[KernelId::new("matmul")])
        .is_ok_and(|b| b.images().iter().all(|i| i.has_ltoir()));
    match (&nvjitlink, ltoir) {
        (Err(e), _) => eprintln!("tiered: nvJitLink not found, every test ignored: {e}"),
        (Ok(()), false) => eprintln!(
            "tiered: the example images were embedded without LTO-IR (no NVRTC at build): the tests \
             that need it are ignored"
        ),
        (Ok(()), true) => {}
    }
    let trials = TESTS.iter().map(|&(name, test, needs_ltoir)| {
        let runnable = nvjitlink.is_ok() && (ltoir || !needs_ltoir);
        libtest_mimic::Trial::test(name, move || {
            test();
            Ok(())
        })
        .with_ignored_flag(!runnable)
    });
    libtest_mimic::run(&args, trials.collect()).exit_code()
}

/// An image with LTO-IR tiers up to its LTO build: until then its code is
/// the emulated PTX and it is not "native"; waiting links the kernel.
fn an_image_with_ltoir_tiers_up_to_lto() {
    let matmul = KernelId::new("matmul");
    let exe = tiered_matmul(Some(4));
    let built = exe.built_image(&matmul).unwrap();
    assert_eq!(built.mode(), SpecMode::Tiered);
    assert_eq!(built.tier_mode(), Some(SpecMode::Lto));
    assert!(built.ptx().is_some(), "runs emulated first");
    assert!(!exe.native_specialization_constant());
    assert_eq!(exe.get_specialization_constant(&BLOCK).unwrap(), 4);
    assert_eq!(
        exe.wait_for_tier_up(&matmul, 90, WAIT).unwrap(),
        SpecMode::Lto
    );
    // A second wait finds it linked; another architecture is another link.
    assert_eq!(
        exe.wait_for_tier_up(&matmul, 90, WAIT).unwrap(),
        SpecMode::Lto
    );
    assert_eq!(
        exe.wait_for_tier_up(&matmul, 80, WAIT).unwrap(),
        SpecMode::Lto
    );
}

/// An image without LTO-IR tiers up to its PTX specialized with the
/// values, which nvJitLink compiles to a cubin (a launch then only loads
/// it); an image of another mode answers its own mode.
fn an_image_without_ltoir_tiers_up_to_native() {
    let images: Vec<Image> = ptxspec_core::postlink::post_link(
        vec![(
            "matmul.ptx".into(),
            include_str!("../kernels/ptx/matmul.ptx").into(),
        )],
        &ptxspec_core::postlink::Options::default(),
    )
    .unwrap()
    .into_iter()
    .map(|i| Image::new(i.stem, i.ptx, &i.props.to_text()).unwrap())
    .collect();
    assert!(images.iter().all(|i| !i.has_ltoir()));
    let mut input = KernelBundle::from_images(images).with_mode(SpecMode::Tiered);
    input.set_specialization_constant(&BLOCK, 8).unwrap();
    let exe = build(&input).unwrap();
    let matmul = KernelId::new("matmul");
    assert_eq!(
        exe.built_image(&matmul).unwrap().tier_mode(),
        Some(SpecMode::Native)
    );
    assert_eq!(
        exe.wait_for_tier_up(&matmul, 90, WAIT).unwrap(),
        SpecMode::Native
    );
    let native = build(&input.with_mode(SpecMode::Native)).unwrap();
    assert_eq!(
        native.wait_for_tier_up(&matmul, 90, WAIT).unwrap(),
        SpecMode::Native
    );
}

/// A link that fails is an error for the waiter, with the reason in the
/// bundle's build log; the image stays emulated.
fn a_failed_tier_up_is_logged_and_stays_emulated() {
    let matmul = KernelId::new("matmul");
    let exe = tiered_matmul(None);
    // sm_1 is no architecture nvJitLink knows.
    let e = exe.wait_for_tier_up(&matmul, 1, WAIT).unwrap_err();
    assert!(e.to_string().contains("tiered specialization"), "{e}");
    let log = exe.build_log();
    assert!(
        log.contains("stays emulated") && log.contains("sm_1"),
        "{log}"
    );
    assert!(exe.built_image(&matmul).unwrap().ptx().is_some());
}

/// Runs test `test` of this binary in a child process with `var` set to
/// `value` (which makes the test do its child's part).
fn run_as_child(test: &str, var: &str, value: &str) -> std::process::Output {
    this_test_again(test).env(var, value).output().unwrap()
}

/// A process that exits while a background link runs exits cleanly: exit
/// waits for the link in progress instead of tearing nvJitLink down under
/// it (the GPU bench crashed so at exit once). Each round is a child
/// process that asks for a link and exits at once — the process's first
/// link, during which the worker loads and warms the toolkit up: in odd
/// rounds the link is asked for by another thread, which is not joined
/// (the exiting thread built the bundle).
fn exit_while_a_tier_up_links_is_clean() {
    if let Some(how) = std::env::var_os("PTXSPEC_TEST_EXIT_WHILE_LINKING") {
        let exe = tiered_matmul(None);
        // Queue the link and leave without it.
        let ask = move || {
            let _ = exe.wait_for_tier_up(&KernelId::new("matmul"), 90, Duration::from_millis(1));
        };
        if how == "other thread" {
            // Exit once the other thread has asked (its wait of 1 ms over,
            // the link queued or running), not after a guess of how long
            // that takes: a loaded machine would exit before the ask.
            let (asked, has_asked) = std::sync::mpsc::channel();
            let _unjoined = std::thread::spawn(move || {
                ask();
                let _ = asked.send(());
            });
            has_asked
                .recv_timeout(WAIT)
                .expect("the other thread asked for the link");
        } else {
            ask();
        }
        std::process::exit(0);
    }
    for round in 0..20 {
        let out = run_as_child(
            "exit_while_a_tier_up_links_is_clean",
            "PTXSPEC_TEST_EXIT_WHILE_LINKING",
            if round % 2 == 1 {
                "other thread"
            } else {
                "this thread"
            },
        );
        assert!(
            out.status.success(),
            "round {round}: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A tiered build starts NVIDIA's libraries on the building thread — loads
/// them, and runs the code in which they register their static destructors
/// — so that the worker's link registers none: a destructor registered on a
/// background thread runs before exit's hook, and an exit from another
/// thread then tears the library down under the link (see
/// `ptxspec_core::toolkit::exit`). A child with a counter of the libraries'
/// registrations preloaded (`count_atexit.c`, built with `cc`) builds,
/// then waits for the link: the build registered the libraries' handlers
/// (thousands), the link on the worker none.
fn a_tiered_build_starts_the_toolkit_on_the_building_thread() {
    if std::env::var_os("PTXSPEC_TEST_TIERED_BUILD_REGISTERS").is_some() {
        let before = atexit_counter::registrations();
        let exe = tiered_matmul(Some(4));
        let built = atexit_counter::registrations();
        exe.wait_for_tier_up(&KernelId::new("matmul"), 90, WAIT)
            .unwrap();
        let linked = atexit_counter::registrations();
        println!(
            "registered: before {before:?}, built {built:?}, linked {linked:?} (in the background first: {})",
            atexit_counter::first_in_the_background()
        );
        std::process::exit(0);
    }
    if !atexit_counter::cc_on_path() {
        assert!(
            std::env::var_os("PTXSPEC_REQUIRE_TOOLS").is_none_or(|v| v != "1"),
            "PTXSPEC_REQUIRE_TOOLS=1, and no C compiler (cc) is on PATH"
        );
        eprintln!(
            "a_tiered_build_starts_the_toolkit_on_the_building_thread: no cc on PATH, not run"
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("ptxspec-tiered-atexit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = this_test_again("a_tiered_build_starts_the_toolkit_on_the_building_thread");
    child.env("PTXSPEC_TEST_TIERED_BUILD_REGISTERS", "1");
    let out = atexit_counter::run_counting(child, &dir);
    let line = said(&out, "registered:");
    let _ = std::fs::remove_dir_all(&dir);
    let n = atexit_counter::counts_said(&line);
    let [_, _, built, built_background, linked, linked_background] = n[..] else {
        panic!("the child said {line:?}");
    };
    assert!(built > 1000, "the build started no library: {line}");
    assert_eq!(built_background, 0, "{line}");
    assert_eq!(
        linked_background, 0,
        "the link registered handlers on the worker: {line}"
    );
    assert_eq!(linked, built, "the link registered handlers: {line}");
}

/// A tiered image whose values this process linked before holds its cubin
/// already: its first launch starts at the specialized tier, without a
/// worker. Only the kernel linked counts (the image has two).
fn a_tiered_image_of_values_linked_before_finds_its_cubin() {
    let matmul = KernelId::new("matmul");
    let base = get_kernel_bundle_for(std::slice::from_ref(&matmul)).unwrap();
    let tiered = |block: i32| tiered_matmul(Some(block));
    // Values no other test of this process uses.
    let before = tiered(11);
    let built = before.built_image(&matmul).unwrap();
    assert!(!built.cubin_is_cached(90, "matmul"));
    let mut lto = base.clone().with_mode(SpecMode::Lto);
    lto.set_specialization_constant(&BLOCK, 11).unwrap();
    let lto = build(&lto).unwrap();
    let linked = lto.built_image(&matmul).unwrap();
    linked.cubin_for_kernel(90, "matmul").unwrap();
    assert!(linked.cubin_is_cached(90, "matmul"));
    // The same values, a new tiered build, and the one built before.
    let after = tiered(11);
    assert!(
        after
            .built_image(&matmul)
            .unwrap()
            .cubin_is_cached(90, "matmul")
    );
    assert!(built.cubin_is_cached(90, "matmul"));
    // Not another kernel, architecture or value set.
    assert!(!built.cubin_is_cached(90, "matmul_rolled"));
    assert!(!built.cubin_is_cached(80, "matmul"));
    let other = tiered(12);
    assert!(
        !other
            .built_image(&matmul)
            .unwrap()
            .cubin_is_cached(90, "matmul")
    );
}
