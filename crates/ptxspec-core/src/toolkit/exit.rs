//! Process exit while another thread is inside one of NVIDIA's libraries —
//! a background link of `SpecMode::Tiered` — would run the library's static
//! destructors under that thread, or tear the process down while that
//! thread runs a library's constructors in `dlopen` — either crashes the
//! process (seen: a segmentation fault in libNVVM's initialization at exit).
//! A hook that exit runs before those destructors takes the loading lock
//! and each library's exit lock alone, and keeps them: exit waits for the
//! load or the calls in progress, and no new one starts. Calls share those
//! locks — exit needs "no call in flight", not "one call at a time" — and
//! run side by side wherever the library's documentation allows it
//! ([`concurrent_calls`]).
//!
//! Exit runs its hooks in the reverse order of registration, so the hook
//! only runs before the destructors registered earlier than itself: it is
//! registered again after each library's load and after each call of a
//! library or of the driver on a background thread (up to
//! 4 096 of each), as a library registers destructors
//! lazily, inside any call that first reaches some code. The libraries'
//! start — their loads, whose constructors register thousands of
//! destructors, and the calls that first reach the code a background link
//! runs — is therefore never a background thread's: the toolkit's warm-up
//! (`crate::lto::warm_up`) runs on the program's thread that asks for
//! background links (building an adapting or tiered bundle, or the first
//! request), and only then is work handed over. A background thread that
//! loaded the libraries itself left a window of a few dozen milliseconds in
//! which an exit from another thread ran libNVVM's destructors under its
//! constructors and first calls (glibc's heap checks failed in 13 of 248
//! and 6 of 172 children exiting so). The warm-up reaches the code in which the
//! libraries register destructors on a background link's way (the test
//! `exit_registrations` counts them: none in links after it).
//!
//! The main thread's end is the process's end, and its thread-local
//! destructors run before every exit handler: a thread that makes a queue,
//! asks for background work or builds a tiered image carries a
//! [`guard_this_thread`] guard, which on the main thread takes the locks as
//! the hook does — exit from it waits for every call in flight before any
//! handler runs, also those a library registered during a call after the
//! hook's last registration. Left uncovered: `exit` called on another
//! thread while a background call is in flight that registered a destructor
//! during that very call — code the warm-up did not reach — (the hook waits
//! for the call, but the destructor has run), and `exit` on one of the
//! program's threads while another of its threads is inside a call of
//! ptxspec that loads or first runs a library (as for any library with
//! static destructors).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Condvar, Mutex, RwLock};

use super::Lib;

/// What exit waits for: each library call holds its library's lock
/// *shared*, and exit's hook takes each lock alone — so calls run side by
/// side, and exit waits until none runs and lets no new one start.
static NVJITLINK: RwLock<()> = RwLock::new(());
static NVRTC: RwLock<()> = RwLock::new(());
static NVVM: RwLock<()> = RwLock::new(());
/// What exit waits for of the CUDA driver: ptxspec's background threads
/// (the tier loader, the retiring thread, adaptive variants' link threads)
/// hold it shared around each driver call they make — never across a call
/// of NVIDIA's compiler libraries, whose locks exit takes first — and
/// exit's hook takes it alone, after the driver's own exit handlers were
/// registered ([`driver_used`]): the driver is not torn down under such a
/// call, and none starts afterwards (seen: glibc's "free(): invalid
/// pointer" in a process that exited while adaptive links loaded their
/// code). Driver calls of the program's own threads are the program's.
static DRIVER: RwLock<()> = RwLock::new(());
/// One call at a time, for a library whose documentation does not say that
/// concurrent calls are safe (see [`concurrent_calls`]).
static NVJITLINK_TURNS: Turns = Turns::new();

