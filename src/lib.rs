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
//! Applications depend on this crate: kernel bundles ([`KernelBundle`],
//! [`get_kernel_bundle`], [`build`], ...), values ([`SpecId`]), devices and
//! queues ([`Queue`], [`runtime`]), CUDA graphs whose values change between
//! replays ([`Queue::capture`], [`Graph`]). A `build.rs` uses `ptxspec-build` to
//! compile and embed the kernels; the `ptxspec` command line is
//! `ptxspec-cli`.
//!
//! ```no_run
//! use ptxspec::{KernelId, SpecId, build, get_kernel_bundle_for};
//! const BLOCK: SpecId<i32> = SpecId::new("block_size_id");
//! let mut input = get_kernel_bundle_for(&[KernelId::new("matmul")])?;
//! input.set_specialization_constant(&BLOCK, 16)?;
//! let exe = build(&input)?;
//! # Ok::<(), ptxspec::Error>(())
//! ```

//! ## The trust model: device memory is data
//!
//! Launches are safe Rust. A safe call never lets a kernel reach host memory
//! (pinned, mapped or managed memory included), memory or code that ptxspec
//! or the program freed, or another process's memory, and never crashes the
//! process — whatever the program does with the other safe APIs it has,
//! cudarc's among them. A kernel parameter that the kernel's PTX may use as
//! an address (an analysis that fails closed) takes device memory only; a
//! number for it is refused. What a kernel does inside the device memory it
//! was given — its own indexing, a length too large — is the kernel's
//! contract: it corrupts device data, read back only as `bytemuck::Pod`,
//! never Rust's memory. Raw addresses ([`runtime::Arg::address`]), structs
//! holding pointers ([`runtime::Arg::bytes_with_addresses`]), a program's own
//! stream ([`Queue::from_stream`]) and foreign graph work
//! ([`runtime::Capturing::end_unchecked`]) take `unsafe`, each with what the
//! caller promises. The guide's page `docs/guide/trust-model.md` says it in
//! full.
//!
//! ## Environment
//!
//! | variable | what it sets |
//! |---|---|
//! | `PTXSPEC_NVRTC`, `PTXSPEC_NVJITLINK`, `PTXSPEC_NVVM` | the library file to load (it must exist; unset: the library path, `CUDA_PATH`, `/usr/local/cuda`, NVIDIA's wheels of the `python3` on `PATH`) |
//! | `PTXSPEC_CUDA_INCLUDE` | folders of CUDA headers for NVRTC (colon-separated) |
//! | `PTXSPEC_CUDADEVRT` | `libcudadevrt.a`, for images that launch kernels from device code |
//! | `PTXSPEC_CACHE_DIR` | the disk cache of linked cubins and compiled units (default `$XDG_CACHE_HOME/ptxspec` or `~/.cache/ptxspec`) |
//! | `PTXSPEC_CACHE_MAX_MB` | the most the disk cache holds (default 256) |
//! | `PTXSPEC_TIER_WORKERS` | background link workers of [`SpecMode::Tiered`], and toolkit worker processes of background links at once (default 2) |
//! | `PTXSPEC_TIER_AFTER_MS` | how long a tiered kernel runs with one value set before it is linked (default 5) |
//! | `PTXSPEC_TIER_PROFILE` | a file of the value sets tiered up: recorded by each process, fetched from the caches by the next (warm starts) |
//! | `PTXSPEC_TRACE` | a file to write a Chrome/Perfetto trace of what ptxspec decided and did to ([`trace`]) |
//! | `PTXSPEC_WORKER_TIMEOUT_S` | how long a call in a toolkit worker process may take before the worker is killed (default 600) |
//! | `PTXSPEC_REMOTE_CACHE`, `PTXSPEC_REMOTE_CA_FILE`, `PTXSPEC_CACHE_TRUSTED_KEYS`, `PTXSPEC_CACHE_SIGNING_KEY`, `PTXSPEC_REMOTE_TIMEOUT_MS`, `PTXSPEC_REMOTE_LEASE_MS` | the remote cubin cache (docs/guide/sharing.md) |
//!
//! A value that is not valid is an error naming the variable ([`Error::Setting`]).

