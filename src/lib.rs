//! # ptxspec
//!
//! SYCL 2020 specialization constants, kernel bundles and optional kernel
//! features for NVIDIA GPUs, through PTX.
//!
//! PTX has no specialization constants. A **post-link** step links the PTX of
//! several translation units, gives every symbolic ID its numeric IDs, lays out
//! one specialization-constant buffer by ascending ID, rewrites every getter
//! call into a load at the constant's offset (or an immediate), and writes
//! DPC++-compatible property sets.
//!
//! Layers, each depending only on those above it:
//!
//! * [`layout`]: constant types, numeric IDs, descriptors, buffer layout and
//!   default blob;
//! * [`props`]: property sets and DPC++'s `.prop` text format;
//! * [`ptx`]: PTX lexer, parser, module model and byte-exact printer;
//! * [`postlink`]: link, find getters, call graph, rewrite, split, write images;
//! * [`inspect`]: human-readable and JSON views used by the CLI.
//!
//! ```
//! use ptxspec::layout::{Layout, Numbering, SpecConstant, SpecType, ScalarKind};
//! // Seed 001: id_int(42), then id_A = {int, {float, float}}.
//! let a = SpecType::c_struct([
//!     SpecType::Scalar(ScalarKind::I32),
//!     SpecType::c_struct([SpecType::Scalar(ScalarKind::F32), SpecType::Scalar(ScalarKind::F32)]),
//! ]);
//! let layout = Layout::build(Numbering::Native, [
//!     SpecConstant::typed("id_int", SpecType::Scalar(ScalarKind::I32), 42i32.to_le_bytes().to_vec())?,
//!     SpecConstant::typed("id_A", a, vec![0; 12])?,
//! ])?;
//! assert_eq!(layout.get("id_A").unwrap().ids().collect::<Vec<_>>(), [1, 2, 3]);
//! # Ok::<(), ptxspec::layout::LayoutError>(())
//! ```

pub mod build_support;
pub mod bundle;
pub mod compile;
pub mod device_config;
pub mod error;
mod fasthash;
pub mod features;
pub mod files;
pub mod inspect;
pub mod layout;
pub mod lto;
pub mod postlink;
pub mod props;
pub mod ptx;
pub mod registry;
pub mod runtime;
pub mod spec_id;
pub mod spirv;
#[cfg(test)]
mod test_util;
pub mod toolkit;

pub use bundle::{
    BuildOptions, Device, DeviceImage, Executable, Input, KernelBundle, KernelId, Object, SpecMode,
    build, build_with, compile, get_kernel_bundle, get_kernel_bundle_for, get_kernel_bundle_with,
    get_kernel_ids, has_kernel_bundle, is_compatible, join, link,
};
pub use error::{Errc, Error};
pub use runtime::{Arg, LaunchConfig, Queue};
pub use spec_id::{Bool, F16, Pad, SpecConstType, SpecId};

/// Re-exported for the code `build_support` generates.
pub use inventory;

/// The README's Rust examples, compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