/// Turns at a library that takes one call at a time, where a call that a
/// thread waits for goes before background work: a launch's synchronous
/// link waits for the background link under way at most, never for the
/// queue of them behind it (tier workers, adaptive variants and prefetches
/// mark their threads with [`this_thread_works_in_the_background`]).
struct Turns {
    state: Mutex<TurnState>,
    changed: Condvar,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TurnState {
    busy: bool,
    /// Calls of threads that wait for them, waiting for their turn.
    foreground_waiting: usize,
    /// Background calls waiting for their turn.
    background_waiting: usize,
}

impl Turns {
    const fn new() -> Turns {
        Turns {
            state: Mutex::new(TurnState {
                busy: false,
                foreground_waiting: 0,
                background_waiting: 0,
            }),
            changed: Condvar::new(),
        }
    }

    /// Waits for this thread's turn (background threads after every
    /// foreground call waiting), and holds it until the turn is dropped.
    fn take(&'static self) -> Turn {
        let background = this_thread_is_in_the_background();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if background {
            s.background_waiting += 1;
            while s.busy || s.foreground_waiting > 0 {
                s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            s.background_waiting -= 1;
        } else {
            s.foreground_waiting += 1;
            while s.busy {
                s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            s.foreground_waiting -= 1;
        }
        s.busy = true;
        Turn(self)
    }

    #[cfg(test)]
    fn state(&self) -> TurnState {
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A turn at a one-call-at-a-time library, given back when dropped.
struct Turn(&'static Turns);

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner()).busy = false;
        self.0.changed.notify_all();
    }
}

thread_local! {
    /// This thread does background work (see [`Turns`]).
    static BACKGROUND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread as one that does background work — links no thread
/// waits for — so that where a library takes one call at a time, calls of
/// threads that wait go first. For the tier workers, adaptive variants'
/// link threads and prefetches.
pub fn this_thread_works_in_the_background() {
    BACKGROUND.with(|b| b.set(true));
}

/// Whether this thread was marked as one that does background work
/// ([`this_thread_works_in_the_background`]).
pub fn this_thread_is_in_the_background() -> bool {
    BACKGROUND.with(|b| b.get())
}
/// Held while a library is being loaded (its constructors run then; exit
/// must not run beside them either).
static LOADING: Mutex<()> = Mutex::new(());

/// Whether NVIDIA documents that `lib`'s functions may be called from
/// several threads at once (on distinct handles: no handle of ours ever
/// leaves the call that made it).
///
/// - libNVVM: "libNVVM API provides a thread-safe interface to libNVVM.
///   Clients can take advantage of improved compilation speeds by spawning
///   multiple compilation threads concurrently" (libNVVM API reference,
///   "Thread Safety").
/// - NVRTC: multiple threads may call it at once as long as no two use the
///   same `nvrtcProgram` at once where one compiles or adds a name
///   expression (NVRTC User Guide, "Miscellaneous Notes: Thread Safety");
///   the one function excepted, `nvrtcGetTypeName` on Windows, is not
///   called here.
/// - nvJitLink: its documentation (user guide and `nvJitLink.h`) says
///   nothing about threads beyond requiring POSIX threads. Its calls stay
///   one at a time in a process; links run side by side in worker
///   processes instead (`toolkit::worker`: `ptxspec cache warm`, and
///   programs that name a worker with `BuildOptions::with_toolkit_worker`).
pub const fn concurrent_calls(lib: Lib) -> bool {
    match lib {
        Lib::Nvrtc | Lib::Nvvm => true,
        Lib::NvJitLink => false,
        // Linked, never called.
        Lib::CudaDevRt => true,
    }
}

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
    /// This thread holds a [`DriverCall`].
    static IN_DRIVER_CALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A driver call of one of ptxspec's background threads in progress (the
/// tier loader, the retiring thread, adaptive variants' link threads): exit
/// waits until it is dropped, and none starts once exit began, so the CUDA
/// driver is not torn down under one. Hold it around the calls only — not
/// while waiting for anything else, and never across a call of NVIDIA's
/// compiler libraries, whose locks exit takes first.
#[must_use = "the guard covers the driver calls made while it lives"]
pub struct DriverCall {
    guard: Option<std::sync::RwLockReadGuard<'static, ()>>,
    /// Whether exit's hook is registered again when it ends.
    register_after: bool,
}

/// Begins a background thread's driver call (see [`DriverCall`]); when it
/// ends, exit's hook is registered again, as after a library call (the
/// driver, too, may register exit handlers during a call: a module load,
/// a first unload).
pub fn background_driver_call() -> DriverCall {
    driver_call(true)
}

/// [`background_driver_call`] for a look that is made again and again (an
/// event's poll): it registers nothing, so that the polls do not spend the
/// registrations.
pub fn background_driver_poll() -> DriverCall {
    driver_call(false)
}

fn driver_call(register_after: bool) -> DriverCall {
    let guard = DRIVER.read().unwrap_or_else(|p| p.into_inner());
    IN_DRIVER_CALL.with(|c| c.set(true));
    DriverCall {
        guard: Some(guard),
        register_after,
    }
}

impl Drop for DriverCall {
    fn drop(&mut self) {
        IN_DRIVER_CALL.with(|c| c.set(false));
        drop(self.guard.take());
        if self.register_after {
            static AFTER_DRIVER_CALLS: std::sync::atomic::AtomicU32 =
                std::sync::atomic::AtomicU32::new(0);
            register_again(&AFTER_DRIVER_CALLS);
        }
    }
}

/// Registers exit's hook once the driver has been used the way that
/// `moment` names: the handlers libcuda registers at its initialization
/// and at its first module load run after the hook (exit runs handlers in
/// the reverse order of registration), so the hook waits for the
/// background threads' driver calls before any of them.
pub fn driver_used(moment: DriverMoment) {
    static REGISTERED: AtomicU8 = AtomicU8::new(0);
    let bit = moment as u8;
    if REGISTERED.fetch_or(bit, Ordering::AcqRel) & bit == 0 {
        register_now();
    }
}

/// When [`driver_used`] registers the hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverMoment {
    /// A context was made (the driver initialized).
    ContextMade = 1,
    /// A module was loaded.
    ModuleLoaded = 2,
}

/// A library call in progress on this thread: it holds the library's exit
/// lock (shared with other calls), its one-at-a-time lock where the library
/// needs one ([`concurrent_calls`]), and the mark that exit's hook reads;
/// when it ends — the locks freed — it registers the hook again (see
/// [`register_after_a_call`]).
pub(super) struct Call {
    exit: Option<std::sync::RwLockReadGuard<'static, ()>>,
    alone: Option<Turn>,
}

impl Call {
    pub(super) fn enter(lib: Lib) -> Call {
        let lock = match lib {
            Lib::NvJitLink => &NVJITLINK,
            Lib::Nvrtc => &NVRTC,
            // `libcudadevrt.a` is linked, never called: no lock of its own.
            Lib::Nvvm | Lib::CudaDevRt => &NVVM,
        };
        // The one-at-a-time lock first: a call that waits for it holds
        // nothing exit waits for.
        let alone = (!concurrent_calls(lib)).then(|| NVJITLINK_TURNS.take());
        let exit = lock.read().unwrap_or_else(|p| p.into_inner());
        IN_CALL.with(|c| c.set(true));
        Call {
            exit: Some(exit),
            alone,
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        IN_CALL.with(|c| c.set(false));
        drop(self.exit.take());
        drop(self.alone.take());
        register_after_a_call();
    }
}

/// How many times the hook is registered again as a library call returns.
/// A library may register a destructor inside any call that first reaches
/// some code, and the hook runs before it only if registered after it;
/// each registration stays in the C library's list for the process's life,
/// so they stop at a count by which the libraries' lazily made statics
/// have long been made.
const REGISTRATIONS_AFTER_CALLS: u32 = 4096;

/// Registers the hook once more after a library call returned (see
/// [`REGISTRATIONS_AFTER_CALLS`]).
fn register_after_a_call() {
    static AFTER_CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    register_again(&AFTER_CALLS);
}

/// Registers the hook once more, while `count` (one kind of call's) is
/// below [`REGISTRATIONS_AFTER_CALLS`].
fn register_again(count: &std::sync::atomic::AtomicU32) {
    if count.fetch_add(1, Ordering::Relaxed) < REGISTRATIONS_AFTER_CALLS {
        register_now();
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
    std::mem::forget(LOADING.lock().unwrap_or_else(|p| p.into_inner()));
    for lock in [&NVJITLINK, &NVRTC, &NVVM] {
        std::mem::forget(lock.write().unwrap_or_else(|p| p.into_inner()));
    }
    // The driver last: its calls never wait for the libraries' locks. A
    // thread that exits inside its own driver call cannot wait for itself.
    if !IN_DRIVER_CALL.with(|c| c.get()) {
        std::mem::forget(DRIVER.write().unwrap_or_else(|p| p.into_inner()));
    }
}

/// Registers the hook once more, now: after a warm-up has run every
/// library's code paths, so that the hook runs before every destructor they
/// registered (`crate::lto::warm_up`).
pub(crate) fn register_now() {
    // SAFETY: registers a function of no arguments that exit calls on the
    // exiting thread; it only takes (poison-proof) locks.
    unsafe {
        atexit(hold_the_locks);
    }
}

/// See [`guard_this_thread`].
struct ExitGuard;

impl Drop for ExitGuard {
    fn drop(&mut self) {
        // The main thread's end is the process's end (`main` returned, or
        // `exit` called on it), and its thread-local destructors run before
        // every exit handler: holding the locks here, exit waits for the
        // calls in flight before any library destructor runs — also those
        // a library registered lazily, during a call after the hook's last
        // registration, which run before the hook (seen: a background
        // link's libnvvm or nvJitLink crashed in `__sigsetjmp` while the
        // exiting thread's hook waited for that very call).
        if is_main_thread() {
            hold_the_locks();
        }
    }
}

/// Whether this is the process's main thread (its thread ID is the
/// process's).
fn is_main_thread() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: neither call has preconditions; both only read IDs.
        unsafe { libc::gettid() == libc::getpid() }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

thread_local! {
    static EXIT_GUARD: ExitGuard = const { ExitGuard };
}

/// This thread's end — the process's exit, when this is the main thread
/// and it calls `exit` or returns from `main` — takes the locks exit's
/// hook takes, before any exit handler runs: exit waits for every library
/// call and background driver call in flight (see the module's docs). For
/// threads that make queues, ask for background links or build images that
/// will; once per thread is enough, more is free.
pub fn guard_this_thread() {
    EXIT_GUARD.with(|_| {});
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;
    use std::time::Duration;

    /// Calls of a library documented as thread-safe run side by side: a
    /// second thread's call enters and returns while the first is still in
    /// its own (were calls one at a time, it would wait — the test would
    /// fail by its bound, not hang); nvJitLink's calls stay one at a time.
    #[test]
    fn documented_thread_safe_libraries_share_their_lock_and_nvjitlink_does_not() {
        for lib in [Lib::Nvrtc, Lib::Nvvm] {
            let first = Call::enter(lib);
            let (tx, rx) = std::sync::mpsc::channel();
            let other = std::thread::spawn(move || {
                let second = Call::enter(lib);
                drop(second);
                let _ = tx.send(());
            });
            assert!(
                rx.recv_timeout(Duration::from_secs(60)).is_ok(),
                "a second {lib:?} call waited for the first"
            );
            other.join().unwrap();
            drop(first);
        }
        let first = Call::enter(Lib::NvJitLink);
        assert!(
            NVJITLINK_TURNS.state().busy,
            "an nvJitLink call left its one-at-a-time turn free"
        );
        // Exit's lock is shared even here: exit waits for the call.
        assert!(NVJITLINK.try_write().is_err());
        drop(first);
    }

    /// A call a thread waits for goes before background calls that were
    /// waiting longer: the order of turns follows the waiters' kinds, read
    /// from the turns' own state (no sleep picks the race).
    #[test]
    fn a_waiting_thread_goes_before_queued_background_work() {
        static TURNS: Turns = Turns::new();
        static ORDER: Mutex<Vec<&str>> = Mutex::new(Vec::new());
        let until = |what: &str, ok: &dyn Fn(TurnState) -> bool| {
            let started = std::time::Instant::now();
            while !ok(TURNS.state()) {
                assert!(started.elapsed() < Duration::from_secs(60), "{what}");
                std::thread::yield_now();
            }
        };
        let first = TURNS.take();
        let background = std::thread::spawn(|| {
            this_thread_works_in_the_background();
            let _turn = TURNS.take();
            ORDER.lock().unwrap().push("background");
        });
        until("the background call never waited", &|s| {
            s.background_waiting == 1
        });
        let foreground = std::thread::spawn(|| {
            let _turn = TURNS.take();
            ORDER.lock().unwrap().push("foreground");
        });
        until("the foreground call never waited", &|s| {
            s.foreground_waiting == 1
        });
        drop(first);
        foreground.join().unwrap();
        background.join().unwrap();
        assert_eq!(*ORDER.lock().unwrap(), ["foreground", "background"]);
        assert_eq!(TURNS.state(), TurnState::default());
    }

    /// Whether the late handler's background call is in flight.
    static LATE_IN_CALL: AtomicBool = AtomicBool::new(false);
    /// Where the late handler writes what it saw.
    static LATE_MARKER: OnceLock<std::path::PathBuf> = OnceLock::new();

    /// An exit handler registered inside a library call, as a library
    /// registers a destructor lazily: it writes whether a call was in
    /// flight when it ran.
    extern "C" fn late_handler() {
        if let Some(marker) = LATE_MARKER.get() {
            let said = match LATE_IN_CALL.load(Ordering::SeqCst) {
                true => "during a call",
                false => "after the calls",
            };
            let _ = std::fs::write(marker, said);
        }
    }

    /// A destructor a library (or the driver) registers inside a call after
    /// its first — a call that first reaches some code — runs after the
    /// calls in flight at exit: the hook is registered again as each call
    /// returns, so it runs first and waits. Library calls and background
    /// driver calls alike. The child exits from libtest's thread (not the
    /// main one, whose guard would hold the locks anyway). Fails where the
    /// hook is registered after the first call only (the handler saw the
    /// call in flight in 3 of 3 children of each kind).
    #[test]
    fn a_destructor_registered_inside_a_later_call_runs_after_the_calls() {
        const CHILD: &str = "PTXSPEC_TEST_EXIT_LATE_HANDLER";
        if let Some(spec) = std::env::var_os(CHILD) {
            let spec = spec.to_string_lossy().to_string();
            let (kind, marker) = spec.split_once(':').expect("kind:marker");
            let _ = LATE_MARKER.set(marker.into());
            let driver = kind == "driver";
            // A call of the kind: a library's, or a background driver call.
            let call = move || -> Box<dyn std::any::Any> {
                match driver {
                    true => Box::new(background_driver_call()),
                    false => Box::new(Call::enter(Lib::Nvrtc)),
                }
            };
            if driver {
                driver_used(DriverMoment::ContextMade);
            }
            let (inside, is_inside) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                drop(call());
                {
                    let _registering = call();
                    // SAFETY: registers a function of no arguments that
                    // exit calls; it only writes a file.
                    unsafe { atexit(late_handler) };
                }
                let in_flight = call();
                LATE_IN_CALL.store(true, Ordering::SeqCst);
                let _ = inside.send(());
                std::thread::sleep(Duration::from_millis(300));
                LATE_IN_CALL.store(false, Ordering::SeqCst);
                drop(in_flight);
            });
            is_inside
                .recv_timeout(Duration::from_secs(60))
                .expect("the call began");
            std::process::exit(0);
        }
        let dir = std::env::temp_dir().join(format!("ptxspec-exit-late-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for kind in ["library", "driver"] {
            for round in 0..3 {
                let marker = dir.join(format!("marker-{kind}-{round}"));
                let out = std::process::Command::new(std::env::current_exe().unwrap())
                    .args([
                        "--exact",
                        "toolkit::exit::tests::a_destructor_registered_inside_a_later_call_runs_after_the_calls",
                        "--nocapture",
                    ])
                    .env(CHILD, format!("{kind}:{}", marker.display()))
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{kind}, round {round}: {out:?}");
                assert_eq!(
                    std::fs::read_to_string(&marker).unwrap_or_default(),
                    "after the calls",
                    "{kind}, round {round}"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
