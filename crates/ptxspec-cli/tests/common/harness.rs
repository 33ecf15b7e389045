//! The end-to-end tests' harness (libtest-mimic): each test says what it
//! needs beyond Rust — NVIDIA's tools, a `redis-server` — and where this
//! machine lacks it the test is reported **ignored**, with a line naming
//! what is missing and how to get it: plain `cargo test` on a fresh clone
//! passes, and says what it did not run. Under `PTXSPEC_REQUIRE_TOOLS=1`
//! (`ci/test.sh` sets it: CI installs everything) a missing tool fails the
//! run instead, so that CI never passes by ignoring.

use std::process::ExitCode;
use std::sync::OnceLock;

/// What a test needs beyond Rust.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    /// `ptxas` and NVIDIA's libraries (NVRTC, nvJitLink, libNVVM,
    /// `libcudadevrt.a`).
    pub nvidia: bool,
    /// A `redis-server` on PATH.
    pub redis: bool,
    /// The SPIR-V tools (`spirv-val`, `spirv-as`, `glslangValidator`: Debian's
    /// spirv-tools and glslang-tools).
    pub spirv: bool,
}

/// Rust alone.
pub const NOTHING: Needs = Needs {
    nvidia: false,
    redis: false,
    spirv: false,
};
/// NVIDIA's tools.
pub const NVIDIA: Needs = Needs {
    nvidia: true,
    ..NOTHING
};
/// NVIDIA's tools and a `redis-server`.
pub const NVIDIA_AND_REDIS: Needs = Needs {
    nvidia: true,
    redis: true,
    ..NOTHING
};
/// The SPIR-V tools.
pub const SPIRV: Needs = Needs {
    spirv: true,
    ..NOTHING
};

/// NVIDIA's tools that this machine lacks, in words (`None`: all there).
pub fn nvidia_missing() -> Option<&'static str> {
    static MISSING: OnceLock<Option<String>> = OnceLock::new();
    MISSING
        .get_or_init(|| {
            use ptxspec_core::toolkit::{Lib, require};
            let mut missing = Vec::new();
            if super::find_ptxas().is_none() {
                missing.push("ptxas".to_string());
            }
            for lib in [Lib::Nvrtc, Lib::NvJitLink, Lib::Nvvm, Lib::CudaDevRt] {
                if require(lib).is_err() {
                    missing.push(lib.name().to_string());
                }
            }
            (!missing.is_empty()).then(|| {
                format!(
                    "NVIDIA's tools are missing ({}): `source ci/install-nvidia-tools.sh` installs them \
                     (PyPI wheels, no GPU needed)",
                    missing.join(", ")
                )
            })
        })
        .as_deref()
}

/// Why this machine cannot run a test that needs `needs` (`None`: it can).
pub fn lacking(needs: Needs) -> Option<String> {
    let mut why = Vec::new();
    if needs.nvidia
        && let Some(m) = nvidia_missing()
    {
        why.push(m.to_string());
    }
    static REDIS: OnceLock<bool> = OnceLock::new();
    if needs.redis && !*REDIS.get_or_init(super::redis_server::installed) {
        why.push(
            "no redis-server on PATH (Debian's package redis-server; ci/test.sh installs it)"
                .into(),
        );
    }
    if needs.spirv {
        let missing: Vec<&str> = ["spirv-val", "spirv-as", "glslangValidator"]
            .into_iter()
            .filter(|t| !on_path(t))
            .collect();
        if !missing.is_empty() {
            why.push(format!(
                "the SPIR-V tools are missing ({}): Debian's spirv-tools and glslang-tools (ci/test.sh installs them)",
                missing.join(", ")
            ));
        }
    }
    (!why.is_empty()).then(|| why.join("; "))
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()))
}

/// Says that `which` tests of `file` are ignored because of `why` — or,
/// under `PTXSPEC_REQUIRE_TOOLS=1` (CI), that the run fails for it: the
/// exit code to end with.
pub fn ignoring(file: &str, which: &str, why: &str) -> Result<(), ExitCode> {
    if std::env::var_os("PTXSPEC_REQUIRE_TOOLS").is_some_and(|v| v == "1") {
        eprintln!("{file}: PTXSPEC_REQUIRE_TOOLS=1, and {why}");
        return Err(ExitCode::FAILURE);
    }
    eprintln!("{file}: {which} are ignored: {why}");
    Ok(())
}

/// Runs `tests` (name, test, what it needs) as libtest does: filters,
/// `--list`, `--ignored`, threads. `file` names the test file in the lines
/// it prints about what is missing.
pub fn run(file: &str, tests: Vec<(&'static str, fn(), Needs)>) -> ExitCode {
    run_unless(file, tests, |_| None)
}

/// [`run`], where `also(name)` gives a further reason this machine cannot
/// run a test (a multi-host test without network namespaces): reported
/// ignored too, with its reason — `PTXSPEC_REQUIRE_TOOLS` does not make it
/// a failure.
pub fn run_unless(
    file: &str,
    tests: Vec<(&'static str, fn(), Needs)>,
    also: impl Fn(&str) -> Option<String>,
) -> ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    let mut said = std::collections::BTreeSet::new();
    let mut trials = Vec::new();
    for (name, test, needs) in tests {
        let lacking = lacking(needs);
        if let Some(why) = &lacking
            && said.insert(why.clone())
            && let Err(code) = ignoring(file, "the tests that need them", why)
        {
            return code;
        }
        let other = also(name);
        if let Some(why) = &other
            && said.insert(why.clone())
        {
            eprintln!("{file}: ignored: {why}");
        }
        trials.push(
            libtest_mimic::Trial::test(name, move || {
                test();
                Ok(())
            })
            .with_ignored_flag(lacking.is_some() || other.is_some()),
        );
    }
    libtest_mimic::run(&args, trials).exit_code()
}
