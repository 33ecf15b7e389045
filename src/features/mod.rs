//! Optional kernel features (seed 003) on PTX: which aspects code uses and
//! declares, what an image requires of a device, and the check a runtime
//! makes before a launch. The device configuration file and the aspect
//! filter are in [`device_config`](crate::device_config).

mod aspect;
mod requirements;

pub use aspect::Aspect;
pub use requirements::{Requirements, WORK_GROUP_SIZE_U64};

use crate::ptx::{Function, Module, StmtKind};
use std::collections::BTreeSet;

/// The marker `PTXSPEC_DEVICE_HAS(...)` leaves in PTX: an inline-asm
/// comment `// ptxspec.device_has fp16, fp64`, which every CUDA compiler
/// copies into the function's body verbatim.
pub const DEVICE_HAS_MARKER: &str = "ptxspec.device_has";

/// Opcodes that only move data: a `.f64` on them is no fp64 arithmetic.
const DATA_MOVEMENT: &[&str] = &[
    "ld",
    "ldu",
    "st",
    "mov",
    "prefetch",
    "prefetchu",
    "cvta",
    "shfl",
];

/// Aspects a function's own instructions use.
pub fn used_aspects(m: &Module, f: &Function) -> BTreeSet<Aspect> {
    let mut used = BTreeSet::new();
    let Some(body) = &f.body else { return used };
    for st in body.stmts.iter().filter(|s| s.kind == StmtKind::Instr) {
        let op = m.text(st.op);
        let mut parts = op.split('.');
        let base = parts.next().unwrap_or("");
        let mut wide = false;
        for p in parts {
            match p {
                "f16" | "f16x2" => {
                    used.insert(Aspect::FP16);
                }
                "bf16" | "bf16x2" => {
                    used.insert(Aspect::BF16_MATH);
                }
                "f64" if !DATA_MOVEMENT.contains(&base) => {
                    used.insert(Aspect::FP64);
                }
                _ => {}
            }
            wide |= matches!(p, "b64" | "u64" | "s64" | "f64");
        }
        if wide && matches!(base, "atom" | "red") {
            used.insert(Aspect::ATOMIC64);
        }
    }
    used
}

/// Opcodes whose meaning depends on the warp (sub-group) being 32 threads.
const WARP_OPCODES: &[&str] = &[
    "shfl",
    "vote",
    "match",
    "redux",
    "activemask",
    "elect",
    "wmma",
    "mma",
    "ldmatrix",
    "stmatrix",
    "movmatrix",
];

/// Whether a function's own code relies on the sub-group size: warp
/// shuffles, votes and reductions, warp-wide matrix operations,
/// `bar.warp.sync`, or the lane registers (`%laneid`, `%lanemask_*`).
pub fn relies_on_warp_size(m: &Module, f: &Function) -> bool {
    let Some(body) = &f.body else { return false };
    body.stmts
        .iter()
        .filter(|s| s.kind == StmtKind::Instr)
        .any(|st| {
            let op = m.text(st.op);
            let base = op.split('.').next().unwrap_or("");
            WARP_OPCODES.contains(&base) || op.starts_with("bar.warp")
        })
        || m.text(body.span).contains("%lane")
}

/// Aspects a function declares with `PTXSPEC_DEVICE_HAS`, or `None` when it
/// declares nothing. Unknown names are returned as errors with the name.
pub fn declared_aspects(m: &Module, f: &Function) -> Result<Option<BTreeSet<Aspect>>, String> {
    let Some(body) = &f.body else { return Ok(None) };
    let text = m.text(body.span);
    let mut found: Option<BTreeSet<Aspect>> = None;
    for (i, _) in text.match_indices(DEVICE_HAS_MARKER) {
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

/// The message seed 003 gives when a device lacks what an image requires,
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
        let total: u64 = w.iter().map(|&d| d as u64).product();
        if total > max_work_group_size as u64 {
            let dims: Vec<String> = w.iter().map(u32::to_string).collect();
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
