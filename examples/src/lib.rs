//! ptxspec's examples, benchmarks and GPU tests, and the example kernels
//! they share: `build.rs` compiles `kernels/*.cu` (or embeds the committed
//! `kernels/ptx`) into `$OUT_DIR/example_kernels.rs`, which each example,
//! bench and test `include!`s, so that its own binary registers the images.

pub mod reference;
pub mod same_name;
