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
#[non_exhaustive]
pub struct Location {
    /// The input file's name.
    pub file: String,
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1.
    pub col: usize,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

impl SourceMap {
    /// The position in the inputs of an offset of the linked text.
    pub(crate) fn locate(&self, linked: &str, offset: u32) -> Location {
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
    /// What the link could not keep (debug information of several units).
    pub warnings: Vec<String>,
    /// The inputs' file names, by input index.
    pub inputs: Vec<String>,
}

impl Linked {
    /// The file stem of input `index` (`two_tu_kernel` for
    /// `dir/two_tu_kernel.ptx`): the unit's name in symbolic IDs.
    pub(crate) fn unit_stem(&self, index: usize) -> &str {
        self.inputs
            .get(index)
            .and_then(|file| super::input_stem(file))
            .unwrap_or("")
    }
}

/// A `.common` variable's size and alignment, to pick the largest (an
/// unknown size counts as none).
fn common_extent(item: &Item) -> (u64, u32) {
    match &item.kind {
        ItemKind::Variable(v) => (
            v.size().unwrap_or(0),
            v.align.unwrap_or_else(|| v.elem_size().unwrap_or(1)),
        ),
        _ => (0, 0),
    }
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
            ItemKind::File | ItemKind::Section | ItemKind::Other => Some(Phase::Definitions),
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
        let inputs = vec![module.file.clone()];
        return Ok(Linked {
            module,
            origin,
            map,
            warnings: Vec::new(),
            inputs,
        });
    }
    let Some(first) = modules.first() else {
        return Err(PostLinkError::NoInput);
    };
    check_headers(&modules)?;
    let inputs = modules.iter().map(|m| m.file.clone()).collect();
    let defined = definitions(&modules)?;
    let renames = internal_renames(&modules, &defined);
    let (tus, warnings) = units(&modules, renames);
    let (mut text, map, origin) = emit(&modules, &defined, &tus)?;
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
        warnings,
        inputs,
    })
}

/// Each name defined with external linkage, by the definition that wins
/// (module, item, linkage): the first of each name; a strong definition
/// over a weak one; of `.common` declarations the largest. Two strong
/// definitions of one name are an error naming both.
type Definitions<'m> = HashMap<&'m str, (usize, usize, Linkage)>;

fn definitions(modules: &[Module]) -> Result<Definitions<'_>, PostLinkError> {
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
                Some(&(pm, pi, Linkage::Common))
                    if linkage == Linkage::Common
                        && common_extent(item) > common_extent(&modules[pm].items[pi]) =>
                {
                    // Of `.common` declarations the largest wins (and its
                    // alignment), as CUDA's linker resolves them: code of
                    // every unit may use that many bytes.
                    defined.insert(name, (m, i, linkage));
                }
                Some(_) => {}
                None => {
                    defined.insert(name, (m, i, linkage));
                }
            }
        }
    }

    Ok(defined)
}

