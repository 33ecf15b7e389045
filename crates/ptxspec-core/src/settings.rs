//! Every environment variable ptxspec reads, and the one reader of each.
//!
//! A setting that is set but not valid is an error naming the variable
//! ([`SettingError`]): never a silent default, never another file found
//! elsewhere in its place. Each reader takes the environment as an [`Env`]
//! so that tests read a table of values rather than the process's own
//! environment; [`VARIABLES`] is the list that the guide's (docs/guide/environment.md) and the crate
//! documentation's tables are checked against.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// An environment variable of ptxspec's and what it sets.
#[derive(Clone, Copy, Debug)]
pub struct Variable {
    /// Its name.
    pub name: &'static str,
    /// What it sets, in a few words.
    pub sets: &'static str,
}

/// Every variable ptxspec reads (besides the system's own: `HOME`,
/// `XDG_CACHE_HOME`, `LD_LIBRARY_PATH`, `CUDA_PATH`, `CUDA_HOME`,
/// `CUDA_ROOT`, `VIRTUAL_ENV`, `CONDA_PREFIX`, which it reads as other
/// programs do).
pub const VARIABLES: &[Variable] = &[
    Variable {
        name: "PTXSPEC_NVRTC",
        sets: "the libnvrtc file to load",
    },
    Variable {
        name: "PTXSPEC_NVJITLINK",
        sets: "the libnvJitLink file to load",
    },
    Variable {
        name: "PTXSPEC_NVVM",
        sets: "the libnvvm file to load",
    },
    Variable {
        name: "PTXSPEC_CUDA_INCLUDE",
        sets: "folders of CUDA headers for NVRTC (colon-separated)",
    },
    Variable {
        name: "PTXSPEC_CUDADEVRT",
        sets: "libcudadevrt.a, for images that launch kernels from device code",
    },
    Variable {
        name: "PTXSPEC_CACHE_DIR",
        sets: "the disk cache of linked cubins and compiled units",
    },
    Variable {
        name: "PTXSPEC_CACHE_MAX_MB",
        sets: "the most the disk cache holds",
    },
    Variable {
        name: "PTXSPEC_TIER_WORKERS",
        sets: "background links at once: tiered bundles' link workers, and background toolkit worker processes",
    },
    Variable {
        name: "PTXSPEC_TIER_AFTER_MS",
        sets: "how long a tiered kernel runs with one value set before it is linked",
    },
    Variable {
        name: "PTXSPEC_TIER_PROFILE",
        sets: "a file of the value sets tiered up, for the next process",
    },
    Variable {
        name: "PTXSPEC_TRACE",
        sets: "a file to write a Chrome/Perfetto trace of what ptxspec decided to (links, cache look-ups, compiles, tier-ups, trials)",
    },
    Variable {
        name: "PTXSPEC_WORKER_TIMEOUT_S",
        sets: "how long one call in a toolkit worker process may take",
    },
    Variable {
        name: "PTXSPEC_REMOTE_CACHE",
        sets: "the remote cubin store",
    },
    Variable {
        name: "PTXSPEC_REMOTE_CA_FILE",
        sets: "the CA certificates a rediss:// store's certificate is verified against",
    },
    Variable {
        name: "PTXSPEC_CACHE_TRUSTED_KEYS",
        sets: "the file of public keys whose remote entries load",
    },
    Variable {
        name: "PTXSPEC_CACHE_SIGNING_KEY",
        sets: "the secret key a writer signs remote entries with",
    },
    Variable {
        name: "PTXSPEC_REMOTE_TIMEOUT_MS",
        sets: "the bound of one call to the remote store",
    },
    Variable {
        name: "PTXSPEC_REMOTE_LEASE_MS",
        sets: "how long a linking process holds its lease, and others wait",
    },
];

/// A setting that is not valid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?}: {what}")]
#[non_exhaustive]
pub struct SettingError {
    /// The environment variable.
    pub variable: &'static str,
    /// Its value (lossily as text).
    pub value: String,
    /// What is wrong with it.
    pub what: String,
}

impl SettingError {
    /// `variable`'s `value` is not valid: `what`.
    pub fn new(variable: &'static str, value: &OsStr, what: impl Into<String>) -> SettingError {
        SettingError {
            variable,
            value: value.to_string_lossy().into_owned(),
            what: what.into(),
        }
    }
}

/// Where settings are read from: the process's environment
/// ([`Env::process`]) or, in tests, a table. Every variable the library
/// reads goes through it: its own ([`VARIABLES`]) and the system's that
/// locate NVIDIA's libraries (`CUDA_PATH`, `CUDA_HOME`, `CUDA_ROOT`,
/// `LD_LIBRARY_PATH`, `VIRTUAL_ENV`, `CONDA_PREFIX`, `HOME`).
pub struct Env<'a>(&'a (dyn Fn(&str) -> Option<OsString> + Sync));

