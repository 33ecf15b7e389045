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
            && (demangled == wanted || unqualified(&demangled) == wanted)
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

/// The name among `known` that a kernel asked for as `wanted` is: itself
/// where `known` has it, else the one mangled C++ name whose function is
/// `wanted` (qualified, or its last component: a kernel declared without
/// `extern "C"` asked for by its C++ name). `None` where there is no such
/// name, or several (overloads, or namesakes in two namespaces): asking
/// then is an error that lists them ([`near_suffix`]).
pub(crate) fn resolve_kernel<'a>(
    wanted: &str,
    known: impl IntoIterator<Item = &'a str> + Clone,
) -> Option<&'a str> {
    // The exact name first, without demangling anything: bundle look-ups
    // (a launch's plan, `has_kernel`) mostly name kernels as images do.
    if let Some(exact) = known.clone().into_iter().find(|n| *n == wanted) {
        return Some(exact);
    }
    let mut found = None;
    for name in known {
        if found != Some(name)
            && let Some(demangled) = demangled_function(name)
            && (demangled == wanted || unqualified(&demangled) == wanted)
        {
            if found.is_some() {
                // Ambiguous, unless `wanted` itself is among the rest.
                found = Some("");
                continue;
            }
            found = Some(name);
        }
    }
    found.filter(|f| !f.is_empty())
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

/// The last component of a qualified C++ name: what follows its last `::`
/// outside template arguments and parentheses (`ns::nk<x::T>` → `nk<x::T>`,
/// where a plain split at the last `::` cut inside the argument).
fn unqualified(name: &str) -> &str {
    let bytes = name.as_bytes();
    let (mut depth, mut start, mut i) = (0i32, 0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'<' | b'(' | b'[' => depth += 1,
            b'>' | b')' | b']' => depth -= 1,
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                start = i + 2;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    &name[start..]
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

    /// Exact names win; a C++ name resolves where one mangled kernel has
    /// it (qualified or not); overloads and namesakes in two namespaces
    /// resolve to nothing.
    #[test]
    fn kernels_resolve_by_their_cpp_names_where_unambiguous() {
        let known = [
            "_Z4dampPfi",
            "_ZN2ns5scaleEPfi",
            "_ZN3one4goodEPf",
            "_ZN3two4goodEPf",
            "_Z4overPf",
            "_Z4overPd",
            "plain",
        ];
        for (wanted, is) in [
            ("damp", Some("_Z4dampPfi")),
            ("_Z4dampPfi", Some("_Z4dampPfi")),
            ("scale", Some("_ZN2ns5scaleEPfi")),
            ("ns::scale", Some("_ZN2ns5scaleEPfi")),
            ("one::good", Some("_ZN3one4goodEPf")),
            ("good", None),
            ("over", None),
            ("_Z4overPd", Some("_Z4overPd")),
            ("plain", Some("plain")),
            ("Plain", None),
            ("missing", None),
            ("", None),
        ] {
            assert_eq!(resolve_kernel(wanted, known), is, "{wanted}");
        }
        // Template arguments qualified themselves: the unqualified name is
        // the function's last component, the arguments whole.
        let templates = ["_ZN2ns2nkIN1x1TEEEvPi", "_ZN1a1b1kIN1c1dIN1e1fEEEEEvPf"];
        for (wanted, is) in [
            ("nk<x::T>", Some(templates[0])),
            ("ns::nk<x::T>", Some(templates[0])),
            ("k<c::d<e::f> >", Some(templates[1])),
            ("a::b::k<c::d<e::f> >", Some(templates[1])),
            ("T>", None),
            ("f> >", None),
        ] {
            assert_eq!(resolve_kernel(wanted, templates), is, "{wanted}");
        }
        assert_eq!(unqualified("ns::nk<x::T>"), "nk<x::T>");
        assert_eq!(unqualified("f(a::b)"), "f(a::b)");
        assert_eq!(unqualified("plain"), "plain");
        // An exact name after an unmangled match still wins.
        assert_eq!(resolve_kernel("damp", ["_Z4dampPfi", "damp"]), Some("damp"));
    }

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
