//! # ptxspec-core
//!
//! The layers below ptxspec's three crates: what the post-link, the build
//! script support, the runtime and the command line share. An internal
//! crate: depend on `ptxspec` (applications), `ptxspec-build` (`build.rs`)
//! or install `ptxspec-cli`; this crate's API follows their needs.
//!
//! Its modules are layers, each importing only those below it: [`ptx`];
//! [`layout`], [`props`], [`features`], [`device_config`]; [`image`] (the
//! device-image contract); [`arguments`] and `tier_profile`; [`toolkit`];
//! [`lto`]; [`postlink`]; [`compile`] and `spirv` — with [`settings`],
//! [`files`], [`digest`] and [`notice`] used by all. ARCHITECTURE.md, in the
//! repository, is the map (what each layer holds and why); its order is
//! checked against the code by the repository's `tests/tidy.rs`.
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
pub mod choices;
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
pub mod trace;
