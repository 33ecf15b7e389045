//! `ptxspec verify-choices` and `ptxspec sign-choices`: two runs' choices
//! compared, a table signed.

use std::path::Path;

use ptxspec_core::choices::ChoiceTable;

use crate::io::{read_input, write_atomically};

/// A table file's choices, or a digest given as 64 hexadecimal digits.
enum Side {
    Table(ChoiceTable),
    Digest(String),
}

fn side(arg: &str) -> Result<Side, String> {
    if arg.len() == 64 && arg.bytes().all(|b| b.is_ascii_hexdigit()) && !Path::new(arg).exists() {
        return Ok(Side::Digest(arg.to_ascii_lowercase()));
    }
    let path = Path::new(arg);
    let bytes = read_input(path)?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{arg}: not UTF-8 text"))?;
    ChoiceTable::parse(&text)
        .map(Side::Table)
        .map_err(|e| format!("{arg}: {e}"))
}

/// `verify-choices A B`: the same (exit 0), or what differs (exit 1).
pub(crate) fn verify(a: &str, b: &str) -> Result<(), String> {
    let (a_side, b_side) = (side(a)?, side(b)?);
    let digest = |s: &Side| match s {
        Side::Table(t) => t.digest().hex(),
        Side::Digest(d) => d.clone(),
    };
    let (da, db) = (digest(&a_side), digest(&b_side));
    if da == db {
        outln!("choices: the same ({da})");
        return Ok(());
    }
    outln!("choices: they differ ({da} and {db})");
    if let (Side::Table(ta), Side::Table(tb)) = (&a_side, &b_side) {
        for line in ta.differences(tb) {
            outln!("  {line}");
        }
    } else {
        outln!("  (a digest says that they differ, not where: give both tables to see)");
    }
    std::process::exit(1);
}

/// `sign-choices TABLE --secret KEY -o OUT`.
pub(crate) fn sign(table: &Path, secret: &Path, output: &Path) -> Result<(), String> {
    let text = String::from_utf8(read_input(table)?)
        .map_err(|_| format!("{}: not UTF-8 text", table.display()))?;
    let parsed = ChoiceTable::parse(&text).map_err(|e| format!("{}: {e}", table.display()))?;
    let key_text = String::from_utf8(read_input(secret)?)
        .map_err(|_| format!("{}: not a key file", secret.display()))?;
    let key = ptxspec_core::lto::remote::entry::secret_key(&key_text)
        .map_err(|e| format!("{}: {e}", secret.display()))?;
    write_atomically(
        output,
        ptxspec_core::choices::sign(&parsed, &key).as_bytes(),
    )?;
    eprintln!(
        "ptxspec: {}: {} choices signed (digest {})",
        output.display(),
        parsed.len(),
        parsed.digest().hex()
    );
    Ok(())
}
