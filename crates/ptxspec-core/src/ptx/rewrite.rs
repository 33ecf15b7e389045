//! What the optimizer's passes share: their temporaries' names, the
//! rewriting of function bodies statement by statement, and the order the
//! loop passes run in.

use super::{Body, Edits, Function, ItemKind, Module, ParseError, Span, parse};

/// A prefix for a rewrite's temporaries that `src` does not hold: `stem`,
/// or `<stem><k>x` where an earlier rewrite of the same PTX took it (the
/// native route's, before an argument is fixed) — its registers, declared
/// again with another count, would clash.
pub(crate) fn fresh_prefix(src: &str, stem: &str) -> String {
    (0..)
        .map(|k| match k {
            0 => stem.to_string(),
            k => format!("{stem}{k}x"),
        })
        .find(|p| !src.contains(p.as_str()))
        .unwrap_or_default()
}

/// What a pass rewrote of one body: each statement's index and its new
/// text, and how many 64-bit temporaries (named by [`temporary`] from the
/// prefix the pass was given) and predicates (`<prefix>q<n>`) the new
/// texts use.
#[derive(Default)]
pub(crate) struct BodyRewrite {
    pub(crate) statements: std::collections::BTreeMap<usize, String>,
    pub(crate) temporaries: usize,
    pub(crate) predicates: usize,
}

/// Runs `rewrite` on the body of each function of `ptx` that `wanted`
/// names — with a prefix for its temporaries that `ptx` does not use (from
/// `stem`, each function's its own) — and applies what it rewrote, the
/// temporaries declared in the body's own scope, right after its opening
/// brace (a body that opens with a nested block would otherwise declare
/// them inside it). Text nothing was rewritten in comes back as it was.
pub(crate) fn rewrite_bodies(
    ptx: &str,
    stem: &str,
    wanted: impl Fn(&Module, &Function) -> bool,
    rewrite: impl Fn(&Module, &Body, &str) -> BodyRewrite,
) -> Result<String, ParseError> {
    let m = parse("specialized.ptx", ptx.to_string())?;
    let prefix = fresh_prefix(&m.src, stem);
    let mut edits = Edits::new();
    let mut any = false;
    for (n, item) in m.items.iter().enumerate() {
        let ItemKind::Function(f) = &item.kind else {
            continue;
        };
        let (Some(body), true) = (&f.body, wanted(&m, f)) else {
            continue;
        };
        let prefix = format!("{prefix}{n}_");
        let done = rewrite(&m, body, &prefix);
        if done.statements.is_empty() {
            continue;
        }
        for (at, text) in done.statements {
            edits.replace(body.stmts[at].span, text.trim_start().to_string());
        }
        let open = body.span.start + 1;
        let predicates = match done.predicates {
            0 => String::new(),
            n => format!("\n.reg .pred {prefix}q<{n}>;"),
        };
        edits.replace(
            Span::new(open, open),
            format!("\n.reg .b64 {prefix}<{}>;{predicates}", done.temporaries),
        );
        any = true;
    }
    if !any {
        return Ok(ptx.to_string());
    }
    Ok(edits.apply(&m.src).unwrap_or_else(|_| ptx.to_string()))
}

/// The loop half of the optimizer, as both specialization routes run it
/// (constants made immediates, arguments fixed through PTX) on
/// `specialized`, the code made from `generic`, in the functions `wanted`
/// names: sums in the loops the values count extended term by term
/// ([`super::widen`]), the addresses' constants moved outward
/// ([`super::offsets`]), those loops let unroll ([`super::loops`]), then
/// loops' addresses stepped as pointers behind a guard
/// ([`super::pointers`]).
pub(crate) fn loop_passes(
    generic: &Module,
    specialized: &str,
    wanted: impl Fn(&Module, &Function) -> bool + Copy,
) -> Result<String, ParseError> {
    let widened = super::widen::widen_sums_in_counted_loops(specialized, wanted)?;
    let offset = super::offsets::fold_offsets_in_counted_loops(&widened, wanted)?;
    let unrolled = super::loops::unroll_where_counts_became_known(generic, &offset, wanted)?;
    super::pointers::step_addresses_as_pointers(&unrolled, wanted)
}

/// A pass's next temporary, named from `prefix`.
pub(crate) fn temporary(prefix: &str, next: &mut usize) -> String {
    *next += 1;
    format!("{prefix}{}", *next - 1)
}

/// The parsed module of `ptx` and the body of its first function that has
/// one: what the passes' tests read.
#[cfg(test)]
pub(crate) fn first_body(ptx: &str) -> (Module, Body) {
    let module = parse("k.ptx", ptx.to_string()).expect("test PTX parses");
    let body = module
        .items
        .iter()
        .find_map(|i| match &i.kind {
            ItemKind::Function(f) => f.body.clone(),
            _ => None,
        })
        .expect("a function with a body");
    (module, body)
}
