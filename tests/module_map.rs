//! The map's rules, read from the code as the compiler reads it: every path
//! (`use` trees, grouped or not; paths in expressions, types, patterns and
//! macro arguments) is parsed with `syn` and resolved (`crate::`,
//! `super::`, `self::`) to the module it names. Then:
//!
//! - core's top-level modules import only modules below them in
//!   `CORE_LAYERS`, or cross-cutting ones that import no layer;
//! - the facade's top-level modules import only modules below them in
//!   `FACADE_LAYERS`, and none reaches another through `lib.rs`'s
//!   re-exports;
//! - at every level, the modules of one parent form no circle (a child
//!   using its parent, or a parent its child, is no edge: siblings are);
//! - the facade's driver layer, `runtime/cuda.rs`, is the floor: it names
//!   no other module of the runtime;
//! - every library `mod.rs` has at most 600 lines.
//!
//! ARCHITECTURE.md states both layer lists; each list here is checked to be
//! the one it states. The test's own tests plant each spelling in a copy of
//! a file and see the rule fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Core's layers, lowest first (ARCHITECTURE.md, "Inside ptxspec-core").
const CORE_LAYERS: &[&str] = &[
    "ptx",
    "layout",
    "props",
    "features",
    "device_config",
    "image",
    "arguments",
    "tier_profile",
    "toolkit",
    "lto",
    "choices",
    "postlink",
    "compile",
    "spirv",
];

/// Core's cross-cutting modules: used by every layer, importing none.
const CORE_CROSS_CUTTING: &[&str] = &[
    "settings",
    "files",
    "digest",
    "notice",
    "fasthash",
    "quiet_panic",
    "driver_symbols",
    "test_util",
    "trace",
];

/// The facade's layers, lowest first (ARCHITECTURE.md, "The root crate").
const FACADE_LAYERS: &[&str] = &[
    "error",
    "trace",
    "near",
    "spec_id",
    "sycl_types",
    "pod",
    "stats",
    "image",
    "registry",
    "bundle",
    "runtime",
    "source",
    "remote",
    "choices",
];

/// Whether `m` is a facade module of one layer with the one named:
/// `adaptive` lives in `bundle` (its policy), and so on.
const FACADE_SAME_LAYER: &[(&str, &str)] = &[];

/// The most lines of a library `mod.rs`.
const MOD_RS_MAX_LINES: usize = 600;

/// One import: from module `from` (a path of module names below the crate
/// root) of `module` to module `to`, at `file:line`.
#[derive(Clone, Debug)]
struct Import {
    file: PathBuf,
    line: usize,
    from: Vec<String>,
    to: Vec<String>,
}

/// The module path of `file` below the crate's `src` (`lto/remote/store.rs`
/// → `lto::remote::store`; `lto/mod.rs` → `lto`; `lib.rs` → the root).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" && stem != "main" {
        parts.push(stem.to_string());
    }
    parts
}

/// Collects the module paths a file's code names.
struct Paths<'a> {
    here: Vec<String>,
    file: &'a Path,
    found: Vec<Import>,
    /// Top-level names of the crate (so that `crate::X` of an item
    /// re-exported at the root is told from a module).
    modules: &'a BTreeSet<String>,
    through_root: Vec<String>,
}

impl Paths<'_> {
    /// Resolves `segments` (the path as written) at line `line`.
    fn resolve(&mut self, segments: &[String], line: usize) {
        let Some(first) = segments.first() else {
            return;
        };
        let absolute: Vec<String> = match first.as_str() {
            "crate" | "$crate" => segments[1..].to_vec(),
            "super" => {
                let mut at = self.here.clone();
                let mut rest = segments;
                while rest.first().is_some_and(|s| s == "super") {
                    at.pop();
                    rest = &rest[1..];
                }
                at.extend(rest.iter().cloned());
                at
            }
            "self" => {
                let mut at = self.here.clone();
                at.extend(segments[1..].iter().cloned());
                at
            }
            _ => return,
        };
        let Some(top) = absolute.first() else {
            return;
        };
        if !self.modules.contains(top) {
            // An item of the crate root (a re-export, a macro): from a
            // module other than the root, a reach through `lib.rs`.
            if !self.here.is_empty() && first != "$crate" && top.starts_with(char::is_uppercase) {
                self.through_root
                    .push(format!("{}:{line}: crate::{top}", self.file.display()));
            }
            return;
        }
        // The module named: the path less its last segment where that is
        // an item (not a module we know of is fine: deeper is finer).
        self.found.push(Import {
            file: self.file.to_path_buf(),
            line,
            from: self.here.clone(),
            to: absolute,
        });
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, line: usize) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, line);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.resolve(&prefix.clone(), line);
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.resolve(&prefix.clone(), line);
                prefix.pop();
            }
            syn::UseTree::Glob(_) => self.resolve(&prefix.clone(), line),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t, line);
                }
            }
        }
    }
}

