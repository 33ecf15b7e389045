//! NVIDIA's compilers and linkers, found and loaded at run time like the
//! driver: NVRTC (CUDA C++ → PTX, LTO-IR), nvJitLink (LTO-IR → cubin),
//! libNVVM (NVVM IR → LTO-IR) and the device runtime library
//! (`libcudadevrt.a`). Nothing here needs a GPU.
//!
//! Each library is looked for, in order: the path in its environment
//! variable (`PTXSPEC_NVRTC`, `PTXSPEC_NVJITLINK`, `PTXSPEC_NVVM`,
//! `PTXSPEC_CUDADEVRT`); the dynamic loader's own search (`LD_LIBRARY_PATH`,
//! the system's library folders); a CUDA toolkit under `CUDA_PATH`,
//! `CUDA_HOME`, `/usr/local/cuda` or `/opt/cuda`; NVIDIA's PyPI wheels in
//! the active virtual environment, the user's and the system's Python
//! site-packages. A library that is nowhere is a [`ToolkitError::Missing`]
//! naming it and how to get it — never a panic.

pub mod nvjitlink;
pub mod nvrtc;
pub mod nvvm;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Why a tool of the toolkit could not do its work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolkitError {
    /// The library is not installed where ptxspec looks.
    #[error(
        "{library} not found ({what}); looked in: {}. Install the CUDA toolkit, or `pip install {wheel}`, \
         or set {env} to the file",
        searched.join(", ")
    )]
    Missing {
        library: &'static str,
        what: &'static str,
        wheel: &'static str,
        env: &'static str,
        searched: Vec<String>,
    },
    /// The library lacks a function ptxspec needs (too old a version).
    #[error("{library} at {path} has no function {symbol} (too old? ptxspec needs CUDA 12)")]
    Symbol {
        library: &'static str,
        path: String,
        symbol: &'static str,
    },
    /// A call failed; `log` is what the library said.
    #[error("{library}: {function} failed ({code}){}", if log.is_empty() { String::new() } else { format!(":\n{log}") })]
    Failed {
        library: &'static str,
        function: &'static str,
        code: String,
        log: String,
    },
}

/// One of the libraries ptxspec loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lib {
    Nvrtc,
    NvJitLink,
    Nvvm,
    /// `libcudadevrt.a`, a static library: found, never loaded.
    CudaDevRt,
}

impl Lib {
    fn name(self) -> &'static str {
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
            Lib::Nvrtc => "nvidia-cuda-nvrtc-cu12",
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

/// Roots of CUDA toolkits to look in.
fn toolkit_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["CUDA_PATH", "CUDA_HOME", "CUDA_ROOT"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect();
    roots.extend(["/usr/local/cuda", "/opt/cuda"].map(PathBuf::from));
    roots
}

/// Python site-packages folders that may hold NVIDIA's wheels.
pub fn site_packages() -> Vec<PathBuf> {
    let mut bases: Vec<PathBuf> = Vec::new();
    if let Some(v) = std::env::var_os("VIRTUAL_ENV") {
        bases.push(PathBuf::from(v).join("lib"));
    }
    if let Some(h) = std::env::var_os("HOME") {
        bases.push(PathBuf::from(h).join(".local/lib"));
    }
    bases.extend(["/usr/local/lib", "/usr/lib"].map(PathBuf::from));
    let mut out = Vec::new();
    for base in bases {
        let Ok(entries) = std::fs::read_dir(&base) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("python3"))
            })
            .collect();
        pythons.sort();
        for p in pythons.into_iter().rev() {
            out.push(p.join("site-packages"));
            out.push(p.join("dist-packages"));
        }
    }
    out.push(PathBuf::from("/usr/lib/python3/dist-packages"));
    out
}

/// Where `lib` is, as a file, or the list of places looked at. Names the
/// loader resolves by itself (sonames) are tried by [`load`], not here.
fn find_file(lib: Lib) -> Result<PathBuf, Vec<String>> {
    let mut searched = Vec::new();
    if let Some(p) = std::env::var_os(lib.env()) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        searched.push(format!("{}={} (no such file)", lib.env(), p.display()));
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    for root in toolkit_roots() {
        candidates.extend(lib.in_toolkit().iter().map(|r| root.join(r)));
    }
    for site in site_packages() {
        candidates.extend(lib.in_wheels().iter().map(|r| site.join(r)));
    }
    for c in candidates {
        if c.is_file() {
            return Ok(c);
        }
        if let Some(parent) = c.parent()
            && parent.is_dir()
        {
            searched.push(c.display().to_string());
        }
    }
    Err(searched)
}

