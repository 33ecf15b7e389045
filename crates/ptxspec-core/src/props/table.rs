//! DPC++'s file table: the list of device images (`table.txt`) that
//! sycl-post-link writes and the aspect filter reads.

/// A DPC++ file table: a header of column names and rows of file paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileTable {
    pub columns: Vec<String>,
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
    /// Reads a file table's text.
    pub fn parse(text: &str) -> Result<FileTable, TableError> {
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