impl Env<'static> {
    /// The process's environment.
    pub fn process() -> Env<'static> {
        Env(&|name| std::env::var_os(name))
    }
}

impl<'a> Env<'a> {
    /// An environment that `lookup` answers.
    pub fn from_fn(lookup: &'a (dyn Fn(&str) -> Option<OsString> + Sync)) -> Env<'a> {
        Env(lookup)
    }

    /// The value of `name`; an empty value is no value for settings whose
    /// reader says so.
    pub fn get(&self, name: &str) -> Option<OsString> {
        (self.0)(name)
    }

    /// A whole number of `variable` in `range`, or `default` where it is
    /// not set; `unit` names what it counts, for the message.
    pub fn number(
        &self,
        variable: &'static str,
        range: std::ops::RangeInclusive<u64>,
        default: u64,
        unit: &str,
    ) -> Result<u64, SettingError> {
        let Some(v) = self.get(variable) else {
            return Ok(default);
        };
        v.to_str()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .filter(|n| range.contains(n))
            .ok_or_else(|| {
                SettingError::new(
                    variable,
                    &v,
                    format!(
                        "not a whole number of {unit} from {} to {}",
                        range.start(),
                        range.end()
                    ),
                )
            })
    }

    /// A path of `variable` that must not be empty; `None` where unset.
    pub fn path(&self, variable: &'static str) -> Result<Option<PathBuf>, SettingError> {
        match self.get(variable) {
            None => Ok(None),
            Some(v) if v.is_empty() => Err(SettingError::new(
                variable,
                &v,
                "empty: name a file, or unset it",
            )),
            Some(v) => Ok(Some(PathBuf::from(v))),
        }
    }

    /// A file of `variable` that must exist (after links) as a regular
    /// file; `None` where unset.
    pub fn existing_file(&self, variable: &'static str) -> Result<Option<PathBuf>, SettingError> {
        let Some(p) = self.path(variable)? else {
            return Ok(None);
        };
        match std::fs::metadata(&p) {
            Ok(m) if m.is_file() => Ok(Some(p)),
            Ok(_) => Err(SettingError::new(
                variable,
                p.as_os_str(),
                "not a regular file",
            )),
            Err(e) => Err(SettingError::new(
                variable,
                p.as_os_str(),
                format!("no such file ({e})"),
            )),
        }
    }

    /// Folders of `variable`, colon-separated, each of which must exist;
    /// `None` where unset.
    pub fn folders(&self, variable: &'static str) -> Result<Option<Vec<PathBuf>>, SettingError> {
        let Some(v) = self.get(variable) else {
            return Ok(None);
        };
        let folders: Vec<PathBuf> = std::env::split_paths(&v).collect();
        if folders.iter().all(|f| f.as_os_str().is_empty()) {
            return Err(SettingError::new(
                variable,
                &v,
                "empty: name folders (colon-separated), or unset it",
            ));
        }
        for f in folders.iter().filter(|f| !f.as_os_str().is_empty()) {
            if !f.is_dir() {
                return Err(SettingError::new(
                    variable,
                    &v,
                    format!("{} is not a folder", f.display()),
                ));
            }
        }
        Ok(Some(
            folders
                .into_iter()
                .filter(|f| !f.as_os_str().is_empty())
                .collect(),
        ))
    }

    /// A text setting; `None` where unset or empty.
    pub fn text(&self, variable: &'static str) -> Result<Option<String>, SettingError> {
        match self.get(variable) {
            None => Ok(None),
            Some(v) if v.is_empty() => Ok(None),
            Some(v) => v
                .into_string()
                .map(Some)
                .map_err(|v| SettingError::new(variable, &v, "not valid UTF-8")),
        }
    }
}

/// `PTXSPEC_TIER_WORKERS`: 1 to 16 link workers, default 2 — the tier's
/// link threads, and the toolkit worker processes of background work that
/// run at once (`toolkit::worker`).
pub fn tier_workers(env: &Env) -> Result<usize, SettingError> {
    env.number("PTXSPEC_TIER_WORKERS", 1..=16, 2, "workers")
        .map(|n| n as usize)
}

/// `PTXSPEC_TIER_AFTER_MS`: 0 to 60 000 ms, default 5.
pub fn tier_after(env: &Env) -> Result<Duration, SettingError> {
    env.number("PTXSPEC_TIER_AFTER_MS", 0..=60_000, 5, "milliseconds")
        .map(Duration::from_millis)
}

/// `PTXSPEC_TIER_PROFILE`: a file (it need not exist yet); `None` where
/// unset.
pub fn tier_profile(env: &Env) -> Result<Option<PathBuf>, SettingError> {
    env.path("PTXSPEC_TIER_PROFILE")
}

/// `PTXSPEC_TRACE`: the file a trace is written to — a new file or one to
/// replace, not a folder, in a folder that exists; `None` where unset.
pub fn trace_file(env: &Env) -> Result<Option<PathBuf>, SettingError> {
    let Some(p) = env.path("PTXSPEC_TRACE")? else {
        return Ok(None);
    };
    if p.is_dir() {
        return Err(SettingError::new(
            "PTXSPEC_TRACE",
            p.as_os_str(),
            "a folder: name the file the trace is written to",
        ));
    }
    let parent = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(SettingError::new(
            "PTXSPEC_TRACE",
            p.as_os_str(),
            format!("its folder {} does not exist", parent.display()),
        ));
    }
    Ok(Some(p))
}

