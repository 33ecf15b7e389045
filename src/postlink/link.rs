//! Linking translation units (separate compilation) into one PTX module.
//!
//! `.extern` declarations resolve to the `.visible`/`.weak` definitions of
//! other units, internal names that collide across units (`$str`, helpers,
//! default-value variables) are renamed, a `.visible` symbol defined twice
//! is an error, later `.weak` definitions give way to the first. PTX wants
//! declarations before uses, so the linked module lists function prototypes
//! first, then variables, then function definitions, each in input order.

use std::collections::{HashMap, HashSet};

use super::PostLinkError;
use crate::ptx::{self, Edits, Item, ItemKind, Linkage, Module, Span, TokenKind};

/// Where linked text came from, for error messages: sorted by offset.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    /// (offset in the linked text, file, 1-based line there)
    chunks: Vec<(u32, String, usize)>,
}

/// A position in an input file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub file: String,
    pub line: usize,
    pub col: usize,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

impl SourceMap {
    /// The position in the inputs of an offset of the linked text.
    pub fn locate(&self, linked: &str, offset: u32) -> Location {
        let (line, col) = ptx::line_col(linked, offset);
        let i = self.chunks.partition_point(|c| c.0 <= offset);
        if i == 0 {
            return Location {
                file: "<linked>".into(),
                line,
                col,
            };
        }
        let (start, file, orig_line) = &self.chunks[i - 1];
        let (start_line, _) = ptx::line_col(linked, *start);
        Location {
            file: file.clone(),
            line: orig_line + (line - start_line),
            col,
        }
    }
}

/// The linked module, which input each of its items came from, and the map
/// back to input positions.
pub struct Linked {
    pub module: Module,
    /// Per item of `module`: index of its input.
    pub origin: Vec<usize>,
    pub map: SourceMap,
}

fn is_declaration(item: &Item) -> bool {
    match &item.kind {
        ItemKind::Function(f) => f.body.is_none(),
        ItemKind::Variable(v) => v.linkage == Linkage::Extern,
        _ => false,
    }
}

/// The order in which the linked module lists items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Prototypes,
    Variables,
    Definitions,
}

impl Phase {
    fn of(item: &Item) -> Option<Phase> {
        match &item.kind {
            ItemKind::Function(f) if f.body.is_none() => Some(Phase::Prototypes),
            ItemKind::Function(_) => Some(Phase::Definitions),
            ItemKind::Variable(_) => Some(Phase::Variables),
            ItemKind::Other => Some(Phase::Definitions),
            _ => None,
        }
    }
}

fn is_header(item: &Item) -> bool {
    matches!(
        item.kind,
        ItemKind::Version | ItemKind::Target | ItemKind::AddressSize
    )
}