fn missing(lib: Lib, mut searched: Vec<String>) -> ToolkitError {
    if !lib.sonames().is_empty() {
        searched.insert(
            0,
            format!("the library path ({})", lib.sonames().join(", ")),
        );
    }
    searched.push("CUDA_PATH, CUDA_HOME, /usr/local/cuda, /opt/cuda".into());
    searched.push("Python site-packages (NVIDIA's wheels)".into());
    ToolkitError::Missing {
        library: lib.name(),
        what: lib.what(),
        wheel: lib.wheel(),
        env: lib.env(),
        searched,
    }
}

/// The path of `libcudadevrt.a`.
pub fn cudadevrt() -> Result<PathBuf, ToolkitError> {
    find_file(Lib::CudaDevRt).map_err(|s| missing(Lib::CudaDevRt, s))
}

/// A loaded library and where it came from.
pub struct Loaded {
    pub lib: libloading::Library,
    pub path: String,
    which: Lib,
}

impl Loaded {
    /// A function of the library. The caller names the right signature.
    ///
    /// # Safety
    /// `F` must be the function's true type.
    pub unsafe fn get<F: Copy>(&self, symbol: &'static str) -> Result<F, ToolkitError> {
        let name = format!("{symbol}\0");
        // SAFETY: forwarded to the caller.
        unsafe { self.lib.get::<F>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|_| ToolkitError::Symbol {
                library: self.which.name(),
                path: self.path.clone(),
                symbol,
            })
    }
}

/// Loads `lib` once per process; later calls return the same handle (or
/// the same error).
pub fn load(lib: Lib) -> Result<&'static Loaded, ToolkitError> {
    static NVRTC: OnceLock<Result<Loaded, ToolkitError>> = OnceLock::new();
    static NVJITLINK: OnceLock<Result<Loaded, ToolkitError>> = OnceLock::new();
    static NVVM: OnceLock<Result<Loaded, ToolkitError>> = OnceLock::new();
    let cell = match lib {
        Lib::Nvrtc => &NVRTC,
        Lib::NvJitLink => &NVJITLINK,
        Lib::Nvvm => &NVVM,
        Lib::CudaDevRt => {
            return Err(ToolkitError::Failed {
                library: lib.name(),
                function: "load",
                code: "a static library is linked, not loaded".into(),
                log: String::new(),
            });
        }
    };
    cell.get_or_init(|| open(lib))
        .as_ref()
        .map_err(Clone::clone)
}

fn open(lib: Lib) -> Result<Loaded, ToolkitError> {
    let try_open = |p: &Path| {
        // SAFETY: loading one of NVIDIA's libraries runs its initializers,
        // which have no preconditions.
        unsafe { libloading::Library::new(p) }.ok().map(|l| Loaded {
            lib: l,
            path: p.display().to_string(),
            which: lib,
        })
    };
    // An explicit path wins over everything, then the loader's search.
    let explicit = std::env::var_os(lib.env()).map(PathBuf::from);
    if let Some(p) = explicit.as_deref().filter(|p| p.is_file())
        && let Some(l) = try_open(p)
    {
        return Ok(l);
    }
    for name in lib.sonames() {
        if let Some(l) = try_open(Path::new(name)) {
            return Ok(l);
        }
    }
    let file = find_file(lib).map_err(|s| missing(lib, s))?;
    try_open(&file).ok_or_else(|| ToolkitError::Failed {
        library: lib.name(),
        function: "dlopen",
        code: file.display().to_string(),
        log:
            "the file exists but could not be loaded (wrong architecture, or missing dependencies)"
                .into(),
    })
}

/// Whether `lib` can be loaded here (it is then loaded).
pub fn available(lib: Lib) -> bool {
    match lib {
        Lib::CudaDevRt => cudadevrt().is_ok(),
        _ => load(lib).is_ok(),
    }
}

