//! Names near one that was not found: a kernel asked for by its C++ name
//! when the image has it mangled, a constant's name with another letter case
//! or a typo. What "kernel not found" and "no such constant" messages list.

/// The names of `known` near `wanted`, each as a message shows it: one
/// whose C++ demangling names the function `wanted` (a kernel declared
/// without `extern "C"`), one equal but for letter case, one a typo away
/// (at most two edits, for names of four characters or more).
pub(crate) fn near_names<'a>(
    wanted: &str,
    known: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    let mut near = Vec::new();
    for name in known {
        if name == wanted
            || near
                .iter()
                .any(|n: &String| n.starts_with(&format!("{name} ")))
        {
            continue;
        }
        if let Some(demangled) = demangled_function(name)
            && (demangled == wanted || demangled.rsplit("::").next() == Some(wanted))
        {
            near.push(format!(
                "{name} (C++'s mangled name of {demangled}: declare the kernel extern \"C\", or ask for it by this name)"
            ));
        } else if name.eq_ignore_ascii_case(wanted)
            || (wanted.chars().count() >= 4 && edit_distance(name, wanted) <= 2)
        {
            near.push(name.to_string());
        }
    }
    near
}

/// `"; near: A, B"` for [`near_names`], or nothing.
pub(crate) fn near_suffix<'a>(wanted: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    let near = near_names(wanted, known);
    if near.is_empty() {
        String::new()
    } else {
        format!("; near: {}", near.join(", "))
    }
}

/// The function a mangled C++ name names, without its parameters
/// (`_Z4dampPfi` → `damp`, `_ZN2ns4dampEPf` → `ns::damp`).
fn demangled_function(name: &str) -> Option<String> {
    if !name.starts_with("_Z") {
        return None;
    }
    let symbol = cpp_demangle::Symbol::new(name).ok()?;
    let options = cpp_demangle::DemangleOptions::new()
        .no_params()
        .no_return_type();
    symbol.demangle_with_options(&options).ok()
}

/// Levenshtein distance of two short names (by characters).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mangled_kernels_case_and_typos_are_near() {
        let known = [
            "_Z4dampPfi",
            "_ZN2ns5scaleEPfi",
            "Gain",
            "offset_x",
            "unrelated",
            "dampening",
        ];
        let near = near_names("damp", known);
        assert_eq!(near.len(), 1, "{near:?}");
        assert!(
            near[0].starts_with("_Z4dampPfi (C++'s mangled name of damp:"),
            "{near:?}"
        );
        assert!(near_names("scale", known)[0].starts_with("_ZN2ns5scaleEPfi"));
        assert!(near_names("ns::scale", known)[0].starts_with("_ZN2ns5scaleEPfi"));
        assert_eq!(near_names("gain", known), ["Gain"]);
        assert_eq!(near_names("ofset_x", known), ["offset_x"]);
        assert_eq!(near_names("offsetx_y", known), ["offset_x"]);
        // Short names: case only, never a typo away.
        assert!(near_names("dmp", known).is_empty());
        assert!(near_names("nothing_like", known).is_empty());
        assert_eq!(near_suffix("x", known), "");
    }

    #[test]
    fn edit_distances() {
        for (a, b, d) in [
            ("", "", 0),
            ("abc", "abc", 0),
            ("abc", "abd", 1),
            ("abc", "ab", 1),
            ("kitten", "sitting", 3),
            ("é", "e", 1),
        ] {
            assert_eq!(edit_distance(a, b), d, "{a} {b}");
        }
    }
}
