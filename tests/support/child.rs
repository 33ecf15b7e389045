//! Tests that need a process of their own (an exit, a fresh cache, what a
//! process has mapped) run this test binary again as a child that does
//! the test's child part, and read what it says on standard output.

use std::process::{Command, Output};

/// This test binary again, running test `test` alone with its output not
/// captured; the caller sets the variables that make the test do its
/// child's part.
pub fn this_test_again(test: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("the test binary's path"));
    c.args(["--exact", test, "--nocapture"]);
    c
}

/// The line of a child's standard output that starts with `prefix` (empty
/// where there is none), once the child has succeeded; a child that failed
/// fails the test with its standard error.
pub fn said(out: &Output, prefix: &str) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_default()
        .to_string()
}
