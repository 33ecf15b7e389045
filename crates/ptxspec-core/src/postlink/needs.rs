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
pub(crate) const NVIDIA_SUB_GROUP_SIZE: u32 = 32;

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
            .map(|(_, dims)| dims.clone());
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
///
/// Linear in the call graph: functions that call each other (recursion)
/// share one set, and each set is made once from its callees' sets, in the
/// order Tarjan's algorithm finds the strongly connected components
/// (callees first). A walk per function was quadratic on a deep call chain.
fn closure(
    callees: &[Vec<usize>],
    own: impl Fn(usize) -> BTreeSet<Aspect>,
) -> Vec<BTreeSet<Aspect>> {
    let components = strongly_connected(callees);
    let mut component_of = vec![0; callees.len()];
    for (c, members) in components.iter().enumerate() {
        for &f in members {
            component_of[f] = c;
        }
    }
    let mut acc: Vec<BTreeSet<Aspect>> = Vec::with_capacity(components.len());
    for (c, members) in components.iter().enumerate() {
        let mut set = BTreeSet::new();
        for &f in members {
            set.extend(own(f));
            for &g in &callees[f] {
                // Callee components come first: theirs are done.
                if component_of[g] != c {
                    set.extend(acc[component_of[g]].iter().copied());
                }
            }
        }
        acc.push(set);
    }
    (0..callees.len())
        .map(|f| acc[component_of[f]].clone())
        .collect()
}

/// The strongly connected components of the call graph, each a list of
/// functions, callees' components before their callers' (Tarjan's order);
/// iterative, so that no call chain's depth reaches the thread's stack.
fn strongly_connected(callees: &[Vec<usize>]) -> Vec<Vec<usize>> {
    const NONE: usize = usize::MAX;
    let n = callees.len();
    let (mut index, mut low) = (vec![NONE; n], vec![0; n]);
    let mut on_stack = vec![false; n];
    let (mut stack, mut components) = (Vec::new(), Vec::new());
    let mut next = 0;
    // (function, how many of its callees were looked at)
    let mut walk: Vec<(usize, usize)> = Vec::new();
    for root in 0..n {
        if index[root] != NONE {
            continue;
        }
        walk.push((root, 0));
        while let Some(&mut (f, ref mut i)) = walk.last_mut() {
            if *i == 0 {
                index[f] = next;
                low[f] = next;
                next += 1;
                stack.push(f);
                on_stack[f] = true;
            }
            if let Some(&g) = callees[f].get(*i) {
                *i += 1;
                if index[g] == NONE {
                    walk.push((g, 0));
                } else if on_stack[g] {
                    low[f] = low[f].min(index[g]);
                }
                continue;
            }
            walk.pop();
            if let Some(&(parent, _)) = walk.last() {
                low[parent] = low[parent].min(low[f]);
            }
            if low[f] == index[f] {
                let mut members = Vec::new();
                while let Some(g) = stack.pop() {
                    on_stack[g] = false;
                    members.push(g);
                    if g == f {
                        break;
                    }
                }
                components.push(members);
            }
        }
    }
    components
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

#[cfg(test)]
mod closure_tests {
    use super::*;

    /// The closure by one walk per function, as it was computed before.
    fn walked(callees: &[Vec<usize>], own: &[BTreeSet<Aspect>]) -> Vec<BTreeSet<Aspect>> {
        (0..callees.len())
            .map(|start| {
                let mut seen = vec![false; callees.len()];
                let mut stack = vec![start];
                let mut acc = BTreeSet::new();
                while let Some(f) = stack.pop() {
                    if std::mem::replace(&mut seen[f], true) {
                        continue;
                    }
                    acc.extend(own[f].iter().copied());
                    stack.extend(callees[f].iter().copied());
                }
                acc
            })
            .collect()
    }

    #[test]
    fn the_linear_closure_equals_one_walk_per_function() {
        // Small pseudo-random graphs with cycles, self-calls and islands.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % m) as usize
        };
        for _ in 0..300 {
            let n = 1 + next(12);
            let callees: Vec<Vec<usize>> = (0..n)
                .map(|_| (0..next(4)).map(|_| next(n as u64)).collect())
                .collect();
            let own: Vec<BTreeSet<Aspect>> = (0..n)
                .map(|_| (0..next(3)).map(|_| Aspect(next(6) as u32)).collect())
                .collect();
            assert_eq!(
                closure(&callees, |i| own[i].clone()),
                walked(&callees, &own),
                "{callees:?}"
            );
        }
    }

    #[test]
    fn a_deep_chain_is_linear_and_needs_no_deep_stack() {
        let n = 200_000;
        let callees: Vec<Vec<usize>> = (0..n)
            .map(|i| if i + 1 < n { vec![i + 1] } else { vec![] })
            .collect();
        let sets = std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || {
                closure(&callees, |i| {
                    if i == n - 1 {
                        BTreeSet::from([Aspect::FP64])
                    } else {
                        BTreeSet::new()
                    }
                })
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(sets.iter().all(|s| s.contains(&Aspect::FP64)));
    }
}
