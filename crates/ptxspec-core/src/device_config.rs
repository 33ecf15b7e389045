//! The device configuration file (the optional kernel features design (DPC++)) — a YAML map from target name to
//! the aspects (names or numbers) and sub-group sizes the target provides —
//! and the aspect filter over file tables that uses it.
//!
//! ```yaml
//! sm_90:
//!   aspects: [gpu, fp16, fp64, 28]
//!   sub-group-sizes: [32]
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

use std::path::{Path, PathBuf};

use crate::features::{Aspect, Requirements};
use crate::props::{FileTable, PropertySets};

/// One target of a configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The aspects the target's devices have.
    pub aspects: Vec<Aspect>,
    /// The sub-group sizes they support.
    pub sub_group_sizes: Vec<u32>,
}

/// A device configuration: targets by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// The targets, by name (`intel_gpu_pvc`, `nvidia_gpu_sm_90`).
    pub targets: BTreeMap<String, Target>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum AspectRef {
    Number(u32),
    Name(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    #[serde(default)]
    aspects: Vec<AspectRef>,
    #[serde(default, rename = "sub-group-sizes")]
    sub_group_sizes: Vec<u32>,
}

/// The configuration shipped with ptxspec: NVIDIA targets sm_50 … sm_120.
pub const DEFAULT_CONFIG: &str = include_str!("features/nvidia.yaml");

/// A device configuration that cannot be read: which configuration, and
/// what is wrong (the YAML reader's message, or a target's unknown aspect).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{config}: {what}")]
pub struct ConfigError {
    /// Which configuration: a file's path, or the shipped one's name.
    pub config: String,
    /// What is wrong with it.
    pub what: String,
}

impl DeviceConfig {
    /// Parses a configuration; `what` names it in errors.
    pub fn parse(text: &str, what: &str) -> Result<DeviceConfig, ConfigError> {
        let error = |problem: String| ConfigError {
            config: what.to_string(),
            what: problem,
        };
        let raw: BTreeMap<String, RawTarget> =
            serde_saphyr::from_str(text).map_err(|e| error(e.to_string()))?;
        let mut targets = BTreeMap::new();
        for (name, t) in raw {
            let aspects = t
                .aspects
                .into_iter()
                .map(|a| match a {
                    AspectRef::Number(n) => Ok(Aspect(n)),
                    AspectRef::Name(s) => Aspect::parse(&s)
                        .ok_or_else(|| error(format!("target {name}: unknown aspect {s:?}"))),
                })
                .collect::<Result<_, _>>()?;
            targets.insert(
                name,
                Target {
                    aspects,
                    sub_group_sizes: t.sub_group_sizes,
                },
            );
        }
        Ok(DeviceConfig { targets })
    }

    /// The targets' names, ordered as people read them: by their prefix,
    /// then by number (`sm_50` before `sm_100`).
    pub(crate) fn target_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.targets.keys().map(String::as_str).collect();
        let key = |n: &str| {
            let digits = n.trim_start_matches(|c: char| !c.is_ascii_digit());
            let prefix = &n[..n.len() - digits.len()];
            let number: u64 = digits
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .unwrap_or(0);
            (prefix.to_string(), number, n.to_string())
        };
        names.sort_by_key(|n| key(n));
        names
    }

    /// The shipped configuration, parsed once.
    pub fn nvidia() -> &'static DeviceConfig {
        static CONFIG: std::sync::OnceLock<DeviceConfig> = std::sync::OnceLock::new();
        CONFIG.get_or_init(DeviceConfig::default_nvidia)
    }

    /// The shipped configuration's target for a CUDA device of compute
    /// capability `(major, minor)`: `sm_<major><minor>`, or, for one the
    /// table does not list, the newest listed target below it (a newer
    /// device has at least its aspects). `None` below `sm_50`.
    pub fn nvidia_target(compute_capability: (i32, i32)) -> Option<&'static Target> {
        let (major, minor) = compute_capability;
        let wanted = major.checked_mul(10)?.checked_add(minor)?;
        DeviceConfig::nvidia()
            .targets
            .iter()
            .filter_map(|(name, t)| {
                let n: i32 = name.strip_prefix("sm_")?.parse().ok()?;
                (n <= wanted).then_some((n, t))
            })
            .max_by_key(|(n, _)| *n)
            .map(|(_, t)| t)
    }

    /// The shipped configuration.
    pub(crate) fn default_nvidia() -> DeviceConfig {
        // The shipped file is tested to parse; an empty config would only
        // make every check fail loudly.
        DeviceConfig::parse(DEFAULT_CONFIG, "built-in device configuration").unwrap_or(
            DeviceConfig {
                targets: BTreeMap::new(),
            },
        )
    }
}

