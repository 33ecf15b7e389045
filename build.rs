//! Embeds the example kernels for this crate's own examples, tests and
//! benches, which `include!` the generated `$OUT_DIR/example_kernels.rs`;
//! the library itself registers nothing.
//!
//! Where NVRTC is found (the test command installs it), the kernels are
//! compiled from `kernels/*.cu` with LTO-IR, as a user's build script
//! would with `build_support::CudaBuild`; elsewhere the committed PTX
//! (`kernels/ptx`, which CI checks is what NVRTC makes) is embedded, and
//! images carry no LTO-IR.
//!
//! A build script cannot depend on its own crate, so it compiles the
//! sources it needs directly.
#![allow(dead_code, unused_imports)]

#[path = "src/build_support.rs"]
mod build_support;
#[path = "src/compile.rs"]
mod compile;
#[path = "src/fasthash.rs"]
mod fasthash;
#[path = "src/features/mod.rs"]
mod features;
#[path = "src/files.rs"]
mod files;
#[path = "src/layout/mod.rs"]
mod layout;
#[path = "src/lto/mod.rs"]
mod lto;
#[path = "src/postlink/mod.rs"]
mod postlink;
#[path = "src/props/mod.rs"]
mod props;
#[path = "src/ptx/mod.rs"]
mod ptx;
#[path = "src/toolkit/mod.rs"]
mod toolkit;

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
    let from_sources = toolkit::available(toolkit::Lib::Nvrtc)
        && std::env::var_os("PTXSPEC_EMBED_COMMITTED_PTX").is_none();
    if from_sources {
        if let Err(e) = build_support::CudaBuild::new("kernels")
            .lto(true)
            .embed(&out)
        {
            panic!("compiling kernels/*.cu: {e}");
        }
    } else if let Err(e) = build_support::embed_ptx_dir("kernels/ptx", &out) {
        panic!("embedding kernels/ptx: {e}");
    }
}
