//! ptxspec's example kernels and what the examples, benches and GPU tests
//! of the `ptxspec` package share. Not published: only `ptxspec`'s
//! dev-dependencies name it, so a user's build never compiles the kernels.
//!
//! `build.rs` compiles `kernels/*.cu` (or embeds the committed
//! `kernels/ptx`); each example, bench and test binary registers the images
//! with [`register_example_kernels!`].

pub mod reference;
pub mod same_name;

include!(concat!(env!("OUT_DIR"), "/register_example_kernels.rs"));
