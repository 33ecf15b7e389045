//! The runtime's error, with SYCL 2020's error categories.
//!
//! Two of its payloads come from `ptxspec-core` and are re-exported here on
//! purpose (part of this crate's API): [`PostLinkError`], from the post-link
//! of PTX given at run time, with the [`Location`] and [`Unresolved`] it
//! names and the PTX [`ParseError`]; [`ToolkitError`], from NVRTC,
//! nvJitLink and libNVVM; and [`SettingError`], an environment variable (or
//! a program's own setting) that is not valid.

pub use ptxspec_core::postlink::{Location, PostLinkError, Unresolved};
pub use ptxspec_core::ptx::ParseError;
pub use ptxspec_core::settings::SettingError;
pub use ptxspec_core::toolkit::ToolkitError;

/// SYCL 2020 `errc` values that ptxspec raises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Errc {
    /// `errc::runtime`.
    Runtime,
    /// `errc::invalid`.
    Invalid,
    /// `errc::kernel_argument`.
    KernelArgument,
    /// `errc::kernel_not_supported`.
    KernelNotSupported,
    /// `errc::nd_range`.
    NdRange,
    /// `errc::build`.
    Build,
    /// `errc::feature_not_supported`.
    FeatureNotSupported,
}

impl Errc {
    /// SYCL's spelling of it (`kernel_not_supported`), with which every
    /// [`Error`]'s message begins.
    pub fn name(self) -> &'static str {
        match self {
            Errc::Runtime => "runtime",
            Errc::Invalid => "invalid",
            Errc::KernelArgument => "kernel_argument",
            Errc::KernelNotSupported => "kernel_not_supported",
            Errc::NdRange => "nd_range",
            Errc::Build => "build",
            Errc::FeatureNotSupported => "feature_not_supported",
        }
    }
}

