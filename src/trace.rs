//! A trace a person opens: what ptxspec decided and did on the host's
//! timeline — links, each cache tier's look-up (hit or miss, and bytes),
//! lease waits, compiles, tier-ups, adaptive trials' verdicts, graph
//! updates — as a Chrome trace (JSON that Perfetto's UI and
//! `chrome://tracing` open).
//!
//! `PTXSPEC_TRACE=FILE` records one from a process's first bundle on and
//! writes it when the process exits; [`start`] and [`stop`] record one
//! around the work a program chooses. Off, each place that would record
//! costs one relaxed atomic load.

use std::path::{Path, PathBuf};

use crate::error::Error;

/// Starts recording a trace, to be written to `file` by [`stop`] (a
/// folder, or a file in a folder that does not exist, is
/// `Error::Setting` naming `PTXSPEC_TRACE`).
pub fn start(file: impl AsRef<Path>) -> Result<(), Error> {
    ptxspec_core::trace::start(file.as_ref()).map_err(trace_error)
}

/// Stops recording and writes the trace: its file and how many events it
/// holds; `None` where none was recording.
pub fn stop() -> Result<Option<(PathBuf, usize)>, Error> {
    ptxspec_core::trace::stop().map_err(trace_error)
}

/// A span of the program's own on the trace's timeline (category
/// `program`), from this call to its drop: a training step or a request
/// beside the links, loads and verdicts ptxspec recorded, so that a person
/// sees which of its steps each landed in. Nothing where no trace is
/// recording (one relaxed atomic load) — nor, with `nvtx`, where no
/// profiler injects NVTX.
pub fn program_span(name: &str) -> ProgramSpan {
    ProgramSpan(ptxspec_core::trace::span(name, "program"))
}

/// A span of the program's ([`program_span`]): recorded when dropped.
#[must_use = "the span ends when dropped"]
pub struct ProgramSpan(ptxspec_core::trace::Span);

impl ProgramSpan {
    /// Adds an argument, shown with the span.
    pub fn arg(&mut self, key: &str, value: impl std::fmt::Display) {
        self.0.arg(key, value);
    }
}

fn trace_error(e: ptxspec_core::trace::TraceError) -> Error {
    match e {
        ptxspec_core::trace::TraceError::Setting(s) => Error::Setting(s),
        ptxspec_core::trace::TraceError::Write { path, source } => Error::File {
            what: format!("the trace {}", path.display()),
            source,
        },
        other => Error::File {
            what: other.to_string(),
            source: std::io::Error::other("trace"),
        },
    }
}