/// Links the modules (at least one).
pub fn link(modules: Vec<Module>) -> Result<Linked, PostLinkError> {
    if modules.len() == 1 {
        let module = modules.into_iter().next().ok_or(PostLinkError::NoInput)?;
        let origin = vec![0; module.items.len()];
        let map = SourceMap {
            chunks: vec![(0, module.file.clone(), 1)],
        };
        return Ok(Linked {
            module,
            origin,
            map,
        });
    }
    let Some(first) = modules.first() else {
        return Err(PostLinkError::NoInput);
    };
    check_headers(&modules)?;

    // Definitions with external linkage: the first of each name.
    let mut defined: HashMap<&str, (usize, usize, Linkage)> = HashMap::new();
    for (m, module) in modules.iter().enumerate() {
        for (i, item) in module.items.iter().enumerate() {
            let (Some(name), Some(linkage)) = (item.name(), item.linkage()) else {
                continue;
            };
            if is_declaration(item)
                || !matches!(linkage, Linkage::Visible | Linkage::Weak | Linkage::Common)
            {
                continue;
            }
            let name = module.text(name);
            match defined.get(name) {
                Some(&(pm, pi, plink))
                    if plink == Linkage::Visible && linkage == Linkage::Visible =>
                {
                    let prev = &modules[pm];
                    let (pl, pc) = ptx::line_col(&prev.src, prev.items[pi].span.start);
                    let (l, c) = ptx::line_col(&module.src, item.span.start);
                    return Err(PostLinkError::DuplicateSymbol {
                        name: name.to_string(),
                        first: Location {
                            file: prev.file.clone(),
                            line: pl,
                            col: pc,
                        },
                        second: Location {
                            file: module.file.clone(),
                            line: l,
                            col: c,
                        },
                    });
                }
                Some(&(_, _, Linkage::Weak | Linkage::Common)) if linkage == Linkage::Visible => {
                    // A strong definition wins over a weak one seen before.
                    defined.insert(name, (m, i, linkage));
                }
                Some(_) => {}
                None => {
                    defined.insert(name, (m, i, linkage));
                }
            }
        }
    }

    // Every name with external linkage anywhere: internal names must not
    // collide with these, nor with other units' internal names.
    let mut taken: HashSet<String> = HashSet::new();
    for module in &modules {
        for item in &module.items {
            if let (Some(n), Some(l)) = (item.name(), item.linkage())
                && l != Linkage::Internal
            {
                taken.insert(module.text(n).to_string());
            }
        }
    }
    let mut renames: Vec<HashMap<String, String>> = vec![HashMap::new(); modules.len()];
    for (m, module) in modules.iter().enumerate() {
        for item in &module.items {
            let (Some(n), Some(Linkage::Internal)) = (item.name(), item.linkage()) else {
                continue;
            };
            let name = module.text(n);
            if is_declaration(item) && defined.contains_key(name) {
                continue; // a plain prototype of an external function
            }
            if taken.insert(name.to_string()) {
                continue;
            }
            let mut k = m;
            let fresh = loop {
                let candidate = format!("{name}$tu{k}");
                if !taken.contains(&candidate) {
                    break candidate;
                }
                k += modules.len();
            };
            taken.insert(fresh.clone());
            renames[m].insert(name.to_string(), fresh);
        }
    }

    // Emission: header, prototypes, variables, definitions.
    let mut text = String::new();
    let mut map = SourceMap::default();
    let mut origin = Vec::new();
    let version = max_version(&modules);
    for item in first.items.iter().filter(|i| is_header(i)) {
        map.chunks.push((
            text.len() as u32,
            first.file.clone(),
            ptx::line_col(&first.src, item.full.start).0,
        ));
        if item.kind == ItemKind::Version {
            text.push_str(&first.src[item.full.start as usize..item.span.start as usize]);
            text.push_str(&format!(".version {version}"));
        } else {
            text.push_str(&first.src[item.full.range()]);
        }
    }
    text.push('\n');
    // Names already declared (prototypes, extern variables), after renaming.
    let mut declared: HashSet<String> = HashSet::new();
    for phase in [Phase::Prototypes, Phase::Variables, Phase::Definitions] {
        for (m, module) in modules.iter().enumerate() {
            for (i, item) in module.items.iter().enumerate() {
                if Phase::of(item) != Some(phase) {
                    continue;
                }
                let mut edits = Edits::new();
                if let Some(name) = item.name().map(|n| module.text(n)) {
                    let resolved = defined.get(name).copied();
                    if is_declaration(item) {
                        let key = renames[m].get(name).map_or(name, String::as_str);
                        if !declared.insert(key.to_string()) {
                            continue; // one declaration per symbol
                        }
                        match (resolved, &item.kind) {
                            // An extern variable whose definition is linked in
                            // goes: the definition comes before any function.
                            (Some(_), ItemKind::Variable(_)) => continue,
                            // An extern function whose definition is linked
                            // in: its declaration becomes a prototype.
                            (Some((_, _, linkage)), _) => {
                                if let Some(at) = linkage_span(module, item) {
                                    let kw = if linkage == Linkage::Visible {
                                        ".visible"
                                    } else {
                                        ".weak"
                                    };
                                    edits.replace(at, kw);
                                }
                            }
                            (None, _) => {}
                        }
                    } else if matches!(item.linkage(), Some(Linkage::Weak | Linkage::Common))
                        && resolved.is_some_and(|(dm, di, _)| (dm, di) != (m, i))
                    {
                        continue; // another unit's definition is kept
                    }
                }
                map.chunks.push((
                    text.len() as u32,
                    module.file.clone(),
                    ptx::line_col(&module.src, item.full.start).0,
                ));
                rename_into(module, item.full, &renames[m], &mut edits)?;
                edits.apply_range(&module.src, item.full, &mut text);
                origin.push(m);
            }
        }
    }
    text.push('\n');
    let names: Vec<&str> = modules.iter().map(|m| m.file.as_str()).collect();
    let module = ptx::parse(format!("linked({})", names.join(", ")), text)?;
    // The parse sees one item per emitted chunk after the header items.
    let header_items = first.items.iter().filter(|i| is_header(i)).count();
    let mut full_origin = vec![0; header_items];
    full_origin.extend(origin);
    if full_origin.len() != module.items.len() {
        return Err(PostLinkError::Internal(format!(
            "linked module has {} items, expected {}",
            module.items.len(),
            full_origin.len()
        )));
    }
    Ok(Linked {
        module,
        origin: full_origin,
        map,
    })
}

