//! Loading a library once per process, and looking up the functions of its
//! table (which each library's module does once, in its `Api`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::find::{find_file, missing};
use super::{Lib, ToolkitError};
use crate::settings::Env;

/// A loaded library and the file it came from. Loaded libraries are never
/// unloaded (they live in statics), so function pointers taken from them
/// stay valid for the whole process.
pub(super) struct Loaded {
    lib: libloading::Library,
    /// The file, as far as it is known: the path opened, or the file the
    /// dynamic loader mapped for a name it resolved itself.
    pub path: PathBuf,
    /// How the library was found.
    pub origin: Origin,
    /// The file's identity ([`identity_of`]) when it was loaded: what the
    /// process runs, even if the file is replaced on disk since.
    identity: Option<Vec<u8>>,
    which: Lib,
}

/// How a library was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Origin {
    /// The file its environment variable names.
    Explicit,
    /// Beside the nvJitLink that is loaded (libNVVM of the same toolkit).
    BesideLinker,
    /// The loader's own search, a CUDA toolkit folder or a wheel.
    Searched,
}

impl Loaded {
    /// The function `symbol` of the library.
    ///
    /// # Safety
    /// `F` must be the function's true type (its C declaration's).
    pub unsafe fn get<F: Copy>(&self, symbol: &'static str) -> Result<F, ToolkitError> {
        let name = format!("{symbol}\0");
        // SAFETY: forwarded to the caller.
        unsafe { self.lib.get::<F>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|_| ToolkitError::Symbol {
                library: self.which.name(),
                path: self.path.display().to_string(),
                symbol,
            })
    }
}

/// Declares a library's function table from one list: the struct `Api`
/// of function pointers and `fn api()`, which resolves it once per process
/// ([`function_table`]). Each entry names the field, the C symbol and the
/// function's type as the library's header (`$header`) declares it — what
/// the table's one `unsafe` resolution relies on.
macro_rules! function_table {
    ($lib:expr, $header:literal, {
        $( $(#[$doc:meta])* $field:ident = $symbol:literal : $ty:ty ),* $(,)?
    }) => {
        #[doc = concat!("The library's functions (", $header, "), resolved once.")]
        struct Api {
            $( $(#[$doc])* $field: $ty, )*
        }

        fn api() -> Result<&'static Api, $crate::toolkit::ToolkitError> {
            static API: std::sync::OnceLock<Result<Api, $crate::toolkit::ToolkitError>> =
                std::sync::OnceLock::new();
            super::library::function_table(&API, $lib, |lib| {
                // SAFETY: each type is the function's declaration in the
                // library's header, as the table's entry gives it.
                unsafe { Ok(Api { $( $field: lib.get($symbol)?, )* }) }
            })
        }
    };
}

/// A library's function table (`Api` in each library's module, declared by
/// `function_table!`), resolved once per process: `resolve` looks its
/// functions up in the loaded library; later calls return the same table
/// (or the same error).
pub(super) fn function_table<T>(
    cell: &'static OnceLock<Result<T, ToolkitError>>,
    lib: Lib,
    resolve: impl FnOnce(&'static Loaded) -> Result<T, ToolkitError>,
) -> Result<&'static T, ToolkitError> {
    cell.get_or_init(|| resolve(load(lib)?))
        .as_ref()
        .map_err(Clone::clone)
}

/// Loads `lib` once per process; later calls return the same library (or
/// the same error).
pub(super) fn load(lib: Lib) -> Result<&'static Loaded, ToolkitError> {
    let Some(cell) = cell(lib) else {
        return Err(ToolkitError::Failed {
            library: lib.name(),
            function: "load",
            code: "a static library is linked, not loaded".into(),
            log: String::new(),
        });
    };
    let loaded = cell
        .get_or_init(|| {
            let _loading = super::exit::Loading::enter();
            let opened = open(lib);
            // Exit's hook after the destructors the load registered (exit
            // runs handlers newest first): once per library and process.
            if opened.is_ok() {
                super::exit::register_now();
            }
            opened
        })
        .as_ref()
        .map_err(Clone::clone)?;
    Ok(loaded)
}

/// The library, where this process has loaded it already.
fn static_loaded(lib: Lib) -> Option<&'static Loaded> {
    cell(lib)?.get()?.as_ref().ok()
}

type Cell = OnceLock<Result<Loaded, ToolkitError>>;

/// Where a loaded library lives (none for the static `libcudadevrt.a`).
fn cell(lib: Lib) -> Option<&'static Cell> {
    static NVRTC: Cell = OnceLock::new();
    static NVJITLINK: Cell = OnceLock::new();
    static NVVM: Cell = OnceLock::new();
    match lib {
        Lib::Nvrtc => Some(&NVRTC),
        Lib::NvJitLink => Some(&NVJITLINK),
        Lib::Nvvm => Some(&NVVM),
        Lib::CudaDevRt => None,
    }
}

