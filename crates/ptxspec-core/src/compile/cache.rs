//! Compiled translation units, cached by everything their compilation
//! depends on: in this process's memory, and on disk beside the cubin
//! cache (`PTXSPEC_CACHE_DIR`, `PTXSPEC_CACHE_MAX_MB`), so that a program
//! that makes its CUDA source at run time compiles each source once.
//!
//! The key hashes the source and its name (NVRTC's messages name it), the
//! device header, the resolved options (architecture, extra options, LTO-IR
//! or not), the text of the headers in the include folders, and which NVRTC
//! compiles (its release: its file's name and size). An entry is the unit's PTX, LTO-IR and
//! log in length-prefixed frames, inside the disk cache's checked entry.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{CompileError, CompileOptions, HEADER, Unit, compile_unit};
use crate::lto::cache::{DiskSettings, MemoryCache, disk_get, disk_put, hash128};

/// What the unit cache did in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnitCacheStats {
    /// Units found in memory.
    pub memory_hits: u64,
    /// Units found on disk.
    pub disk_hits: u64,
    /// Units NVRTC compiled.
    pub compiled: u64,
}

static MEMORY_HITS: AtomicU64 = AtomicU64::new(0);
static DISK_HITS: AtomicU64 = AtomicU64::new(0);
static COMPILED: AtomicU64 = AtomicU64::new(0);

/// The unit cache's counts so far, in this process.
pub fn unit_cache_stats() -> UnitCacheStats {
    UnitCacheStats {
        memory_hits: MEMORY_HITS.load(Ordering::Relaxed),
        disk_hits: DISK_HITS.load(Ordering::Relaxed),
        compiled: COMPILED.load(Ordering::Relaxed),
    }
}

/// [`compile_unit`], answered from the caches where the same unit was
/// compiled before (in this process, or by any process sharing the disk
/// cache). Only successful compilations are stored.
pub fn compile_unit_cached(
    name: &str,
    source: &str,
    opts: &CompileOptions,
    header: &Path,
) -> Result<Unit, CompileError> {
    let key = unit_key(name, source, opts);
    let memory_key = [b"unit:".as_slice(), &key.to_le_bytes()].concat();
    if let Some(bytes) = MemoryCache::global().get(&memory_key)
        && let Some(unit) = decode(name, &bytes)
    {
        MEMORY_HITS.fetch_add(1, Ordering::Relaxed);
        return Ok(unit);
    }
    // The disk cache's settings are checked like the cubin cache's: a
    // setting that is not valid is an error naming it.
    let disk = DiskSettings::from_env()?;
    let dir = disk
        .dir
        .as_ref()
        .and_then(|d| d.parent())
        .map(|d| d.join("units-v1"));
    if let Some(dir) = &dir
        && let Some(bytes) = disk_get(dir, key)
        && let Some(unit) = decode(name, &bytes)
    {
        DISK_HITS.fetch_add(1, Ordering::Relaxed);
        MemoryCache::global().insert(memory_key, Arc::new(bytes));
        return Ok(unit);
    }
    let unit = compile_unit(name, source, opts, header)?;
    COMPILED.fetch_add(1, Ordering::Relaxed);
    let bytes = encode(&unit);
    if let Some(dir) = &dir {
        disk_put(dir, key, &bytes, disk.max_bytes);
    }
    MemoryCache::global().insert(memory_key, Arc::new(bytes));
    Ok(unit)
}

/// The hash of everything the unit depends on (see the module's docs): its
/// identity, the same in every process and on every machine with the same
/// NVRTC release.
pub fn unit_key(name: &str, source: &str, opts: &CompileOptions) -> u128 {
    let mut parts: Vec<Vec<u8>> = vec![
        b"ptxspec unit v1".to_vec(),
        name.as_bytes().to_vec(),
        source.as_bytes().to_vec(),
        HEADER.as_bytes().to_vec(),
        opts.arch.as_bytes().to_vec(),
        vec![opts.lto as u8],
        crate::toolkit::library_release(crate::toolkit::Lib::Nvrtc)
            .unwrap_or_default()
            .into_bytes(),
    ];
    parts.extend(opts.extra.iter().map(|o| o.as_bytes().to_vec()));
    for dir in &opts.include {
        parts.push(dir.to_string_lossy().as_bytes().to_vec());
        parts.extend(header_texts(dir));
    }
    for dir in crate::toolkit::cuda_include_dirs() {
        parts.push(dir.to_string_lossy().as_bytes().to_vec());
    }
    // Each part with its length: no two lists hash alike by concatenation.
    let mut all = Vec::new();
    for p in &parts {
        all.extend_from_slice(&(p.len() as u64).to_le_bytes());
        all.extend_from_slice(p);
    }
    hash128(&all)
}

/// The names and texts of the headers (`.h`, `.cuh`, `.hpp`) directly in
/// `dir`, by name: a changed header is another key.
fn header_texts(dir: &Path) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<std::path::PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "h" || e == "cuh" || e == "hpp")
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .flat_map(|p| {
            let text = crate::files::read_input(&p).unwrap_or_default();
            [p.to_string_lossy().as_bytes().to_vec(), text]
        })
        .collect()
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
        let o = CompileOptions::default();
        let k = unit_key("a.cu", "x", &o);
        assert_eq!(k, unit_key("a.cu", "x", &o));
        assert_ne!(k, unit_key("b.cu", "x", &o));
        assert_ne!(k, unit_key("a.cu", "y", &o));
        let lto = CompileOptions {
            lto: true,
            ..CompileOptions::default()
        };
        assert_ne!(k, unit_key("a.cu", "x", &lto));
        let extra = CompileOptions {
            extra: vec!["-DX=1".into()],
            ..CompileOptions::default()
        };
        assert_ne!(k, unit_key("a.cu", "x", &extra));
    }
}
