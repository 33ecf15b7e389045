//! Embeds the example kernels (`kernels/ptx/*.ptx`) for this crate's own
//! examples, tests and benches, which `include!` the generated
//! `$OUT_DIR/example_kernels.rs`; the library itself registers nothing.
//!
//! A build script cannot depend on its own crate, so it compiles the
//! post-link's sources directly (they need only `thiserror`). Users' build
//! scripts call `ptxspec::build_support::embed_ptx_dir` instead.
#![allow(dead_code, unused_imports)]

#[path = "src/build_support.rs"]
mod build_support;
#[path = "src/features/mod.rs"]
mod features;
#[path = "src/layout/mod.rs"]
mod layout;
#[path = "src/lto/mod.rs"]
mod lto;
#[path = "src/toolkit/mod.rs"]
mod toolkit;

#[path = "src/postlink/mod.rs"]
mod postlink;
#[path = "src/props/mod.rs"]
mod props;
#[path = "src/ptx/mod.rs"]
mod ptx;

fn main() {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"))
        .join("example_kernels.rs");
    if let Err(e) = build_support::embed_ptx_dir("kernels/ptx", &out) {
        panic!("embedding kernels/ptx: {e}");
    }
}
