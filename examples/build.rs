//! Embeds the example kernels for the examples, tests and benches of this
//! package, which `include!` the generated `$OUT_DIR/example_kernels.rs`.
//! No library of the workspace has a build script that compiles kernels:
//! this package is the only one.
//!
//! Where NVRTC is found (the test command installs it), the kernels are
//! compiled from `kernels/*.cu` with LTO-IR, as a user's build script
//! would with `ptxspec_build::CudaBuild`; elsewhere the committed PTX
//! (`kernels/ptx`, which CI checks is what NVRTC makes) is embedded, and
//! images carry no LTO-IR.

fn main() {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"))
        .join("example_kernels.rs");
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
        if let Err(e) = ptxspec_build::CudaBuild::new("kernels")
            .lto(true)
            .embed(&out)
        {
            panic!("compiling kernels/*.cu: {e}");
        }
    } else if let Err(e) = ptxspec_build::embed_ptx_dir("kernels/ptx", &out) {
        panic!("embedding kernels/ptx: {e}");
    }
}