fn try_open(lib: Lib, path: &Path, origin: Origin) -> Option<Loaded> {
    // SAFETY: loading one of NVIDIA's libraries runs its initializers,
    // which have no preconditions.
    let l = unsafe { libloading::Library::new(path) }.ok()?;
    // A bare name is resolved by the loader: find the file it mapped.
    let file = if path.components().count() == 1 {
        mapped_file(path.to_str().unwrap_or_default()).unwrap_or_else(|| path.to_path_buf())
    } else {
        path.to_path_buf()
    };
    Some(Loaded {
        lib: l,
        identity: identity_of(&file),
        path: file,
        origin,
        which: lib,
    })
}

fn open(lib: Lib) -> Result<Loaded, ToolkitError> {
    // An explicit path wins over everything, and is the only one tried: a
    // file that is not there, or does not load, is an error, never another
    // copy found elsewhere.
    if let Some(p) = crate::settings::library_file(&Env::process(), lib.env())? {
        return try_open(lib, &p, Origin::Explicit).ok_or_else(|| ToolkitError::Failed {
            library: lib.name(),
            function: "dlopen",
            code: format!("{}={}", lib.env(), p.display()),
            log: "the file exists but could not be loaded (not the library, the wrong \
                  architecture, or missing dependencies)"
                .into(),
        });
    }
    // libNVVM of the toolkit whose nvJitLink links its output.
    if lib == Lib::Nvvm
        && let Ok(linker) = load(Lib::NvJitLink)
    {
        for p in nvvm_beside(&linker.path) {
            if p.is_file()
                && let Some(l) = try_open(lib, &p, Origin::BesideLinker)
            {
                return Ok(l);
            }
        }
    }
    // The file the loader's folders hold first (what `file_identity`
    // names); then the loader's own search by soname, which also reads
    // `/etc/ld.so.cache` and the program's run path.
    if let Some((file, _)) = loader_search(lib)
        && let Some(l) = try_open(lib, &file, Origin::Searched)
    {
        return Ok(l);
    }
    for name in lib.sonames() {
        if let Some(l) = try_open(lib, Path::new(name), Origin::Searched) {
            return Ok(l);
        }
    }
    let file = find_file(lib).map_err(|s| missing(lib, s))?;
    try_open(lib, &file, Origin::Searched).ok_or_else(|| ToolkitError::Failed {
        library: lib.name(),
        function: "dlopen",
        code: file.display().to_string(),
        log:
            "the file exists but could not be loaded (wrong architecture, or missing dependencies)"
                .into(),
    })
}

