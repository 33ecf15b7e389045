//! The files a compilation can read, found before it runs: what a cached
//! unit's key must cover.
//!
//! NVRTC cannot report the files it read (12.9 refuses `-M`, `-MD` and
//! `-MF`), so they are found as its preprocessor would find them: every
//! `#include`, `#include_next` and `__has_include` of the source and of
//! every file reached, resolved along NVRTC's search (a quoted name first
//! in the including file's folder — for the source, the folder of its
//! name — then the `-I` folders in order). The search takes every
//! directive, whether or not a `#if` would skip it: a superset of what the
//! compile reads, so a change of any file it may read changes the key.
//!
//! A directive that names its file by a macro (`#include HEADER`) is
//! resolved through every object-like definition of that macro the walk
//! sees (in any file reached, or in a `-D` option) — each a string, an
//! angled name, or another such macro — and every candidate is taken. One
//! that cannot be resolved so (a function-like macro, a pasted name, a
//! macro defined nowhere the walk sees) is refused: NVRTC would open a file
//! no check saw, and a FIFO there would hang the compile. More files or
//! bytes than [`MAX_FILES`] and [`MAX_BYTES`] make the unit one that is not
//! cached.

use std::path::{Path, PathBuf};

use crate::digest::{Digest, KeyEncoder};

/// The most files one unit's closure is followed to.
pub const MAX_FILES: usize = 4096;
/// The most bytes of them read.
pub const MAX_BYTES: u64 = 256 << 20;

/// A folder searched for included files, in NVRTC's order.
#[derive(Clone, Debug)]
pub struct SearchDir {
    /// The folder.
    pub path: PathBuf,
    /// Its name in keys where its path differs from run to run though
    /// its content does not (the device header's private folder).
    pub stable_name: Option<&'static str>,
    /// A folder of the CUDA toolkit's headers.
    pub toolkit: bool,
}

/// What a unit depends on besides its own text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dependencies {
    /// The files found (for build scripts' `rerun-if-changed`), and the
    /// key of every resolution and every file's content.
    Known {
        /// Every file read, in the order found.
        files: Vec<PathBuf>,
        /// The canonical encoding of the resolutions and contents.
        key: Vec<u8>,
    },
    /// The unit's files cannot be known before compiling it: why.
    Unknown(String),
    /// A file the compile would read is not one it may: not a regular file
    /// (a FIFO, a device, a socket, which NVRTC would open and could wait
    /// on forever) — an error, not an uncached unit.
    Refused(String),
}

/// The dependencies of the source `name` with `text`, included files
/// searched in `search`; `pre_includes` are the headers the options include
/// before the source (`-include`).
pub fn dependencies(
    name: &str,
    text: &str,
    search: &[SearchDir],
    pre_includes: &[String],
) -> Dependencies {
    dependencies_with(name, text, search, pre_includes, &[])
}

/// [`dependencies`], with the macros the options define (`-D NAME=VALUE`:
/// `(NAME, VALUE)`), which a computed include may name.
pub fn dependencies_with(
    name: &str,
    text: &str,
    search: &[SearchDir],
    pre_includes: &[String],
    defined: &[(String, String)],
) -> Dependencies {
    let source_dir = Path::new(name)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let mut walk = Walk {
        search,
        key: KeyEncoder::new("ptxspec unit dependencies v1"),
        files: Vec::new(),
        seen: std::collections::HashSet::new(),
        bytes: 0,
        pending: Vec::new(),
        refused: None,
        macros: std::collections::HashMap::new(),
        computed: Vec::new(),
    };
    for (n, v) in defined {
        walk.macros.entry(n.clone()).or_default().push(v.clone());
    }
    let result = (|| {
        for header in pre_includes {
            walk.resolve(&source_dir, Directive::Quoted(header), false)?;
        }
        walk.scan(&source_dir, name, text)?;
        // Until no file is left to scan and no computed include to resolve:
        // a macro may be defined in a file found after the directive.
        loop {
            while let Some((dir, path)) = walk.pending.pop() {
                let text = walk.read(&path)?;
                walk.scan(&dir, &path.display().to_string(), &text)?;
            }
            let computed = std::mem::take(&mut walk.computed);
            if computed.is_empty() {
                return Ok::<(), String>(());
            }
            for c in computed {
                walk.resolve_computed(&c)?;
            }
        }
    })();
    match (result, walk.refused) {
        (_, Some(why)) => Dependencies::Refused(why),
        (Ok(()), None) => Dependencies::Known {
            files: walk.files,
            key: walk.key.into_encoded(),
        },
        (Err(why), None) => Dependencies::Unknown(why),
    }
}

