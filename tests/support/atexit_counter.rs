//! What the preloaded counter of exit handler registrations
//! (`crates/ptxspec-core/tests/support/count_atexit.c`) has seen, read by
//! a test's child that runs with it preloaded.

use std::ffi::{CStr, c_char, c_long, c_void};

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