/// The span of an item's `.extern` keyword.
fn linkage_span(module: &Module, item: &Item) -> Option<Span> {
    let mut lx = ptx::lex::Lexer::range(&module.src, item.span.start, item.span.end);
    let t = lx.next_token().ok()??;
    (t.text(&module.src) == ".extern").then_some(Span::new(t.start, t.end))
}

/// Adds edits renaming identifiers of `span`.
fn rename_into(
    module: &Module,
    span: Span,
    renames: &HashMap<String, String>,
    edits: &mut Edits,
) -> Result<(), PostLinkError> {
    if renames.is_empty() {
        return Ok(());
    }
    let toks = ptx::lex::tokens(&module.src, span.start, span.end)
        .map_err(|e| module.error_at(e.offset, e.what))?;
    for t in toks {
        if t.kind == TokenKind::Word
            && let Some(new) = renames.get(t.text(&module.src))
        {
            edits.replace(Span::new(t.start, t.end), new.clone());
        }
    }
    Ok(())
}

fn header_text(module: &Module, pred: impl Fn(&ItemKind) -> bool) -> Option<String> {
    module.items.iter().find(|i| pred(&i.kind)).map(|i| {
        let t = module.text(i.span);
        t.split_whitespace().skip(1).collect::<Vec<_>>().join(" ")
    })
}

fn check_headers(modules: &[Module]) -> Result<(), PostLinkError> {
    let first = &modules[0];
    let target = header_text(first, |k| *k == ItemKind::Target);
    let asize = header_text(first, |k| *k == ItemKind::AddressSize);
    for m in &modules[1..] {
        let t = header_text(m, |k| *k == ItemKind::Target);
        if t != target {
            return Err(PostLinkError::Link(format!(
                "{} has .target {} but {} has .target {}",
                m.file,
                t.as_deref().unwrap_or("(none)"),
                first.file,
                target.as_deref().unwrap_or("(none)")
            )));
        }
        let a = header_text(m, |k| *k == ItemKind::AddressSize);
        if a != asize {
            return Err(PostLinkError::Link(format!(
                "{} has .address_size {} but {} has {}",
                m.file,
                a.as_deref().unwrap_or("(none)"),
                first.file,
                asize.as_deref().unwrap_or("(none)")
            )));
        }
    }
    Ok(())
}

/// The highest `.version` of the modules, as written.
fn max_version(modules: &[Module]) -> String {
    let parse = |s: &str| -> (u32, u32) {
        let (a, b) = s.split_once('.').unwrap_or((s, "0"));
        (a.parse().unwrap_or(0), b.parse().unwrap_or(0))
    };
    modules
        .iter()
        .filter_map(|m| header_text(m, |k| *k == ItemKind::Version))
        .max_by_key(|v| parse(v))
        .unwrap_or_else(|| "7.0".to_string())
}
