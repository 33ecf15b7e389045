//! Where unsafe code may be: the facade's unsafe blocks and impls in the
//! driver layer (`src/runtime/cuda.rs`) and the `Pod` assertions
//! (`src/pod.rs`) alone, the rest of the crate denying it, and the build and
//! command-line crates forbidding it. A new `unsafe` elsewhere fails here,
//! naming the file and line (the lint catches it at build time too; this
//! says where it belongs).

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
