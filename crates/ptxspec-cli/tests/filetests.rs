//! Golden filetests of the post-link, in the manner of cranelift's and naga's.
//!
//! `filetests/<case>/` holds the input PTX (one file per translation unit,
//! taken in file-name order) whose first line is the case's header,
//! `// post-link: [--mode M] [--split S] [--buffer B]`, and `expected/` holds
//! every output the post-link writes for it (`<stem>.ptx`, `.prop`, `.sym`,
//! `table.txt`), plus `warnings.txt` when it warns, or `error.txt` (the error's
//! message) when it must fail. Outputs are compared byte for byte and the set
//! of files must match; every image is also assembled by ptxas for the
//! architecture it targets, in a test of its own (`CASE::assembles`), which
//! is reported ignored where NVIDIA's tools are missing (`common::harness`).
//!
//! Each case is its own test (`cargo test --test filetests CASE`). After an
//! intended change, `PTXSPEC_BLESS=1 cargo test --test filetests [CASE]`
//! rewrites `expected/`; review the diff and commit it with the change.
//! `ci/filetest_inputs.py` says where the inputs came from.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use ptxspec_core::postlink::{self, BufferPlacement, Mode, Options, Split};

const HEADER: &str = "// post-link:";

/// The post-link options a case's header asks for.
fn parse_header(case: &str, first_line: &str) -> Options {
    let rest = first_line
        .strip_prefix(HEADER)
        .unwrap_or_else(|| panic!("{case}: the first input must start with `{HEADER} [OPTIONS]`"));
    let mut opts = Options::default();
    let words: Vec<&str> = rest.split_whitespace().collect();
    for pair in words.chunks(2) {
        let [flag, value] = pair else {
            panic!("{case}: header option without a value: {pair:?}")
        };
        match (*flag, *value) {
            ("--mode", "emulated") => opts.mode = Mode::Emulated,
            ("--mode", "aot") => opts.mode = Mode::Aot,
            ("--split", "auto") => opts.split = Split::Auto,
            ("--split", "off") => opts.split = Split::Off,
            ("--split", "per_kernel") => opts.split = Split::PerKernel,
            ("--split", "per_source") => opts.split = Split::PerSource,
            ("--buffer", "auto") => opts.buffer = BufferPlacement::Auto,
            ("--buffer", "param") => opts.buffer = BufferPlacement::Param,
            ("--buffer", "global") => opts.buffer = BufferPlacement::Global,
            _ => panic!("{case}: unknown header option {flag} {value}"),
        }
    }
    opts
}

