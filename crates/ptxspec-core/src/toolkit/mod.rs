//! NVIDIA's compilers and linkers, found and loaded at run time like the
//! driver: NVRTC (CUDA C++ → PTX, LTO-IR), nvJitLink (LTO-IR → cubin),
//! libNVVM (NVVM IR → LTO-IR) and the device runtime library
//! (`libcudadevrt.a`). Nothing here needs a GPU.
//!
//! Each library is looked for, in order: the path in its environment
//! variable (`PTXSPEC_NVRTC`, `PTXSPEC_NVJITLINK`, `PTXSPEC_NVVM`,
//! `PTXSPEC_CUDADEVRT`); the first folder of `LD_LIBRARY_PATH` and the
//! system's library folders that holds one of its sonames (the folders'
//! order decides between a CUDA 12 and a CUDA 13 library, then the sonames'
//! order); the dynamic loader's own search by soname (`/etc/ld.so.cache`,
//! the program's run path); a CUDA toolkit under `CUDA_PATH`,
//! `CUDA_HOME`, `/usr/local/cuda` or `/opt/cuda`; NVIDIA's PyPI wheels in
//! the active virtual environment, the user's and the system's Python
//! site-packages. A library that is nowhere is a [`ToolkitError::Missing`]
//! naming it and how to get it — never a panic.

//!
//! Each library is layered as cudarc layers the driver: its function table
//! is resolved once, when the library is first used (`Api` in each
//! module); a thin result layer turns status codes into [`ToolkitError`]s;
//! the safe functions ([`nvrtc::compile`], [`nvjitlink::link`],
//! [`nvvm::compile`]) own every C object they create (`ffi::Owned`, whose
//! construction from a raw handle is `unsafe`, destroys it on every path).
//!
//! **Threads.** libNVVM and NVRTC document that threads may call them at
//! once (on distinct programs), and their calls run side by side; nvJitLink's
//! documentation says nothing about threads, so its calls run one at a time
//! in a process, and links run side by side in worker processes instead
//! (`exit::concurrent_calls` cites each). No handle ever leaves the call
//! that made it. Exit waits for every call in flight (`exit`).
//!
//! **One toolkit.** LTO-IR must not be newer than the linker that reads it,
//! so libNVVM (which compiles the definitions of an LTO link) is looked for
//! first beside the nvJitLink that is loaded, and the definitions are
//! compiled with it only when it comes from there (or from
//! `PTXSPEC_NVVM`): `nvvm_matches_linker`.

pub mod exit;
mod ffi;
mod find;
#[macro_use]
mod library;
pub mod nvjitlink;
pub mod nvrtc;
pub mod nvvm;
pub mod worker;

pub(crate) use find::cuda_include_dirs;
pub use find::cudadevrt;
pub use library::{available, require};
pub(crate) use library::{file_identity, library_release, nvvm_matches_linker};

/// Why a tool of the toolkit could not do its work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolkitError {
    /// The library is not installed where ptxspec looks.
    #[error(
        "{library} not found ({what}); looked in: {}. Install the CUDA toolkit, or `pip install {wheel}`, \
         or set {env} to the file",
        searched.join(", ")
    )]
    Missing {
        /// The library's file name.
        library: &'static str,
        /// What it is for.
        what: &'static str,
        /// The PyPI wheel that ships it.
        wheel: &'static str,
        /// The variable that names the file.
        env: &'static str,
        /// Where ptxspec looked.
        searched: Vec<String>,
    },
    /// The library lacks a function ptxspec needs (too old a version).
    #[error("{library} at {path} has no function {symbol} (too old? ptxspec needs CUDA 12)")]
    Symbol {
        /// The library.
        library: &'static str,
        /// The file that was loaded.
        path: String,
        /// The missing function.
        symbol: &'static str,
    },
    /// A string handed to the library (an option, a source, a name) holds a
    /// NUL byte, which C strings cannot carry.
    #[error("{library}: the {what} holds {value}")]
    NulByte {
        /// The library.
        library: &'static str,
        /// What the string is.
        what: &'static str,
        /// Where the NUL byte is (line and column) and the text before it,
        /// bounded ([`nul_byte_at`]): never the whole string, which may be
        /// a source of megabytes.
        value: String,
    },
    /// A setting of ptxspec's (an environment variable) that is not valid.
    #[error(transparent)]
    Setting(#[from] crate::settings::SettingError),
    /// The worker process making a call ([`worker`]) died: the library
    /// crashed or exited on the input, or it was ended from outside;
    /// `status` says which.
    #[error("{library} died while {what} in ptxspec's toolkit worker: {status}")]
    WorkerDied {
        /// The library.
        library: &'static str,
        /// What it was doing.
        what: String,
        /// How the worker ended (its exit status or signal).
        status: String,
    },
    /// A call made in the worker process failed; `message` is its error.
    #[error("{message}")]
    InWorker {
        /// The library.
        library: &'static str,
        /// Its error.
        message: String,
    },
    /// A call failed; `log` is what the library said.
    #[error("{library}: {function} failed ({code}){}", if log.is_empty() { String::new() } else { format!(":\n{log}") })]
    Failed {
        /// The library.
        library: &'static str,
        /// The function that failed.
        function: &'static str,
        /// Its result code, by name.
        code: String,
        /// The library's log.
        log: String,
    },
}

