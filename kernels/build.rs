//! Compiles the example kernels for ptxspec's own examples, tests and
//! benches. It writes `$OUT_DIR/example_kernels.rs` (what a user's build
//! script writes) and wraps it in the macro `register_example_kernels!`,
//! which `src/lib.rs` exports: each example, test and bench binary expands
//! it, so that its own binary registers the images (an `inventory` item in a
//! library that the binary never names could be dropped by the linker).
//!
//! Where NVRTC is found (the test command installs it), the kernels are
//! compiled from `*.cu` with LTO-IR, as a user's build script would with
//! `ptxspec_build::CudaBuild`; elsewhere the committed PTX (`ptx/`, which CI
//! checks is what NVRTC makes) is embedded, and images carry no LTO-IR.

use std::path::PathBuf;

fn main() {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let out = out_dir.join("example_kernels.rs");
    // Whether NVRTC is found depends on these: a change reruns this script.
    for env in [
        "PTXSPEC_EMBED_COMMITTED_PTX",
        "PTXSPEC_NVRTC",
        "LD_LIBRARY_PATH",
        "CUDA_PATH",
        "CUDA_HOME",
        "VIRTUAL_ENV",
    ] {
        println!("cargo:rerun-if-env-changed={env}");
    }
    let from_sources = ptxspec_build::nvrtc_available()
        && std::env::var_os("PTXSPEC_EMBED_COMMITTED_PTX").is_none();
    if from_sources {
        if let Err(e) = ptxspec_build::CudaBuild::new(".").lto(true).embed(&out) {
            panic!("compiling kernels/*.cu: {e}");
        }
    } else {
        if std::env::var_os("PTXSPEC_EMBED_COMMITTED_PTX").is_none() {
            // Said, not silent: a GPU run of such a build fails every LTO
            // test with "image … has no LTO-IR", far from the cause.
            println!(
                "cargo:warning=NVRTC not found: the example kernels embed their committed PTX, \
                 without LTO-IR (LTO and tiered tests then fail); `source ci/install-nvidia-tools.sh` \
                 first, or set PTXSPEC_EMBED_COMMITTED_PTX=1 to choose this"
            );
        }
        println!("cargo:rerun-if-changed=ptx");
        if let Err(e) = ptxspec_build::embed_ptx_dir("ptx", &out) {
            panic!("embedding kernels/ptx: {e}");
        }
    }
    let generated = std::fs::read_to_string(&out).expect("the file embed just wrote");
    let wrapped = format!(
        "/// Registers the example kernels' device images in the binary that\n\
         /// expands it (once per binary, at item level).\n\
         #[macro_export]\n\
         macro_rules! register_example_kernels {{\n    () => {{\n{generated}\n    }};\n}}\n"
    );
    let macro_file = out_dir.join("register_example_kernels.rs");
    std::fs::write(&macro_file, wrapped).expect("OUT_DIR is writable");
}