/// Whether `attrs` hold `#[cfg(test)]`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta
                .require_list()
                .is_ok_and(|l| l.tokens.to_string().contains("test"))
    })
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if is_test(&m.attrs) {
            return;
        }
        if let Some((_, items)) = &m.content {
            self.here.push(m.ident.to_string());
            for i in items {
                self.visit_item(i);
            }
            self.here.pop();
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !is_test(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if is_test(&u.attrs) {
            return;
        }
        let line = u.use_token.span.start().line;
        self.use_tree(&mut Vec::new(), &u.tree, line);
    }
    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = p
            .segments
            .first()
            .map_or(0, |s| s.ident.span().start().line);
        self.resolve(&segments, line);
        syn::visit::visit_path(self, p);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // Paths inside a macro's arguments are tokens: `crate :: a :: b`,
        // `super :: x`, `$crate` excluded (a macro's own users').
        let tokens: Vec<proc_macro2::TokenTree> = flatten(m.tokens.clone());
        let mut i = 0;
        while i < tokens.len() {
            if let proc_macro2::TokenTree::Ident(id) = &tokens[i] {
                let word = id.to_string();
                let dollar = i > 0
                    && matches!(&tokens[i - 1], proc_macro2::TokenTree::Punct(p) if p.as_char() == '$');
                if (word == "crate" || word == "super" || word == "self") && !dollar {
                    let mut segments = vec![word];
                    let mut j = i + 1;
                    while j + 2 < tokens.len() + 1 {
                        let colons = matches!(
                            (&tokens.get(j), &tokens.get(j + 1)),
                            (Some(proc_macro2::TokenTree::Punct(a)), Some(proc_macro2::TokenTree::Punct(b)))
                                if a.as_char() == ':' && b.as_char() == ':'
                        );
                        match (colons, tokens.get(j + 2)) {
                            (true, Some(proc_macro2::TokenTree::Ident(next))) => {
                                segments.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    if segments.len() > 1 {
                        self.resolve(&segments, id.span().start().line);
                    }
                    i = j;
                    continue;
                }
            }
            i += 1;
        }
        syn::visit::visit_macro(self, m);
    }
}

/// A token stream's tokens, groups opened.
fn flatten(stream: proc_macro2::TokenStream) -> Vec<proc_macro2::TokenTree> {
    let mut out = Vec::new();
    for t in stream {
        match t {
            proc_macro2::TokenTree::Group(g) => out.extend(flatten(g.stream())),
            other => out.push(other),
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every import of the crate whose sources are in `src`, and the reaches
/// through the root (`crate::Item` outside `lib.rs`).
fn imports(src: &Path) -> (Vec<Import>, Vec<String>) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|f| module_of(src, f).first().cloned())
        .collect();
    let mut all = Vec::new();
    let mut through_root = Vec::new();
    for file in &files {
        // A file of tests (`tests.rs`, `tests/…`) is no part of the map.
        if file.iter().any(|p| p == "tests" || p == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let parsed = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{}: does not parse: {e}", file.display()));
        let mut paths = Paths {
            here: module_of(src, file),
            file,
            found: Vec::new(),
            modules: &modules,
            through_root: Vec::new(),
        };
        paths.visit_file(&parsed);
        all.extend(paths.found);
        through_root.extend(paths.through_root);
    }
    (all, through_root)
}

/// What breaks the layer rule: imports from a top-level module to one not
/// below it in `layers` (nor a cross-cutting one, which itself imports no
/// layer), and modules in neither list.
fn layer_breaks(imports: &[Import], layers: &[&str], cross: &[&str]) -> Vec<String> {
    let rank = |m: &str| layers.iter().position(|l| *l == m);
    let mut wrong = Vec::new();
    for i in imports {
        let (Some(from), Some(to)) = (i.from.first(), i.to.first()) else {
            continue;
        };
        if from == to {
            continue;
        }
        let allowed = match (rank(from), rank(to)) {
            (_, None) if cross.contains(&to.as_str()) => true,
            (Some(me), Some(it)) => it < me,
            _ => false,
        };
        if !allowed {
            wrong.push(format!("{}:{}: {from} → {to}", i.file.display(), i.line));
        }
    }
    wrong.sort();
    wrong.dedup();
    wrong
}

/// The circles among siblings: for each import between two modules
/// neither of which holds the other, the edge between their ancestors just
/// below the deepest module holding both; any circle among a parent's
/// children, named by its modules.
fn sibling_circles(imports: &[Import]) -> Vec<String> {
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    let mut at: BTreeMap<(Vec<String>, Vec<String>), String> = BTreeMap::new();
    for i in imports {
        let common = i.from.iter().zip(&i.to).take_while(|(a, b)| a == b).count();
        // One holds the other: no sibling edge.
        if common == i.from.len() || common == i.to.len() {
            continue;
        }
        let a = i.from[..=common].to_vec();
        let b = i.to[..=common].to_vec();
        at.entry((a.clone(), b.clone()))
            .or_insert_with(|| format!("{}:{}", i.file.display(), i.line));
        edges.entry(a).or_default().insert(b);
    }
    let mut circles = Vec::new();
    for start in edges.keys() {
        // Depth-first from `start`, back to it.
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((node, trail)) = stack.pop() {
            for next in edges.get(&node).into_iter().flatten() {
                if next == start {
                    let names: Vec<String> =
                        trail.iter().chain([start]).map(|m| m.join("::")).collect();
                    let first = at
                        .get(&(trail[0].clone(), trail.get(1).unwrap_or(start).clone()))
                        .cloned()
                        .unwrap_or_default();
                    circles.push(format!("{} (first edge at {first})", names.join(" → ")));
                } else if seen.insert(next.clone()) {
                    let mut t = trail.clone();
                    t.push(next.clone());
                    stack.push((next.clone(), t));
                }
            }
        }
    }
    circles.sort();
    circles.dedup();
    circles
}

/// The imports of the facade's driver layer that name another module of
/// the runtime.
fn floor_breaks(imports: &[Import]) -> Vec<String> {
    let floor = ["runtime".to_string(), "cuda".to_string()];
    imports
        .iter()
        .filter(|i| i.from == floor)
        .filter(|i| i.to.first().is_some_and(|t| t == "runtime") && !i.to.starts_with(&floor))
        .map(|i| format!("{}:{}: {}", i.file.display(), i.line, i.to.join("::")))
        .collect()
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn cores_modules_import_only_modules_below_them() {
    let (imports, _) = imports(&root().join("crates/ptxspec-core/src"));
    assert!(imports.len() > 200, "the walk found core's imports");
    let wrong = layer_breaks(&imports, CORE_LAYERS, CORE_CROSS_CUTTING);
    assert!(
        wrong.is_empty(),
        "core imports that run up:\n{}",
        wrong.join("\n")
    );
    // Every module is in one list.
    let mut modules = BTreeSet::new();
    let mut files = Vec::new();
    rust_files(&root().join("crates/ptxspec-core/src"), &mut files);
    for f in &files {
        if let Some(top) = module_of(&root().join("crates/ptxspec-core/src"), f).first() {
            modules.insert(top.clone());
        }
    }
    for m in &modules {
        assert!(
            CORE_LAYERS.contains(&m.as_str()) || CORE_CROSS_CUTTING.contains(&m.as_str()),
            "core module {m} is in neither list: put it in its layer (and in ARCHITECTURE.md)"
        );
    }
}

#[test]
fn the_facades_modules_import_only_modules_below_them() {
    let (imports, through_root) = imports(&root().join("src"));
    assert!(imports.len() > 100, "the walk found the facade's imports");
    let wrong = layer_breaks(&imports, FACADE_LAYERS, &[]);
    assert!(
        wrong.is_empty(),
        "facade imports that run up:\n{}",
        wrong.join("\n")
    );
    assert!(
        through_root.is_empty(),
        "reached through lib.rs:\n{}",
        through_root.join("\n")
    );
    assert!(FACADE_SAME_LAYER.is_empty());
}

#[test]
fn no_circle_among_the_modules_of_one_parent() {
    for src in [
        "crates/ptxspec-core/src",
        "src",
        "crates/ptxspec-cli/src",
        "crates/ptxspec-build/src",
    ] {
        let (imports, _) = imports(&root().join(src));
        let circles = sibling_circles(&imports);
        assert!(
            circles.is_empty(),
            "{src}: circles:\n{}",
            circles.join("\n")
        );
    }
}

#[test]
fn the_driver_layer_is_the_floor() {
    let (imports, _) = imports(&root().join("src"));
    let wrong = floor_breaks(&imports);
    assert!(
        wrong.is_empty(),
        "runtime/cuda.rs names runtime modules above it:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_library_mod_rs_stays_small() {
    let mut long = Vec::new();
    for src in [
        "crates/ptxspec-core/src",
        "src",
        "crates/ptxspec-cli/src",
        "crates/ptxspec-build/src",
    ] {
        let mut files = Vec::new();
        rust_files(&root().join(src), &mut files);
        for f in files.iter().filter(|f| f.ends_with("mod.rs")) {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            if n > MOD_RS_MAX_LINES {
                long.push(format!("{}: {n} lines", f.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "mod.rs files over {MOD_RS_MAX_LINES} lines (split their jobs into files of their own):\n{}",
        long.join("\n")
    );
}

/// ARCHITECTURE.md states the lists this test checks.
#[test]
fn the_layer_lists_are_architectures() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    // As a reader sees it: a list may wrap.
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for (name, list) in [("core", CORE_LAYERS), ("facade", FACADE_LAYERS)] {
        let written = list
            .iter()
            .map(|m| format!("`{m}`"))
            .collect::<Vec<_>>()
            .join(" → ");
        assert!(
            text.contains(&written),
            "ARCHITECTURE.md does not state the {name}'s layers as {written}"
        );
    }
}

/// The rules fail on every spelling of an import that runs up: planted in
/// a copy of core, each is found and named by its file.
#[test]
fn planted_imports_that_run_up_are_found() {
    let src = root().join("crates/ptxspec-core/src");
    let scratch = std::env::temp_dir().join(format!("ptxspec-map-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    copy_dir(&src, &scratch);
    let plants: &[(&str, &str)] = &[
        // Grouped, as rustfmt keeps it.
        (
            "ptx/print.rs",
            "use crate::{layout::Layout, postlink::Options};\n",
        ),
        // Through super::super:: from a nested module.
        (
            "lto/remote/keys.rs",
            "use super::super::super::compile::CompileOptions;\n",
        ),
        // A path in an expression, no `use` at all.
        (
            "layout/mod.rs",
            "pub fn planted() -> bool { crate::lto::remote::stats().hits > 0 }\n",
        ),
        // In a macro's arguments.
        (
            "props/mod.rs",
            "pub fn planted2() { let _ = format!(\"{}\", crate::spirv::MAGIC); }\n",
        ),
    ];
    for (file, code) in plants {
        let path = scratch.join(file);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(code);
        std::fs::write(&path, text).unwrap();
        let (imports, _) = imports(&scratch);
        let wrong = layer_breaks(&imports, CORE_LAYERS, CORE_CROSS_CUTTING);
        assert!(
            wrong.iter().any(|w| w.contains(file)),
            "a planted import in {file} was not found: {wrong:?}"
        );
        // Put back, for the next plant alone.
        copy_file(&src.join(file), &path);
    }
    // A circle between siblings, planted.
    let circle = scratch.join("lto/remote/keys.rs");
    let mut text = std::fs::read_to_string(&circle).unwrap();
    text.push_str("use super::store::RemoteStore as _Planted;\n");
    std::fs::write(&circle, text).unwrap();
    let store = scratch.join("lto/remote/store.rs");
    let mut text = std::fs::read_to_string(&store).unwrap();
    text.push_str("use super::keys::store_key as _planted;\n");
    std::fs::write(&store, text).unwrap();
    let (imports, _) = imports(&scratch);
    let circles = sibling_circles(&imports);
    assert!(
        circles
            .iter()
            .any(|c| c.contains("keys") && c.contains("store")),
        "a planted circle was not found: {circles:?}"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

/// A reach through the facade's root and an import into the driver layer,
/// planted, are found.
#[test]
fn planted_facade_breaks_are_found() {
    let src = root().join("src");
    let scratch = std::env::temp_dir().join(format!("ptxspec-map-facade-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    copy_dir(&src, &scratch);
    let error = scratch.join("error.rs");
    let mut text = std::fs::read_to_string(&error).unwrap();
    text.push_str("use crate::bundle::KernelBundle as _Planted;\n");
    std::fs::write(&error, text).unwrap();
    let cuda = scratch.join("runtime/cuda.rs");
    let mut text = std::fs::read_to_string(&cuda).unwrap();
    text.push_str("use super::{graph::Graph as _G, launch::Handler as _H};\n");
    std::fs::write(&cuda, text).unwrap();
    let (imports, _) = imports(&scratch);
    assert!(
        layer_breaks(&imports, FACADE_LAYERS, &[])
            .iter()
            .any(|w| w.contains("error.rs") && w.contains("error → bundle")),
        "the planted upward import of error.rs"
    );
    let floor = floor_breaks(&imports);
    assert!(
        floor.iter().any(|w| w.contains("runtime::graph"))
            && floor.iter().any(|w| w.contains("runtime::launch")),
        "the planted imports of the driver layer: {floor:?}"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            copy_file(&path, &target);
        }
    }
}

fn copy_file(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap();
}
