//! Where NVIDIA's libraries and headers are: environment variables, CUDA
//! toolkits, NVIDIA's Python wheels.

use std::path::PathBuf;

use super::{Lib, ToolkitError};
use crate::settings::{Env, SettingError};

/// Roots of CUDA toolkits to look in.
pub(super) fn toolkit_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["CUDA_PATH", "CUDA_HOME", "CUDA_ROOT"]
        .iter()
        .filter_map(|v| Env::process().get(v))
        .map(PathBuf::from)
        .collect();
    roots.extend(["/usr/local/cuda", "/opt/cuda"].map(PathBuf::from));
    roots
}

/// Python site-packages folders that may hold NVIDIA's wheels.
pub(crate) fn site_packages() -> Vec<PathBuf> {
    let mut bases: Vec<PathBuf> = Vec::new();
    let env = Env::process();
    if let Some(v) = env.get("VIRTUAL_ENV") {
        bases.push(PathBuf::from(v).join("lib"));
    }
    if let Some(c) = env.get("CONDA_PREFIX") {
        bases.push(PathBuf::from(c).join("lib"));
    }
    if let Some(h) = env.get("HOME") {
        bases.push(PathBuf::from(h).join(".local/lib"));
    }
    bases.extend(["/usr/local/lib", "/usr/lib"].map(PathBuf::from));
    // The python3 on PATH knows its own folders (a venv's bin first on PATH
    // without activating it, pyenv, conda, `pip install --user`).
    let mut out: Vec<PathBuf> = python_site_packages().to_vec();
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
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

/// The site-packages folders of the `python3` on `PATH` (its own and the
/// user's), asked once per process; none where there is no python3.
fn python_site_packages() -> &'static [PathBuf] {
    static FOLDERS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    FOLDERS.get_or_init(|| {
        let script =
            "import site\nfor p in site.getsitepackages() + [site.getusersitepackages()]: print(p)";
        std::process::Command::new("python3")
            .args(["-I", "-c", script])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(PathBuf::from)
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// Where `lib` is, as a file, or the list of places looked at. Names the
/// loader resolves by itself (sonames) are tried by [`load`](super::library::load), not here.
/// (The file that `lib`'s environment variable names is the caller's to
/// take first: [`crate::settings::library_file`].)
pub(super) fn find_file(lib: Lib) -> Result<PathBuf, Vec<String>> {
    let mut searched = Vec::new();
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

pub(super) fn missing(lib: Lib, mut searched: Vec<String>) -> ToolkitError {
    if !lib.sonames().is_empty() {
        searched.insert(
            0,
            format!("the library path ({})", lib.sonames().join(", ")),
        );
    }
    searched.push("CUDA_PATH, CUDA_HOME, /usr/local/cuda, /opt/cuda".into());
    let sites: Vec<String> = site_packages()
        .iter()
        .filter(|p| p.is_dir())
        .map(|p| p.display().to_string())
        .collect();
    searched.push(if sites.is_empty() {
        "Python site-packages (NVIDIA's wheels): none found (no python3 on PATH, no venv)".into()
    } else {
        format!(
            "Python site-packages (NVIDIA's wheels): {}",
            sites.join(", ")
        )
    });
    ToolkitError::Missing {
        library: lib.name(),
        what: lib.what(),
        wheel: lib.wheel(),
        env: lib.env(),
        searched,
    }
}

/// The path of `libcudadevrt.a`: `PTXSPEC_CUDADEVRT`'s file (which must
/// exist), else a toolkit's or wheel's.
pub fn cudadevrt() -> Result<PathBuf, ToolkitError> {
    if let Some(p) = crate::settings::cudadevrt(&Env::process())? {
        return Ok(p);
    }
    find_file(Lib::CudaDevRt).map_err(|s| missing(Lib::CudaDevRt, s))
}

/// Include folders of the CUDA headers (the runtime's `cuda_fp16.h`, CCCL's
/// `<cuda/...>`): `PTXSPEC_CUDA_INCLUDE` (colon-separated, each a folder
/// that exists), else a toolkit's `include`, else the wheels'.
pub(crate) fn cuda_include_dirs() -> Result<Vec<PathBuf>, SettingError> {
    if let Some(dirs) = crate::settings::cuda_include(&Env::process())? {
        return Ok(dirs);
    }
    for root in toolkit_roots() {
        let inc = root.join("include");
        if inc.join("cuda_runtime.h").is_file() {
            return Ok(vec![inc]);
        }
    }
    for site in site_packages() {
        let rt = site.join("nvidia/cuda_runtime/include");
        if rt.is_dir() {
            return Ok([
                "cuda_runtime/include",
                "cuda_cccl/include",
                "cuda_nvcc/include",
            ]
            .iter()
            .map(|d| site.join("nvidia").join(d))
            .filter(|p| p.is_dir())
            .collect());
        }
    }
    Ok(Vec::new())
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
