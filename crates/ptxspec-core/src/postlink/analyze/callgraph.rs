//! The static call graph and the getter calls of a linked module.

use super::*;

/// What a getter's (mangled) name says of the constant's type.
#[derive(Clone, Copy)]
pub(super) struct GetterName {
    /// Its declaration's item.
    pub(super) decl: usize,
    /// The scalar getter (else the composite one).
    pub(super) scalar: bool,
    /// Size and signedness of a scalar.
    pub(super) width: Option<(u32, bool)>,
    pub(super) kind: Option<ScalarKind>,
}

pub(super) fn func(m: &Module, item: usize) -> Option<&Function> {
    match &m.items.get(item)?.kind {
        ItemKind::Function(f) => Some(f),
        _ => None,
    }
}

pub(super) fn stmts(m: &Module, item: usize) -> &[Stmt] {
    func(m, item)
        .and_then(|f| f.body.as_ref())
        .map_or(&[], |b| &b.stmts)
}

/// A `call` statement's pieces: return parameter, callee, arguments.
pub(super) struct CallOps<'a> {
    pub(super) retval: Option<&'a str>,
    pub(super) callee: &'a str,
    pub(super) args: Vec<&'a str>,
}

pub(super) fn call_ops<'a>(m: &'a Module, st: &Stmt) -> Result<CallOps<'a>, ptx::ParseError> {
    let ops = m.operands(st)?;
    pub(super) fn words<'a, 't>(
        m: &'a Module,
        toks: &'t [Token],
    ) -> impl Iterator<Item = &'a str> + 't
    where
        'a: 't,
    {
        toks.iter()
            .filter(|t| t.kind == TokenKind::Word)
            .map(|t| t.text(&m.src))
    }
    let mut it = ops.iter();
    let mut first = it.next().unwrap_or(&[]);
    let mut retval = None;
    if first.first().is_some_and(|t| t.is(b'(')) {
        retval = words(m, first).next();
        first = it.next().unwrap_or(&[]);
    }
    let callee = words(m, first).next().unwrap_or_default();
    let args = it.next().map(|a| words(m, a).collect()).unwrap_or_default();
    Ok(CallOps {
        retval,
        callee,
        args,
    })
}

/// Items reachable from `start` through calls, `start` included.
pub(crate) fn reachable(callees: &[Vec<usize>], start: usize) -> impl Iterator<Item = usize> {
    let mut seen = std::collections::HashSet::from([start]);
    let mut stack = vec![start];
    let mut order = Vec::new();
    while let Some(f) = stack.pop() {
        order.push(f);
        for &c in callees.get(f).map_or(&[][..], |v| v.as_slice()) {
            if seen.insert(c) {
                stack.push(c);
            }
        }
    }
    order.into_iter()
}

pub(crate) fn func_name(m: &Module, item: usize) -> String {
    m.items
        .get(item)
        .and_then(|i| i.name())
        .map_or_else(|| "?".to_string(), |n| m.text(n).to_string())
}

/// The module's symbols, getters and static call graph.
pub(super) struct CallGraph<'a> {
    /// Item of each name: the definition where there is one.
    pub(super) by_name: FxHashMap<&'a str, usize>,
    /// Declarations of getter functions.
    pub(super) getter_decls: Vec<usize>,
    /// Per item: the functions with bodies it calls.
    pub(super) callees: Vec<Vec<usize>>,
    /// Per item: the declared-only functions it calls, with the call's
    /// offset.
    pub(super) extern_calls: Vec<Vec<(usize, u32)>>,
    /// Per callee: (caller item, call statement index) pairs.
    pub(super) callers: FxHashMap<usize, Vec<(usize, usize)>>,
    /// Getter calls: (function, statement, operands, what the getter's
    /// name says).
    pub(super) getter_calls: Vec<(usize, usize, CallOps<'a>, GetterName)>,
}

impl<'a> CallGraph<'a> {
    pub(super) fn of(m: &'a Module) -> Result<Self, PostLinkError> {
        let mut by_name = FxHashMap::default();
        for (i, item) in m.items.iter().enumerate() {
            if let Some(n) = item.name() {
                let defines = match &item.kind {
                    ItemKind::Function(f) => f.body.is_some(),
                    ItemKind::Variable(v) => v.linkage != ptx::Linkage::Extern,
                    _ => false,
                };
                let entry = by_name.entry(m.text(n)).or_insert(i);
                if defines {
                    *entry = i;
                }
            }
        }
        let getter_decls: Vec<usize> = (0..m.items.len())
            .filter(|&i| {
                func(m, i).is_some_and(|f| f.body.is_none() && is_getter_name(m.text(f.name)))
            })
            .collect();
        // What each getter's name says, worked out once per declaration.
        let getters: FxHashMap<&str, GetterName> = getter_decls
            .iter()
            .filter_map(|&i| m.items[i].name().map(|n| (i, m.text(n))))
            .map(|(decl, name)| {
                let scalar = name.contains(SCALAR_GETTER);
                (
                    name,
                    GetterName {
                        decl,
                        scalar,
                        width: mangled_scalar(name),
                        kind: mangled_kind(name),
                    },
                )
            })
            .collect();

        // Call graph, and the getter calls to look at.
        let mut callees = vec![Vec::new(); m.items.len()];
        let mut extern_calls = vec![Vec::new(); m.items.len()];
        let mut callers: FxHashMap<usize, Vec<(usize, usize)>> = FxHashMap::default();
        let mut getter_calls = Vec::new();
        for (i, callee_list) in callees.iter_mut().enumerate() {
            for (s, st) in stmts(m, i).iter().enumerate() {
                if m.opcode(st) != Some("call") {
                    continue;
                }
                let ops = call_ops(m, st)?;
                if let Some(&getter) = getters.get(ops.callee) {
                    getter_calls.push((i, s, ops, getter));
                } else if let Some(&c) = by_name.get(ops.callee) {
                    if func(m, c).is_some_and(|f| f.body.is_none()) {
                        extern_calls[i].push((c, st.span.start));
                    } else if !callee_list.contains(&c) {
                        callee_list.push(c);
                    }
                    callers.entry(c).or_default().push((i, s));
                }
            }
        }
        Ok(CallGraph {
            by_name,
            getter_decls,
            callees,
            extern_calls,
            callers,
            getter_calls,
        })
    }
}
