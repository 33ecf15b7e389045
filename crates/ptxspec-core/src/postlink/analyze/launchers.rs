//! Kernels that launch kernels from device code (dynamic parallelism) and
//! pass their `kernel_handler` on.

use super::*;
use crate::ptx::instr::Instr;

/// Whether function `f` loads parameter `param` as a pointer and stores
/// that register somewhere (into a launch's parameter buffer).
pub(super) fn passes_on(m: &Module, f: usize, param: &str) -> bool {
    param_flows_into(m, f, param, |i| i.opcode == "st")
}

/// Whether function `f` loads parameter `param` (`ld.param`, in any of its
/// spellings) into a register that is then the second operand of an
/// instruction that `into` picks (a store: the parameter stored somewhere).
pub(super) fn param_flows_into(
    m: &Module,
    f: usize,
    param: &str,
    into: impl Fn(&Instr<'_>) -> bool,
) -> bool {
    let body = stmts(m, f);
    let is = |st: &&Stmt, pick: &dyn Fn(&Instr<'_>) -> bool| {
        m.instr(st).ok().flatten().is_some_and(|i| pick(&i))
    };
    let loaded: Vec<&str> = body
        .iter()
        .filter(|st| is(st, &|i| i.opcode == "ld" && i.has("param")))
        .filter_map(|st| {
            let ops = m.operands(st).ok()?;
            let (name, _) = address(m, ops.get(1)?)?;
            (name == param).then(|| ops.first()?.first().map(|t| t.text(&m.src)))?
        })
        .collect();
    body.iter().filter(|st| is(st, &into)).any(|st| {
        m.operands(st).ok().is_some_and(|ops| {
            ops.get(1)
                .and_then(|v| v.first())
                .is_some_and(|t| loaded.contains(&t.text(&m.src)))
        })
    })
}

/// Kernels that launch kernels from device code and store their last
/// parameter for them pass their kernel_handler on (dynamic parallelism):
/// that parameter carries the buffer too. Marks it in `buffer_params` and
/// returns those kernels.
pub(super) fn passing_the_handler_on(
    m: &Module,
    callees: &[Vec<usize>],
    extern_calls: &[Vec<(usize, u32)>],
    buffer_params: &mut HashMap<usize, usize>,
) -> Vec<usize> {
    let mut launchers = Vec::new();
    for (k, item) in m.items.iter().enumerate() {
        let ItemKind::Function(f) = &item.kind else {
            continue;
        };
        if !f.is_kernel || f.body.is_none() || buffer_params.contains_key(&k) {
            continue;
        }
        let launches = reachable(callees, k).any(|g| {
            extern_calls[g].iter().any(|&(d, _)| {
                let n = func_name(m, d);
                n.starts_with("cudaLaunchDevice") || n.starts_with("__cudaCDP2LaunchDevice")
            })
        });
        if !launches {
            continue;
        }
        if let Some(last) = f.params.last().filter(|p| p.size() == 8)
            && passes_on(m, k, m.text(last.name))
        {
            buffer_params.insert(k, f.params.len() - 1);
            launchers.push(k);
        }
    }
    launchers
}
