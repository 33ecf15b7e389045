//! DPC++'s file table: the list of device images (`table.txt`) that
//! sycl-post-link writes and the aspect filter reads.

use std::path::{Component, Path, PathBuf};

/// A DPC++ file table: a header of column names and rows of file paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileTable {
    /// The column names of the header (`Code`, `Properties`, `Symbols`).
    pub columns: Vec<String>,
    /// One row per image: a file name per column.
    pub rows: Vec<Vec<String>>,
}

/// A file table that cannot be read: the line (1-based) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct TableError {
    pub line: usize,
    pub what: String,
}

impl FileTable {
    /// Reads a file table's text. A control character anywhere (a carriage
    /// return inside a line, an escape) is an error naming its line: no
    /// file name holds one, and a table written back would not read the
    /// same (found by fuzzing: `\r\r` at a line's end read back as `\r`).
    pub fn parse(text: &str) -> Result<FileTable, TableError> {
        for (i, line) in text.split_inclusive('\n').enumerate() {
            // A CRLF file's carriage returns end its lines: not part of them
            // (where a line feed follows, as `str::lines` reads them).
            let line = match line.strip_suffix('\n') {
                Some(l) => l.strip_suffix('\r').unwrap_or(l),
                None => line,
            };
            if let Some(c) = line.chars().find(|c| c.is_control()) {
                return Err(TableError {
                    line: i + 1,
                    what: format!("a control character ({c:?}) in a file table"),
                });
            }
        }
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let header = lines.next().ok_or_else(|| TableError {
            line: 1,
            what: "empty file table".into(),
        })?;
        let inner = header
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .ok_or_else(|| TableError {
                line: 1,
                what: format!("expected [Column|...], found {header:?}"),
            })?;
        let columns: Vec<String> = inner.split('|').map(str::to_string).collect();
        let mut rows = Vec::new();
        for (i, line) in lines.enumerate() {
            let row: Vec<String> = line.split('|').map(str::to_string).collect();
            if row.len() != columns.len() {
                return Err(TableError {
                    line: i + 2,
                    what: format!("{} columns, the header has {}", row.len(), columns.len()),
                });
            }
            rows.push(row);
        }
        Ok(FileTable { columns, rows })
    }

    /// The table with its relative paths, which resolve against `from`,
    /// rewritten to resolve against `to` (where the table will be
    /// written); absolute paths stay. Both folders must exist.
    pub fn rebased(&self, from: &Path, to: &Path) -> std::io::Result<FileTable> {
        let (from, to) = (std::fs::canonicalize(from)?, std::fs::canonicalize(to)?);
        if from == to {
            return Ok(self.clone());
        }
        let rows = self
            .rows
            .iter()
            .map(|row| {
                row.iter()
                    .map(|cell| {
                        let p = Path::new(cell);
                        if p.is_absolute() {
                            cell.clone()
                        } else {
                            relative(&from.join(p), &to).display().to_string()
                        }
                    })
                    .collect()
            })
            .collect();
        Ok(FileTable {
            columns: self.columns.clone(),
            rows,
        })
    }

    /// The table's text, as [`parse`](Self::parse) reads it.
    pub fn to_text(&self) -> String {
        let mut s = format!("[{}]\n", self.columns.join("|"));
        for r in &self.rows {
            s.push_str(&r.join("|"));
            s.push('\n');
        }
        s
    }
}

/// `path` relative to the folder `base` (both absolute and free of `..`):
/// up from `base` to their common ancestor, then down.
fn relative(path: &Path, base: &Path) -> PathBuf {
    let p: Vec<Component> = path.components().collect();
    let b: Vec<Component> = base.components().collect();
    let common = p.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &p[common..] {
        out.push(c.as_os_str());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        let r = |p: &str, b: &str| relative(Path::new(p), Path::new(b)).display().to_string();
        assert_eq!(r("/a/img/x.prop", "/a/img"), "x.prop");
        assert_eq!(r("/a/img/x.prop", "/a/out"), "../img/x.prop");
        assert_eq!(r("/a/img/x.prop", "/a/out/deep"), "../../img/x.prop");
        assert_eq!(r("/a/img/x.prop", "/"), "a/img/x.prop");
    }

    /// A table read writes back to text that reads back the same — over a
    /// generated family of cells (the fuzzer's finding was a cell ending in
    /// carriage returns) — and a control character anywhere is an error
    /// naming its line.
    #[test]
    fn tables_read_back_and_control_characters_are_refused() {
        let pieces = ["a", "x.prop", " sp ", "é", "[b]", "", "1.ptx", "q]"];
        let mut seed = 7u64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..500 {
            let columns: Vec<String> = (0..1 + next(3)).map(|i| format!("C{i}")).collect();
            let rows: Vec<Vec<String>> = (0..next(4))
                .map(|_| {
                    (0..columns.len())
                        .map(|_| format!("{}{}", pieces[next(8)], pieces[next(8)]))
                        .collect()
                })
                // A row that is blank is no row: the text has no such line.
                .filter(|r: &Vec<String>| !r.join("|").trim().is_empty())
                .collect();
            let table = FileTable { columns, rows };
            let text = table.to_text();
            assert_eq!(FileTable::parse(&text).as_ref(), Ok(&table), "{text:?}");
        }
        for (text, line) in [
            ("[Code]\na.ptx\r\r\n", 2),
            ("[Code|Properties]\r\na\x1b|b\r\n", 2),
            ("[Co\u{7f}de]\n", 1),
            ("[Code]\n\na.ptx\n\tb.ptx\n", 4),
            // A carriage return at the end of a last line without a line
            // feed is no line end (the fuzzer's second finding).
            ("[Code]\na.ptx\r", 2),
        ] {
            let e = FileTable::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.what.contains("control character"), "{e}");
        }
        // CRLF line ends are line ends.
        assert_eq!(
            FileTable::parse("[Code]\r\na.ptx\r\n").unwrap().rows,
            [["a.ptx"]]
        );
    }
}
