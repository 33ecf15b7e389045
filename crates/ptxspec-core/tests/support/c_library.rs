//! A C file of `tests/support` built into a shared library with the
//! system's C compiler, for the tests that inject or preload one (`nvtx`,
//! `exit_registrations`). They report themselves ignored where `cc` is
//! missing (failed under `PTXSPEC_REQUIRE_TOOLS=1`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether a C compiler (`cc`) is on PATH.
pub fn cc_on_path() -> bool {
    Command::new("cc").arg("--version").output().is_ok()
}

/// `tests/support/<source>` built as a shared library at `out`, with the
/// compiler's `extra` arguments.
pub fn build(source: &str, out: PathBuf, extra: &[&str]) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/support")
        .join(source);
    let o = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(&source)
        .args(extra)
        .output()
        .expect("cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}
