//! The choices that change which code runs, made the same everywhere (see
//! [`ChoiceTable`]): what adaptive arguments kept for each variant — its
//! LTO or PTX code, or the generic code. A process records each one it
//! makes; [`made`] gives them, [`Stats::choices_digest`](crate::Stats) their
//! digest, and `ptxspec verify-choices` compares two runs' tables or
//! digests. A process [`pin`]ned to a table — signed by a key it trusts,
//! read by [`read_signed`] — times nothing and runs exactly the table's
//! choices (the generic code where it holds none): two identical pinned
//! runs run the same code.

use std::path::Path;

pub use ptxspec_core::choices::ChoiceTable;

use crate::error::Error;

/// The choices this process made or took so far.
pub fn made() -> ChoiceTable {
    ptxspec_core::choices::made()
}

/// The SHA-256 of [`made`]'s table, in hexadecimal.
pub fn digest() -> String {
    ptxspec_core::choices::made_count_and_digest().1.hex()
}

/// Pins this process to `table`: from now on no variant of adaptive
/// arguments is timed; each runs the table's choice, or the generic code
/// where the table holds none.
pub fn pin(table: ChoiceTable) {
    ptxspec_core::choices::pin(Some(table));
}

/// Ends [`pin`]: trials time variants again.
pub fn unpin() {
    ptxspec_core::choices::pin(None);
}

/// The table of `file`, signed (`ptxspec sign-choices`) by a key of the
/// trusted-keys file `trusted_keys` (one public key a line, as
/// `PTXSPEC_CACHE_TRUSTED_KEYS` names). A table not signed so, changed
/// since, or malformed is an error naming the file.
pub fn read_signed(file: &Path, trusted_keys: &Path) -> Result<ChoiceTable, Error> {
    let bad = |what: String| Error::File {
        what: format!("the choices table {}", file.display()),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, what),
    };
    ptxspec_core::files::check_protected_file(trusted_keys).map_err(|e| bad(e.to_string()))?;
    let keys = ptxspec_core::files::read_input_text(trusted_keys)
        .map_err(|e| bad(format!("{}: {e}", trusted_keys.display())))?;
    let trusted = ptxspec_core::lto::remote::entry::trusted_keys(&keys)
        .map_err(|e| bad(format!("{}: {e}", trusted_keys.display())))?;
    let text = ptxspec_core::files::read_input_text(file).map_err(|e| bad(e.to_string()))?;
    ptxspec_core::choices::read_signed(&text, &trusted).map_err(bad)
}