/// An include directive's operand.
enum Directive<'a> {
    /// `"name"`: the including file's folder first.
    Quoted(&'a str),
    /// `<name>`: the search folders only.
    Angled(&'a str),
}

struct Walk<'s> {
    search: &'s [SearchDir],
    key: KeyEncoder,
    files: Vec<PathBuf>,
    seen: std::collections::HashSet<PathBuf>,
    bytes: u64,
    /// Files found and not yet scanned, with their folders.
    pending: Vec<(PathBuf, PathBuf)>,
    /// A file the compile would open that is not a regular file: why.
    refused: Option<String>,
    /// Every object-like macro definition seen (a macro defined several
    /// times, under `#if`s the walk does not evaluate, has each), by name;
    /// a function-like one has the value `(`.
    macros: std::collections::HashMap<String, Vec<String>>,
    /// Directives naming their file by a macro, to resolve once every file
    /// is scanned.
    computed: Vec<Computed>,
}

/// `#include MACRO` in `file` (of folder `dir`) at line `line`.
struct Computed {
    dir: PathBuf,
    file: String,
    line: usize,
    word: String,
    operand: String,
    every: bool,
}

/// How deep a macro naming a macro is followed.
const MAX_MACRO_DEPTH: usize = 16;

impl Walk<'_> {
    /// Reads a found file, within the bounds.
    fn read(&mut self, path: &Path) -> Result<String, String> {
        let bytes =
            crate::files::read_input(path).map_err(|e| format!("{}: {e}", path.display()))?;
        self.bytes += bytes.len() as u64;
        if self.bytes > MAX_BYTES {
            return Err(format!(
                "its included files hold more than {MAX_BYTES} bytes"
            ));
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Whether `dir` (a file's folder) is in one of the toolkit's header
    /// folders.
    fn in_toolkit(&self, dir: &Path) -> bool {
        self.search
            .iter()
            .any(|d| d.toolkit && dir.starts_with(&d.path))
    }

    /// The name `path` has in keys: its stable folder's name where it is
    /// in one, else the path as found.
    fn key_name(&self, path: &Path) -> String {
        for dir in self.search {
            if let (Some(stable), Ok(rest)) = (dir.stable_name, path.strip_prefix(&dir.path)) {
                return format!("<{stable}>/{}", rest.display());
            }
        }
        path.display().to_string()
    }

    /// Records where `directive` (in a file of `dir`) resolves, and queues
    /// the file found. `every`: all candidates (`#include_next`,
    /// `__has_include`), not only the first.
    fn resolve(&mut self, dir: &Path, directive: Directive<'_>, every: bool) -> Result<(), String> {
        let (name, quoted) = match directive {
            Directive::Quoted(n) => (n, true),
            Directive::Angled(n) => (n, false),
        };
        let mut candidates: Vec<PathBuf> = Vec::new();
        if Path::new(name).is_absolute() {
            candidates.push(PathBuf::from(name));
        } else {
            if quoted {
                candidates.push(dir.join(name));
            }
            candidates.extend(self.search.iter().map(|d| d.path.join(name)));
        }
        self.key
            .str(if quoted { "quoted" } else { "angled" })
            .str(name);
        let mut found_any = false;
        for c in candidates {
            match std::fs::metadata(&c) {
                Ok(m) if m.is_file() => {}
                // A folder is skipped by the preprocessor's search too.
                Ok(m) if m.is_dir() => continue,
                Ok(_) => {
                    let why = format!(
                        "{}: not a regular file (a FIFO, device or socket), which the compile would open \
                         and could wait on forever; included as {name:?}",
                        c.display()
                    );
                    self.refused = Some(why.clone());
                    return Err(why);
                }
                Err(_) => continue,
            }
            found_any = true;
            self.key.str(&self.key_name(&c));
            if self.seen.insert(c.clone()) {
                if self.seen.len() > MAX_FILES {
                    return Err(format!("it includes more than {MAX_FILES} files"));
                }
                let text = self.read(&c)?;
                self.key.digest_field(&Digest::of(text.as_bytes()));
                self.files.push(c.clone());
                let parent = c
                    .parent()
                    .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
                self.pending.push((parent, c));
            }
            if !every {
                break;
            }
        }
        if !found_any {
            // Not found now; a file that appears later is another key.
            self.key.str("not found");
        }
        Ok(())
    }

    /// Finds the directives of one file's text.
    fn scan(&mut self, dir: &Path, file: &str, text: &str) -> Result<(), String> {
        for (n, line) in logical_lines(text) {
            let trimmed = line.trim_start();
            let Some(rest) = trimmed.strip_prefix('#') else {
                continue;
            };
            let rest = rest.trim_start();
            let (word, operand) = match rest.find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            {
                Some(end) => rest.split_at(end),
                None => (rest, ""),
            };
            let operand = operand.trim();
            let every = match word {
                "define" => {
                    self.define(operand);
                    continue;
                }
                "include" | "import" => false,
                "include_next" => true,
                "if" | "elif" | "elifdef" | "elifndef" => {
                    self.has_include(dir, file, n, operand)?;
                    continue;
                }
                _ => continue,
            };
            let Some(directive) = parse_operand(operand) else {
                if self.in_toolkit(dir) {
                    // Another of the toolkit's headers (see the module's
                    // docs).
                    self.key.str("computed in the toolkit");
                    continue;
                }
                self.computed.push(Computed {
                    dir: dir.to_path_buf(),
                    file: file.to_string(),
                    line: n,
                    word: word.to_string(),
                    operand: operand.to_string(),
                    every,
                });
                continue;
            };
            self.resolve(dir, directive, every)?;
        }
        Ok(())
    }

    /// Records `#define NAME VALUE` (object-like) or `#define NAME(...)`
    /// (function-like, which no include is resolved through).
    fn define(&mut self, operand: &str) {
        let end = operand
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(operand.len());
        let (name, rest) = operand.split_at(end);
        if name.is_empty() {
            return;
        }
        let value = match rest.starts_with('(') {
            true => "(".to_string(),
            false => rest.trim().to_string(),
        };
        let values = self.macros.entry(name.to_string()).or_default();
        if !values.contains(&value) && values.len() < 64 {
            values.push(value);
        }
    }

    /// The directives a macro operand may stand for: each definition's
    /// string or angled name, through macros naming macros; `None` where
    /// one cannot be resolved so.
    fn expand(&self, operand: &str, depth: usize) -> Option<Vec<String>> {
        let is_name = !operand.is_empty()
            && operand
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !operand.starts_with(|c: char| c.is_ascii_digit());
        if !is_name || depth > MAX_MACRO_DEPTH {
            return None;
        }
        let values = self.macros.get(operand)?;
        let mut out = Vec::new();
        for v in values {
            match parse_operand(v) {
                Some(_) => out.push(v.clone()),
                None => out.extend(self.expand(v, depth + 1)?),
            }
        }
        Some(out)
    }

    /// Resolves a directive that names its file by a macro, through every
    /// definition of it; refuses one that cannot be resolved.
    fn resolve_computed(&mut self, c: &Computed) -> Result<(), String> {
        let Some(operands) = self.expand(&c.operand, 0) else {
            let why = format!(
                "{}:{}: `#{} {}` names its file by a macro that is not defined as a \"name\" or \
                 <name> anywhere the compile's files or -D options show: NVRTC would open a file \
                 no check saw (write the name, or define the macro as one)",
                c.file, c.line, c.word, c.operand
            );
            self.refused = Some(why.clone());
            return Err(why);
        };
        self.key.str("computed").str(&c.operand);
        for operand in operands {
            if let Some(directive) = parse_operand(&operand) {
                // Every definition may be the one the compile sees.
                let dir = c.dir.clone();
                self.resolve(&dir, directive, c.every)?;
            }
        }
        Ok(())
    }

    /// Records what each `__has_include(...)` of a condition finds.
    fn has_include(
        &mut self,
        dir: &Path,
        file: &str,
        n: usize,
        condition: &str,
    ) -> Result<(), String> {
        let mut rest = condition;
        while let Some(at) = rest.find("__has_include") {
            rest = &rest[at + "__has_include".len()..];
            let rest_trim = rest.trim_start_matches("_next").trim_start();
            let Some(inner) = rest_trim.strip_prefix('(') else {
                continue;
            };
            let end = inner.find(')').unwrap_or(inner.len());
            let operand = inner[..end].trim();
            match parse_operand(operand) {
                Some(directive) => self.resolve(dir, directive, true)?,
                None => self.computed.push(Computed {
                    dir: dir.to_path_buf(),
                    file: file.to_string(),
                    line: n,
                    word: "if __has_include".into(),
                    operand: operand.to_string(),
                    every: true,
                }),
            }
        }
        Ok(())
    }
}

/// `"name"` or `<name>`; `None` for anything else (a macro).
fn parse_operand(operand: &str) -> Option<Directive<'_>> {
    if let Some(rest) = operand.strip_prefix('"') {
        let end = rest.find('"')?;
        return Some(Directive::Quoted(&rest[..end]));
    }
    if let Some(rest) = operand.strip_prefix('<') {
        let end = rest.find('>')?;
        return Some(Directive::Angled(&rest[..end]));
    }
    None
}

/// The lines of `text` as the preprocessor sees them: block comments
/// removed (their line breaks kept), line comments cut, and lines ending
/// in a backslash joined to the next; each with its first line's number.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start_line = 1;
    let mut line_no = 1;
    let mut in_block = false;
    let mut chars = text.chars().peekable();
    let mut in_string: Option<char> = None;
    while let Some(c) = chars.next() {
        if in_block {
            if c == '*' && chars.peek() == Some(&'/') {
                chars.next();
                in_block = false;
                current.push(' ');
            } else if c == '\n' {
                line_no += 1;
            }
            continue;
        }
        if let Some(q) = in_string {
            current.push(c);
            if c == '\\' {
                if let Some(n) = chars.next() {
                    if n == '\n' {
                        line_no += 1;
                    }
                    current.push(n);
                }
            } else if c == q || c == '\n' {
                in_string = None;
                if c == '\n' {
                    current.pop();
                    out.push((start_line, std::mem::take(&mut current)));
                    line_no += 1;
                    start_line = line_no;
                }
            }
            continue;
        }
        match c {
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                in_block = true;
            }
            '/' if chars.peek() == Some(&'/') => {
                // The rest of the line (a backslash at its end continues
                // the comment, as in C).
                let mut last = ' ';
                for d in chars.by_ref() {
                    if d == '\n' {
                        line_no += 1;
                        if last != '\\' {
                            break;
                        }
                    }
                    last = d;
                }
                out.push((start_line, std::mem::take(&mut current)));
                start_line = line_no;
            }
            '\\' if chars.peek() == Some(&'\n') => {
                chars.next();
                line_no += 1;
            }
            '"' | '\'' => {
                // A quoted include's name is a string too: kept whole.
                in_string = Some(c);
                current.push(c);
            }
            '\n' => {
                out.push((start_line, std::mem::take(&mut current)));
                line_no += 1;
                start_line = line_no;
            }
            _ => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push((start_line, current));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A computed include in a toolkit header (as Thrust's) keeps the unit
    /// keyed; the same in a header of the user's makes it unknown. A file
    /// changed, appearing earlier in the search or the resolution of a
    /// missing one changes the key.
    #[test]
    fn computed_includes_in_the_toolkit_and_in_the_users_headers() {
        let base = std::env::temp_dir().join(format!("ptxspec-includes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (toolkit, user) = (base.join("toolkit"), base.join("user"));
        std::fs::create_dir_all(&toolkit).unwrap();
        std::fs::create_dir_all(&user).unwrap();
        let computed = "#define H \"other.h\"\n#include H\n";
        std::fs::write(toolkit.join("tk.h"), computed).unwrap();
        std::fs::write(user.join("mine.h"), computed).unwrap();
        let search = [
            SearchDir {
                path: user.clone(),
                stable_name: None,
                toolkit: false,
            },
            SearchDir {
                path: toolkit.clone(),
                stable_name: None,
                toolkit: true,
            },
        ];
        let deps = |text: &str| dependencies("k.cu", text, &search, &[]);
        let Dependencies::Known { files, key } = deps("#include <tk.h>\n") else {
            panic!("a toolkit header's computed include made the unit unknown");
        };
        assert_eq!(files, [toolkit.join("tk.h")]);
        // The user's: resolved through the macro's definition, and the file
        // it names found (and keyed) too.
        std::fs::write(user.join("other.h"), "// named by a macro\n").unwrap();
        let Dependencies::Known { files, .. } = deps("#include <mine.h>\n") else {
            panic!("a computed include defined as a string was not resolved");
        };
        assert_eq!(files, [user.join("mine.h"), user.join("other.h")]);
        // Defined after the directive's file was scanned (in a header found
        // later), or by an option, or through another macro: resolved too.
        std::fs::write(user.join("defs.h"), "#define LATER \"other.h\"\n").unwrap();
        let later = "#include LATER\n#include \"defs.h\"\n";
        assert!(matches!(deps(later), Dependencies::Known { .. }));
        let by_option = dependencies_with(
            "k.cu",
            "#define VIA OPT\n#include VIA\n",
            &search,
            &[],
            &[("OPT".into(), "<other.h>".into())],
        );
        let Dependencies::Known { files, .. } = by_option else {
            panic!("{by_option:?}");
        };
        assert_eq!(files, [user.join("other.h")]);
        // What cannot be resolved before NVRTC opens it is refused.
        for unresolved in [
            "#define H(x) #x\n#include H(a.h)\n",
            "#include NOWHERE\n",
            "#define A B\n#define B A\n#include A\n",
            "#if __has_include(NOWHERE)\n#endif\n",
        ] {
            assert!(
                matches!(deps(unresolved), Dependencies::Refused(ref why) if why.contains("macro")),
                "{unresolved}"
            );
        }
        // The same name appearing in an earlier folder: another key.
        std::fs::write(user.join("tk.h"), "// shadows the toolkit's\n").unwrap();
        let Dependencies::Known { key: shadowed, .. } = deps("#include <tk.h>\n") else {
            panic!("unknown");
        };
        assert_ne!(key, shadowed);
        // A missing header appearing: another key.
        let before = deps("#include \"later.h\"\n");
        std::fs::write(user.join("later.h"), "").unwrap();
        assert_ne!(before, deps("#include \"later.h\"\n"));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn lines_lose_comments_and_join_continuations() {
        let text = "#include \"a.h\" // \"b.h\"\n/* #include \"c.h\"\n */#  include \\\n  <d.h>\nint s = \"#include <e.h>\";\n";
        let lines = logical_lines(text);
        let directives: Vec<&str> = lines
            .iter()
            .map(|(_, l)| l.trim())
            .filter(|l| l.starts_with('#'))
            .collect();
        assert_eq!(directives, ["#include \"a.h\"", "#  include   <d.h>"]);
        // The comment that ends on line 3 began on line 2: one logical line.
        assert_eq!(lines.iter().find(|(_, l)| l.contains("d.h")).unwrap().0, 2);
    }
}
