//! A process that ends from its main thread — `exit` there, or `main`
//! returning — while one of ptxspec's background threads is inside a driver
//! call: exit waits for that call before *any* exit handler runs, also
//! those registered after exit's hook (as NVIDIA's libraries register
//! destructors lazily, inside a call that first reaches some code: seen on
//! the GPU, a background link crashed in libnvvm while the exiting thread's
//! hook waited for it). The main thread's guard (`guard_this_thread`, which
//! every queue's thread carries) does it, in its thread-local destructor.
//!
//! Each case is a child process whose main thread is the test's own (no
//! test harness: libtest runs tests on threads of its own). No driver is
//! needed: the guard and the locks are what is tested.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ptxspec_core::toolkit::exit::{
    DriverMoment, background_driver_call, driver_used, guard_this_thread,
};

/// The environment variable that makes this binary a child: how it ends
/// (`exit` or `return`), then the marker file's path.
const CHILD: &str = "PTXSPEC_TEST_EXIT_FROM_MAIN";

/// Whether the background thread is inside a driver call.
static IN_CALL: AtomicBool = AtomicBool::new(false);
/// The marker file, for the late handler.
static MARKER: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// An exit handler registered after exit's hook, as a library's lazily
/// registered destructor is: it runs before that hook, and writes whether
/// a background call was in flight.
extern "C" fn late_destructor() {
    if let Some(marker) = MARKER.get()
        && let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(marker)
    {
        let said = match IN_CALL.load(Ordering::SeqCst) {
            true => "late handler: during the call",
            false => "late handler: after the call",
        };
        let _ = writeln!(f, "{said}");
    }
}

fn child(how: &str, marker: PathBuf) {
    std::fs::write(&marker, "").expect("the marker is made");
    let _ = MARKER.set(marker);
    guard_this_thread();
    driver_used(DriverMoment::ContextMade);
    let (inside, is_inside) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Calls that take a while, one after another: exit comes during
        // one, and the next may begin while exit waits for the driver.
        for n in 0u64.. {
            let call = background_driver_call();
            IN_CALL.store(true, Ordering::SeqCst);
            if n == 0 {
                let _ = inside.send(());
            }
            std::thread::sleep(Duration::from_millis(100));
            IN_CALL.store(false, Ordering::SeqCst);
            drop(call);
        }
    });
    is_inside
        .recv_timeout(Duration::from_secs(60))
        .expect("the thread began its call");
    // SAFETY: registers a function of no arguments that exit calls.
    let registered = unsafe { libc::atexit(late_destructor) };
    assert_eq!(registered, 0, "atexit refused the handler");
    if how == "exit" {
        std::process::exit(0);
    }
}

fn run_child(how: &str, marker: &Path) -> Result<(), String> {
    let out = Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
        .env(CHILD, format!("{how}:{}", marker.display()))
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{how}: the child failed: {out:?}"));
    }
    let log = std::fs::read_to_string(marker).map_err(|e| e.to_string())?;
    match log.lines().collect::<Vec<_>>()[..] {
        ["late handler: after the call"] => Ok(()),
        _ => Err(format!(
            "{how}: an exit handler ran while a background driver call was in flight:\n{log}"
        )),
    }
}

fn main() {
    if let Some(spec) = std::env::var_os(CHILD) {
        let spec = spec.to_string_lossy().to_string();
        let (how, marker) = spec.split_once(':').expect("how:marker");
        return child(how, PathBuf::from(marker));
    }
    let dir = std::env::temp_dir().join(format!("ptxspec-exit-from-main-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let mut failures = Vec::new();
    for how in ["exit", "return"] {
        for round in 0..3 {
            let marker = dir.join(format!("{how}-{round}"));
            if let Err(e) = run_child(how, &marker) {
                failures.push(format!("round {round}: {e}"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if failures.is_empty() {
        println!("exit_from_main: 6 children ended after their background calls: ok");
    } else {
        eprintln!("exit_from_main: FAILED\n{}", failures.join("\n"));
        std::process::exit(1);
    }
}