impl ToolkitError {
    /// The library the error is about.
    pub fn library(&self) -> &'static str {
        match self {
            ToolkitError::Missing { library, .. }
            | ToolkitError::Symbol { library, .. }
            | ToolkitError::NulByte { library, .. }
            | ToolkitError::WorkerDied { library, .. }
            | ToolkitError::InWorker { library, .. }
            | ToolkitError::Failed { library, .. } => library,
            ToolkitError::Setting(_) => "ptxspec",
        }
    }
}

/// One of the libraries ptxspec loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lib {
    /// NVRTC: CUDA C++ to PTX and LTO-IR.
    Nvrtc,
    /// nvJitLink: links LTO-IR and PTX into cubins.
    NvJitLink,
    /// libNVVM: NVVM IR to LTO-IR (the values' definitions).
    Nvvm,
    /// `libcudadevrt.a`, a static library: found, never loaded.
    CudaDevRt,
}

impl Lib {
    /// The library's file name without its version (`libnvrtc`).
    pub fn name(self) -> &'static str {
        match self {
            Lib::Nvrtc => "libnvrtc",
            Lib::NvJitLink => "libnvJitLink",
            Lib::Nvvm => "libnvvm",
            Lib::CudaDevRt => "libcudadevrt.a",
        }
    }
    fn what(self) -> &'static str {
        match self {
            Lib::Nvrtc => "NVRTC, CUDA's run-time C++ compiler",
            Lib::NvJitLink => "nvJitLink, CUDA's JIT linker",
            Lib::Nvvm => "libNVVM, CUDA's NVVM IR compiler",
            Lib::CudaDevRt => "CUDA's device runtime library",
        }
    }
    fn wheel(self) -> &'static str {
        match self {
            // Kernels that include CUDA's headers (cuda_fp16.h, cuda/std)
            // need them too: NVRTC's wheel ships none.
            Lib::Nvrtc => {
                "nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12 nvidia-cuda-cccl-cu12 (NVRTC, and the CUDA \
                 headers that kernels including cuda_fp16.h or <cuda/std/...> need)"
            }
            Lib::NvJitLink => "nvidia-nvjitlink-cu12 (the same version as NVRTC)",
            Lib::Nvvm => "nvidia-cuda-nvcc-cu12",
            Lib::CudaDevRt => "nvidia-cuda-runtime-cu12",
        }
    }
    fn env(self) -> &'static str {
        match self {
            Lib::Nvrtc => "PTXSPEC_NVRTC",
            Lib::NvJitLink => "PTXSPEC_NVJITLINK",
            Lib::Nvvm => "PTXSPEC_NVVM",
            Lib::CudaDevRt => "PTXSPEC_CUDADEVRT",
        }
    }
    /// File names the dynamic loader may know.
    fn sonames(self) -> &'static [&'static str] {
        match self {
            Lib::Nvrtc => &["libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc.so"],
            Lib::NvJitLink => &[
                "libnvJitLink.so.12",
                "libnvJitLink.so.13",
                "libnvJitLink.so",
            ],
            Lib::Nvvm => &["libnvvm.so.4", "libnvvm.so"],
            Lib::CudaDevRt => &[],
        }
    }
    /// Paths relative to a toolkit's root.
    fn in_toolkit(self) -> &'static [&'static str] {
        match self {
            Lib::Nvrtc => &[
                "lib64/libnvrtc.so",
                "lib/libnvrtc.so",
                "targets/x86_64-linux/lib/libnvrtc.so",
            ],
            Lib::NvJitLink => &[
                "lib64/libnvJitLink.so",
                "lib/libnvJitLink.so",
                "targets/x86_64-linux/lib/libnvJitLink.so",
            ],
            Lib::Nvvm => &["nvvm/lib64/libnvvm.so", "nvvm/lib/libnvvm.so"],
            Lib::CudaDevRt => &[
                "lib64/libcudadevrt.a",
                "lib/libcudadevrt.a",
                "targets/x86_64-linux/lib/libcudadevrt.a",
            ],
        }
    }
    /// Paths relative to a site-packages folder (NVIDIA's wheels).
    fn in_wheels(self) -> &'static [&'static str] {
        match self {
            Lib::Nvrtc => &[
                "nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
                "nvidia/cu13/lib/libnvrtc.so.13",
            ],
            Lib::NvJitLink => &[
                "nvidia/nvjitlink/lib/libnvJitLink.so.12",
                "nvidia/cu13/lib/libnvJitLink.so.13",
            ],
            Lib::Nvvm => &[
                "nvidia/cuda_nvcc/nvvm/lib64/libnvvm.so",
                "nvidia/cu13/nvvm/lib64/libnvvm.so",
            ],
            Lib::CudaDevRt => &[
                "nvidia/cuda_runtime/lib/libcudadevrt.a",
                "nvidia/cu13/lib/libcudadevrt.a",
            ],
        }
    }
}

/// Where the NUL byte at byte `at` of `text` is, for messages: its line and
/// column, and at most 40 characters before it on its line, escaped.
pub fn nul_byte_at(text: &str, at: usize) -> String {
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |p| p + 1);
    let column = before[line_start..].chars().count() + 1;
    let excerpt: String = before[line_start..]
        .chars()
        .rev()
        .take(40)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!(
        "a NUL byte at line {line}, column {column}, after {:?}",
        excerpt
    )
}