/// Files of a directory (not folders), by name.
fn files_in(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// What one case produces: output files by name, and the images' targets
/// (architecture, whether ptxas needs `-c`) by PTX file name.
struct Produced {
    files: BTreeMap<String, Vec<u8>>,
    assemble: Vec<(String, String, bool)>,
}

fn run_case(case: &str, dir: &Path) -> Produced {
    run_case_spelled(case, dir, |text| text.to_string())
}

/// [`run_case`] with each input's text rewritten by `spell` first.
fn run_case_spelled(case: &str, dir: &Path, spell: impl Fn(&str) -> String) -> Produced {
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ptx"))
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{case}: no input .ptx");
    let inputs: Vec<(String, String)> = inputs
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, spell(&std::fs::read_to_string(p).unwrap()))
        })
        .collect();
    let opts = parse_header(case, inputs[0].1.lines().next().unwrap_or(""));
    let out = tempdir(&format!("filetest-{case}"));
    let mut files = BTreeMap::new();
    let mut assemble = Vec::new();
    match postlink::post_link(inputs, &opts) {
        Err(e) => {
            files.insert("error.txt".to_string(), format!("{e}\n").into_bytes());
        }
        Ok(images) => {
            postlink::write_images(&out, &images, &[]).unwrap_or_else(|e| panic!("{case}: {e}"));
            files = files_in(&out);
            let warnings: String = images
                .iter()
                .flat_map(|img| {
                    img.warnings
                        .iter()
                        .map(move |w| format!("{}: {w}\n", img.stem))
                })
                .collect();
            if !warnings.is_empty() {
                files.insert("warnings.txt".to_string(), warnings.into_bytes());
            }
            for img in &images {
                let arch = img
                    .ptx
                    .lines()
                    .find_map(|l| l.trim().strip_prefix(".target "))
                    .and_then(|t| t.split([',', ' ']).next())
                    .unwrap_or_else(|| panic!("{case}: image {} has no .target", img.stem))
                    .to_string();
                assemble.push((
                    format!("{}.ptx", img.stem),
                    arch,
                    img.info.needs_device_runtime,
                ));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    Produced { files, assemble }
}

/// Where two texts first differ, for the failure message.
fn first_difference(expected: &[u8], actual: &[u8]) -> String {
    let (e, a) = (
        String::from_utf8_lossy(expected),
        String::from_utf8_lossy(actual),
    );
    for (n, pair) in e.lines().zip(a.lines()).enumerate() {
        if pair.0 != pair.1 {
            return format!(
                "line {}:\n    expected: {}\n    actual:   {}",
                n + 1,
                pair.0,
                pair.1
            );
        }
    }
    format!(
        "one is a prefix of the other ({} vs {} lines, {} vs {} bytes)",
        e.lines().count(),
        a.lines().count(),
        expected.len(),
        actual.len()
    )
}

/// Compares one case's outputs with its `expected/` (or, blessing, writes
/// them there).
fn check_case(case: &str, dir: &Path, bless: bool) -> Result<(), String> {
    let produced = run_case(case, dir);
    let expected_dir = dir.join("expected");
    if bless {
        let _ = std::fs::remove_dir_all(&expected_dir);
        std::fs::create_dir_all(&expected_dir).map_err(|e| e.to_string())?;
        for (name, bytes) in &produced.files {
            std::fs::write(expected_dir.join(name), bytes).map_err(|e| e.to_string())?;
        }
        eprintln!("filetests: blessed {case}; review `git diff filetests/{case}`");
        return Ok(());
    }
    let expected = files_in(&expected_dir);
    let mut failures = Vec::new();
    for name in expected.keys().filter(|n| !produced.files.contains_key(*n)) {
        failures.push(format!("expected/{name} was not produced"));
    }
    for (name, bytes) in &produced.files {
        match expected.get(name) {
            None => failures.push(format!("{name} produced, not in expected/")),
            Some(want) if want != bytes => failures.push(format!(
                "{name} differs from expected/{name}, {}",
                first_difference(want, bytes)
            )),
            Some(_) => {}
        }
    }
    if failures.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{case}: {} failure(s) (after an intended change: PTXSPEC_BLESS=1 cargo test --test filetests {case}, \
         then review the diff):\n{}",
        failures.len(),
        failures.join("\n")
    ))
}

/// Each case is its own test, named by its folder: `cargo test --test
/// filetests CASE` runs one.
/// Every image that `case` produces assembles with ptxas (a trial of its
/// own, which needs NVIDIA's tools; the goldens need nothing).
fn check_assembles(case: &str, dir: &Path) -> Result<(), String> {
    let produced = run_case(case, dir);
    let mut failures = Vec::new();
    for (file, arch, relocatable) in &produced.assemble {
        let ptx = String::from_utf8_lossy(&produced.files[file]).into_owned();
        if let Err(e) = assembles(&ptx, arch, *relocatable, &format!("{case}-{file}")) {
            failures.push(format!("ptxas -arch={arch} rejects {file}:\n{e}"));
        }
    }
    match (failures.is_empty(), produced.assemble.is_empty()) {
        (true, false) => Ok(()),
        (true, true) => Err(format!(
            "{case}: expected/ holds PTX, but the case produced no image to assemble"
        )),
        (false, _) => Err(format!("{case}:\n{}", failures.join("\n"))),
    }
}

