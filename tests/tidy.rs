//! Rules of the house that the compiler does not check, read from the
//! sources: where unsafe code may be (the facade's unsafe blocks and impls
//! in the driver layer, `src/runtime/cuda.rs`, and the `Pod` assertions,
//! `src/pod.rs`, alone; the build and command-line crates forbid it), and
//! that every file the crates read goes through `files::read_input`, and
//! that ARCHITECTURE.md names paths that exist. A break names the file and
//! line. (The map's layers: `tests/module_map.rs`.)

use std::path::{Path, PathBuf};

/// The files of the facade that may hold unsafe blocks and impls.
const UNSAFE_HOMES: [&str; 2] = ["src/runtime/cuda.rs", "src/pod.rs"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a line: what precedes a `//` comment.
fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

#[test]
fn unsafe_blocks_and_impls_live_in_two_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    assert!(files.len() > 20, "the facade's sources were not found");
    let mut found = Vec::new();
    let mut homes_used = 0;
    for file in &files {
        let relative = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(file).unwrap();
        let home = UNSAFE_HOMES.contains(&relative.as_str());
        let mut has_unsafe = false;
        for (n, line) in text.lines().enumerate() {
            let c = code(line);
            // A block or an impl; `unsafe fn` declarations (a public
            // contract, its body safe) are allowed where they are API.
            let unsafe_code = c.contains("unsafe {")
                || c.contains("unsafe impl")
                || c.contains("unsafe trait")
                || c.trim_end().ends_with("unsafe");
            if unsafe_code {
                has_unsafe = true;
                if !home {
                    found.push(format!("{relative}:{}: {}", n + 1, line.trim()));
                }
            }
        }
        if home && has_unsafe {
            homes_used += 1;
        }
    }
    assert!(
        found.is_empty(),
        "unsafe code outside the driver layer and pod.rs:\n{}",
        found.join("\n")
    );
    assert_eq!(
        homes_used,
        UNSAFE_HOMES.len(),
        "each home holds unsafe code"
    );
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    assert!(
        lib.contains("#![deny(unsafe_code)]"),
        "src/lib.rs denies unsafe code"
    );
}

#[test]
fn the_build_and_cli_crates_forbid_unsafe_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for root_file in [
        "crates/ptxspec-build/src/lib.rs",
        "crates/ptxspec-cli/src/lib.rs",
        "crates/ptxspec-cli/src/main.rs",
    ] {
        let text = std::fs::read_to_string(root.join(root_file)).unwrap();
        assert!(
            text.contains("#![forbid(unsafe_code)]"),
            "{root_file} forbids unsafe code"
        );
    }
}

/// Every file the crates read outside their tests goes through
/// `files::read_input` (a regular file, of a bounded size, checked before
/// reading: a FIFO would hang, a device never end) or a reader built on it;
/// a plain `std::fs::read` or `read_to_string` elsewhere fails here, naming
/// the file and line.
#[test]
fn every_file_read_is_bounded_and_regular() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    for krate in ["ptxspec-core", "ptxspec-build", "ptxspec-cli"] {
        rust_files(&root.join("crates").join(krate).join("src"), &mut files);
    }
    let mut found = Vec::new();
    for file in &files {
        let relative = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        // The one reader, and unit-test files.
        if relative.ends_with("src/files.rs") || relative.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        // A file's own unit tests, after `#[cfg(test)]`, may read freely.
        let code_end = text.find("#[cfg(test)]").unwrap_or(text.len());
        for (n, line) in text[..code_end].lines().enumerate() {
            let c = code(line);
            if c.contains("fs::read_to_string(") || c.contains("fs::read(") {
                found.push(format!("{relative}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "files read without files::read_input's checks:\n{}",
        found.join("\n")
    );
}

/// Every repository path ARCHITECTURE.md names in backticks (a word with a
/// `/`, or a file name with an extension) exists: as a file or folder whose
/// path ends with it (`runtime/cuda.rs`, `lto/remote/`, `tests/tidy.rs`).
/// The map names symbols where files move; a path it names must be there.
#[test]
fn every_path_the_map_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut all: Vec<String> = Vec::new();
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "target" || name.starts_with('.') {
                continue;
            }
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if path.is_dir() {
                out.push(format!("{rel}/"));
                walk(&path, root, out);
            } else {
                out.push(rel);
            }
        }
    }
    walk(root, root, &mut all);
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut named = 0;
    let mut missing = Vec::new();
    for (i, chunk) in map.split('`').enumerate() {
        // Odd pieces are inside backticks.
        if i % 2 == 0 || chunk.contains(' ') || chunk.contains("::") || chunk.contains('*') {
            continue;
        }
        let looks_like_a_path = chunk.contains('/')
            || [".rs", ".md", ".yaml", ".cuh", ".py", ".sh", ".txt"]
                .iter()
                .any(|e| chunk.ends_with(e));
        if !looks_like_a_path || chunk.starts_with("ptxspec:") || chunk.contains("://") {
            continue;
        }
        named += 1;
        let wanted = chunk.trim_start_matches("./");
        let found = all.iter().any(|p| {
            let folder = format!("{wanted}/");
            p == wanted
                || *p == folder
                || p.ends_with(&format!("/{wanted}"))
                || p.ends_with(&format!("/{folder}"))
        });
        if !found {
            missing.push(chunk.to_string());
        }
    }
    assert!(named > 20, "the map names paths: {named} found");
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

// The map's layers, circles and module sizes: tests/module_map.rs, which
// reads the code with `syn`.
