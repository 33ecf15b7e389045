//! Compiled translation units, cached by everything their compilation
//! depends on: in this process's memory, and on disk beside the cubin
//! cache (`PTXSPEC_CACHE_DIR`, `PTXSPEC_CACHE_MAX_MB`), so that a program
//! that makes its CUDA source at run time compiles each source once.
//!
//! The key ([`unit_key`]) is the SHA-256 of the source and its name
//! (NVRTC's messages name it, and its quoted includes start in its
//! folder), the device header, the resolved options (architecture, extra
//! options, LTO-IR or not), which NVRTC compiles (its release: its file's
//! name and size), and every file the compile can read through its
//! includes — where each resolves and what it holds ([`super::includes`]).
//! A unit whose files cannot be known before compiling it (an `#include`
//! of a macro) is compiled every time, never cached. An entry is the
//! unit's PTX, LTO-IR and log in length-prefixed frames, inside the disk
//! cache's checked entry.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::includes::{self, Dependencies};
use super::{CompileError, CompileOptions, HEADER, Unit, compile_unit};
use crate::digest::{Digest, KeyEncoder};
use crate::lto::cubin_cache::DiskSettings;
use crate::lto::tiers::{Observer, Tier, Walk, walk};

/// The disk cache's folder of units (its layout's version).
const UNITS: &str = "units-v2";

/// What the unit cache did in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnitCacheStats {
    /// Units found in memory.
    pub memory_hits: u64,
    /// Units found on disk.
    pub disk_hits: u64,
    /// Units NVRTC compiled.
    pub compiled: u64,
    /// Units compiled without the cache, their files unknown beforehand.
    pub uncacheable: u64,
}

static MEMORY_HITS: AtomicU64 = AtomicU64::new(0);
static DISK_HITS: AtomicU64 = AtomicU64::new(0);
static COMPILED: AtomicU64 = AtomicU64::new(0);
static UNCACHEABLE: AtomicU64 = AtomicU64::new(0);

/// The unit cache's counts so far, in this process.
pub fn unit_cache_stats() -> UnitCacheStats {
    UnitCacheStats {
        memory_hits: MEMORY_HITS.load(Ordering::Relaxed),
        disk_hits: DISK_HITS.load(Ordering::Relaxed),
        compiled: COMPILED.load(Ordering::Relaxed),
        uncacheable: UNCACHEABLE.load(Ordering::Relaxed),
    }
}

/// Where a unit [`compile_unit_cached`] returned came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitFrom {
    /// This process's memory cache.
    Memory,
    /// The disk cache.
    Disk,
    /// NVRTC, now (and stored in the caches).
    Compiled,
    /// NVRTC, now, without the caches: its files could not be known
    /// before compiling it.
    Uncacheable,
}

/// A compiled unit, its key (none for a unit that cannot be cached) and
/// where it came from.
#[derive(Clone, Debug)]
pub struct CachedUnit {
    /// The unit.
    pub unit: Unit,
    /// Its key in the caches.
    pub key: Option<Digest>,
    /// Where it came from.
    pub from: UnitFrom,
}

/// [`compile_unit`], answered from the caches where the same unit was
/// compiled before (in this process, or by any process sharing the disk
/// cache), with its key; a unit that cannot be cached is compiled and has
/// none. Only successful compilations are stored.
pub fn compile_unit_cached(
    name: &str,
    source: &str,
    opts: &CompileOptions,
    header: &Path,
) -> Result<CachedUnit, CompileError> {
    let key = match unit_key(name, source, opts, header)? {
        UnitKey::Known(k) => k,
        UnitKey::Unknown(why) => {
            UNCACHEABLE.fetch_add(1, Ordering::Relaxed);
            crate::notice::once(format!("{name} is compiled without the unit cache: {why}"));
            COMPILED.fetch_add(1, Ordering::Relaxed);
            return Ok(CachedUnit {
                unit: compile_unit(name, source, opts, header)?,
                key: None,
                from: UnitFrom::Uncacheable,
            });
        }
    };
    let found = |unit, from| CachedUnit {
        unit,
        key: Some(key),
        from,
    };
    let memory_key = KeyEncoder::new("ptxspec unit in memory v2")
        .digest_field(&key)
        .encoded()
        .to_vec();
    // Memory, then — its settings checked like the cubin cache's, a setting
    // that is not valid an error naming it — the disk: the walk the cubins
    // take (`lto::tiers`), without the fleet's store.
    let tiers = std::iter::once(Ok(Tier::Memory)).chain(
        std::iter::once_with(|| {
            DiskSettings::from_env()
                .map(|s| s.cache(UNITS).map(|d| Tier::Disk(d, key)))
                .map_err(crate::toolkit::ToolkitError::from)
        })
        .filter_map(Result::transpose),
    );
    match walk(tiers, &memory_key, 0, &UnitsSeen, |bytes| {
        decode(name, bytes)
    })? {
        Walk::Found { value, tier, .. } => Ok(found(
            value,
            match tier {
                Tier::Memory => UnitFrom::Memory,
                _ => UnitFrom::Disk,
            },
        )),
        Walk::Missed { walked, .. } => {
            let unit = compile_unit(name, source, opts, header)?;
            COMPILED.fetch_add(1, Ordering::Relaxed);
            let bytes = Arc::new(encode(&unit));
            for tier in walked.iter().rev() {
                match tier {
                    Tier::Disk(disk, key) => {
                        disk.put(key, &bytes);
                    }
                    other => other.fill(&memory_key, &bytes),
                }
            }
            Ok(found(unit, UnitFrom::Compiled))
        }
    }
}

/// The unit cache's observer of a walk: its counts, and the trace.
struct UnitsSeen;

impl Observer for UnitsSeen {
    type Error = crate::toolkit::ToolkitError;

