//! A trace a person opens: what ptxspec decided and did, on the host's
//! timeline — links and their stages, each cache tier's look-up (hit or
//! miss, and bytes), lease waits, compiles, tier-ups, adaptive trials'
//! verdicts, graph updates — written as a Chrome trace (the Trace Event
//! Format's JSON object, which Perfetto's UI and `chrome://tracing` open).
//!
//! Every span and instant is also an NVTX range or mark where a profiling
//! tool injects NVTX (`NVTX_INJECTION64_PATH`, as Nsight Systems sets it:
//! see `trace/nvtx.rs`), so that the same ranges appear beside the kernels.
//!
//! Off (the default, and no tool injecting NVTX), every call here is two
//! atomic loads and nothing else. On — [`start`] with a file, or `PTXSPEC_TRACE=FILE` read by
//! [`start_from_env`] — events are kept in memory (at most [`MAX_EVENTS`];
//! past that they are counted, not kept) and written by [`stop`] into the
//! file at once (a temporary file renamed: a reader never sees half a
//! trace). `tracing` events stay what they were: this is the picture, they
//! are the log.

mod nvtx;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// The most events one trace keeps.
pub const MAX_EVENTS: usize = 1 << 20;

static ON: AtomicBool = AtomicBool::new(false);
static DROPPED: AtomicU64 = AtomicU64::new(0);

struct Trace {
    file: PathBuf,
    origin: Instant,
    events: Vec<String>,
}

static TRACE: Mutex<Option<Trace>> = Mutex::new(None);

/// Why a trace could not be started or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// `PTXSPEC_TRACE` is not valid (a folder, a folder that does not exist).
    #[error(transparent)]
    Setting(#[from] crate::settings::SettingError),
    /// The file could not be written.
    #[error("the trace {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

/// Whether a trace is being recorded.
#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Starts recording a trace to be written to `file` by [`stop`]; a trace
/// already recording is replaced (its events dropped).
pub fn start(file: &Path) -> Result<(), TraceError> {
    let lookup = |name: &str| (name == "PTXSPEC_TRACE").then(|| file.as_os_str().to_os_string());
    let env = crate::settings::Env::from_fn(&lookup);
    let Some(file) = crate::settings::trace_file(&env)? else {
        return Ok(());
    };
    let mut t = TRACE.lock().unwrap_or_else(|p| p.into_inner());
    *t = Some(Trace {
        file,
        origin: Instant::now(),
        events: Vec::new(),
    });
    DROPPED.store(0, Ordering::Relaxed);
    ON.store(true, Ordering::Relaxed);
    Ok(())
}

/// Starts a trace where `PTXSPEC_TRACE` names a file; the file, or `None`
/// where it is unset. An invalid value is an error naming the variable. A
/// trace started so is written when the process exits, where [`stop`] was
/// not called before (a program that only sets the variable gets its
/// trace).
pub fn start_from_env() -> Result<Option<PathBuf>, TraceError> {
    let env = crate::settings::Env::process();
    let Some(file) = crate::settings::trace_file(&env)? else {
        return Ok(None);
    };
    start(&file)?;
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    AT_EXIT.call_once(|| {
        extern "C" fn write_at_exit() {
            if let Err(e) = stop() {
                eprintln!("ptxspec: {e}");
            }
        }
        // SAFETY: `write_at_exit` is a plain function of the C ABI that
        // takes nothing; the C library calls it once, at exit.
        unsafe {
            libc::atexit(write_at_exit);
        }
    });
    Ok(Some(file))
}

/// [`start_from_env`] once per process, where a library first needs it (a
/// process's first bundle); an invalid `PTXSPEC_TRACE` is said once and no
/// trace is recorded.
pub fn start_from_env_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Err(e) = start_from_env() {
            crate::notice::once(format!("no trace is recorded: {e}"));
        }
    });
}

/// Stops recording and writes the trace: its file, and how many events it
/// holds; `None` where none was recording.
pub fn stop() -> Result<Option<(PathBuf, usize)>, TraceError> {
    ON.store(false, Ordering::Relaxed);
    let Some(t) = TRACE.lock().unwrap_or_else(|p| p.into_inner()).take() else {
        return Ok(None);
    };
    let mut out = String::from("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    let _ = write!(
        out,
        "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":\"ptxspec\"}}}}",
        std::process::id()
    );
    for e in &t.events {
        out.push_str(",\n");
        out.push_str(e);
    }
    let dropped = DROPPED.swap(0, Ordering::Relaxed);
    let _ = write!(
        out,
        "\n],\"otherData\":{{\"events\":{},\"dropped\":{dropped}}}}}\n",
        t.events.len()
    );
    crate::files::write_atomically(&t.file, out.as_bytes()).map_err(|source| {
        TraceError::Write {
            path: t.file.clone(),
            source,
        }
    })?;
    Ok(Some((t.file, t.events.len())))
}

/// A value of an event's arguments.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    /// Text (escaped as JSON).
    Text(&'a str),
    /// A number.
    Number(u64),
}

