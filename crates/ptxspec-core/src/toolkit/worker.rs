//! NVIDIA's libraries in a child process.
//!
//! NVRTC, libNVVM and nvJitLink are not hardened against bad input: a
//! damaged LTO-IR container can make nvJitLink crash (SIGSEGV), abort
//! ("LLVM ERROR: out of memory") or call `exit()`. Where the input comes from
//! files, their calls can run in a *worker*: the `ptxspec` binary started as
//! `ptxspec __toolkit-worker`, which reads one call on its standard input,
//! makes it and writes the result on its standard output. A worker that dies
//! is [`ToolkitError::WorkerDied`], naming the call and how it died; the
//! calling process lives on.
//!
//! [`Toolkit`] says where calls run; [`serve`] is the worker's side. The
//! frames are length-prefixed byte strings, every length checked against
//! what is left.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{ToolkitError, nvjitlink, nvrtc, nvvm};

/// The argument that starts a `ptxspec` binary as a worker.
pub const WORKER_ARG: &str = "__toolkit-worker";

/// Where NVIDIA's libraries are called.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Toolkit {
    /// In this process (images embedded in the program: trusted).
    #[default]
    InProcess,
    /// In a child process of this `ptxspec` binary, one per call.
    Worker(PathBuf),
}

/// One call of a library.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Call {
    Nvrtc {
        source: String,
        name: String,
        options: Vec<String>,
        output: nvrtc::Output,
    },
    Nvvm {
        ir: String,
        name: String,
        options: Vec<String>,
    },
    NvJitLink {
        /// (kind, bytes, name) per input.
        inputs: Vec<(nvjitlink::InputKind, Vec<u8>, String)>,
        options: Vec<String>,
    },
}

/// What a call gives back: the bytes it made and the library's log.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Made {
    bytes: Vec<u8>,
    log: String,
}

