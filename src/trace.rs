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
