//! The trace's spans and instants reach an NVTX tool (issue 68.1): a
//! stand-in injection library (`support/nvtx_injection.c`, built here with
//! the system's C compiler) named in `NVTX_INJECTION64_PATH` as Nsight
//! Systems names its own, takes the process's NVTX slots through the
//! export tables and logs every range and mark it is handed.
//!
//! - a process whose spans and instants run with the tool injected: each
//!   span a range (started, then ended with its own id, nested in order),
//!   each instant a mark, with or without a trace file recording;
//! - a tool whose initialization refuses, and a path that is no library:
//!   the process runs on, without ranges, and says so once;
//! - no variable: nothing is loaded.
//!
//! Each case is a child process (NVTX starts once per process): this
//! binary run again with `PTXSPEC_NVTX_CHILD` set. Reported ignored where
//! no C compiler is on PATH (failed under `PTXSPEC_REQUIRE_TOOLS=1`).

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "support/c_library.rs"]
mod c_library;

/// The child's work: a span holding a span, an instant, then a span while a
/// trace records.
fn child() {
    {
        let _link = ptxspec_core::trace::span("link (nvJitLink)", "link");
        let _stage = ptxspec_core::trace::span("link stage: add inputs", "link");
    }
    ptxspec_core::trace::instant("choice: lto", "choices", &[]);
    let dir = PathBuf::from(std::env::var_os("PTXSPEC_NVTX_CHILD").unwrap());
    ptxspec_core::trace::start(&dir.join("trace.json")).unwrap();
    drop(ptxspec_core::trace::span("module load (cubin)", "load"));
    ptxspec_core::trace::stop().unwrap();
}

fn tempdir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ptxspec-nvtx-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The injection library built into `dir` (`refuse`: one that refuses).
fn build_library(dir: &Path, refuse: bool) -> PathBuf {
    let source = include_str!("support/nvtx_injection.c");
    match refuse {
        true => c_library::build(
            "nvtx_injection.c",
            source,
            dir.join("librefuse.so"),
            &["-DREFUSE"],
        ),
        false => c_library::build("nvtx_injection.c", source, dir.join("libinject.so"), &[]),
    }
}

/// Runs the child with `injection` as NVTX_INJECTION64_PATH (or none):
/// its log (empty where the library never opened it) and its stderr.
fn run_child(dir: &Path, injection: Option<&Path>) -> (String, String) {
    let log = dir.join("nvtx.log");
    let _ = std::fs::remove_file(&log);
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env("PTXSPEC_NVTX_CHILD", dir)
        .env("PTXSPEC_TEST_NVTX_LOG", &log)
        .env_remove("NVTX_INJECTION64_PATH");
    if let Some(lib) = injection {
        cmd.env("NVTX_INJECTION64_PATH", lib);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (
        std::fs::read_to_string(&log).unwrap_or_default(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn spans_and_instants_are_nvtx_ranges_and_marks() {
    let dir = tempdir("ranges");
    let lib = build_library(&dir, false);
    let (log, _) = run_child(&dir, Some(&lib));
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        [
            "initialized, core 16 slots",
            "start 1 ptxspec: link (nvJitLink)",
            "start 2 ptxspec: link stage: add inputs",
            "end 2",
            "end 1",
            "mark ptxspec: choice: lto",
            "start 3 ptxspec: module load (cubin)",
            "end 3",
        ],
        "{log}"
    );
    // The trace recorded its span as well.
    let trace = std::fs::read_to_string(dir.join("trace.json")).unwrap();
    assert!(trace.contains("module load (cubin)"), "{trace}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn a_tool_that_fails_leaves_the_process_running_without_ranges() {
    let dir = tempdir("fails");
    let refusing = build_library(&dir, true);
    let missing = dir.join("no-such-library.so");
    for (lib, said) in [(&refusing, "refused"), (&missing, "no-such-library.so")] {
        let (log, stderr) = run_child(&dir, Some(lib));
        assert_eq!(log, "", "no range reached a tool");
        assert_eq!(
            stderr.lines().filter(|l| l.contains("NVTX")).count(),
            1,
            "said once, naming the library: {stderr}"
        );
        assert!(
            stderr.contains(said) && stderr.contains("NVTX_INJECTION64_PATH"),
            "{stderr}"
        );
    }
    let (log, stderr) = run_child(&dir, None);
    assert_eq!(log, "");
    assert!(!stderr.contains("NVTX"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() -> std::process::ExitCode {
    if std::env::var_os("PTXSPEC_NVTX_CHILD").is_some() {
        child();
        return std::process::ExitCode::SUCCESS;
    }
    let args = libtest_mimic::Arguments::from_args();
    let has_cc = c_library::cc_on_path();
    if !has_cc {
        if std::env::var_os("PTXSPEC_REQUIRE_TOOLS").is_some_and(|v| v == "1") {
            eprintln!("nvtx: PTXSPEC_REQUIRE_TOOLS=1, and no C compiler (cc) is on PATH");
            return std::process::ExitCode::FAILURE;
        }
        eprintln!("nvtx: no C compiler (cc) on PATH: the tests are ignored");
    }
    let tests: [(&str, fn()); 2] = [
        (
            "spans_and_instants_are_nvtx_ranges_and_marks",
            spans_and_instants_are_nvtx_ranges_and_marks,
        ),
        (
            "a_tool_that_fails_leaves_the_process_running_without_ranges",
            a_tool_that_fails_leaves_the_process_running_without_ranges,
        ),
    ];
    let trials = tests
        .into_iter()
        .map(|(name, test)| {
            libtest_mimic::Trial::test(name, move || {
                test();
                Ok(())
            })
            .with_ignored_flag(!has_cc)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}
