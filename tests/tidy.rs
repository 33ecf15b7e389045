//! Rules of the house that the compiler does not check, read from the
//! sources: where unsafe code may be (the facade's unsafe blocks and impls
//! in the driver layer, `src/runtime/cuda.rs`, and the `Pod` assertions,
//! `src/pod.rs`, alone; the build and command-line crates forbid it), and
//! that every file the crates read goes through `files::read_input`. A
//! break names the file and line.

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

/// `ptxspec-core`'s layers, lowest first (ARCHITECTURE.md's list): a module
/// imports only modules before it here, or the cross-cutting ones.
const CORE_LAYERS: [&str; 13] = [
    "ptx",
    "layout",
    "props",
    "features",
    "device_config",
    "image",
    "arguments",
    "tier_profile",
    "toolkit",
    "lto",
    "postlink",
    "compile",
    "spirv",
];

/// Small and used by every layer: they import none of the layers.
const CORE_CROSS_CUTTING: [&str; 8] = [
    "settings",
    "files",
    "digest",
    "notice",
    "fasthash",
    "quiet_panic",
    "driver_symbols",
    "test_util",
];

/// Every `crate::MODULE` a core module's code names (not its comments, not
/// its tests) is a module below it in [`CORE_LAYERS`], or a cross-cutting
/// one — which itself names no layer: no import runs up, so there is no
/// circle. Every core module is in one of the two lists.
#[test]
fn core_modules_import_only_modules_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/ptxspec-core/src");
    let mut modules = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let module = name.trim_end_matches(".rs").to_string();
        if module != "lib" {
            modules.push((module, entry.path()));
        }
    }
    let rank = |m: &str| CORE_LAYERS.iter().position(|l| *l == m);
    let mut wrong = Vec::new();
    for (module, path) in &modules {
        assert!(
            rank(module).is_some() || CORE_CROSS_CUTTING.contains(&module.as_str()),
            "core module {module} is in neither list: put it in its layer (and in ARCHITECTURE.md)"
        );
        let mut files = Vec::new();
        if path.is_dir() {
            rust_files(path, &mut files);
        } else {
            files.push(path.clone());
        }
        for file in files {
            if file.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            let mut in_tests = false;
            for (n, line) in text.lines().enumerate() {
                // A file's own test module, to its end.
                if line.starts_with("mod tests") || line.starts_with("pub(crate) mod tests") {
                    in_tests = true;
                }
                if in_tests {
                    continue;
                }
                let c = code(line);
                for (at, _) in c.match_indices("crate::") {
                    let used: String = c[at + 7..]
                        .chars()
                        .take_while(|ch| ch.is_ascii_alphanumeric() || *ch == '_')
                        .collect();
                    if used == *module || modules.iter().all(|(m, _)| *m != used) {
                        continue;
                    }
                    let allowed = match (rank(module), rank(&used)) {
                        (_, None) => true,
                        (Some(me), Some(it)) => it < me,
                        (None, Some(_)) => false,
                    };
                    if !allowed {
                        wrong.push(format!("{}:{}: {module} → {used}", file.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run up the layers:\n{}",
        wrong.join("\n")
    );
}

/// The facade's modules (`src/`) import each other without a circle, and
/// none reaches another through the crate root's re-exports (`crate::Item`
/// outside `lib.rs`; a macro's `$crate::` paths are its users'): `lib.rs`
/// declares and re-exports, it is no hub.
#[test]
fn the_facades_modules_form_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules: Vec<(String, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "lib.rs" {
            modules.push((name.trim_end_matches(".rs").to_string(), entry.path()));
        }
    }
    let mut edges: Vec<(String, String)> = Vec::new();
    let mut through_root = Vec::new();
    for (module, path) in &modules {
        let mut files = Vec::new();
        if path.is_dir() {
            rust_files(path, &mut files);
        } else {
            files.push(path.clone());
        }
        for file in files.iter().filter(|f| !f.ends_with("tests.rs")) {
            let text = std::fs::read_to_string(file).unwrap();
            for (n, line) in text.lines().enumerate() {
                if line.starts_with("mod tests") {
                    break;
                }
                let c = code(line).replace("$crate::", "");
                for (at, _) in c.match_indices("crate::") {
                    let used: String = c[at + 7..]
                        .chars()
                        .take_while(|ch| ch.is_ascii_alphanumeric() || *ch == '_')
                        .collect();
                    if used.starts_with(|ch: char| ch.is_ascii_uppercase()) {
                        through_root.push(format!("{}:{}: crate::{used}", file.display(), n + 1));
                    } else if used != *module && modules.iter().any(|(m, _)| *m == used) {
                        edges.push((module.clone(), used));
                    }
                }
            }
        }
    }
    assert!(
        through_root.is_empty(),
        "reached through lib.rs:\n{}",
        through_root.join("\n")
    );
    // A circle: a module that reaches itself.
    for (start, _) in &modules {
        let mut seen = vec![start.clone()];
        let mut frontier = vec![start.clone()];
        while let Some(m) = frontier.pop() {
            for (_, to) in edges.iter().filter(|(from, _)| *from == m) {
                assert!(to != start, "a circle of imports through {start} (via {m})");
                if !seen.contains(to) {
                    seen.push(to.clone());
                    frontier.push(to.clone());
                }
            }
        }
    }
}

/// The most lines a module's `mod.rs` in core may have: past it, the file
/// holds jobs of their own beside the module's (the LTO module once held
/// eight), which belong in files named for them.
const CORE_MOD_RS_MAX_LINES: usize = 600;

#[test]
fn cores_module_roots_stay_small() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("crates/ptxspec-core/src"), &mut files);
    let mut long = Vec::new();
    for file in files.iter().filter(|f| f.ends_with("mod.rs")) {
        let lines = std::fs::read_to_string(file).unwrap().lines().count();
        if lines > CORE_MOD_RS_MAX_LINES {
            long.push(format!(
                "{}: {lines} lines",
                file.strip_prefix(root).unwrap().display()
            ));
        }
    }
    assert!(
        files.iter().any(|f| f.ends_with("lto/remote/mod.rs")),
        "the walk found core's files"
    );
    assert!(
        long.is_empty(),
        "core's module roots over {CORE_MOD_RS_MAX_LINES} lines (split their jobs into files of their own): {long:?}"
    );
}
