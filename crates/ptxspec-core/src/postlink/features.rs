//! Requirements of kernels from what their code uses and declares,
//! propagated up the static call graph (the optional kernel features design (DPC++)).

use std::collections::{BTreeSet, HashMap, VecDeque};

use super::PostLinkError;
use super::analyze::func_name;
use super::link::Linked;
use crate::features::{self, Aspect, Requirements};
use crate::ptx::ItemKind;

/// The sub-group (warp) size of NVIDIA GPUs, which warp-level code relies
/// on.
pub const NVIDIA_SUB_GROUP_SIZE: u32 = 32;

/// Per kernel its requirements; warnings by the function they are about.
pub struct Features {
    pub kernels: HashMap<usize, Requirements>,
    pub warnings: Vec<(usize, String)>,
}

pub fn analyze(linked: &Linked, callees: &[Vec<usize>]) -> Result<Features, PostLinkError> {
    let m = &linked.module;
    let n = m.items.len();
    let mut own: Vec<BTreeSet<Aspect>> = vec![BTreeSet::new(); n];
    let mut declared: Vec<Option<BTreeSet<Aspect>>> = vec![None; n];
    let mut warp: Vec<bool> = vec![false; n];
    for (i, item) in m.items.iter().enumerate() {
        if let ItemKind::Function(f) = &item.kind {
            let code = features::code_features(m, f);
            own[i] = code.aspects;
            warp[i] = code.relies_on_warp_size;
            declared[i] =
                features::declared_aspects(m, f).map_err(|what| PostLinkError::Getter {
                    at: linked.map.locate(&m.src, item.span.start),
                    function: func_name(m, i),
                    what,
                })?;
        }
    }
    // What each function uses through its callees, and what it requires
    // (uses or declares, itself or through its callees).
    let used = closure(callees, |i| own[i].clone());
    let required = closure(callees, |i| {
        let mut s = own[i].clone();
        s.extend(declared[i].iter().flatten());
        s
    });
    let mut warnings = Vec::new();
    for (i, d) in declared.iter().enumerate() {
        let Some(d) = d else { continue };
        for a in used[i].difference(d) {
            let chain = chain_to(callees, i, |j| own[j].contains(a))
                .iter()
                .map(|&j| func_name(m, j))
                .collect::<Vec<_>>()
                .join(" -> ");
            warnings.push((
                i,
                format!(
                    "warning: function '{}' uses aspect '{}' not listed in its PTXSPEC_DEVICE_HAS (call chain: {chain})",
                    func_name(m, i),
                    a.name()
                ),
            ));
        }
    }
    let mut kernels = HashMap::new();
    for (i, item) in m.items.iter().enumerate() {
        let ItemKind::Function(f) = &item.kind else {
            continue;
        };
        if !f.is_kernel || f.body.is_none() {
            continue;
        }
        let reqntid = f
            .perf
            .iter()
            .find(|(name, _)| name == "reqntid")
            .map(|(_, dims)| dims.iter().map(|&d| d as u32).collect());
        // Like DPC++, which writes a sub-group size only for kernels that
        // require one: here, kernels whose code relies on the warp's size.
        let uses_warp = super::analyze::reachable(callees, i).any(|g| warp[g]);
        kernels.insert(
            i,
            Requirements {
                aspects: required[i].clone(),
                reqd_work_group_size: reqntid,
                reqd_sub_group_size: uses_warp.then_some(NVIDIA_SUB_GROUP_SIZE),
                fixed_target: None,
            },
        );
    }
    Ok(Features { kernels, warnings })
}

/// For every function, the union of `own` over itself and everything it
/// reaches through calls.
fn closure(
    callees: &[Vec<usize>],
    own: impl Fn(usize) -> BTreeSet<Aspect>,
) -> Vec<BTreeSet<Aspect>> {
    // `mark[f] == start`: f was visited from `start` (one buffer for all).
    let mut mark = vec![usize::MAX; callees.len()];
    let mut stack = Vec::new();
    (0..callees.len())
        .map(|start| {
            stack.push(start);
            let mut acc = BTreeSet::new();
            while let Some(f) = stack.pop() {
                if std::mem::replace(&mut mark[f], start) == start {
                    continue;
                }
                acc.extend(own(f));
                stack.extend(callees[f].iter().copied().filter(|&c| mark[c] != start));
            }
            acc
        })
        .collect()
}

/// The shortest call chain from `from` to a function satisfying `hit`.
fn chain_to(callees: &[Vec<usize>], from: usize, hit: impl Fn(usize) -> bool) -> Vec<usize> {
    let mut parent: HashMap<usize, usize> = HashMap::new();
    let mut queue = VecDeque::from([from]);
    let mut seen = vec![false; callees.len()];
    seen[from] = true;
    while let Some(f) = queue.pop_front() {
        if hit(f) {
            let mut chain = vec![f];
            let mut at = f;
            while let Some(&p) = parent.get(&at) {
                chain.push(p);
                at = p;
            }
            chain.reverse();
            return chain;
        }
        for &c in &callees[f] {
            if !std::mem::replace(&mut seen[c], true) {
                parent.insert(c, f);
                queue.push_back(c);
            }
        }
    }
    vec![from]
}
