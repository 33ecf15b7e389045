//! The environment tables (the guide's, docs/guide/environment.md, and the crate documentation's) list
//! exactly the variables ptxspec reads: `ptxspec_core::settings::VARIABLES`,
//! whose readers a table-driven test in `ptxspec-core` checks.

use std::collections::BTreeSet;

use ptxspec_core::settings::VARIABLES;

/// The `PTXSPEC_*` names in the table that starts at `heading` in `text`
/// (its rows: lines from the first `| variable` to the first line that is
/// no row).
fn table_names(text: &str, row_prefix: &str) -> BTreeSet<String> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| {
            l.trim_start_matches(row_prefix)
                .starts_with("| variable | what it sets |")
        })
        .expect("an environment table");
    lines[start..]
        .iter()
        .map(|l| l.trim_start_matches(row_prefix))
        .take_while(|l| l.starts_with('|'))
        .flat_map(|l| {
            let first = l.split('|').nth(1).unwrap_or("");
            first
                .split(|c: char| !(c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit()))
                .filter(|w| w.starts_with("PTXSPEC_"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_environment_tables_list_every_variable_read() {
    let read: BTreeSet<String> = VARIABLES.iter().map(|v| v.name.to_string()).collect();
    for (doc, text, prefix) in [
        (
            "docs/guide/environment.md",
            include_str!("../docs/guide/environment.md"),
            "",
        ),
        ("src/lib.rs", include_str!("../src/lib.rs"), "//! "),
    ] {
        assert_eq!(table_names(text, prefix), read, "{doc}'s environment table");
    }
}