    fn hit(&self, tier: &Tier, _: &[u8], bytes: &[u8]) -> Result<(), Self::Error> {
        match tier {
            Tier::Memory => MEMORY_HITS.fetch_add(1, Ordering::Relaxed),
            _ => DISK_HITS.fetch_add(1, Ordering::Relaxed),
        };
        crate::trace::instant(
            &format!("unit look-up: {} hit", tier.name()),
            "cache",
            &[
                ("tier", crate::trace::Arg::Text(tier.name())),
                ("bytes", crate::trace::Arg::Number(bytes.len() as u64)),
            ],
        );
        Ok(())
    }

    fn miss(&self, tier: &Tier) {
        crate::trace::instant(
            &format!("unit look-up: {} miss", tier.name()),
            "cache",
            &[("tier", crate::trace::Arg::Text(tier.name()))],
        );
    }
}

/// A unit's key, or why it has none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnitKey {
    /// The key.
    Known(Digest),
    /// The unit's files cannot be known before compiling it: why.
    Unknown(String),
}

/// The key of everything the unit depends on (see the module's docs): its
/// identity, the same in every process and on every machine with the same
/// NVRTC release and the same files. An error is a setting that is not
/// valid (`PTXSPEC_CUDA_INCLUDE`).
pub fn unit_key(
    name: &str,
    source: &str,
    opts: &CompileOptions,
    header: &Path,
) -> Result<UnitKey, CompileError> {
    let (search, pre) = super::include_search(opts, header)?;
    let given = super::ExtraOptions::read(&opts.extra);
    if let Some(why) = given.refusal() {
        return Err(CompileError::Other(why));
    }
    let deps = match includes::dependencies_with(name, source, &search, &pre, &given.defines) {
        Dependencies::Known { key, .. } => key,
        Dependencies::Unknown(why) => return Ok(UnitKey::Unknown(why)),
        Dependencies::Refused(why) => return Err(CompileError::Other(why)),
    };
    let nvrtc = crate::toolkit::library_release(crate::toolkit::Lib::Nvrtc).unwrap_or_default();
    let mut key = KeyEncoder::new("ptxspec unit v2");
    key.str(name)
        .str(source)
        .str(HEADER)
        .str(&opts.arch)
        .u64(opts.lto.into())
        .str(&nvrtc)
        .list(opts.extra.iter().map(|o| o.as_bytes()))
        .u64(search.len() as u64);
    for dir in &search {
        match dir.stable_name {
            Some(stable) => key.str(stable),
            None => key.bytes(dir.path.as_os_str().as_encoded_bytes()),
        };
    }
    key.bytes(&deps);
    Ok(UnitKey::Known(key.digest()))
}

/// A unit as bytes: PTX, LTO-IR (a flag, then the bytes) and log, each
/// length-prefixed.
fn encode(unit: &Unit) -> Vec<u8> {
    let mut out = Vec::new();
    let mut frame = |b: &[u8]| {
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    };
    frame(unit.ptx.as_bytes());
    match &unit.ltoir {
        Some(ir) => {
            frame(&[1]);
            frame(ir);
        }
        None => frame(&[0]),
    }
    frame(unit.log.as_bytes());
    out
}

/// A unit from [`encode`]'s bytes, named `name`; `None` for bytes that are
/// not one (every length is checked against what is left).
fn decode(name: &str, bytes: &[u8]) -> Option<Unit> {
    let mut rest = bytes;
    let mut frame = || -> Option<&[u8]> {
        let len = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
        let len = usize::try_from(len).ok()?;
        let body = rest.get(8..8usize.checked_add(len)?)?;
        rest = &rest[8 + len..];
        Some(body)
    };
    let ptx = String::from_utf8(frame()?.to_vec()).ok()?;
    let ltoir = match frame()? {
        [1] => Some(frame()?.to_vec()),
        [0] => None,
        _ => return None,
    };
    let log = String::from_utf8(frame()?.to_vec()).ok()?;
    Some(Unit {
        name: name.to_string(),
        ptx,
        ltoir,
        log,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_round_trip_and_damaged_bytes_are_none() {
        let unit = Unit {
            name: "a.cu".into(),
            ptx: ".version 7.0".into(),
            ltoir: Some(vec![1, 2, 3]),
            log: "warning".into(),
        };
        let bytes = encode(&unit);
        let back = decode("a.cu", &bytes).unwrap();
        assert_eq!(
            (back.ptx, back.ltoir, back.log),
            (unit.ptx.clone(), unit.ltoir.clone(), unit.log.clone())
        );
        for cut in 0..bytes.len() {
            assert!(decode("a.cu", &bytes[..cut]).is_none(), "{cut}");
        }
        let mut huge = bytes.clone();
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode("a.cu", &huge).is_none());
    }

    #[test]
    fn the_key_follows_source_name_and_options() {
        let header = std::env::temp_dir();
        let key =
            |name: &str, text: &str, o: &CompileOptions| match unit_key(name, text, o, &header)
                .unwrap()
            {
                UnitKey::Known(k) => k,
                UnitKey::Unknown(why) => panic!("{why}"),
            };
        let o = CompileOptions::default();
        let k = key("a.cu", "x", &o);
        assert_eq!(k, key("a.cu", "x", &o));
        assert_ne!(k, key("b.cu", "x", &o));
        assert_ne!(k, key("a.cu", "y", &o));
        let lto = CompileOptions {
            lto: true,
            ..CompileOptions::default()
        };
        assert_ne!(k, key("a.cu", "x", &lto));
        let extra = CompileOptions {
            extra: vec!["-DX=1".into()],
            ..CompileOptions::default()
        };
        assert_ne!(k, key("a.cu", "x", &extra));
    }
}