impl Call {
    fn library(&self) -> &'static str {
        match self {
            Call::Nvrtc { .. } => "NVRTC",
            Call::Nvvm { .. } => "libNVVM",
            Call::NvJitLink { .. } => "nvJitLink",
        }
    }

    /// The call, in words, for a worker that died making it.
    fn describe(&self) -> String {
        match self {
            Call::Nvrtc { name, .. } => format!("compiling {name}"),
            Call::Nvvm { name, .. } => format!("compiling {name}"),
            Call::NvJitLink { inputs, .. } => format!(
                "linking {}",
                inputs
                    .iter()
                    .map(|i| i.2.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// Makes the call in this process.
    fn run_here(&self) -> Result<Made, ToolkitError> {
        match self {
            Call::Nvrtc {
                source,
                name,
                options,
                output,
            } => nvrtc::compile(source, name, options, *output).map(|c| Made {
                bytes: c.code,
                log: c.log,
            }),
            Call::Nvvm { ir, name, options } => {
                nvvm::compile(ir, name, options).map(|bytes| Made {
                    bytes,
                    log: String::new(),
                })
            }
            Call::NvJitLink { inputs, options } => {
                let inputs: Vec<(nvjitlink::InputKind, &[u8], &str)> = inputs
                    .iter()
                    .map(|(k, b, n)| (*k, b.as_slice(), n.as_str()))
                    .collect();
                nvjitlink::link(&inputs, options).map(|l| Made {
                    bytes: l.code,
                    log: l.info_log,
                })
            }
        }
    }
}

impl Toolkit {
    /// [`nvrtc::compile`], here or in the worker.
    pub fn nvrtc(
        &self,
        source: &str,
        name: &str,
        options: &[String],
        output: nvrtc::Output,
    ) -> Result<nvrtc::Compiled, ToolkitError> {
        let made = match self {
            Toolkit::InProcess => return nvrtc::compile(source, name, options, output),
            Toolkit::Worker(exe) => run_in_worker(
                exe,
                &Call::Nvrtc {
                    source: source.into(),
                    name: name.into(),
                    options: options.to_vec(),
                    output,
                },
            )?,
        };
        Ok(nvrtc::Compiled {
            code: made.bytes,
            log: made.log,
        })
    }

    /// [`nvvm::compile`], here or in the worker.
    pub fn nvvm(&self, ir: &str, name: &str, options: &[String]) -> Result<Vec<u8>, ToolkitError> {
        match self {
            Toolkit::InProcess => nvvm::compile(ir, name, options),
            Toolkit::Worker(exe) => run_in_worker(
                exe,
                &Call::Nvvm {
                    ir: ir.into(),
                    name: name.into(),
                    options: options.to_vec(),
                },
            )
            .map(|m| m.bytes),
        }
    }

    /// [`nvjitlink::link`], here or in the worker.
    pub fn link(
        &self,
        inputs: &[(nvjitlink::InputKind, &[u8], &str)],
        options: &[String],
    ) -> Result<nvjitlink::Linked, ToolkitError> {
        match self {
            Toolkit::InProcess => nvjitlink::link(inputs, options),
            Toolkit::Worker(exe) => run_in_worker(
                exe,
                &Call::NvJitLink {
                    inputs: inputs
                        .iter()
                        .map(|(k, b, n)| (*k, b.to_vec(), n.to_string()))
                        .collect(),
                    options: options.to_vec(),
                },
            )
            .map(|m| nvjitlink::Linked {
                code: m.bytes,
                info_log: m.log,
            }),
        }
    }
}

/// How much a worker's standard error is kept for a message.
const STDERR_KEPT: usize = 4096;

fn run_in_worker(exe: &Path, call: &Call) -> Result<Made, ToolkitError> {
    // The library is found (not called) here first: a missing one stays a
    // typed error saying where it was looked for.
    super::require(match call {
        Call::Nvrtc { .. } => super::Lib::Nvrtc,
        Call::Nvvm { .. } => super::Lib::Nvvm,
        Call::NvJitLink { .. } => super::Lib::NvJitLink,
    })?;
    let _slot = WorkerSlot::for_this_thread(&WORKER_SLOTS)?;
    // The call's stages happen in the worker, whose trace this process
    // does not see: the worker's whole life is one span here.
    let _span = crate::trace::span(&format!("{} in a worker process", call.library()), "link");
    spawn_worker(exe, call)
}

/// Worker processes this process runs at once, and the threads waiting
/// for one to end.
struct WorkerSlots {
    running: std::sync::Mutex<usize>,
    freed: std::sync::Condvar,
}

impl WorkerSlots {
    const fn new() -> WorkerSlots {
        WorkerSlots {
            running: std::sync::Mutex::new(0),
            freed: std::sync::Condvar::new(),
        }
    }
}

/// At most `PTXSPEC_TIER_WORKERS` worker processes for background work run
/// at once — a tier's pool, adaptive arguments, whose every variant links
/// on a thread of its own: a program's first steps asked for a few dozen
/// variants at once, and as many workers on the processor's cores took its
/// own threads' time (steps ran ×1.07 and ×1.08 of the others while they
/// started). A call that a thread of the program waits for never waits
/// behind them (as at nvJitLink's turns, it goes first); `cache warm`'s
/// threads are as many as the limit already.
static WORKER_SLOTS: WorkerSlots = WorkerSlots::new();

/// One of [`WorkerSlots`]' places, held while a worker runs. A wait for
/// one is bounded: each worker ends by its deadline ([`worker_timeout`]).
struct WorkerSlot(&'static WorkerSlots);

impl WorkerSlot {
    /// A place for this thread's worker where it does background work
    /// (`toolkit::exit::this_thread_works_in_the_background`), waited for;
    /// none for a thread of the program, which does not wait for one.
    fn for_this_thread(slots: &'static WorkerSlots) -> Result<Option<WorkerSlot>, ToolkitError> {
        if !super::exit::this_thread_is_in_the_background() {
            return Ok(None);
        }
        let limit = crate::settings::tier_workers(&crate::settings::Env::process())?;
        Ok(Some(WorkerSlot::take(slots, limit)))
    }

    fn take(slots: &'static WorkerSlots, limit: usize) -> WorkerSlot {
        let running = slots.running.lock().unwrap_or_else(|p| p.into_inner());
        let mut running = slots
            .freed
            .wait_while(running, |n| *n >= limit.max(1))
            .unwrap_or_else(|p| p.into_inner());
        *running += 1;
        WorkerSlot(slots)
    }
}

impl Drop for WorkerSlot {
    fn drop(&mut self) {
        let mut running = self.0.running.lock().unwrap_or_else(|p| p.into_inner());
        *running = running.saturating_sub(1);
        drop(running);
        self.0.freed.notify_one();
    }
}

/// Makes `call` in a new worker process of `exe`, killed if it takes
/// longer than [`worker_timeout`].
fn spawn_worker(exe: &Path, call: &Call) -> Result<Made, ToolkitError> {
    spawn_worker_for(exe, call, worker_timeout()?)
}

/// [`spawn_worker`] with a deadline of `timeout`.
fn spawn_worker_for(
    exe: &Path,
    call: &Call,
    timeout: std::time::Duration,
) -> Result<Made, ToolkitError> {
    let died = |status: String| ToolkitError::WorkerDied {
        library: call.library(),
        what: call.describe(),
        status,
    };
    let mut child = Command::new(exe)
        .arg(WORKER_ARG)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| died(format!("could not start {}: {e}", exe.display())))?;
    let request = encode_call(call);
    let mut stdin = child.stdin.take();
    // Written from a thread while the output is read here: neither side
    // waits for the other with a full pipe.
    let writer = std::thread::spawn(move || {
        if let Some(s) = stdin.as_mut() {
            let _ = s.write_all(&request);
        }
    });
    // Read from threads while this one watches the clock: a worker that
    // hangs (a library that never returns) is killed at the deadline.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = std::time::Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if std::time::Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!(
                    "it did not finish in {} s (PTXSPEC_WORKER_TIMEOUT_S) and was killed",
                    timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_micros(500)),
            Err(e) => break Err(format!("lost: {e}")),
        }
    };
    let _ = writer.join();
    let output = std::process::Output {
        status: match status {
            Ok(s) => s,
            Err(why) => return Err(died(why)),
        },
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    let stderr = String::from_utf8_lossy(&output.stderr[..output.stderr.len().min(STDERR_KEPT)])
        .trim()
        .to_string();
    let said = if stderr.is_empty() {
        String::new()
    } else {
        format!("; it said: {stderr}")
    };
    match decode_reply(&output.stdout) {
        Some(reply) if output.status.success() => reply,
        _ => Err(died(format!("{}{said}", exit_status(&output.status)))),
    }
}

/// A worker that crashed: the library failed on what it was given.
const CRASHED: &str =
    "the library crashed on its input, which is damaged or not what ptxspec wrote";
/// A worker ended from outside.
const KILLED: &str = "the worker was ended from outside (by a user, a supervisor or the system, out of memory?), \
                      not by its input";

/// How long one call may take in a worker before the worker is killed
/// (`PTXSPEC_WORKER_TIMEOUT_S`, 1 to 86 400; default 600: far longer than
/// any compile or link of a kernel).
fn worker_timeout() -> Result<std::time::Duration, ToolkitError> {
    Ok(crate::settings::worker_timeout(
        &crate::settings::Env::process(),
    )?)
}

/// How a child ended, in words.
fn exit_status(status: &std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            // A crash is the library's on its input; the others come from
            // outside the worker (a user, a supervisor, the OOM killer).
            let (name, why) = match sig {
                4 => (" (SIGILL)", CRASHED),
                6 => (" (SIGABRT)", CRASHED),
                7 => (" (SIGBUS)", CRASHED),
                8 => (" (SIGFPE)", CRASHED),
                11 => (" (SIGSEGV)", CRASHED),
                1 => (" (SIGHUP)", KILLED),
                2 => (" (SIGINT)", KILLED),
                9 => (" (SIGKILL)", KILLED),
                15 => (" (SIGTERM)", KILLED),
                _ => ("", KILLED),
            };
            return format!("killed by signal {sig}{name}: {why}");
        }
    }
    match status.code() {
        Some(c) => format!("exited with status {c} before giving a result"),
        None => "ended without a status".into(),
    }
}