/// `ptx` as a newer compiler spells its parameter space: a kernel's loads
/// `ld.param::entry`, a device function's `ld.param::func`, the arguments of
/// a call `st.param::func`.
fn spelled_with_sub_qualifiers(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len() + ptx.len() / 16);
    let mut in_kernel = false;
    for line in ptx.split_inclusive('\n') {
        if line.contains(".entry ") {
            in_kernel = true;
        } else if line.contains(".func ") {
            in_kernel = false;
        }
        let load = if in_kernel {
            "ld.param::entry."
        } else {
            "ld.param::func."
        };
        out.push_str(
            &line
                .replace("ld.param.", load)
                .replace("st.param.", "st.param::func."),
        );
    }
    out
}

/// `text` with the sub-qualifiers of [`spelled_with_sub_qualifiers`] taken
/// out again, and without the property that is a digest of the image's
/// PTX text (`ptx=`), which the spelling changes.
fn unspelled(text: &[u8]) -> Vec<u8> {
    String::from_utf8_lossy(text)
        .replace("ld.param::entry.", "ld.param.")
        .replace("ld.param::func.", "ld.param.")
        .replace("st.param::func.", "st.param.")
        .lines()
        .filter(|l| !l.starts_with("ptx="))
        .collect::<Vec<_>>()
        .join("\n")
        .into_bytes()
}

/// Every case spelled as a newer compiler spells its parameter space
/// (`ld.param::entry`, `ld.param::func`, `st.param::func`) post-links to its
/// goldens, the spelling aside: each pass reads the space from the
/// instruction model, where a sub-qualifier narrows its space and keeps it.
fn check_case_spelled(case: &str, dir: &Path) -> Result<(), String> {
    let produced = run_case_spelled(case, dir, spelled_with_sub_qualifiers);
    let expected = files_in(&dir.join("expected"));
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    if names(&expected) != names(&produced.files) {
        return Err(format!(
            "{case}, spelled with sub-qualifiers: produced {:?}, expected {:?}",
            names(&produced.files),
            names(&expected)
        ));
    }
    for (name, bytes) in &produced.files {
        let want = unspelled(&expected[name]);
        let got = unspelled(bytes);
        if want != got {
            return Err(format!(
                "{case}, spelled with sub-qualifiers: {name} differs, {}",
                first_difference(&want, &got)
            ));
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    let root = root().join("filetests");
    let bless = std::env::var_os("PTXSPEC_BLESS").is_some_and(|v| v == "1");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    let found = cases.len();
    let mut trials = vec![libtest_mimic::Trial::test(
        "filetests_are_found",
        move || {
            // A folder that moved would leave nothing to compare: that must fail.
            if found >= 30 {
                Ok(())
            } else {
                Err(format!("only {found} filetests under filetests/").into())
            }
        },
    )];
    let no_ptxas = harness::lacking(harness::NVIDIA);
    if let Some(why) = &no_ptxas
        && let Err(code) = harness::ignoring("filetests", "the `assembles` trials", why)
    {
        return code;
    }
    for dir in cases {
        let case = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // A case whose goldens hold PTX assembles it too.
        let has_ptx = files_in(&dir.join("expected"))
            .keys()
            .any(|n| n.ends_with(".ptx"));
        if has_ptx {
            let (case, dir) = (case.clone(), dir.clone());
            trials.push(
                libtest_mimic::Trial::test(format!("{case}::assembles"), move || {
                    check_assembles(&case, &dir).map_err(Into::into)
                })
                .with_ignored_flag(no_ptxas.is_some()),
            );
        }
        let (spelled_case, spelled_dir) = (case.clone(), dir.clone());
        trials.push(libtest_mimic::Trial::test(
            format!("{case}::sub_qualified"),
            move || check_case_spelled(&spelled_case, &spelled_dir).map_err(Into::into),
        ));
        trials.push(libtest_mimic::Trial::test(case.clone(), move || {
            check_case(&case, &dir, bless).map_err(Into::into)
        }));
    }
    libtest_mimic::run(&args, trials).exit_code()
}