/// An event's arguments as a JSON object.
fn args_json(args: &[(&str, Arg<'_>)]) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in args.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&json_string(k));
        out.push(':');
        match v {
            Arg::Text(t) => out.push_str(&json_string(t)),
            Arg::Number(n) => {
                let _ = write!(out, "{n}");
            }
        }
    }
    out.push('}');
    out
}

/// `text` as a JSON string, control characters escaped.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The thread's number in the trace (its name where it has one).
fn thread_id() -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::thread::current().id().hash(&mut h);
    h.finish() & 0xffff_ffff
}

/// Records one event (`ph`: `X` a span with `dur`, `i` an instant).
fn record(
    name: &str,
    category: &str,
    ph: char,
    start: Instant,
    dur: Option<u64>,
    args: &[(&str, Arg<'_>)],
) {
    let mut t = TRACE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(t) = t.as_mut() else {
        return;
    };
    if t.events.len() >= MAX_EVENTS {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let ts = start.saturating_duration_since(t.origin).as_micros() as u64;
    let mut e = format!(
        "{{\"name\":{},\"cat\":{},\"ph\":\"{ph}\",\"ts\":{ts},\"pid\":{},\"tid\":{}",
        json_string(name),
        json_string(category),
        std::process::id(),
        thread_id()
    );
    if let Some(d) = dur {
        let _ = write!(e, ",\"dur\":{d}");
    }
    if ph == 'i' {
        e.push_str(",\"s\":\"t\"");
    }
    let _ = write!(e, ",\"args\":{}}}", args_json(args));
    t.events.push(e);
}

/// An instant on the timeline: a decision (a cache tier's hit or miss, a
/// verdict, a refusal).
#[inline]
pub fn instant(name: &str, category: &str, args: &[(&str, Arg<'_>)]) {
    if on() {
        record(name, category, 'i', Instant::now(), None, args);
    }
    nvtx::mark(name);
}

/// A span on the timeline, from its making to its drop (a link, a compile,
/// a lease wait, a graph update); [`Span::arg`] adds what was learnt by its
/// end. Nothing where no trace is recording and no profiler injects NVTX.
pub struct Span {
    open: Option<OpenSpan>,
    /// Its NVTX range, where a tool injects NVTX (`nvtx`).
    nvtx: Option<u64>,
}

/// A span being recorded: its name, category, start and arguments.
struct OpenSpan {
    name: String,
    category: &'static str,
    start: Instant,
    args: Vec<(String, String)>,
}

/// Opens a span named `name` of `category`.
#[inline]
pub fn span(name: &str, category: &'static str) -> Span {
    Span {
        open: on().then(|| OpenSpan {
            name: name.to_string(),
            category,
            start: Instant::now(),
            args: Vec::new(),
        }),
        nvtx: nvtx::range_start(name),
    }
}

impl Span {
    /// Adds an argument (shown with the span).
    pub fn arg(&mut self, key: &str, value: impl std::fmt::Display) {
        if let Some(open) = &mut self.open {
            open.args.push((key.to_string(), value.to_string()));
        }
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some(id) = self.nvtx.take() {
            nvtx::range_end(id);
        }
        if let Some(open) = self.open.take() {
            let dur = open.start.elapsed().as_micros() as u64;
            let args: Vec<(&str, Arg<'_>)> = open
                .args
                .iter()
                .map(|(k, v)| (k.as_str(), Arg::Text(v.as_str())))
                .collect();
            record(&open.name, open.category, 'X', open.start, Some(dur), &args);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace written is one JSON object whose events name what was
    /// recorded, spans with their durations, text escaped; off, nothing is
    /// recorded; a folder or a file in a folder that does not exist is an
    /// error naming PTXSPEC_TRACE.
    #[test]
    fn a_trace_is_json_a_person_opens() {
        let dir = std::env::temp_dir().join(format!("ptxspec-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        instant("before", "test", &[]);
        let file = dir.join("t.json");
        start(&file).unwrap();
        {
            let mut s = span("link \"k\"", "lto");
            s.arg("bytes", 42);
        }
        instant(
            "memory miss",
            "cache",
            &[("tier", Arg::Text("memory\n")), ("arch", Arg::Number(90))],
        );
        let (written, n) = stop().unwrap().unwrap();
        assert_eq!((written.as_path(), n), (file.as_path(), 2));
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with('{') && text.trim_end().ends_with('}'),
            "{text}"
        );
        assert!(
            text.contains("\"name\":\"link \\\"k\\\"\"") && text.contains("\"ph\":\"X\""),
            "{text}"
        );
        assert!(
            text.contains("\"dur\":") && text.contains("\"memory\\u000a\""),
            "{text}"
        );
        assert!(!text.contains("before"), "recorded while off");
        // Balanced braces and brackets outside strings: one JSON value.
        let (mut depth, mut in_str, mut esc) = (0i64, false, false);
        for c in text.chars() {
            match (in_str, esc, c) {
                (true, true, _) => esc = false,
                (true, false, '\\') => esc = true,
                (true, false, '"') => in_str = false,
                (false, _, '"') => in_str = true,
                (false, _, '{' | '[') => depth += 1,
                (false, _, '}' | ']') => depth -= 1,
                _ => {}
            }
            assert!(depth >= 0);
        }
        assert_eq!(depth, 0, "{text}");
        for bad in [dir.clone(), dir.join("nowhere/t.json")] {
            let e = start(&bad).unwrap_err().to_string();
            assert!(e.contains("PTXSPEC_TRACE"), "{e}");
        }
        assert!(!on());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