/// The worker's side: reads one call from `input`, makes it, writes the
/// reply to `output`. Returns whether a reply was written.
pub fn serve(mut input: impl Read, mut output: impl Write) -> bool {
    let mut request = Vec::new();
    if input.read_to_end(&mut request).is_err() {
        return false;
    }
    let reply = match decode_call(&request) {
        Some(call) => call.run_here(),
        None => Err(ToolkitError::InWorker {
            library: "ptxspec",
            message: "the toolkit worker received a request it cannot read".into(),
        }),
    };
    output.write_all(&encode_reply(&reply)).is_ok() && output.flush().is_ok()
}

// The frames: a tag byte, then fields, each a u64 length (little endian)
// and its bytes; lists are a count then their items.

struct Writer(Vec<u8>);

impl Writer {
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(&(b.len() as u64).to_le_bytes());
        self.0.extend_from_slice(b);
        self
    }
    fn count(&mut self, n: usize) -> &mut Self {
        self.0.extend_from_slice(&(n as u64).to_le_bytes());
        self
    }
    fn strings(&mut self, list: &[String]) -> &mut Self {
        self.count(list.len());
        for s in list {
            self.bytes(s.as_bytes());
        }
        self
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn tag(&mut self) -> Option<u8> {
        let (&t, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(t)
    }
    fn count(&mut self) -> Option<usize> {
        let (n, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        usize::try_from(u64::from_le_bytes(*n)).ok()
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.count()?;
        if n > self.0.len() {
            return None;
        }
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(b)
    }
    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
    fn strings(&mut self) -> Option<Vec<String>> {
        let n = self.count()?;
        // Each string takes at least its 8-byte length: a count beyond that
        // is a damaged frame, not an allocation.
        if n > self.0.len() / 8 {
            return None;
        }
        (0..n).map(|_| self.string()).collect()
    }
}

const OUTPUTS: [nvrtc::Output; 3] = [
    nvrtc::Output::Ptx,
    nvrtc::Output::LtoIr,
    nvrtc::Output::Cubin,
];
const KINDS: [nvjitlink::InputKind; 6] = [
    nvjitlink::InputKind::Cubin,
    nvjitlink::InputKind::Ptx,
    nvjitlink::InputKind::LtoIr,
    nvjitlink::InputKind::Fatbin,
    nvjitlink::InputKind::Object,
    nvjitlink::InputKind::Library,
];

fn index_of<T: PartialEq>(all: &[T], x: &T) -> u8 {
    all.iter().position(|y| y == x).unwrap_or(0) as u8
}

fn encode_call(call: &Call) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    match call {
        Call::Nvrtc {
            source,
            name,
            options,
            output,
        } => {
            w.0.push(0);
            w.0.push(index_of(&OUTPUTS, output));
            w.bytes(source.as_bytes())
                .bytes(name.as_bytes())
                .strings(options);
        }
        Call::Nvvm { ir, name, options } => {
            w.0.push(1);
            w.bytes(ir.as_bytes())
                .bytes(name.as_bytes())
                .strings(options);
        }
        Call::NvJitLink { inputs, options } => {
            w.0.push(2);
            w.count(inputs.len());
            for (kind, bytes, name) in inputs {
                w.0.push(index_of(&KINDS, kind));
                w.bytes(bytes).bytes(name.as_bytes());
            }
            w.strings(options);
        }
    }
    w.0
}

fn decode_call(b: &[u8]) -> Option<Call> {
    let mut r = Reader(b);
    let call = match r.tag()? {
        0 => {
            let output = *OUTPUTS.get(r.tag()? as usize)?;
            Call::Nvrtc {
                source: r.string()?,
                name: r.string()?,
                options: r.strings()?,
                output,
            }
        }
        1 => Call::Nvvm {
            ir: r.string()?,
            name: r.string()?,
            options: r.strings()?,
        },
        2 => {
            let n = r.count()?;
            if n > r.0.len() / 17 {
                return None;
            }
            let inputs = (0..n)
                .map(|_| {
                    let kind = *KINDS.get(r.tag()? as usize)?;
                    Some((kind, r.bytes()?.to_vec(), r.string()?))
                })
                .collect::<Option<Vec<_>>>()?;
            Call::NvJitLink {
                inputs,
                options: r.strings()?,
            }
        }
        _ => return None,
    };
    r.0.is_empty().then_some(call)
}

fn encode_reply(reply: &Result<Made, ToolkitError>) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    match reply {
        Ok(m) => {
            w.0.push(0);
            w.bytes(&m.bytes).bytes(m.log.as_bytes());
        }
        Err(e) => {
            w.0.push(1);
            w.bytes(e.library().as_bytes())
                .bytes(e.to_string().as_bytes());
        }
    }
    w.0
}