impl Target {
    /// DPC++'s optional kernel features design's check of an image's requirements against a target: all
    /// aspects present, all sub-group sizes supported, and, for fixed
    /// targets, at least one of them among the target's aspects.
    pub fn supports(&self, r: &Requirements) -> bool {
        r.aspects.iter().all(|a| self.aspects.contains(a))
            && r.reqd_sub_group_size
                .is_none_or(|s| self.sub_group_sizes.contains(&s))
            && r.fixed_target
                .as_ref()
                .is_none_or(|t| t.iter().any(|a| self.aspects.contains(&Aspect(*a))))
    }
}

/// DPC++'s optional kernel features design's aspect filter: keeps the rows of `table` (read from
/// `table_dir`, against which relative paths resolve) whose properties the
/// configuration's `target` supports; rows without device requirements
/// are kept; a table without a Properties column is returned as it is.
pub fn aspect_filter(
    table: &FileTable,
    table_dir: &Path,
    config: &DeviceConfig,
    target: &str,
) -> Result<FileTable, String> {
    let Some(col) = table.columns.iter().position(|c| c == "Properties") else {
        return Ok(table.clone());
    };
    let t = config.targets.get(target).ok_or_else(|| {
        let known = config.target_names();
        format!(
            "unknown target {target:?}: the device configuration has {}",
            known.join(", ")
        )
    })?;
    let mut out = FileTable {
        columns: table.columns.clone(),
        rows: Vec::new(),
    };
    for row in &table.rows {
        let path = resolve(table_dir, &row[col]);
        let bytes =
            crate::files::read_input(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("{}: not UTF-8 text: not a property file", path.display()))?;
        let sets = PropertySets::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let r = Requirements::read(&sets).map_err(|e| format!("{}: {e}", path.display()))?;
        if t.supports(&r) {
            out.rows.push(row.clone());
        }
    }
    Ok(out)
}

fn resolve(dir: &Path, file: &str) -> PathBuf {
    let p = Path::new(file);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_has_every_target() {
        let c = DeviceConfig::default_nvidia();
        for t in [
            "sm_50", "sm_53", "sm_70", "sm_80", "sm_90", "sm_100", "sm_120",
        ] {
            let target = c.targets.get(t).unwrap_or_else(|| panic!("{t}"));
            assert_eq!(target.sub_group_sizes, [32], "{t}");
            assert!(target.aspects.contains(&Aspect::FP64), "{t}");
        }
        assert!(!c.targets["sm_50"].aspects.contains(&Aspect::FP16));
        assert!(c.targets["sm_53"].aspects.contains(&Aspect::FP16));
        assert!(c.targets["sm_80"].aspects.contains(&Aspect::BF16_MATH));
        assert!(!c.targets["sm_75"].aspects.contains(&Aspect::BF16_MATH));
    }

    #[test]
    fn nvidia_target_of_a_compute_capability() {
        let has =
            |cc, a: Aspect| DeviceConfig::nvidia_target(cc).is_some_and(|t| t.aspects.contains(&a));
        // Listed: fp16 from sm_53, bf16 math from sm_80.
        assert!(!has((5, 2), Aspect::FP16));
        assert!(has((5, 3), Aspect::FP16));
        assert!(!has((7, 5), Aspect::BF16_MATH));
        assert!(has((8, 0), Aspect::BF16_MATH));
        // Not listed: the newest listed target below it.
        assert_eq!(
            DeviceConfig::nvidia_target((8, 5)),
            DeviceConfig::nvidia().targets.get("sm_80")
        );
        assert_eq!(
            DeviceConfig::nvidia_target((15, 0)),
            DeviceConfig::nvidia().targets.get("sm_121")
        );
        // Older than the table, or nonsense.
        assert_eq!(DeviceConfig::nvidia_target((3, 5)), None);
        assert_eq!(DeviceConfig::nvidia_target((i32::MAX, 0)), None);
    }

    #[test]
    fn names_numbers_and_errors() {
        let c = DeviceConfig::parse("a:\n  aspects: [fp16, 6]\n  sub-group-sizes: [32]\n", "t")
            .unwrap();
        assert_eq!(c.targets["a"].aspects, [Aspect::FP16, Aspect::FP64]);
        let e = DeviceConfig::parse("a:\n  aspects: [fp17]\n", "t.yaml").unwrap_err();
        assert_eq!(e.config, "t.yaml");
        assert_eq!(e.to_string(), "t.yaml: target a: unknown aspect \"fp17\"");
        let e = DeviceConfig::parse("a:\n  aspectz: [1]\n", "t.yaml").unwrap_err();
        assert_eq!(e.config, "t.yaml");
        assert!(e.to_string().starts_with("t.yaml: "), "{e}");
        assert!(DeviceConfig::parse("a: [1, 2\n", "t.yaml").is_err());
    }
}