/// Where libNVVM is in the toolkit (or wheel set) of the nvJitLink at
/// `linker`: `<root>/nvvm/lib64` for a toolkit's `lib64`, `lib` or
/// `targets/<arch>/lib`; `nvidia/cuda_nvcc/nvvm/lib64` beside the
/// `nvidia/nvjitlink` wheel; `nvidia/cu13/nvvm/lib64` in CUDA 13's.
fn nvvm_beside(linker: &Path) -> Vec<PathBuf> {
    let Some(dir) = linker.parent() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let up = |n: usize| dir.ancestors().nth(n).map(Path::to_path_buf);
    // A toolkit: <root>/lib64, <root>/lib, <root>/targets/<arch>/lib.
    for root in [up(1), up(3)].into_iter().flatten() {
        out.push(root.join("nvvm/lib64/libnvvm.so"));
    }
    // Wheels: <site>/nvidia/nvjitlink/lib, <site>/nvidia/cu13/lib.
    if let Some(nvidia) = up(2) {
        out.push(nvidia.join("cuda_nvcc/nvvm/lib64/libnvvm.so"));
        out.push(nvidia.join("cu13/nvvm/lib64/libnvvm.so"));
    }
    out
}

/// The file the dynamic loader mapped for the library named `soname`
/// (Linux: `/proc/self/maps`).
fn mapped_file(soname: &str) -> Option<PathBuf> {
    let stem = soname.split(".so").next().unwrap_or(soname);
    let maps = crate::files::read_input_text(std::path::Path::new("/proc/self/maps")).ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            Path::new(p)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(stem) && n[stem.len()..].starts_with(".so"))
        })
        .map(PathBuf::from)
}

/// The identity ([`identity_of`]) of the file `lib` is (or would be) loaded
/// from, without loading it: the loaded library's file as it was when
/// loaded; else the file the loader would open first (its environment
/// variable, the loader's search of `LD_LIBRARY_PATH` and the system's
/// library folders, then toolkits and wheels). `None` where the file
/// cannot be told.
pub(crate) fn file_identity(lib: Lib) -> Option<Vec<u8>> {
    match static_loaded(lib) {
        Some(l) => l.identity.clone(),
        None => file_to_load(lib).map(|(_, identity)| identity),
    }
}

/// The file of `lib` without loading it: the loaded one, else the one the
/// loader would open first.
fn library_file(lib: Lib) -> Option<PathBuf> {
    loaded_file(lib).or_else(|| file_to_load(lib).map(|(path, _)| path))
}

/// The file the loader would open first for `lib` — the one its
/// environment variable names (alone: `None` where that is no file, as
/// loading it would fail), else the loader's search, else a toolkit's or
/// wheel's — with its identity, from the one `stat` that found it.
fn file_to_load(lib: Lib) -> Option<(PathBuf, Vec<u8>)> {
    if let Some(p) = crate::settings::Env::process().get(lib.env()) {
        return regular_file(PathBuf::from(p));
    }
    loader_search(lib).or_else(|| find_file(lib).ok().and_then(regular_file))
}

/// `path` and its identity where it is a file (after links).
fn regular_file(path: PathBuf) -> Option<(PathBuf, Vec<u8>)> {
    let identity = identity_of(&path)?;
    Some((path, identity))
}

/// The release of `lib` as its file tells it on any machine: the file's
/// name (after links) and size — not its folder or time stamp, which
/// differ between machines that have the same release. Loads nothing.
pub(crate) fn library_release(lib: Lib) -> Option<String> {
    let path = std::fs::canonicalize(library_file(lib)?).ok()?;
    let size = std::fs::metadata(&path).ok()?.len();
    Some(format!("{} {size}", path.file_name()?.to_string_lossy()))
}