/// `PTXSPEC_WORKER_TIMEOUT_S`: 1 to 86 400 s, default 600.
pub fn worker_timeout(env: &Env) -> Result<Duration, SettingError> {
    env.number("PTXSPEC_WORKER_TIMEOUT_S", 1..=86_400, 600, "seconds")
        .map(Duration::from_secs)
}

/// `PTXSPEC_CUDA_INCLUDE`: folders of CUDA headers; `None` where unset.
pub fn cuda_include(env: &Env) -> Result<Option<Vec<PathBuf>>, SettingError> {
    env.folders("PTXSPEC_CUDA_INCLUDE")
}

/// `PTXSPEC_CUDADEVRT`: the device runtime library's file; `None` where
/// unset.
pub fn cudadevrt(env: &Env) -> Result<Option<PathBuf>, SettingError> {
    env.existing_file("PTXSPEC_CUDADEVRT")
}

/// The library file that `variable` (`PTXSPEC_NVRTC`, `PTXSPEC_NVJITLINK`,
/// `PTXSPEC_NVVM`) names; `None` where unset. A file that is not there is
/// an error: another copy found elsewhere would be a surprise.
pub fn library_file(env: &Env, variable: &'static str) -> Result<Option<PathBuf>, SettingError> {
    env.existing_file(variable)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variables' readers, each refusing every invalid value of its
    /// variable with an error that names it: the promise that
    /// `src/lib.rs` and the guide make, kept for every variable in
    /// [`VARIABLES`] (a variable without a row here fails the test).
    #[test]
    fn every_invalid_setting_is_an_error_naming_its_variable() {
        type Reader = fn(&Env) -> Result<(), SettingError>;
        let missing = "/nonexistent/ptxspec-setting-test";
        let a_folder = std::env::temp_dir();
        let a_folder = a_folder.to_str().unwrap().to_string();
        let rows: Vec<(&str, Vec<String>, Reader)> = vec![
            (
                "PTXSPEC_NVRTC",
                vec![missing.into(), String::new(), a_folder.clone()],
                |e| library_file(e, "PTXSPEC_NVRTC").map(drop),
            ),
            (
                "PTXSPEC_NVJITLINK",
                vec![missing.into(), String::new(), a_folder.clone()],
                |e| library_file(e, "PTXSPEC_NVJITLINK").map(drop),
            ),
            (
                "PTXSPEC_NVVM",
                vec![missing.into(), String::new(), a_folder.clone()],
                |e| library_file(e, "PTXSPEC_NVVM").map(drop),
            ),
            (
                "PTXSPEC_CUDA_INCLUDE",
                vec![
                    missing.into(),
                    String::new(),
                    format!("{a_folder}:{missing}"),
                ],
                |e| cuda_include(e).map(drop),
            ),
            (
                "PTXSPEC_CUDADEVRT",
                vec![missing.into(), String::new(), a_folder.clone()],
                |e| cudadevrt(e).map(drop),
            ),
            ("PTXSPEC_CACHE_DIR", vec![String::new()], |e| {
                crate::lto::cubin_cache::DiskSettings::read(e).map(drop)
            }),
            (
                "PTXSPEC_CACHE_MAX_MB",
                ["0", "-1", "1.5", "lots", "", "17592186044417", "1MB"]
                    .map(String::from)
                    .to_vec(),
                |e| crate::lto::cubin_cache::DiskSettings::read(e).map(drop),
            ),
            (
                "PTXSPEC_TIER_WORKERS",
                ["0", "17", "-1", "two", "", "2.0"]
                    .map(String::from)
                    .to_vec(),
                |e| tier_workers(e).map(drop),
            ),
            (
                "PTXSPEC_TIER_AFTER_MS",
                ["60001", "-1", "5ms", "", "soon"]
                    .map(String::from)
                    .to_vec(),
                |e| tier_after(e).map(drop),
            ),
            ("PTXSPEC_TIER_PROFILE", vec![String::new()], |e| {
                tier_profile(e).map(drop)
            }),
            (
                "PTXSPEC_TRACE",
                vec![
                    String::new(),
                    a_folder.clone(),
                    format!("{missing}/trace.json"),
                ],
                |e| trace_file(e).map(drop),
            ),
            (
                "PTXSPEC_WORKER_TIMEOUT_S",
                ["30s", "abc", "0", "-5", "86401", ""]
                    .map(String::from)
                    .to_vec(),
                |e| worker_timeout(e).map(drop),
            ),
            (
                "PTXSPEC_REMOTE_CACHE",
                [
                    "ftp://h",
                    "rediss://",
                    "rediss://h:99999",
                    "redis://",
                    "not a url",
                    "redis://h:99999",
                    "redis://h/x",
                ]
                .map(String::from)
                .to_vec(),
                |e| crate::lto::remote::Settings::read(e).map(drop),
            ),
            (
                "PTXSPEC_CACHE_TRUSTED_KEYS",
                vec![missing.into(), String::new(), a_folder.clone()],
                |e| crate::lto::remote::Settings::read(e).map(drop),
            ),
            (
                "PTXSPEC_REMOTE_CA_FILE",
                vec![missing.into(), String::new(), a_folder.clone()],
                |e| crate::lto::remote::Settings::read(e).map(drop),
            ),
            (
                "PTXSPEC_CACHE_SIGNING_KEY",
                vec![missing.into(), String::new(), a_folder.clone()],
                |e| crate::lto::remote::Settings::read(e).map(drop),
            ),
            (
                "PTXSPEC_REMOTE_TIMEOUT_MS",
                ["0", "60001", "-5", "fast", "", "20ms"]
                    .map(String::from)
                    .to_vec(),
                |e| crate::lto::remote::Settings::read(e).map(drop),
            ),
            (
                "PTXSPEC_REMOTE_LEASE_MS",
                ["0", "600001", "-5", "long", ""].map(String::from).to_vec(),
                |e| crate::lto::remote::Settings::read(e).map(drop),
            ),
        ];
        for v in VARIABLES {
            assert!(
                rows.iter().any(|(name, ..)| *name == v.name),
                "{} has no row in this test",
                v.name
            );
        }
        // The remote variables are read only where a store is named: the
        // others of a row are valid, so that the error is the row's own.
        let trusted =
            std::env::temp_dir().join(format!("ptxspec-settings-trusted-{}", std::process::id()));
        std::fs::write(&trusted, "").unwrap();
        for (variable, bad, read) in &rows {
            assert!(
                VARIABLES.iter().any(|v| v.name == *variable),
                "{variable} is read but not in VARIABLES"
            );
            for value in bad {
                let lookup = |name: &str| -> Option<OsString> {
                    if name == *variable {
                        return Some(value.into());
                    }
                    match name {
                        "PTXSPEC_REMOTE_CACHE" => Some("redis://127.0.0.1:6379".into()),
                        "PTXSPEC_CACHE_TRUSTED_KEYS" => Some(trusted.clone().into()),
                        _ => None,
                    }
                };
                let e = read(&Env::from_fn(&lookup)).expect_err(&format!("{variable}={value:?}"));
                assert_eq!(e.variable, *variable, "{variable}={value:?}: {e}");
                assert!(e.to_string().starts_with(variable), "{e}");
            }
            // Unset: the default, no error.
            let unset = |name: &str| -> Option<OsString> {
                match name {
                    "PTXSPEC_REMOTE_CACHE" if *variable != "PTXSPEC_REMOTE_CACHE" => {
                        Some("redis://127.0.0.1:6379".into())
                    }
                    "PTXSPEC_CACHE_TRUSTED_KEYS" => Some(trusted.clone().into()),
                    _ => None,
                }
            };
            read(&Env::from_fn(&unset)).unwrap_or_else(|e| panic!("{variable} unset: {e}"));
        }
        let _ = std::fs::remove_file(&trusted);
    }

    #[test]
    fn valid_settings_read_as_they_say() {
        let table = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        let t = table(&[
            ("PTXSPEC_TIER_WORKERS", " 4 "),
            ("PTXSPEC_TIER_AFTER_MS", "0"),
            ("PTXSPEC_WORKER_TIMEOUT_S", "86400"),
        ]);
        let env = Env::from_fn(&t);
        assert_eq!(tier_workers(&env), Ok(4));
        assert_eq!(tier_after(&env), Ok(Duration::ZERO));
        assert_eq!(worker_timeout(&env), Ok(Duration::from_secs(86_400)));
        let none = |_: &str| None;
        let env = Env::from_fn(&none);
        assert_eq!(tier_workers(&env), Ok(2));
        assert_eq!(tier_after(&env), Ok(Duration::from_millis(5)));
        assert_eq!(worker_timeout(&env), Ok(Duration::from_secs(600)));
        assert_eq!(tier_profile(&env), Ok(None));
    }
}
