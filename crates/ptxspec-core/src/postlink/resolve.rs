//! Symbols that no input defines: what the driver resolves at load time,
//! and the `link_program_error` for the rest.

use super::{PostLinkError, Unresolved, analyze, link};
use crate::driver_symbols::is_resolved_by_driver;
use crate::fasthash::FxHashSet as HashSet;
use crate::ptx::{self, ItemKind, Module};

/// Fails with every symbol that is used but that no input defines, except
/// what the driver resolves (its system calls and the device runtime).
/// `.extern .shared` arrays are dynamic shared memory, not references.
pub(super) fn check_resolved(
    linked: &link::Linked,
    analysis: &analyze::Analysis,
) -> Result<(), PostLinkError> {
    let m = &linked.module;
    let mut missing: Vec<(u32, String)> = Vec::new();
    for calls in &analysis.extern_calls {
        for &(d, at) in calls {
            let name = analyze::func_name(m, d);
            if !is_resolved_by_driver(&name) && !missing.iter().any(|(_, n)| *n == name) {
                missing.push((at, name));
            }
        }
    }
    // Extern variables (and functions whose address is taken rather than
    // called) that nothing defines, where the module mentions them.
    let defined: HashSet<&str> = m
        .items
        .iter()
        .filter(|i| match &i.kind {
            ItemKind::Function(f) => f.body.is_some(),
            ItemKind::Variable(v) => v.linkage != ptx::Linkage::Extern,
            _ => false,
        })
        .filter_map(|i| i.name().map(|n| m.text(n)))
        .collect();
    for (i, item) in m.items.iter().enumerate() {
        let name = match &item.kind {
            ItemKind::Variable(v) if v.linkage == ptx::Linkage::Extern && v.space != "shared" => {
                m.text(v.name)
            }
            ItemKind::Function(f) if f.body.is_none() && !analysis.getter_decls.contains(&i) => {
                m.text(f.name)
            }
            _ => continue,
        };
        if defined.contains(name)
            || is_resolved_by_driver(name)
            || missing.iter().any(|(_, n)| n == name)
        {
            continue;
        }
        if let Some(at) = first_use(m, name, item.span.end) {
            missing.push((at, name.to_string()));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    missing.sort();
    Err(PostLinkError::Unresolved(
        missing
            .into_iter()
            .map(|(at, symbol)| Unresolved {
                symbol,
                at: linked.map.locate(&m.src, at),
            })
            .collect(),
    ))
}

/// The offset of the first mention of `name` as a whole word after `from`.
fn first_use(m: &Module, name: &str, from: u32) -> Option<u32> {
    ptx::lex::word_positions(m.src.get(from as usize..)?, name)
        .next()
        .map(|i| from + i as u32)
}
