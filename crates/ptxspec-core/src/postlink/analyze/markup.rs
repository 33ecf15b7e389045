//! The header's markup of a getter call and the names of the constants.
//!
//! The getter's first argument is `EXPLICIT_ID\0ptxspec:entity\0PRETTY\0`
//! (see `ptxspec.cuh`): readers of symbolic IDs stop at the first NUL, as
//! DPC++'s do. PRETTY is what the compiler prints for the constant's C++
//! entity (`... entity<Id, T>() [with Id = a::sc, T = int]`). A constant's
//! symbolic ID is the explicit one, or the entity's qualified name, which
//! the symbol of its default (`ptxspec::detail::default_of<a::sc>`) gives
//! demangled; a string without the markup (DPC++'s, hand-written PTX) is the
//! ID itself. The header's LTO flavour reads the constant from
//! `ptxspec::detail::lto_slot<KEY, SIZE, ALIGN>`, KEY the FNV-1a hash of the
//! explicit ID or of PRETTY, which this module spells as the compiler
//! mangles it.

use std::rc::Rc;

use super::Linked;
use super::Site;
use crate::postlink::PostLinkError;

/// What follows the first NUL of a marked-up ID.
pub(crate) const MARKER: &[u8] = b"ptxspec:entity";

/// What a getter's ID string says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdText {
    /// The symbolic ID: explicit or the plain string; for a constant named
    /// by its entity, a label for messages until [`entity_id`] names it.
    pub id: Rc<str>,
    /// lto_slot's key, for marked-up IDs.
    pub lto_key: Option<u64>,
    /// The ID is the C++ entity's name (no explicit ID).
    pub from_entity: bool,
}

/// Reads the string at a getter's ID argument: `bytes` from the string's
/// start to the end of its variable. `Err` says what is wrong.
pub fn read(bytes: &[u8]) -> Result<IdText, String> {
    let mut parts = bytes.split(|&b| b == 0);
    let first = parts.next().unwrap_or_default();
    if bytes.len() == first.len() {
        return Err("is not NUL-terminated".into());
    }
    let explicit = utf8(first, "symbolic ID")?;
    if parts.next() != Some(MARKER) {
        return Ok(IdText {
            id: explicit.into(),
            lto_key: None,
            from_entity: false,
        });
    }
    let pretty = parts.next().unwrap_or_default();
    // The name must end with its NUL inside the variable.
    if bytes.len() <= first.len() + MARKER.len() + pretty.len() + 2 || pretty.is_empty() {
        return Err("ends after ptxspec's marker, without the constant's C++ name".into());
    }
    let pretty = utf8(pretty, "C++ name")?;
    let from_entity = explicit.is_empty();
    let keyed = if from_entity { pretty } else { explicit };
    Ok(IdText {
        id: if from_entity { label(pretty) } else { explicit }.into(),
        lto_key: Some(fnv1a64(keyed.as_bytes())),
        from_entity,
    })
}

/// The `Id = ...` of a compiler's `__PRETTY_FUNCTION__`, for messages.
fn label(pretty: &str) -> &str {
    pretty
        .rfind("Id = ")
        .map(|at| &pretty[at + 5..])
        .and_then(|rest| rest.split([',', ']']).next())
        .unwrap_or(pretty)
}

/// The symbolic ID of a constant named by its entity: the entity in the
/// symbol of its default, `ptxspec::detail::default_of<ENTITY>`, demangled —
/// without EDG's per-unit namespace (`_INTERNAL_<hash>_<file>::`) and with
/// `>>` for `> >`. `None` where the symbol does not demangle so.
pub(crate) fn entity_id(default_symbol: &str) -> Option<String> {
    // The post-link's link renames internal symbols that collide: `$tuN`.
    let mangled = default_symbol
        .rsplit_once("$tu")
        .filter(|(_, n)| n.bytes().all(|b| b.is_ascii_digit()))
        .map_or(default_symbol, |(m, _)| m);
    let text = cpp_demangle::Symbol::new(mangled).ok()?.demangle().ok()?;
    const OF: &str = "ptxspec::detail::default_of<";
    let start = text.find(OF)? + OF.len();
    let entity = text[start..].trim_end().strip_suffix('>')?.trim_end();
    let mut id = String::with_capacity(entity.len());
    let mut rest = entity;
    while let Some(at) = rest.find("_INTERNAL_") {
        let starts_word = rest[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        let end = rest[at..].find("::").map(|e| at + e + 2);
        match end {
            Some(end) if starts_word => {
                id.push_str(&rest[..at]);
                rest = &rest[end..];
            }
            _ => {
                id.push_str(&rest[..at + 1]);
                rest = &rest[at + 1..];
            }
        }
    }
    id.push_str(rest);
    while id.contains("> >") {
        id = id.replace("> >", ">>");
    }
    (!id.is_empty()).then_some(id)
}

/// 64-bit FNV-1a, as the header computes lto_slot's key.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn utf8<'b>(bytes: &'b [u8], what: &str) -> Result<&'b str, String> {
    std::str::from_utf8(bytes).map_err(|_| format!("has a {what} that is not UTF-8"))
}

/// `ptxspec::detail::lto_slot<KEY, SIZE, ALIGN>` as Itanium mangling spells
/// it (`unsigned long long` and `unsigned` arguments).
pub(crate) fn lto_slot_symbol(key: u64, size: u32, align: u32) -> String {
    format!("_ZN7ptxspec6detail8lto_slotILy{key}ELj{size}ELj{align}EEE")
}

