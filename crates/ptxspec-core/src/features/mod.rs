//! Optional kernel features (the optional kernel features design (DPC++)) on PTX: which aspects code uses and
//! declares, what an image requires of a device, and the check a runtime
//! makes before a launch. The device configuration file and the aspect
//! filter are in [`device_config`](crate::device_config).

mod aspect;
mod requirements;

pub use aspect::Aspect;
pub use requirements::Requirements;
pub use requirements::WORK_GROUP_SIZE_U64;

use crate::ptx::instr::{Type, TypeKind};
use crate::ptx::{Function, Module, StmtKind};
use std::collections::BTreeSet;

/// The marker `PTXSPEC_DEVICE_HAS(...)` leaves in PTX: an inline-asm
/// comment `// ptxspec.device_has fp16, fp64`, which every CUDA compiler
/// copies into the function's body verbatim.
pub(crate) const DEVICE_HAS_MARKER: &str = "ptxspec.device_has";

/// Up to 8 bytes of an opcode part as one integer, 0 for longer parts:
/// opcodes are matched per instruction of every function, and integer
/// comparisons are much cheaper than string ones there.
const fn key(b: &[u8]) -> u64 {
    if b.len() > 8 {
        return 0;
    }
    let mut k = 0u64;
    let mut i = 0;
    while i < b.len() {
        k |= (b[i] as u64) << (8 * i);
        i += 1;
    }
    k
}

/// Opcodes that only move data: a `.f64` on them is no fp64 arithmetic.
fn is_data_movement(base: &[u8], base_key: u64) -> bool {
    const MOVES: [u64; 7] = [
        key(b"ld"),
        key(b"ldu"),
        key(b"st"),
        key(b"mov"),
        key(b"prefetch"),
        key(b"cvta"),
        key(b"shfl"),
    ];
    match base_key {
        0 => base == b"prefetchu",
        k => MOVES.contains(&k),
    }
}

/// Opcodes whose meaning depends on the warp (sub-group) being 32 threads.
fn is_warp_opcode(base: &[u8], base_key: u64) -> bool {
    const WARP: [u64; 9] = [
        key(b"shfl"),
        key(b"vote"),
        key(b"match"),
        key(b"redux"),
        key(b"elect"),
        key(b"wmma"),
        key(b"mma"),
        key(b"ldmatrix"),
        key(b"stmatrix"),
    ];
    match base_key {
        0 => matches!(base, b"activemask" | b"movmatrix"),
        k => WARP.contains(&k),
    }
}

/// What a function's own code uses: aspects, and whether it relies on the
/// sub-group size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CodeFeatures {
    pub aspects: BTreeSet<Aspect>,
    /// Warp shuffles, votes and reductions, warp-wide matrix operations,
    /// `bar.warp.sync`, or the lane registers (`%laneid`, `%lanemask_*`).
    pub relies_on_warp_size: bool,
}

