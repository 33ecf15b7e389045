//! DPC++'s file table: the list of device images (`table.txt`) that
//! sycl-post-link writes and the aspect filter reads.

/// A DPC++ file table: a header of column names and rows of file paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileTable {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl FileTable {
    pub fn parse(text: &str) -> Result<FileTable, String> {
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let header = lines.next().ok_or("empty file table")?;
        let inner = header
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .ok_or_else(|| format!("line 1: expected [Column|...], found {header:?}"))?;
        let columns: Vec<String> = inner.split('|').map(str::to_string).collect();
        let mut rows = Vec::new();
        for (i, line) in lines.enumerate() {
            let row: Vec<String> = line.split('|').map(str::to_string).collect();
            if row.len() != columns.len() {
                return Err(format!(
                    "line {}: {} columns, the header has {}",
                    i + 2,
                    row.len(),
                    columns.len()
                ));
            }
            rows.push(row);
        }
        Ok(FileTable { columns, rows })
    }

    pub fn to_text(&self) -> String {
        let mut s = format!("[{}]\n", self.columns.join("|"));
        for r in &self.rows {
            s.push_str(&r.join("|"));
            s.push('\n');
        }
        s
    }
}
