//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use ptxspec_core::postlink::{self, BufferPlacement, Mode, Options, PostLinkedImage, Split};

pub mod harness;
#[path = "../../../../tests/support/redis_server.rs"]
pub mod redis_server;

/// Both places an emulated buffer can be.
pub const PLACEMENTS: [BufferPlacement; 2] = [BufferPlacement::Global, BufferPlacement::Param];

/// The workspace's root folder.
pub fn root() -> PathBuf {
    here().join("../..")
}

/// This package's folder (its `tests/corpus`, `tests/data`).
pub fn here() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The example kernels (`.cu`, and their NVRTC output in `ptx/`).
pub fn kernels_dir() -> PathBuf {
    root().join("kernels")
}

/// Where the committed NVRTC output of `kernels/<name>.cu` is.
pub fn kernel_ptx_path(name: &str) -> PathBuf {
    let dir = if name == "two_tu_single" {
        "ptx/test_only"
    } else {
        "ptx"
    };
    kernels_dir().join(dir).join(format!("{name}.ptx"))
}

/// The committed NVRTC output of `kernels/<name>.cu`.
pub fn kernel_ptx(name: &str) -> (String, String) {
    let path = kernel_ptx_path(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (format!("{name}.ptx"), text)
}

pub fn post_link(inputs: Vec<(String, String)>, mode: Mode, split: Split) -> Vec<PostLinkedImage> {
    post_link_with(
        inputs,
        &Options {
            mode,
            split,
            ..Default::default()
        },
    )
}

pub fn post_link_with(inputs: Vec<(String, String)>, opts: &Options) -> Vec<PostLinkedImage> {
    postlink::post_link(inputs, opts).unwrap_or_else(|e| panic!("{e}"))
}

/// NVIDIA's ptxas: `PTXSPEC_PTXAS`, else `ptxas` on PATH. The test command in
/// README.md installs it (ci/install-nvidia-tools.sh); the tests that need
/// it say so (`harness::NVIDIA`) and are reported ignored without it —
/// except under `PTXSPEC_REQUIRE_TOOLS=1` (CI), where that fails the run.
pub fn ptxas() -> PathBuf {
    find_ptxas().unwrap_or_else(|| {
        panic!(
            "ptxas not found: run the tests through `bash ci/test.sh`, or `source ci/install-nvidia-tools.sh` first"
        )
    })
}

/// `ptxas` as [`ptxas`] finds it, or `None`.
pub fn find_ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PTXSPEC_PTXAS") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("ptxas"))
            .find(|p| p.is_file())
    })
}

/// Assembles `ptx` for `arch` with no `-c`: every symbol must resolve.
pub fn assemble(ptx: &str, arch: &str, what: &str) {
    if let Err(e) = assembles(ptx, arch, false, what) {
        panic!("ptxas -arch={arch} rejected {what}:\n{e}\n--- PTX ---\n{ptx}");
    }
}

/// ptxas' verdict on `ptx` for `arch` (`sm_90`), with `-c` (relocatable:
/// unresolved functions allowed) or without.
pub fn assembles(ptx: &str, arch: &str, relocatable: bool, what: &str) -> Result<(), String> {
    let dir = tempdir(what);
    let input = dir.join("in.ptx");
    std::fs::write(&input, ptx).unwrap();
    let mut cmd = Command::new(ptxas());
    cmd.arg(format!("-arch={arch}"))
        .arg(&input)
        .arg("-o")
        .arg(dir.join("out.cubin"));
    if relocatable {
        cmd.arg("-c");
    }
    let out = cmd.output().expect("run ptxas");
    let _ = std::fs::remove_dir_all(&dir);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// CUDA C++ of one kernel `k(int *out, kernel_handler)` that stores one
/// `int` constant `sc` (default 7): the smallest source with a constant.
pub const ONE_CONSTANT_KERNEL: &str = r#"#include "ptxspec.cuh"
constexpr ptxspec::specialization_id<int> sc{7};
extern "C" __global__ void k(int *out, ptxspec::kernel_handler h) { *out = h.get_specialization_constant<sc>(); }
"#;

/// `ptxspec compile --lto` of [`ONE_CONSTANT_KERNEL`] (as `NAME.cu`) into
/// `dir/out`: the image's `.prop`.
pub fn one_constant_image(dir: &Path, name: &str) -> PathBuf {
    compiled_image(dir, name, ONE_CONSTANT_KERNEL)
}

/// `ptxspec compile --lto` of `source` (as `NAME.cu`) into `dir/out`: the
/// image's `.prop`.
pub fn compiled_image(dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.cu"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join("out");
    cli_ok(&[
        "compile".as_ref(),
        "--lto".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        src.as_os_str(),
    ]);
    out.join(format!("{name}.prop"))
}

/// `ptxspec cache keygen` into `dir`: (the secret key's file, the
/// public key's), named after `name`.
pub fn key_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let secret = dir.join(format!("{name}.secret"));
    let public = dir.join(format!("{name}.pub"));
    cli_ok(&[
        "cache".as_ref(),
        "keygen".as_ref(),
        "--secret".as_ref(),
        secret.as_os_str(),
        "--public".as_ref(),
        public.as_os_str(),
    ]);
    (secret, public)
}

/// A fresh directory under the target directory.
pub fn tempdir(what: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let safe: String = what
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{safe}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub const EXAMPLES: &[&str] = &[
    "conv3x3",
    "matmul",
    "pod",
    "scalars",
    "two_tu_single",
    "vec_types",
];

/// A SPIR-V tool (spirv-val, spirv-as, glslangValidator) from PATH; the test
/// command in README.md installs them (Debian's spirv-tools, glslang-tools).
pub fn spirv_tool(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file()))
        .unwrap_or_else(|| panic!("{name} not found: run the tests through `bash ci/test.sh`, which installs spirv-tools and glslang-tools"))
}

/// Runs a tool, failing the test with its output when it fails.
pub fn run_tool(tool: &Path, args: &[&std::ffi::OsStr], what: &str) {
    let out = Command::new(tool).args(args).output().expect("run tool");
    assert!(
        out.status.success(),
        "{} failed on {what}:\n{}{}",
        tool.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the `ptxspec` binary with `args`.
pub fn cli(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ptxspec"))
        .args(args)
        .output()
        .expect("run ptxspec")
}

/// Runs the `ptxspec` binary, which must succeed.
pub fn cli_ok(args: &[&std::ffi::OsStr]) -> std::process::Output {
    let out = cli(args);
    assert!(
        out.status.success(),
        "ptxspec {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
