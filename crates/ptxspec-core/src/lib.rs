//! # ptxspec-core
//!
//! The layers below ptxspec's three crates: what the post-link, the build
//! script support, the runtime and the command line share. An internal
//! crate: depend on `ptxspec` (applications), `ptxspec-build` (`build.rs`)
//! or install `ptxspec-cli`; this crate's API follows their needs.
//!
//! Layers, each depending only on those above it:
//!
//! * [`ptx`]: PTX lexer, parser, module model and byte-exact printer (no
//!   specialization-constant knowledge);
//! * [`layout`]: constant types, numeric IDs, descriptors, buffer layout and
//!   default blob;
//! * [`props`]: property sets and DPC++'s `.prop` text format;
//! * [`features`], [`device_config`]: aspects, requirements, device
//!   configuration files and the aspect filter;
//! * [`toolkit`]: NVRTC, nvJitLink, libNVVM found and loaded at run time;
//! * [`lto`]: the `.ltoir` container, definitions of an LTO link, caches;
//! * [`image`]: the device-image contract — property sets of an image,
//!   kernel signatures, placement, delivery, launch parameters;
//! * [`postlink`]: link, find getters, call graph, rewrite, split, write
//!   images; [`compile`]: CUDA C++ to PTX and LTO-IR, then the post-link;
//! * [`spirv`]: native specialization constants in SPIR-V;
//!
//! ```
//! use ptxspec_core::layout::{Layout, Numbering, SpecConstant, SpecType, ScalarKind};
//! // The SYCL 2020 spec-constant design (DPC++): id_int(42), then id_A = {int, {float, float}}.
//! let a = SpecType::c_struct([
//!     SpecType::Scalar(ScalarKind::I32),
//!     SpecType::c_struct([SpecType::Scalar(ScalarKind::F32), SpecType::Scalar(ScalarKind::F32)]),
//! ]);
//! let layout = Layout::build(Numbering::Native, [
//!     SpecConstant::typed("id_int", SpecType::Scalar(ScalarKind::I32), 42i32.to_le_bytes().to_vec())?,
//!     SpecConstant::typed("id_A", a, vec![0; 12])?,
//! ])?;
//! assert_eq!(layout.get("id_A").unwrap().ids().collect::<Vec<_>>(), [1, 2, 3]);
//! # Ok::<(), ptxspec_core::layout::LayoutError>(())
//! ```

pub mod arguments;
pub mod compile;
pub mod device_config;
pub mod digest;
mod driver_symbols;
pub mod fasthash;
pub mod features;
pub mod files;
pub mod image;
pub mod layout;
pub mod lto;
pub mod notice;
pub mod postlink;
pub mod props;
pub mod ptx;
#[cfg(feature = "spirv")]
mod quiet_panic;
pub mod settings;
#[cfg(feature = "spirv")]
pub mod spirv;
#[cfg(test)]
mod test_util;
pub mod tier_profile;
pub mod toolkit;