/// Include folders of the CUDA headers (the runtime's `cuda_fp16.h`, CCCL's
/// `<cuda/...>`): `PTXSPEC_CUDA_INCLUDE` (colon-separated), else a toolkit's
/// `include`, else the wheels'.
pub fn cuda_include_dirs() -> Vec<PathBuf> {
    if let Some(v) = std::env::var_os("PTXSPEC_CUDA_INCLUDE") {
        return std::env::split_paths(&v).filter(|p| p.is_dir()).collect();
    }
    for root in toolkit_roots() {
        let inc = root.join("include");
        if inc.join("cuda_runtime.h").is_file() {
            return vec![inc];
        }
    }
    for site in site_packages() {
        let rt = site.join("nvidia/cuda_runtime/include");
        if rt.is_dir() {
            return [
                "cuda_runtime/include",
                "cuda_cccl/include",
                "cuda_nvcc/include",
            ]
            .iter()
            .map(|d| site.join("nvidia").join(d))
            .filter(|p| p.is_dir())
            .collect();
        }
    }
    Vec::new()
}

/// A C API's object (an NVRTC or libNVVM program, an nvJitLink handle),
/// destroyed by its library's destroy function when dropped, on every path
/// out of the call that made it.
pub(crate) struct Owned {
    pub raw: *mut std::ffi::c_void,
    destroy: unsafe extern "C" fn(*mut *mut std::ffi::c_void) -> std::ffi::c_int,
}

impl Owned {
    /// Owns `raw`, which `destroy` releases.
    pub fn new(
        raw: *mut std::ffi::c_void,
        destroy: unsafe extern "C" fn(*mut *mut std::ffi::c_void) -> std::ffi::c_int,
    ) -> Owned {
        Owned { raw, destroy }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: an object its library created, destroyed once.
        unsafe { (self.destroy)(&mut self.raw) };
    }
}

/// Strings as a C API takes them: NUL-terminated copies and the array of
/// pointers to them, which live as long as this value.
pub(crate) struct CStrings {
    _owned: Vec<std::ffi::CString>,
    ptrs: Vec<*const std::ffi::c_char>,
}

impl CStrings {
    /// The C strings of `items`, or the first item that holds a NUL byte.
    pub fn new(items: &[String]) -> Result<CStrings, String> {
        let owned = items
            .iter()
            .map(|o| std::ffi::CString::new(o.as_str()).map_err(|_| o.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let ptrs = owned.iter().map(|o| o.as_ptr()).collect();
        Ok(CStrings {
            _owned: owned,
            ptrs,
        })
    }
    pub fn len(&self) -> usize {
        self.ptrs.len()
    }
    pub fn as_ptr(&self) -> *const *const std::ffi::c_char {
        self.ptrs.as_ptr()
    }
}

/// Reads a size-then-fill pair of calls (`GetXSize`, `GetX`) into bytes.
pub(crate) fn read_sized(
    size: impl FnOnce(&mut usize) -> i32,
    fill: impl FnOnce(*mut u8) -> i32,
) -> Result<Vec<u8>, i32> {
    let mut n = 0usize;
    let rc = size(&mut n);
    if rc != 0 {
        return Err(rc);
    }
    let mut buf = vec![0u8; n];
    if n == 0 {
        return Ok(buf);
    }
    let rc = fill(buf.as_mut_ptr());
    if rc != 0 {
        return Err(rc);
    }
    Ok(buf)
}

/// A C string's bytes without the trailing NULs, as text.
pub(crate) fn text_of(mut bytes: Vec<u8>) -> String {
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_names_itself_and_the_wheel() {
        let e = missing(Lib::NvJitLink, vec!["/x/lib64/libnvJitLink.so".into()]);
        let msg = e.to_string();
        assert!(
            msg.starts_with("libnvJitLink not found (nvJitLink, CUDA's JIT linker)"),
            "{msg}"
        );
        assert!(msg.contains("pip install nvidia-nvjitlink-cu12"), "{msg}");
        assert!(msg.contains("PTXSPEC_NVJITLINK"), "{msg}");
        assert!(msg.contains("/x/lib64/libnvJitLink.so"), "{msg}");
    }
}