impl std::fmt::Display for Errc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Errors of kernel bundles and the CUDA runtime. Every message begins with
/// its SYCL category ([`Error::errc`], as SYCL spells it) and a colon:
/// `invalid: …`, `build: …`, `kernel_argument: …`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No CUDA driver (libcuda) could be loaded: this machine has no GPU,
    /// or no NVIDIA driver is installed.
    #[error("runtime: no CUDA driver found (libcuda could not be loaded): {0}")]
    NoDriver(String),
    /// A kernel name or ID that no registered image (or the bundle, or
    /// the selector's images) defines; `detail` says where it was looked
    /// for, with the names near it.
    #[error("invalid: {detail}")]
    #[non_exhaustive]
    KernelNotFound {
        /// The kernel asked for.
        kernel: String,
        /// The message.
        detail: String,
    },
    /// An operation on an object that cannot take it: what kind of misuse
    /// it is ([`Misuse`], for a program to match on) and the message.
    #[error("invalid: {detail}")]
    #[non_exhaustive]
    InvalidObject {
        /// The kind of misuse.
        misuse: Misuse,
        /// The message: what was asked of which object, and why it cannot.
        detail: String,
    },
    /// The device cannot run the kernel (or an image of the bundle), or
    /// the bundle given to `use_kernel_bundle` does not hold it (SYCL 2020).
    #[error("kernel_not_supported: {detail}")]
    #[non_exhaustive]
    KernelNotSupported {
        /// The kernel, where one kernel was asked for (`None`: an image of
        /// a bundle that a device cannot run; `detail` names it).
        kernel: Option<String>,
        /// The message: what the device lacks, or where the kernel was
        /// looked for.
        detail: String,
    },
    /// An unknown specialization constant, a value of the wrong size or
    /// type, or a value for an image compiled with its defaults.
    #[error("invalid: {detail}")]
    #[non_exhaustive]
    SpecConst {
        /// The constant's symbolic ID.
        id: String,
        /// The message.
        detail: String,
    },
    /// A launch whose work-group size differs from the kernel's required one.
    #[error(
        "nd_range: kernel {kernel} has a required work-group size of {required:?} but is launched with {given:?}"
    )]
    #[non_exhaustive]
    NdRange {
        /// The kernel.
        kernel: String,
        /// Its required work-group size.
        required: [u32; 3],
        /// The launch's.
        given: [u32; 3],
    },
    /// Arguments that do not match the kernel's parameters.
    #[error("kernel_argument: {detail}")]
    #[non_exhaustive]
    KernelArgument {
        /// The kernel launched.
        kernel: String,
        /// The argument that is wrong (its index among the caller's
        /// arguments), where one is; `None` for a wrong count.
        argument: Option<usize>,
        /// The message.
        detail: String,
    },
    /// An embedded image that cannot be read.
    #[error("build: device image {image}: {what}")]
    BadImage {
        /// The image's ID.
        image: String,
        /// What is wrong.
        what: String,
    },
    /// The post-link of PTX given at run time failed.
    #[error("build: {0}")]
    PostLink(#[from] PostLinkError),
    /// Functions that images of a link call and that none defines (SYCL's
    /// `link_program_error`), each with the image that calls it.
    #[error("build: link_program_error: undefined function{} {}", if .0.len() == 1 { "" } else { "s" }, .0.join(", "))]
    LinkProgram(Vec<String>),
    /// The driver's JIT (or linker) rejected an image; `log` is its error
    /// log.
    #[error("build: {what}{}", if log.is_empty() { String::new() } else { format!("\n{log}") })]
    Build {
        /// What was being built.
        what: String,
        /// The JIT's or linker's error log.
        log: String,
    },
    /// NVRTC, nvJitLink or libNVVM is missing or failed.
    #[error("build: {0}")]
    Toolkit(#[from] ToolkitError),
    /// NVRTC rejected a source given at run time
    /// ([`kernel_bundle_from_source`](crate::kernel_bundle_from_source));
    /// `log` is its log, whose lines name the source.
    #[error("build: {what}{}", if log.is_empty() { String::new() } else { format!("\n{log}") })]
    Compile {
        /// The source (its name as given), or the step that failed.
        what: String,
        /// NVRTC's log.
        log: String,
    },
    /// A CUDA driver call failed.
    #[error("runtime: CUDA driver: {0}")]
    Cuda(CudaError),
    /// A setting that is not valid: an environment variable of ptxspec's
    /// (the error names it), or the same setting given by the program.
    #[error("invalid: {0}")]
    Setting(#[from] SettingError),
    /// A file ptxspec was asked to write could not be (a key file of
    /// [`RemoteCache::generate_keys`](crate::RemoteCache::generate_keys)).
    #[error("runtime: {what}: {source}")]
    File {
        /// Which files, and what was being done.
        what: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// A broken invariant of ptxspec's runtime (a bug: please report it).
    #[error("runtime: internal error of ptxspec's runtime: {0}")]
    Internal(&'static str),
}

/// What a program asked of an object that cannot take it
/// ([`Error::InvalidObject`]): SYCL's `errc::invalid` by the kind of
/// mistake, so that a program can tell them apart without reading the
/// message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Misuse {
    /// An empty list where one item at least is needed (`link`, `join`,
    /// devices, sources).
    EmptyList,
    /// Things that disagree: one constant with two values in bundles
    /// linked or joined, two different images of one name.
    Conflict,
    /// Another device's object: memory of another device or context, a
    /// bundle not made for the queue's device, a kernel compatible with
    /// none of the devices asked for.
    OtherDevice,
    /// A command group's calls out of order (`use_kernel_bundle` after
    /// `set_specialization_constant`, or the other way round).
    CommandGroupOrder,
    /// A CUDA graph capture: a call a capturing (or not capturing) queue
    /// does not take, memory of another stream in a captured launch, work
    /// ptxspec did not launch in the capture, a stream that joined a
    /// capture its queue did not begin, a capture the driver invalidated.
    Capture,
    /// An index past the end: a graph's node, a buffer's element, more
    /// values than memory holds.
    OutOfRange,
    /// An image asked for what it was not built to have: LTO-IR, or a
    /// cubin of an image not built in LTO mode.
    NotBuiltForIt,
    /// The remote cache's configuration, where it is not a setting of the
    /// environment (its key files, as a program gives them).
    RemoteCache,
}

impl Error {
    /// `invalid` of the kind `misuse`, with the message `detail`.
    pub(crate) fn invalid(misuse: Misuse, detail: String) -> Error {
        Error::InvalidObject { misuse, detail }
    }

    /// `kernel_not_found` of `kernel`, with the message `detail`.
    pub(crate) fn kernel_not_found(kernel: &str, detail: String) -> Error {
        Error::KernelNotFound {
            kernel: kernel.to_string(),
            detail,
        }
    }

    /// `spec_const_error` of constant `id`, with the message `detail`.
    pub(crate) fn spec_const(id: &str, detail: String) -> Error {
        Error::SpecConst {
            id: id.to_string(),
            detail,
        }
    }

    /// `kernel_not_supported` (of `kernel`, where one was asked for), with
    /// the message `detail`.
    pub(crate) fn kernel_not_supported(kernel: Option<&str>, detail: String) -> Error {
        Error::KernelNotSupported {
            kernel: kernel.map(str::to_string),
            detail,
        }
    }

    /// The SYCL error category.
    pub fn errc(&self) -> Errc {
        match self {
            Error::NoDriver(_) | Error::Cuda(_) | Error::File { .. } | Error::Internal(_) => {
                Errc::Runtime
            }
            Error::KernelNotFound { .. }
            | Error::InvalidObject { .. }
            | Error::SpecConst { .. }
            | Error::Setting(_) => Errc::Invalid,
            Error::KernelNotSupported { .. } => Errc::KernelNotSupported,
            Error::KernelArgument { .. } => Errc::KernelArgument,
            Error::NdRange { .. } => Errc::NdRange,
            Error::BadImage { .. }
            | Error::PostLink(_)
            | Error::LinkProgram(_)
            | Error::Build { .. }
            | Error::Compile { .. }
            | Error::Toolkit(_) => Errc::Build,
        }
    }
}

/// A CUDA driver call that failed: the driver's status (`CUresult`) and
/// its words for it. ptxspec's own type, so that its errors do not change
/// with cudarc's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaError {
    pub(crate) status: u32,
    pub(crate) name: String,
    pub(crate) message: String,
}

impl CudaError {
    /// The driver's status, `CUresult`'s number (`CUDA_ERROR_OUT_OF_MEMORY`
    /// is 2).
    pub fn status(&self) -> u32 {
        self.status
    }

    /// The status's name (`CUDA_ERROR_OUT_OF_MEMORY`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The driver's description of it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for CudaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.name, self.status, self.message)
    }
}

impl From<ptxspec_core::image::ImageError> for Error {
    fn from(e: ptxspec_core::image::ImageError) -> Self {
        use ptxspec_core::image::ImageError;
        match e {
            ImageError::BadImage { image, what } => Error::BadImage { image, what },
            ImageError::Schema { image, source } => Error::BadImage {
                image,
                what: source.to_string(),
            },
            ImageError::SpecConst { id, what } => Error::SpecConst { id, detail: what },
            ImageError::KernelArgument {
                kernel,
                argument,
                what,
            } => Error::KernelArgument {
                kernel,
                argument,
                detail: what,
            },
            // A kind ptxspec-core added later: still an image that breaks
            // its contract.
            other => Error::BadImage {
                image: String::new(),
                what: other.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver error becomes ptxspec's own, with the status's number and
    /// name, whatever cudarc's type.
    #[test]
    fn driver_errors_are_ptxspecs_own() {
        use cudarc::driver::sys::CUresult;
        for (status, number, name) in [
            (
                CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                2,
                "CUDA_ERROR_OUT_OF_MEMORY",
            ),
            (
                CUresult::CUDA_ERROR_INVALID_VALUE,
                1,
                "CUDA_ERROR_INVALID_VALUE",
            ),
            (
                CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                901,
                "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
            ),
        ] {
            let Error::Cuda(e) = Error::from(cudarc::driver::DriverError(status)) else {
                panic!("{status:?}: not Error::Cuda");
            };
            assert_eq!((e.status(), e.name()), (number, name));
            assert!(
                e.to_string().starts_with(&format!("{name} ({number})")),
                "{e}"
            );
            assert_eq!(Error::Cuda(e).errc(), Errc::Runtime);
        }
    }

    /// Which variant `e` is, by a match without a wildcard: a variant added
    /// without a case here does not compile, so the test below covers
    /// every one.
    fn variant(e: &Error) -> &'static str {
        match e {
            Error::NoDriver(_) => "NoDriver",
            Error::KernelNotFound { .. } => "KernelNotFound",
            Error::InvalidObject { .. } => "InvalidObject",
            Error::KernelNotSupported { .. } => "KernelNotSupported",
            Error::SpecConst { .. } => "SpecConst",
            Error::NdRange { .. } => "NdRange",
            Error::KernelArgument { .. } => "KernelArgument",
            Error::BadImage { .. } => "BadImage",
            Error::PostLink(_) => "PostLink",
            Error::LinkProgram(_) => "LinkProgram",
            Error::Build { .. } => "Build",
            Error::Toolkit(_) => "Toolkit",
            Error::Compile { .. } => "Compile",
            Error::Cuda(_) => "Cuda",
            Error::Setting(_) => "Setting",
            Error::File { .. } => "File",
            Error::Internal(_) => "Internal",
        }
    }

    /// Every variant's message begins with its SYCL category and a colon,
    /// as SYCL spells the category — one rule, not a spelling per variant.
    #[test]
    fn every_message_begins_with_its_category() {
        let io = || std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let all = vec![
            Error::NoDriver("libcuda.so.1: not found".into()),
            Error::kernel_not_found("k", "kernel k: no image has it".into()),
            Error::invalid(Misuse::EmptyList, "link of an empty list".into()),
            Error::kernel_not_supported(Some("k"), "the device lacks fp64".into()),
            Error::spec_const("c", "constant c: 8 bytes given, 4 expected".into()),
            Error::NdRange {
                kernel: "k".into(),
                required: [32, 1, 1],
                given: [64, 1, 1],
            },
            Error::KernelArgument {
                kernel: "k".into(),
                argument: Some(1),
                detail: "argument 1: a value where a buffer goes".into(),
            },
            Error::BadImage {
                image: "i".into(),
                what: "no PTX".into(),
            },
            Error::PostLink(PostLinkError::Internal("a test".into())),
            Error::LinkProgram(vec!["helper (called by image caller)".into()]),
            Error::Build {
                what: "image i".into(),
                log: "ptxas fatal".into(),
            },
            Error::Toolkit(ToolkitError::Missing {
                library: "libnvJitLink.so",
                what: "LTO links",
                wheel: "nvidia-nvjitlink-cu12",
                env: "PTXSPEC_NVJITLINK",
                searched: vec!["the library path".into()],
            }),
            Error::Compile {
                what: "a.cu".into(),
                log: String::new(),
            },
            Error::Cuda(CudaError {
                status: 2,
                name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
                message: "out of memory".into(),
            }),
            Error::Setting(SettingError::new(
                "PTXSPEC_TIER_AFTER_MS",
                std::ffi::OsStr::new("x"),
                "not a number",
            )),
            Error::File {
                what: "writing keys".into(),
                source: io(),
            },
            Error::Internal("a broken invariant"),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for e in &all {
            seen.insert(variant(e));
            let text = e.to_string();
            let category = format!("{}: ", e.errc());
            assert!(text.starts_with(&category), "{}: {text:?}", variant(e));
            assert!(
                !text[category.len()..].starts_with(&category),
                "{}: the category twice: {text:?}",
                variant(e)
            );
        }
        assert_eq!(seen.len(), all.len(), "one of each variant");
    }
}