#![deny(unsafe_code)]

pub mod bundle;
pub mod choices;
pub mod error;
pub mod image;
mod near;
mod pod;
#[doc(hidden)]
pub mod registry;
pub mod remote;
pub mod runtime;
pub mod source;
pub mod spec_id;
pub mod stats;
pub mod sycl_types;
pub mod trace;

/// Optional kernel features: the aspects and requirements of images and
/// devices, re-exported from `ptxspec-core` on purpose (part of this
/// crate's API).
pub mod features {
    pub use ptxspec_core::features::{Aspect, Requirements};
}

/// Kernel arguments as constants: a kernel's by-value parameters fixed to
/// values, linked so that the compiler sees literals
/// ([`bundle::BuiltImage::cubin_with_arguments`]; `ptxspec specialize
/// --arg`), re-exported from `ptxspec-core` on purpose (part of this
/// crate's API).
pub mod arguments {
    pub use ptxspec_core::arguments::{ArgumentError, FixedArguments, KernelParams, ParamKind};
}

/// The types of constants: what [`SpecConstType`]
/// describes a Rust type with (and [`spec_struct!`]
/// generates), re-exported from `ptxspec-core` on purpose (part of this
/// crate's API).
pub mod layout {
    pub use ptxspec_core::layout::{LayoutError, Member, ScalarKind, SpecType, StructType};
}

pub use bundle::{
    BuildOptions, BundleState, Device, DeviceImage, Executable, Input, Kernel, KernelBundle,
    KernelId, KernelName, Object, SpecMode, build, build_with, build_with_options, compile,
    compile_with, get_kernel_bundle, get_kernel_bundle_for, get_kernel_bundle_on,
    get_kernel_bundle_selected, get_kernel_bundle_selected_on, get_kernel_id, get_kernel_ids,
    has_kernel_bundle, has_kernel_bundle_in, has_kernel_bundle_of, is_compatible, join, link,
    link_with,
};
pub use error::{CudaError, Errc, Error, Misuse};
/// A cubin, and where it came from ([`BuiltImage::cubin_for_kernel`](bundle::BuiltImage::cubin_for_kernel)).
pub use ptxspec_core::lto::{Cubin, Source as CubinSource};
pub use remote::RemoteCache;
pub use runtime::{Arg, Graph, LaunchConfig, Queue};
pub use source::{SourceOptions, kernel_bundle_from_source};
pub use spec_id::{BF16, Bool, F16, Pad, SpecConstType, SpecId};
pub use stats::{Stats, stats};
pub use sycl_types::{Marray, SyclVec};

/// The `cudarc` this crate is built with: a program that brings its own
/// context, stream and slices ([`Queue::from_stream`], [`Arg::slice`]) uses
/// these types (or the same version of `cudarc`).
///
/// This interop is the one place where ptxspec's API names another crate's
/// types (`CudaContext`, `CudaStream`, `CudaSlice`), on purpose: a program
/// mixes its own cudarc work with ptxspec's on one stream. A new major
/// version of cudarc is therefore a new major version of ptxspec; errors
/// never carry cudarc's types ([`CudaError`] is ptxspec's own).
pub use cudarc;

/// Re-exported for the code `ptxspec-build` generates.
#[doc(hidden)]
pub use inventory;

/// The README's Rust examples, compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The guide's Rust examples (`docs/guide/values.md`), compiled as doc tests.
#[doc = include_str!("../docs/guide/values.md")]
#[cfg(doctest)]
pub struct GuideValuesDoctests;

/// The guide's Rust examples (`docs/guide/arguments.md`), compiled as doc
/// tests.
#[doc = include_str!("../docs/guide/arguments.md")]
#[cfg(doctest)]
pub struct GuideArgumentsDoctests;

/// The guide's Rust examples (`docs/guide/build-scripts.md`), compiled as
/// doc tests.
#[doc = include_str!("../docs/guide/build-scripts.md")]
#[cfg(doctest)]
pub struct GuideBuildScriptsDoctests;
