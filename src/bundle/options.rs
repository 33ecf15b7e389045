//! Options of builds, and the build log they feed.

use std::sync::{Arc, Mutex};

/// A receiver of build logs.
pub type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Options of `compile`, `link` and `build` (the SYCL modules proposal's
/// `property::module::options`). Start from `BuildOptions::default()` and
/// set what you need with its `with_` methods (or its fields): options added
/// later keep their defaults.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct BuildOptions {
    /// A debug build: the JIT generates line information and does not
    /// optimize (`CU_JIT_GENERATE_LINE_INFO`, `CU_JIT_OPTIMIZATION_LEVEL`
    /// 0); LTO links with `-lineinfo`.
    pub debug: bool,
    /// Receives the build log as it is produced: the driver JIT's info and
    /// error logs, nvJitLink's information log. It is also kept on the
    /// bundle ([`KernelBundle::build_log`](super::KernelBundle::build_log)).
    pub log: Option<LogSink>,
    /// Runs the LTO link's NVIDIA libraries (libNVVM or NVRTC, nvJitLink)
    /// in child processes of this `ptxspec` binary (`cargo install
    /// ptxspec-cli`), so that images read from files that are damaged or
    /// hostile make an error ([`Error::Toolkit`](crate::Error::Toolkit)) instead of crashing the
    /// program. Images embedded in the program are trusted: leave it
    /// `None` for them (a link then costs no process start). Background
    /// links (tiers, adaptive arguments' variants) run at most
    /// `PTXSPEC_TIER_WORKERS` workers at once; a link the program waits for
    /// starts its worker at once.
    pub toolkit_worker: Option<std::path::PathBuf>,
}

impl BuildOptions {
    /// A debug build (see [`debug`](Self::debug)).
    #[must_use]
    pub fn with_debug(mut self, debug: bool) -> Self {
        self.debug = debug;
        self
    }

    /// Where the build log goes as it is produced (see [`log`](Self::log)).
    #[must_use]
    pub fn with_log(mut self, sink: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.log = Some(Arc::new(sink));
        self
    }

    /// Links in child processes of this `ptxspec` binary (see
    /// [`toolkit_worker`](Self::toolkit_worker)).
    #[must_use]
    pub fn with_toolkit_worker(mut self, ptxspec_binary: Option<std::path::PathBuf>) -> Self {
        self.toolkit_worker = ptxspec_binary;
        self
    }
}

impl std::fmt::Debug for BuildOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildOptions")
            .field("debug", &self.debug)
            .field("log", &self.log.as_ref().map(|_| "sink"))
            .field("toolkit_worker", &self.toolkit_worker)
            .finish()
    }
}

/// The build log of an executable bundle, shared by its clones and the
/// queues that load its images.
#[derive(Default)]
pub(crate) struct Log {
    pub(super) text: Mutex<String>,
    pub(super) sink: Option<LogSink>,
}

impl Log {
    pub(crate) fn push(&self, what: &str) {
        if what.trim().is_empty() {
            return;
        }
        let mut t = self.text.lock().unwrap_or_else(|p| p.into_inner());
        t.push_str(what);
        if !what.ends_with('\n') {
            t.push('\n');
        }
        if let Some(sink) = &self.sink {
            sink(what);
        }
    }
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Log")
    }
}