/// Per module, its internal names renamed (`NAME$tuK`) where they collide
/// with a name of external linkage or another unit's internal name.
fn internal_renames(modules: &[Module], defined: &Definitions<'_>) -> Vec<HashMap<String, String>> {
    // Every name with external linkage anywhere: internal names must not
    // collide with these, nor with other units' internal names.
    let mut taken: HashSet<String> = HashSet::new();
    for module in modules {
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

    renames
}

/// What each unit's text becomes in the linked module (its renames, its
/// `.file` numbers after those of the units before it, its debug labels'
/// suffix, whether its debug sections go), and the warnings of a debug
/// build of several units.
fn units(
    modules: &[Module],
    renames: Vec<HashMap<String, String>>,
) -> (Vec<TuRenames>, Vec<String>) {
    let Some(first) = modules.first() else {
        return (Vec::new(), Vec::new());
    };
    // Line and debug information: units after the first renumber their
    // `.file`s after those before them and, where they have debug sections
    // (which name compiler-local `$L__` labels at module scope), suffix
    // those labels. DWARF sections of several units cannot be merged at
    // the PTX level (their offsets into each other would be wrong): a debug
    // build keeps the first unit's and says so.
    let debug = is_debug_target(first);
    let mut warnings = Vec::new();
    let mut tus: Vec<TuRenames> = Vec::with_capacity(modules.len());
    let mut files_before = 0u64;
    for (m, (module, names)) in modules.iter().zip(renames).enumerate() {
        let has_sections = module.items.iter().any(|i| i.kind == ItemKind::Section);
        if m > 0 && debug && has_sections {
            warnings.push(format!(
                "warning: {}: the debug information (DWARF) of a translation unit after the first is dropped: \
                 a post-link of several -G units keeps line information for all and variables for {} only",
                module.file, first.file
            ));
        }
        tus.push(TuRenames {
            names,
            file_offset: if m > 0 { files_before } else { 0 },
            label_suffix: (m > 0 && has_sections).then(|| format!("$tu{m}")),
            drop_sections: m > 0 && debug,
        });
        files_before += max_file_number(module);
    }

    (tus, warnings)
}

/// The linked module's text — header, prototypes, variables, definitions
/// — with its source map and each item's unit, as emitted.
fn emit(
    modules: &[Module],
    defined: &Definitions<'_>,
    tus: &[TuRenames],
) -> Result<(String, SourceMap, Vec<usize>), PostLinkError> {
    let Some(first) = modules.first() else {
        return Err(PostLinkError::NoInput);
    };
    let mut text = String::new();
    let mut map = SourceMap::default();
    let mut origin = Vec::new();
    let version = max_version(modules);
    for item in first.items.iter().filter(|i| is_header(i)) {
        map.chunks.push((
            text.len() as u32,
            first.file.clone(),
            ptx::line_col(&first.src, item.full.start).0,
        ));
        if item.kind == ItemKind::Version {
            ptx::push_apart(
                &mut text,
                &first.src[item.full.start as usize..item.span.start as usize],
            );
            ptx::push_apart(&mut text, &format!(".version {version}"));
        } else {
            ptx::push_apart(&mut text, &first.src[item.full.range()]);
        }
    }
    text.push('\n');
    // Names already declared (prototypes, extern variables), after renaming.
    let mut declared: HashSet<String> = HashSet::new();
    for phase in [Phase::Prototypes, Phase::Variables, Phase::Definitions] {
        for (m, module) in modules.iter().enumerate() {
            for (i, item) in module.items.iter().enumerate() {
                if Phase::of(item) != Some(phase)
                    || (tus[m].drop_sections && item.kind == ItemKind::Section)
                {
                    continue;
                }
                let mut edits = Edits::new();
                if let Some(name) = item.name().map(|n| module.text(n)) {
                    let resolved = defined.get(name).copied();
                    if is_declaration(item) {
                        let key = tus[m].names.get(name).map_or(name, String::as_str);
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
                rename_into(module, item.full, &tus[m], &mut edits)?;
                // Items of other units, or kept around dropped ones, may
                // leave tokens touching.
                if ptx::joins(&text, &module.src[item.full.range()]) {
                    text.push('\n');
                }
                edits
                    .apply_range(&module.src, item.full, &mut text)
                    .map_err(|at| {
                        module.error_at(at.start, "two rewrites of one statement while linking")
                    })?;
                origin.push(m);
            }
        }
    }
    Ok((text, map, origin))
}

/// The span of an item's `.extern` keyword.
fn linkage_span(module: &Module, item: &Item) -> Option<Span> {
    let mut lx = ptx::lex::Lexer::range(&module.src, item.span.start, item.span.end);
    let t = lx.next_token().ok()??;
    (t.text(&module.src) == ".extern").then_some(Span::new(t.start, t.end))
}

/// What one unit's text changes into in the linked module.
struct TuRenames {
    /// Internal names that collide with another unit's.
    names: HashMap<String, String>,
    /// Added to the file numbers of `.file` and `.loc`.
    file_offset: u64,
    /// Appended to `$L__` labels.
    label_suffix: Option<String>,
    /// Leave out its `.section`s (DWARF of a unit after the first).
    drop_sections: bool,
}

/// Whether `.target` names the `debug` option (a `-G` build, which ptxas
/// accepts only with its DWARF sections).
pub(crate) fn is_debug_target(module: &Module) -> bool {
    header_text(module, |k| *k == ItemKind::Target)
        .is_some_and(|t| t.split([',', ' ']).any(|o| o == "debug"))
}

/// The highest file number of a module's `.file` directives (0 if none).
fn max_file_number(module: &Module) -> u64 {
    module
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::File)
        .filter_map(|i| {
            let mut lx = ptx::lex::Lexer::range(&module.src, i.span.start, i.span.end);
            lx.next_token().ok()?;
            let n = lx.next_token().ok()??;
            module.text(Span::new(n.start, n.end)).parse::<u64>().ok()
        })
        .max()
        .unwrap_or(0)
}

/// Adds the edits that `tu` makes to the text of `span`.
fn rename_into(
    module: &Module,
    span: Span,
    tu: &TuRenames,
    edits: &mut Edits,
) -> Result<(), PostLinkError> {
    if tu.names.is_empty() && tu.file_offset == 0 && tu.label_suffix.is_none() {
        return Ok(());
    }
    let toks = ptx::lex::tokens(&module.src, span.start, span.end)
        .map_err(|e| module.error_at(e.offset, e.what))?;
    let mut after_file_directive = false;
    for t in toks {
        let text = t.text(&module.src);
        let at = Span::new(t.start, t.end);
        match t.kind {
            TokenKind::Word => {
                if let Some(new) = tu.names.get(text) {
                    edits.replace(at, new.clone());
                } else if let Some(suffix) = &tu.label_suffix
                    && text.starts_with("$L__")
                {
                    edits.replace(at, format!("{text}{suffix}"));
                }
            }
            TokenKind::Number if after_file_directive && tu.file_offset > 0 => {
                if let Ok(n) = text.parse::<u64>() {
                    edits.replace(at, (n + tu.file_offset).to_string());
                }
            }
            _ => {}
        }
        // `.file N`, `.loc N line col` and `.loc …, inlined_at N line col`.
        after_file_directive = (t.kind == TokenKind::Directive && matches!(text, ".file" | ".loc"))
            || (t.kind == TokenKind::Word && text == "inlined_at");
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
