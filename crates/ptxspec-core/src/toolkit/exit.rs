//! Process exit while another thread is inside one of NVIDIA's libraries —
//! a background link of `SpecMode::Tiered` — would run the library's static
//! destructors under that thread, or tear the process down while that
//! thread runs a library's constructors in `dlopen` — either crashes the
//! process (seen: a segmentation fault in libNVVM's initialization at exit).
//! A hook that exit runs before those destructors takes the loading lock
//! and each library's call lock and keeps them: exit waits for the load or
//! calls in progress, and no new one starts.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use super::Lib;

/// One lock per library, which each of its calls holds (nvJitLink and NVRTC
/// make no promise about concurrent calls; exit must know none runs).
static NVJITLINK: Mutex<()> = Mutex::new(());
static NVRTC: Mutex<()> = Mutex::new(());
static NVVM: Mutex<()> = Mutex::new(());
/// Held while a library is being loaded (its constructors run then; exit
/// must not run beside them either).
static LOADING: Mutex<()> = Mutex::new(());

thread_local! {
    /// Loads in progress on this thread (loading libNVVM loads nvJitLink
    /// first): only the outermost takes [`LOADING`].
    static LOAD_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Held across a library load; see [`LOADING`].
pub(super) struct Loading(#[allow(dead_code)] Option<std::sync::MutexGuard<'static, ()>>);

impl Loading {
    pub(super) fn enter() -> Loading {
        let depth = LOAD_DEPTH.with(|d| {
            d.set(d.get() + 1);
            d.get()
        });
        Loading((depth == 1).then(|| LOADING.lock().unwrap_or_else(|p| p.into_inner())))
    }
}

impl Drop for Loading {
    fn drop(&mut self) {
        LOAD_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

unsafe extern "C" {
    /// The C library's `atexit`, which Rust's standard library links.
    fn atexit(hook: extern "C" fn()) -> std::ffi::c_int;
}

thread_local! {
    /// This thread is inside a library call (which holds its lock).
    static IN_CALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A library call in progress on this thread: it holds the library's lock
/// and the mark that exit's hook reads, and when it ends — the lock freed —
/// registers the hook after the library's first call (see [`register`]).
pub(super) struct Call {
    lock: Option<std::sync::MutexGuard<'static, ()>>,
    lib: Lib,
}

impl Call {
    pub(super) fn enter(lib: Lib) -> Call {
        let lock = match lib {
            Lib::NvJitLink => &NVJITLINK,
            Lib::Nvrtc => &NVRTC,
            // `libcudadevrt.a` is linked, never called: no lock of its own.
            Lib::Nvvm | Lib::CudaDevRt => &NVVM,
        };
        let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
        IN_CALL.with(|c| c.set(true));
        Call {
            lock: Some(guard),
            lib,
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        IN_CALL.with(|c| c.set(false));
        drop(self.lock.take());
        register(self.lib, Moment::FirstCallReturned);
    }
}

/// Exit's hook: holds every library's lock from here to the end.
extern "C" fn hold_the_locks() {
    static HELD: AtomicBool = AtomicBool::new(false);
    // A library that calls exit itself (nvJitLink does, on some damaged
    // input) holds its lock on this thread: waiting would never end, and
    // the library is done anyway.
    if IN_CALL.with(|c| c.get()) {
        return;
    }
    // Registered several times: only the first run takes the locks.
    if HELD.swap(true, Ordering::AcqRel) {
        return;
    }
    // Loads first: a thread that loads takes no call lock meanwhile.
    for lock in [&LOADING, &NVJITLINK, &NVRTC, &NVVM] {
        std::mem::forget(lock.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

/// Registers the hook for `lib` at two moments: once it is loaded, and
/// once its first call returned. Exit runs hooks in the reverse order of
/// registration, so the hook runs before the destructors the library
/// registered when it was loaded and during that call (its lazily made
/// statics).
pub(super) fn register(lib: Lib, moment: Moment) {
    static REGISTERED: [AtomicU8; 3] = [const { AtomicU8::new(0) }; 3];
    let i = match lib {
        Lib::NvJitLink => 0,
        Lib::Nvrtc => 1,
        Lib::Nvvm => 2,
        Lib::CudaDevRt => return,
    };
    let bit = moment as u8;
    if REGISTERED[i].fetch_or(bit, Ordering::AcqRel) & bit == 0 {
        // SAFETY: registers a function of no arguments that exit calls on
        // the exiting thread; it only takes (poison-proof) locks.
        unsafe {
            atexit(hold_the_locks);
        }
    }
}

/// When [`register`] is called.
#[derive(Clone, Copy, Debug)]
pub(super) enum Moment {
    Loaded = 1,
    FirstCallReturned = 2,
}

/// Registers the hook once more, now: after a warm-up has run every
/// library's code paths, so that the hook runs before every destructor they
/// registered (`crate::lto::warm_up`).
pub(crate) fn register_now() {
    // SAFETY: as in `register`.
    unsafe {
        atexit(hold_the_locks);
    }
}
