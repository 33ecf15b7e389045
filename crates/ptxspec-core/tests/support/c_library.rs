//! A C file of the tests' support built into a shared library with the
//! system's C compiler, for the tests that inject or preload one (`nvtx`,
//! `exit_registrations`, and the root crate's tests of the libraries'
//! start). Its source is carried in the test binary (`include_str!`), so
//! that a copy of the binary elsewhere builds it too. They report
//! themselves ignored, or fail, where `cc` is missing.

use std::path::PathBuf;
use std::process::Command;

/// Whether a C compiler (`cc`) is on PATH.
pub fn cc_on_path() -> bool {
    Command::new("cc").arg("--version").output().is_ok()
}

/// `source`, the text of the C file `name`, built as a shared library at
/// `out` (the file written beside it), with the compiler's `extra`
/// arguments.
pub fn build(name: &str, source: &str, out: PathBuf, extra: &[&str]) -> PathBuf {
    let file = out.with_file_name(name);
    std::fs::write(&file, source).unwrap();
    let o = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(&file)
        .args(extra)
        .output()
        .expect("cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}