/// Where a site's ID came from the entity's name: its default's variable
/// and whether that has internal linkage.
#[derive(Clone, Debug)]
pub struct EntityOf<'a> {
    pub default_var: &'a str,
    pub internal: bool,
}

/// Each C++ entity is its own constant: where constants of internal
/// linkage (a `static` or `constexpr` variable, the unnamed namespace) of
/// several units, or one of them and another constant, have one name, each
/// internal one becomes `NAME@UNIT` (UNIT: its input's file stem). Two
/// inputs of one file stem (`a/k.ptx`, `b/k.ptx`) would give two such
/// constants one ID: that is refused, naming both files.
pub(crate) fn disambiguate(sites: &mut [Site<'_>], linked: &Linked) -> Result<(), PostLinkError> {
    let mut by_id: std::collections::HashMap<Rc<str>, Vec<&str>> = Default::default();
    for s in sites.iter() {
        if let Some(e) = &s.entity {
            let vars = by_id.entry(Rc::clone(&s.symbolic_id)).or_default();
            if !vars.contains(&e.default_var) {
                vars.push(e.default_var);
            }
        }
    }
    // The input of each `NAME@UNIT` made, to find two inputs of one stem.
    let mut made: std::collections::HashMap<Rc<str>, usize> = Default::default();
    for s in sites.iter_mut() {
        let Some(e) = &s.entity else { continue };
        if e.internal && by_id.get(&s.symbolic_id).is_some_and(|v| v.len() > 1) {
            let input = linked.origin[s.func];
            let unit = linked.unit_stem(input);
            let id: Rc<str> = format!("{}@{unit}", s.symbolic_id).into();
            match made.get(&id) {
                Some(&other) if other != input => {
                    return Err(PostLinkError::Link(format!(
                        "{} and {} have one file stem, {unit}, which names their internal constants \
                         (both would be {id}): rename one of them",
                        linked.inputs[other], linked.inputs[input]
                    )));
                }
                Some(_) => {}
                None => {
                    made.insert(Rc::clone(&id), input);
                }
            }
            s.symbolic_id = id;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn markup(explicit: &str, pretty: &str) -> Vec<u8> {
        [explicit, "ptxspec:entity", pretty, ""]
            .join("\0")
            .into_bytes()
    }

    #[test]
    fn entities_from_the_symbols_nvrtc_gives_defaults() {
        let cases = [
            ("_ZN7ptxspec6detail10default_ofIL_Z8coeff_idEEE", "coeff_id"),
            (
                "_ZN7ptxspec6detail10default_ofIL_ZN2TSIsE2scEEEE",
                "TS<short>::sc",
            ),
            (
                "_ZN7ptxspec6detail10default_ofIL_Z4sameIfEEEE",
                "same<float>",
            ),
            (
                "_ZN36_INTERNAL_00000000_12_same_name_cu_k7ptxspec6detail10default_ofIL_ZNS_1a2scEEEE",
                "a::sc",
            ),
            (
                "_ZN36_INTERNAL_00000000_12_same_name_cu_k7ptxspec6detail10default_ofIL_ZNS_38_GLOBAL__N__00000000_12_same_name_cu_k4anonEEEE",
                "(anonymous namespace)::anon",
            ),
            // Renamed by the post-link's link.
            (
                "_ZN7ptxspec6detail10default_ofIL_Z8coeff_idEEE$tu1",
                "coeff_id",
            ),
        ];
        for (symbol, id) in cases {
            assert_eq!(entity_id(symbol).as_deref(), Some(id), "{symbol}");
        }
        for symbol in ["coeff_id", "_Z3fooi", "_ZN7ptxspec6detail10default_ofIL"] {
            assert_eq!(entity_id(symbol), None, "{symbol}");
        }
    }

    #[test]
    fn keys_are_the_headers() {
        // Keys NVRTC 12.9 computed for these: the lto_slot symbols of a
        // PTXSPEC_LTO build of kernels/same_name.cu, read off its PTX.
        let t = read(&markup(
            "",
            "const char *ptxspec::detail::entity() [with Id = outer::same, T = int]",
        ))
        .unwrap();
        assert_eq!(&*t.id, "outer::same");
        assert_eq!(t.lto_key, Some(13082939468718478849));
        assert!(t.from_entity);
        let t = read(&markup(
            "same_name.named",
            "const char *ptxspec::detail::entity() [with Id = named_form, T = int]",
        ))
        .unwrap();
        assert_eq!(&*t.id, "same_name.named");
        assert_eq!(t.lto_key, Some(12852418991716309084));
        assert!(!t.from_entity);
        assert_eq!(
            lto_slot_symbol(9970039255973987691, 4, 4),
            "_ZN7ptxspec6detail8lto_slotILy9970039255973987691ELj4ELj4EEE"
        );
    }

    #[test]
    fn plain_and_damaged_strings() {
        let t = read(b"scale\0").unwrap();
        assert_eq!((&*t.id, t.lto_key), ("scale", None));
        // DPC++'s strings carry nothing after the NUL but padding.
        assert_eq!(&*read(b"x\0\0\0").unwrap().id, "x");
        assert!(read(b"x").unwrap_err().contains("NUL"));
        assert!(
            read(b"\0ptxspec:entity\0")
                .unwrap_err()
                .contains("C++ name")
        );
        assert!(
            read(b"\0ptxspec:entity\0f() [Id = x]")
                .unwrap_err()
                .contains("C++ name")
        );
        assert!(read(b"\xff\0").unwrap_err().contains("UTF-8"));
    }
}