fn decode_reply(b: &[u8]) -> Option<Result<Made, ToolkitError>> {
    let mut r = Reader(b);
    let reply = match r.tag()? {
        0 => Ok(Made {
            bytes: r.bytes()?.to_vec(),
            log: r.string()?,
        }),
        1 => {
            let library = r.string()?;
            Err(ToolkitError::InWorker {
                library: ["NVRTC", "libNVVM", "nvJitLink"]
                    .into_iter()
                    .find(|l| *l == library)
                    .unwrap_or("the toolkit"),
                message: r.string()?,
            })
        }
        _ => return None,
    };
    r.0.is_empty().then_some(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_replies_read_back_and_damage_is_refused() {
        let calls = [
            Call::Nvrtc {
                source: "__global__ void k() {}".into(),
                name: "k.cu".into(),
                options: vec!["-rdc=true".into(), "-dlto".into()],
                output: nvrtc::Output::LtoIr,
            },
            Call::Nvvm {
                ir: "target triple".into(),
                name: "defs".into(),
                options: vec![],
            },
            Call::NvJitLink {
                inputs: vec![
                    (nvjitlink::InputKind::LtoIr, vec![1, 2, 3], "a.cu".into()),
                    (nvjitlink::InputKind::LtoIr, vec![], "defs".into()),
                ],
                options: vec!["-arch=sm_90".into()],
            },
        ];
        for call in &calls {
            let b = encode_call(call);
            assert_eq!(decode_call(&b).as_ref(), Some(call));
            // Every truncation and one extra byte: refused, never a panic.
            for cut in 0..b.len() {
                assert_eq!(decode_call(&b[..cut]), None, "cut at {cut}");
            }
            let mut longer = b.clone();
            longer.push(0);
            assert_eq!(decode_call(&longer), None);
        }
        // A count of 2^60 strings in a short frame: refused, not allocated.
        let mut huge = vec![1u8];
        huge.extend_from_slice(&0u64.to_le_bytes());
        huge.extend_from_slice(&0u64.to_le_bytes());
        huge.extend_from_slice(&(1u64 << 60).to_le_bytes());
        assert_eq!(decode_call(&huge), None);
        let ok = Ok(Made {
            bytes: vec![7; 3],
            log: "info".into(),
        });
        assert_eq!(decode_reply(&encode_reply(&ok)), Some(ok));
        let err = Err(ToolkitError::InWorker {
            library: "nvJitLink",
            message: "bad".into(),
        });
        let back = decode_reply(&encode_reply(&err)).unwrap().unwrap_err();
        assert!(back.to_string().contains("bad"), "{back}");
    }

    /// Writes a shell script at `exe` that stands in for a worker: it reads
    /// its request, then runs `then`.
    fn stand_in_worker(exe: &Path, then: &str) {
        std::fs::write(exe, format!("#!/bin/sh\ncat >/dev/null\n{then}")).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }

    #[test]
    fn a_worker_that_dies_is_an_error_naming_the_call() {
        // `sh -c 'kill -SEGV $$'` stands in for a library that crashes.
        let dir = std::env::temp_dir().join(format!("ptxspec-worker-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("crashing-worker");
        stand_in_worker(&exe, "kill -SEGV $$\n");
        let call = Call::NvJitLink {
            inputs: vec![(
                nvjitlink::InputKind::LtoIr,
                vec![0; 100],
                "damaged.ltoir".into(),
            )],
            options: vec![],
        };
        let e = spawn_worker(&exe, &call).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, ToolkitError::WorkerDied { .. }), "{text}");
        assert!(
            text.contains("nvJitLink") && text.contains("linking damaged.ltoir"),
            "{text}"
        );
        assert!(
            text.contains("SIGSEGV") && text.contains("crashed on its input"),
            "{text}"
        );
        // One ended from outside mid-call (SIGKILL): the worker died, the
        // input is not blamed.
        stand_in_worker(&exe, "kill -KILL $$\n");
        let text = spawn_worker(&exe, &call).unwrap_err().to_string();
        assert!(
            text.contains("SIGKILL") && text.contains("ended from outside"),
            "{text}"
        );
        assert!(!text.contains("which is damaged"), "{text}");
        // One that hangs: killed at the deadline, said so.
        stand_in_worker(&exe, "sleep 30\n");
        let started = std::time::Instant::now();
        let text = spawn_worker_for(&exe, &call, std::time::Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("did not finish in 1 s") && started.elapsed().as_secs() < 10,
            "{text}"
        );
        // One that exits without a reply (as nvJitLink's exit()).
        stand_in_worker(&exe, "echo oops >&2\nexit 3\n");
        let text = spawn_worker(&exe, &call).unwrap_err().to_string();
        assert!(text.contains("status 3") && text.contains("oops"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A thread of the program takes no place (it never waits behind
    /// background workers); a background thread takes one.
    #[test]
    fn only_background_threads_take_a_worker_place() {
        static SLOTS: WorkerSlots = WorkerSlots::new();
        assert!(WorkerSlot::for_this_thread(&SLOTS).unwrap().is_none());
        assert_eq!(*SLOTS.running.lock().unwrap(), 0);
        std::thread::spawn(|| {
            super::super::exit::this_thread_works_in_the_background();
            let slot = WorkerSlot::for_this_thread(&SLOTS).unwrap();
            assert!(slot.is_some());
            assert_eq!(*SLOTS.running.lock().unwrap(), 1);
        })
        .join()
        .unwrap();
        assert_eq!(
            *SLOTS.running.lock().unwrap(),
            0,
            "the place was given back"
        );
    }

    /// However many threads ask, no more workers run at once than the
    /// limit: each worker notes its start and end in a file, and the
    /// starts never lead the ends by more than the limit — for several
    /// limits, with more threads than each.
    #[test]
    fn no_more_workers_run_at_once_than_the_limit() {
        let dir = std::env::temp_dir().join(format!("ptxspec-slots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (exe, log) = (dir.join("slow-worker"), dir.join("log"));
        stand_in_worker(
            &exe,
            &format!(
                "echo s >> {log}\nsleep 0.2\necho e >> {log}\nexit 3\n",
                log = log.display()
            ),
        );
        let call = Call::Nvvm {
            ir: String::new(),
            name: "slow".into(),
            options: vec![],
        };
        for limit in [1usize, 2, 3] {
            static SLOTS: WorkerSlots = WorkerSlots::new();
            let _ = std::fs::remove_file(&log);
            std::thread::scope(|s| {
                for _ in 0..limit + 3 {
                    s.spawn(|| {
                        let _slot = WorkerSlot::take(&SLOTS, limit);
                        let e = spawn_worker(&exe, &call).unwrap_err();
                        assert!(e.to_string().contains("status 3"), "{e}");
                    });
                }
            });
            let text = std::fs::read_to_string(&log).unwrap();
            let (mut running, mut most) = (0i64, 0i64);
            for line in text.lines() {
                running += if line == "s" { 1 } else { -1 };
                most = most.max(running);
            }
            assert_eq!(text.lines().count(), 2 * (limit + 3), "{text}");
            assert!(
                most >= 1 && most <= limit as i64,
                "limit {limit}: {most} at once"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
