//! What the preloaded counter of exit handler registrations
//! (`crates/ptxspec-core/tests/support/count_atexit.c`) has seen, read by
//! a test's child that runs with it preloaded.

use std::ffi::{CStr, c_char, c_long, c_void};

#[path = "../../crates/ptxspec-core/tests/support/c_library.rs"]
mod c_library;

unsafe extern "C" {
    /// The C library's `dlsym`.
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// The counter's function `name` (glibc's RTLD_DEFAULT, the global scope,
/// is null).
fn function(name: &CStr) -> *mut c_void {
    // SAFETY: looks a symbol up by a NUL-terminated name.
    let f = unsafe { dlsym(std::ptr::null_mut(), name.as_ptr()) };
    assert!(!f.is_null(), "the counting library is not preloaded");
    f
}

/// The libraries' registrations so far: in all, and on ptxspec's
/// background threads.
pub fn registrations() -> [c_long; 2] {
    [
        c"ptxspec_test_atexit_count",
        c"ptxspec_test_atexit_background_count",
    ]
    .map(|name| {
        // SAFETY: the counter's functions of these names take nothing and
        // return a long.
        let f: extern "C" fn() -> c_long = unsafe { std::mem::transmute(function(name)) };
        f()
    })
}

/// The first background registrations, "library on thread; …".
pub fn first_in_the_background() -> String {
    // SAFETY: the counter's function of this name takes nothing and
    // returns a NUL-terminated string in a static buffer.
    let f: extern "C" fn() -> *const c_char =
        unsafe { std::mem::transmute(function(c"ptxspec_test_atexit_background_first")) };
    // SAFETY: as above: a valid NUL-terminated string.
    unsafe { CStr::from_ptr(f()) }
        .to_string_lossy()
        .into_owned()
}

pub use c_library::cc_on_path;

/// The counter built into `dir` with the system's C compiler.
fn build(dir: &std::path::Path) -> std::path::PathBuf {
    c_library::build(
        "count_atexit.c",
        include_str!("../../crates/ptxspec-core/tests/support/count_atexit.c"),
        dir.join("libcount_atexit.so"),
        &["-ldl"],
    )
}

/// Runs `child` with the counter of `dir` preloaded, a fresh disk cache
/// there, and neither the fleet nor a tier profile (whose cubins would
/// spare links).
pub fn run_counting(
    mut child: std::process::Command,
    dir: &std::path::Path,
) -> std::process::Output {
    child
        .env("PTXSPEC_CACHE_DIR", dir.join("cache"))
        .env_remove("PTXSPEC_REMOTE_CACHE")
        .env_remove("PTXSPEC_TIER_PROFILE")
        .env("LD_PRELOAD", build(dir))
        .output()
        .unwrap()
}

/// The counts a child said on `line`, before its parenthesis (where it
/// names the first background registrations).
pub fn counts_said(line: &str) -> Vec<i64> {
    line.split(" (")
        .next()
        .unwrap_or_default()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect()
}