/// [`CodeFeatures`] of a function, in one pass over its instructions.
pub(crate) fn code_features(m: &Module, f: &Function) -> CodeFeatures {
    let mut out = CodeFeatures::default();
    let Some(body) = &f.body else { return out };
    let src = m.src.as_bytes();
    for st in body.stmts.iter().filter(|s| s.kind == StmtKind::Instr) {
        let op = &src[st.op.range()];
        let (base, suffixes) = op.split_at(op.iter().position(|&c| c == b'.').unwrap_or(op.len()));
        let base_key = key(base);
        out.relies_on_warp_size |= is_warp_opcode(base, base_key)
            || base_key == key(b"bar") && suffixes.starts_with(b".warp");
        // Only type suffixes name aspects: each has a 16, or a 64 that
        // counts on arithmetic (fp64) and atomics (64-bit), not on moves.
        let moves = is_data_movement(base, base_key);
        let has = |d: (u8, u8)| suffixes.windows(2).any(|w| (w[0], w[1]) == d);
        if !has((b'1', b'6')) && (moves || !has((b'6', b'4'))) {
            continue;
        }
        // Each type suffix read by the instruction model's one reading of
        // types (`ptx::instr::Type`).
        let mut wide = false;
        let types = m.text(st.op).split('.').skip(1).filter_map(Type::parse);
        for t in types {
            match (t.kind, t.bits) {
                (TypeKind::Float, 16) | (TypeKind::HalfPair, _) => {
                    out.aspects.insert(Aspect::FP16);
                }
                (TypeKind::BFloat, 16) | (TypeKind::BFloatPair, _) => {
                    out.aspects.insert(Aspect::BF16_MATH);
                }
                (TypeKind::Float, 64) if !moves => {
                    out.aspects.insert(Aspect::FP64);
                }
                _ => {}
            }
            wide |= t.bits == 64 && (t.is_integer() || t.kind == TypeKind::Float);
        }
        if wide && (base_key == key(b"atom") || base_key == key(b"red")) {
            out.aspects.insert(Aspect::ATOMIC64);
        }
    }
    out.relies_on_warp_size |=
        memchr::memmem::find(m.text(body.span).as_bytes(), b"%lane").is_some();
    out
}

/// Aspects a function's own instructions use.
#[cfg(test)]
pub(crate) fn used_aspects(m: &Module, f: &Function) -> BTreeSet<Aspect> {
    code_features(m, f).aspects
}

/// Aspects a function declares with `PTXSPEC_DEVICE_HAS`, or `None` when it
/// declares nothing. Unknown names are returned as errors with the name.
pub(crate) fn declared_aspects(
    m: &Module,
    f: &Function,
) -> Result<Option<BTreeSet<Aspect>>, String> {
    let Some(body) = &f.body else { return Ok(None) };
    let text = m.text(body.span);
    let mut found: Option<BTreeSet<Aspect>> = None;
    for i in memchr::memmem::find_iter(text.as_bytes(), DEVICE_HAS_MARKER) {
        let rest = &text[i + DEVICE_HAS_MARKER.len()..];
        let line = rest.split(['\n', '"']).next().unwrap_or("");
        let set = found.get_or_insert_with(BTreeSet::new);
        for name in line.split([',', ' ', '\t']).filter(|s| !s.is_empty()) {
            set.insert(
                Aspect::parse(name)
                    .ok_or_else(|| format!("unknown aspect {name:?} in device_has"))?,
            );
        }
    }
    Ok(found)
}

/// The message the optional kernel features design (DPC++) gives when a device lacks what an image requires,
/// or `Ok` when the device can run it. `device_aspects` are the device's;
/// `max_work_group_size` its threads per block.
pub fn check_device(
    r: &Requirements,
    device_aspects: &[Aspect],
    sub_group_sizes: &[u32],
    max_work_group_size: u32,
) -> Result<(), String> {
    if let Some(t) = &r.fixed_target
        && !t.iter().any(|a| device_aspects.contains(&Aspect(*a)))
    {
        return Err(
            "Kernel was compiled for fixed targets but was submitted to a different device.".into(),
        );
    }
    if let Some(a) = r.aspects.iter().find(|a| !device_aspects.contains(a)) {
        return Err(format!(
            "Kernel uses optional feature corresponding to '{a}' but device does not support this aspect."
        ));
    }
    if let Some(s) = r
        .reqd_sub_group_size
        .filter(|s| !sub_group_sizes.contains(s))
    {
        return Err(format!(
            "Kernel has a required sub-group size of '{s}' but device does not support this sub-group size."
        ));
    }
    if let Some(w) = &r.reqd_work_group_size {
        // In 128 bits: three 64-bit dimensions may overflow 64.
        let total = w
            .iter()
            .try_fold(1u128, |t, &d| t.checked_mul(u128::from(d)));
        if total.is_none_or(|t| t > u128::from(max_work_group_size)) {
            let dims: Vec<String> = w.iter().map(u64::to_string).collect();
            return Err(format!(
                "Kernel has a required work-group size of '{}' but device does not support this work-group size.",
                dims.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
