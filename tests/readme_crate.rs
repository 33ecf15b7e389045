//! README's "A crate of your own", copied as a new user copies it: its four
//! blocks (each names its file on its first line) become a crate outside
//! this workspace, which cargo builds (NVRTC compiles the kernel in its
//! build script) and which then runs. No GPU: it builds the bundle and says
//! so; with one (`PTXSPEC_REQUIRE_GPU=1`), it prints the scaled values.
//!
//! The crate has its own target folder under cargo's test scratch folder:
//! a nested cargo cannot share the one the outer `cargo test` holds locked.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The README's fenced blocks, each with the file name its first line
/// gives (`# Cargo.toml`, `// build.rs` …).
fn blocks(readme: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("```") || line.len() == 3 {
            continue;
        }
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let Some(first) = body.first() else { continue };
        let name = first
            .strip_prefix("# ")
            .or_else(|| first.strip_prefix("// "))
            .and_then(|rest| rest.split([':', ' ']).next())
            .unwrap_or("");
        if !name.is_empty() {
            found.push((name.to_string(), body.join("\n") + "\n"));
        }
    }
    found
}

/// Writes the crate of README's section into `dir`, its dependencies on
/// this workspace's crates by path; returns the files written.
fn write_crate(dir: &Path, root: &Path) -> Vec<String> {
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let wanted = ["Cargo.toml", "kernels/scale.cu", "build.rs", "src/main.rs"];
    let mut written = Vec::new();
    for (name, text) in blocks(&readme) {
        if !wanted.contains(&name.as_str()) || written.contains(&name) {
            continue;
        }
        let text = text.replace("PATH/TO/ptxspec", &root.display().to_string());
        let path = dir.join(&name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        written.push(name);
    }
    // The versions this workspace has locked (and downloaded): cargo adds
    // the new crate's own entry and builds offline.
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    // Outside any workspace of ours: an empty one of its own.
    let manifest = dir.join("Cargo.toml");
    if let Ok(text) = std::fs::read_to_string(&manifest) {
        std::fs::write(&manifest, text + "\n[workspace]\n").unwrap();
    }
    written
}

fn the_readme_crate_builds_and_runs() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = scratch.join("readme-crate");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut written = write_crate(&dir, &root);
    written.sort();
    assert_eq!(
        written,
        ["Cargo.toml", "build.rs", "kernels/scale.cu", "src/main.rs"],
        "README's crate section lost a file"
    );
    // The device header is on CudaBuild's include path; the crate has no copy.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let started = std::time::Instant::now();
    let out = Command::new(&cargo)
        .args(["build", "--quiet", "--offline"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", scratch.join("readme-crate-target"))
        .env_remove("RUSTFLAGS")
        // What is tested is that it builds and runs; its debug info would
        // only take CI's disk.
        .env("CARGO_PROFILE_DEV_DEBUG", "false")
        .env("CARGO_INCREMENTAL", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "README's crate does not build:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("readme_crate: built in {:.1?}", started.elapsed());
    let run = Command::new(scratch.join("readme-crate-target/debug/mine"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "README's crate failed: {}{said}",
        String::from_utf8_lossy(&run.stderr)
    );
    let gpu = ptxspec::runtime::driver_available();
    let expected = if gpu {
        "[3.0, 3.0, 3.0, 3.0]\n"
    } else {
        "built; no GPU here to run it\n"
    };
    assert_eq!(said, expected);
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() -> std::process::ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    let nvrtc = ptxspec_core::toolkit::require(ptxspec_core::toolkit::Lib::Nvrtc);
    if let Err(e) = &nvrtc {
        eprintln!("readme_crate: NVRTC not found, the test is ignored: {e}");
    }
    let trial = libtest_mimic::Trial::test("the_readme_crate_builds_and_runs", || {
        the_readme_crate_builds_and_runs();
        Ok(())
    })
    .with_ignored_flag(nvrtc.is_err());
    libtest_mimic::run(&args, vec![trial]).exit_code()
}