/// A file's identity, which a toolkit upgrade changes: where it is (its
/// device and inode, which no other file has while it exists; elsewhere
/// than Unix its canonical path), size and modification time, as raw
/// bytes (a key's input, never shown). `None` where `path` is not a file
/// (after links).
///
/// On Unix one `stat` call. Not `std::fs::metadata`: std answers a failed
/// look-up (the linker's search fails some) with a second system call that
/// probes for `statx`, and its first use costs a new process several
/// microseconds more, on the path of that process's first disk-cache hit.
#[cfg(unix)]
fn identity_of(path: &Path) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt as _;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call,
    // and `st` points to memory for one `struct stat`, which `stat` fills
    // when it returns 0.
    if unsafe { libc::stat(c_path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: `stat` returned 0, so it wrote the whole struct.
    let st = unsafe { st.assume_init() };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    let mut id = Vec::with_capacity(40);
    // The fields' types differ between Unix targets (`dev_t` is 32 bits on
    // some): widened to 64 bits each, whatever they are here.
    #[allow(clippy::unnecessary_cast)]
    for word in [
        st.st_dev as u64,
        st.st_ino as u64,
        st.st_size as u64,
        st.st_mtime as u64,
        st.st_mtime_nsec as u64,
    ] {
        id.extend_from_slice(&word.to_le_bytes());
    }
    Some(id)
}

#[cfg(not(unix))]
fn identity_of(path: &Path) -> Option<Vec<u8>> {
    let meta = std::fs::metadata(path).ok().filter(|m| m.is_file())?;
    let mut id = std::fs::canonicalize(path)
        .ok()?
        .to_string_lossy()
        .into_owned()
        .into_bytes();
    id.extend_from_slice(&meta.len().to_le_bytes());
    let modified = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    id.extend_from_slice(&modified.as_secs().to_le_bytes());
    id.extend_from_slice(&modified.subsec_nanos().to_le_bytes());
    Some(id)
}

/// The file of `lib` where this process has loaded it.
fn loaded_file(lib: Lib) -> Option<PathBuf> {
    // Only a library already loaded: `load` would load it.
    static_loaded(lib).map(|l| l.path.clone())
}

/// The first folder the dynamic loader searches (`LD_LIBRARY_PATH`, then
/// the usual system folders) that holds one of `lib`'s sonames, and the
/// first of them there. Folder by folder, not soname by soname: the
/// folders' order is the user's word on which toolkit to use (a CUDA 13
/// toolkit first in `LD_LIBRARY_PATH` wins over a CUDA 12 library in a
/// system folder), and the search ends at the toolkit's folder — two
/// `stat`s where a soname-first search tried every folder for each soname
/// the toolkit lacks (a dozen failed look-ups on a new process's first
/// disk-cache hit). [`open`] loads the file found here, so the file named
/// by [`file_identity`] is the file loaded.
fn loader_search(lib: Lib) -> Option<(PathBuf, Vec<u8>)> {
    search_folders(
        lib,
        crate::settings::Env::process()
            .get("LD_LIBRARY_PATH")
            .as_deref(),
    )
}

/// [`loader_search`] with `LD_LIBRARY_PATH` given.
fn search_folders(
    lib: Lib,
    ld_library_path: Option<&std::ffi::OsStr>,
) -> Option<(PathBuf, Vec<u8>)> {
    const SYSTEM: [&str; 7] = [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
        "/usr/local/lib",
    ];
    let listed = ld_library_path.into_iter().flat_map(std::env::split_paths);
    listed
        .chain(SYSTEM.iter().map(PathBuf::from))
        .find_map(|dir| {
            lib.sonames()
                .iter()
                .find_map(|name| regular_file(dir.join(name)))
        })
}

/// Whether `lib` can be loaded here (it is then loaded).
pub fn available(lib: Lib) -> bool {
    require(lib).is_ok()
}

/// `lib` loaded (or found, for `libcudadevrt.a`), or why not: the error
/// names the library, where it was looked for and how to get it.
pub fn require(lib: Lib) -> Result<(), ToolkitError> {
    match lib {
        Lib::CudaDevRt => super::cudadevrt().map(|_| ()),
        _ => load(lib).map(|_| ()),
    }
}

/// Whether the libNVVM that loads belongs with the nvJitLink that loads:
/// found beside it, or named by `PTXSPEC_NVVM` (the user's word). LTO-IR
/// that libNVVM makes must not be newer than the linker; where this is
/// false, the definitions of an LTO link are compiled by NVRTC instead.
pub(crate) fn nvvm_matches_linker() -> bool {
    load(Lib::Nvvm).is_ok_and(|l| matches!(l.origin, Origin::Explicit | Origin::BesideLinker))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvvm_is_looked_for_in_the_linkers_toolkit() {
        let has = |linker: &str, nvvm: &str| {
            nvvm_beside(Path::new(linker)).contains(&PathBuf::from(nvvm))
        };
        assert!(has(
            "/usr/local/cuda/lib64/libnvJitLink.so.12",
            "/usr/local/cuda/nvvm/lib64/libnvvm.so"
        ));
        assert!(has(
            "/opt/cuda/targets/x86_64-linux/lib/libnvJitLink.so",
            "/opt/cuda/nvvm/lib64/libnvvm.so"
        ));
        assert!(has(
            "/v/lib/python3.11/site-packages/nvidia/nvjitlink/lib/libnvJitLink.so.12",
            "/v/lib/python3.11/site-packages/nvidia/cuda_nvcc/nvvm/lib64/libnvvm.so"
        ));
        assert!(has(
            "/v/site-packages/nvidia/cu13/lib/libnvJitLink.so.13",
            "/v/site-packages/nvidia/cu13/nvvm/lib64/libnvvm.so"
        ));
        assert!(
            nvvm_beside(Path::new("libnvJitLink.so"))
                .iter()
                .all(|p| !p.is_absolute())
        );
    }

    #[test]
    fn the_first_folder_holding_a_soname_wins_and_the_search_names_its_file() {
        let root = std::env::temp_dir().join(format!("ptxspec-search-{}", std::process::id()));
        let (first, second) = (root.join("cuda13/lib64"), root.join("cuda12/lib64"));
        std::fs::create_dir_all(&first).unwrap();
        std::fs::create_dir_all(&second).unwrap();
        std::fs::write(first.join("libnvJitLink.so.13"), b"thirteen").unwrap();
        std::fs::write(second.join("libnvJitLink.so.12"), b"twelve").unwrap();
        let path = std::env::join_paths([&first, &second]).unwrap();
        let (found, identity) = search_folders(Lib::NvJitLink, Some(&path)).unwrap();
        // The earlier folder's CUDA 13 library, though `.so.12` is the
        // first soname: the folders' order is the user's.
        assert_eq!(found, first.join("libnvJitLink.so.13"));
        assert_eq!(Some(identity), identity_of(&found));
        // In one folder, the sonames' order; a folder (not a file) of a
        // soname's name is passed over.
        std::fs::write(first.join("libnvJitLink.so.12"), b"12 here").unwrap();
        let (found, _) = search_folders(Lib::NvJitLink, Some(&path)).unwrap();
        assert_eq!(found, first.join("libnvJitLink.so.12"));
        std::fs::remove_file(first.join("libnvJitLink.so.12")).unwrap();
        std::fs::remove_file(first.join("libnvJitLink.so.13")).unwrap();
        std::fs::create_dir(first.join("libnvJitLink.so.13")).unwrap();
        let (found, _) = search_folders(Lib::NvJitLink, Some(&path)).unwrap();
        assert_eq!(found, second.join("libnvJitLink.so.12"));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_replaced_library_file_has_another_identity() {
        let dir = std::env::temp_dir().join(format!("ptxspec-identity-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("libnvJitLink.so.12");
        std::fs::write(&file, b"version one").unwrap();
        let first = identity_of(&file).unwrap();
        assert_eq!(identity_of(&file), Some(first.clone()));
        // Reached through a link (as the loader's sonames are): the same.
        let link = dir.join("libnvJitLink.so");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(identity_of(&link), Some(first.clone()));
        // Replaced by another file of the same size and time stamp (an
        // upgrade renamed into place): another identity.
        let stamp = std::fs::metadata(&file).unwrap().modified().unwrap();
        let other = dir.join("new");
        std::fs::write(&other, b"version two").unwrap();
        std::fs::File::options()
            .append(true)
            .open(&other)
            .unwrap()
            .set_modified(stamp)
            .unwrap();
        std::fs::rename(&other, &file).unwrap();
        assert_ne!(identity_of(&file), Some(first.clone()));
        std::fs::write(&file, b"version three, longer").unwrap();
        assert_ne!(identity_of(&file), Some(first));
        assert_eq!(identity_of(&dir.join("absent")), None);
        // A folder is no library file.
        assert_eq!(identity_of(&dir), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
